package gosched

// HyperNodes through Volcano's own code (v1.14.1; v1.10.0 had none): the HyperNode objects go into the scheduler
// cache's api.HyperNodesInfo (member selectors resolved by Volcano's GetMembers, tiers by its
// BuildHyperNodeCache), PodGroups carry spec.networkTopology, and the network-topology-aware
// plugin gives the allocate action its HyperNode gradients, so Volcano enforces hard tiers itself.
// topoplace reads the same file with --hypernodes (in a cluster: the same objects from the API).

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	listerv1 "k8s.io/client-go/listers/core/v1"
	k8scache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"

	"volcano.sh/volcano/pkg/scheduler/api"
)

// volcanoHyperNodes reads a HyperNode YAML file ("---" between objects) into Volcano's own
// HyperNodesInfo over the given nodes, as the scheduler cache does on HyperNode events.
func volcanoHyperNodes(t *testing.T, path string, nodes []*v1.Node) *api.HyperNodesInfo {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read HyperNodes: %v", err)
	}
	indexer := k8scache.NewIndexer(k8scache.MetaNamespaceKeyFunc, k8scache.Indexers{})
	for _, n := range nodes {
		if err := indexer.Add(n); err != nil {
			t.Fatalf("node lister: %v", err)
		}
	}
	info := api.NewHyperNodesInfo(listerv1.NewNodeLister(indexer))
	for i, doc := range strings.Split(string(data), "---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		hn := &topologyv1alpha1.HyperNode{}
		if err := yaml.UnmarshalStrict([]byte(doc), hn); err != nil {
			t.Fatalf("%s: object %d is not a HyperNode Volcano can read: %v", path, i, err)
		}
		if err := info.UpdateHyperNode(hn); err != nil {
			t.Fatalf("Volcano refuses HyperNode %s: %v", hn.Name, err)
		}
	}
	if !info.Ready() {
		t.Fatalf("Volcano's HyperNode cache is not ready to schedule after %s", path)
	}
	return info
}

// withTopologyAware enables Volcano's network-topology-aware plugin beside the extender: without
// it the allocate action has no HyperNode gradient and a hard tier is not enforced by Volcano.
func withTopologyAware(text string) string {
	return strings.Replace(text, "  - name: extender\n", "  - name: network-topology-aware\n  - name: extender\n", 1)
}

func tierSpec(mode schedulingv1beta1.NetworkTopologyMode, tier int) *schedulingv1beta1.NetworkTopologySpec {
	return &schedulingv1beta1.NetworkTopologySpec{Mode: mode, HighestTierAllowed: &tier}
}

// membersByVolcano is HyperNode → its nodes, as Volcano resolved them ("" members left out).
func membersByVolcano(info *api.HyperNodesInfo) map[string]string {
	out := map[string]string{}
	for name, set := range info.RealNodesSet() {
		if set.Len() == 0 {
			continue
		}
		nodes := set.UnsortedList()
		sort.Strings(nodes)
		out[name] = strings.Join(nodes, ",")
	}
	return out
}

// The edge cases topoplace's HyperNode reader documents (tier 0, regexMatch and labelMatch leaves,
// an empty labelMatch selecting no node, a HyperNode member by regexMatch ignored) are what
// Volcano's own cache makes of the same objects.
func TestVolcanoReadsTheHyperNodeEdgeCasesAsTopoplaceDoes(t *testing.T) {
	var built []*v1.Node
	for _, n := range fourNodes() {
		built = append(built, n.build())
	}
	info := volcanoHyperNodes(t, edgeCaseHyperNodes(t), built)
	want := map[string]string{"nvl-b": "n2,n3", "leaf-a": "n0,n1", "leaf-b": "n2,n3", "spine": "n0,n1,n2,n3"}
	got := membersByVolcano(info)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Volcano resolved the HyperNodes to %v; topoplace reads them as %v "+
			"(the empty labelMatch \"nothing\" selects no node, spine's regexMatch HyperNode member is ignored)", got, want)
	}
	if tiers := info.HyperNodesSetByTier(); !tiers[0].Has("nvl-b") || !tiers[2].Has("spine") {
		t.Fatalf("Volcano's tiers: %v", tiers)
	}
}

// Hard and soft tiers in spec.networkTopology, enforced by Volcano's own allocate action with the
// network-topology-aware plugin, and planned by topoplace: both agree, and the binds are the plan.
func TestHyperNodeTiersThroughVolcanosOwnNetworkTopology(t *testing.T) {
	file := hyperNodesFile(t, twoLeaves)
	var built []*v1.Node
	for _, n := range fourNodes() {
		built = append(built, n.build())
	}
	leaves := membersByVolcano(volcanoHyperNodes(t, file, built))
	leafOfVolcano := func(node string) string {
		for name, members := range leaves {
			if name != "spine" && strings.Contains(","+members+",", ","+node+",") {
				return name
			}
		}
		return ""
	}
	tp := startTopoplace(t, file, "--http-timeout", planTimeout)
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout, hyperNodes: file, confEdit: withTopologyAware}
	alone := extenderSettings{without: true, hyperNodes: file, confEdit: withTopologyAware}

	t.Run("hard", func(t *testing.T) {
		train := gang{name: "train", members: 2, gpus: 8, topology: tierSpec(schedulingv1beta1.HardNetworkTopologyMode, 1)}
		gangs := []gang{busy("busy", "n0"), train}
		// Volcano alone already keeps the gang in one tier-1 HyperNode: its hard tier is live here.
		if own := boundNodes(t, runSession(t, alone, fourNodes(), gangs), train); len(own) != 2 ||
			leafOfVolcano(own[0]) == "" || leafOfVolcano(own[0]) != leafOfVolcano(own[1]) {
			t.Fatalf("Volcano alone, hard tier 1: bound %v, not two nodes of one leaf %v", own, leaves)
		}
		r := runPlanned(t, tp, settings, fourNodes(), gangs)
		got := requireBound(t, tp, r, train)
		requirePlanned(t, tp, train)
		if strings.Join(got, ",") != "n2,n3" || leafOfVolcano(got[0]) != "leaf-b" {
			t.Fatalf("hard tier 1 with n0 half full: leaf-b (n2,n3); bound %v\n%s", got, tp.explain())
		}
		// The shipped allocateFuncVerb: Volcano's own session posts allocateFunc for each member
		// it allocates, and each is where the plan put it.
		if s := tp.status(); s.Calls["allocateFunc"] < 2 || len(s.OffPlan) != 0 {
			t.Fatalf("expected Volcano to post allocateFunc for both members, none off plan: %v", s)
		}
	})
	t.Run("hard without room", func(t *testing.T) {
		train := gang{name: "wide", members: 3, gpus: 8, topology: tierSpec(schedulingv1beta1.HardNetworkTopologyMode, 1)}
		r := runPlanned(t, tp, settings, fourNodes(), []gang{train})
		if got := boundNodes(t, r, train); len(got) != 0 {
			t.Fatalf("three 8-GPU members cannot share a two-node leaf; Volcano bound %v\n%s", got, tp.explain())
		}
		if _, left := tp.status().UnplacedJobs[testNamespace+"/wide"]; !left {
			t.Fatalf("topoplace should leave the hard gang unplaced\n%s", tp.explain())
		}
	})
	t.Run("soft", func(t *testing.T) {
		spread := gang{name: "spread", members: 3, gpus: 8, topology: tierSpec(schedulingv1beta1.SoftNetworkTopologyMode, 1)}
		r := runPlanned(t, tp, settings, fourNodes(), []gang{busy("busy", "n0"), spread})
		got := requireBound(t, tp, r, spread)
		requirePlanned(t, tp, spread)
		if strings.Join(got, ",") != "n1,n2,n3" {
			t.Fatalf("soft tier 1: the gang spans the leaves on the free nodes n1,n2,n3; bound %v\n%s", got, tp.explain())
		}
	})
}

// The shipped extender.managedResources (GPU resources only): Volcano's extender plugin asks
// topoplace nothing about a pod that requests none of them (IsInterested, v1.14.1), so CPU-only
// pods cost no predicate or allocateFunc call. Without the list, the same session calls for both.
func TestManagedResourcesKeepCPUOnlyPodsAwayFromTopoplace(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	cpu := gang{name: "etl", members: 1}
	train := gang{name: "train", members: 1, gpus: 8}
	gangs := []gang{busy("busy", "n0"), cpu, train}
	calls := func(settings extenderSettings) map[string]int {
		r := runPlanned(t, tp, settings, fourNodes(), gangs)
		requireBound(t, tp, r, train)
		requirePlanned(t, tp, train)
		if got := boundNodes(t, r, cpu); len(got) != 1 {
			t.Fatalf("the CPU-only pod should be bound by Volcano; bound %v", got)
		}
		return tp.status().Calls
	}
	shipped := calls(extenderSettings{url: tp.url(), httpTimeout: planTimeout})
	everything := calls(extenderSettings{url: tp.url(), httpTimeout: planTimeout, confEdit: func(text string) string {
		i := strings.Index(text, "      extender.managedResources:")
		if i < 0 {
			t.Fatal("deploy/volcano/volcano-scheduler.conf has no extender.managedResources")
		}
		// Drop the key and its list items, keep whatever follows.
		rest := strings.SplitAfter(text[i:], "\n")[1:]
		for len(rest) > 0 && strings.HasPrefix(rest[0], "      - ") {
			rest = rest[1:]
		}
		return text[:i] + strings.Join(rest, "")
	}})
	if shipped["allocateFunc"] != 1 || everything["allocateFunc"] != 2 {
		t.Fatalf("allocateFunc calls: %d with the shipped managedResources (want 1, the GPU pod), %d without (want 2)",
			shipped["allocateFunc"], everything["allocateFunc"])
	}
	if shipped["predicate"] >= everything["predicate"] {
		t.Fatalf("predicate calls: %d with managedResources, %d without: the CPU-only pod should cost none",
			shipped["predicate"], everything["predicate"])
	}
}
