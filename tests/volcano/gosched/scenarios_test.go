package gosched

// Scenarios: Volcano's own scheduler (enqueue, allocate and backfill actions; priority, gang,
// conformance, drf, predicates, proportion, nodeorder, binpack and the real extender plugin, as
// deploy/volcano/volcano-scheduler.conf enables them) against the real `topoplace volcano serve`.
// Every assertion is on what Volcano's binder was asked to bind.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/extender"
)

// planTimeout: a generous extender.httpTimeout for the scenarios that check the plan is followed,
// so a loaded CI machine does not turn a test of behaviour into one of speed (bench/ measures that).
const planTimeout = "20s"

// fourNodes: two leaves of two nodes under one spine.
func fourNodes() []gpuNode {
	return []gpuNode{{name: "n0", rack: "a"}, {name: "n1", rack: "a"}, {name: "n2", rack: "b"}, {name: "n3", rack: "b"}}
}

var twoLeaves = map[string][]string{"leaf-a": {"n0", "n1"}, "leaf-b": {"n2", "n3"}}

func leafOf(node string) string {
	for leaf, nodes := range twoLeaves {
		for _, n := range nodes {
			if n == node {
				return leaf
			}
		}
	}
	return ""
}

// holding is the volcano-vgpu-device-plugin annotation (volcano.sh/vgpu-ids-new) of a pod holding
// whole GPUs `indices` of `node`: UUID,type,memory MiB,cores %, ':' between devices.
func holding(node string, indices ...int) map[string]string {
	var devices []string
	for _, i := range indices {
		devices = append(devices, fmt.Sprintf("%s,NVIDIA,%d,100", gpuUUID(node, i), gpuMemoryMiB))
	}
	return map[string]string{vgpuIDs: strings.Join(devices, ":") + ";"}
}

// busy is a running job holding GPUs 0-3 of each of `nodes`.
func busy(name string, nodes ...string) gang {
	g := gang{name: name, members: len(nodes), gpus: 4, runningOn: nodes}
	for _, n := range nodes {
		g.podNotes = append(g.podNotes, holding(n, 0, 1, 2, 3))
	}
	return g
}

func boundNodes(t *testing.T, r sessionResult, g gang) []string {
	t.Helper()
	var nodes []string
	for _, key := range podsOf(g) {
		if n, ok := r.binds[key]; ok {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	return nodes
}

func requireBound(t *testing.T, tp *topoplace, r sessionResult, g gang) []string {
	t.Helper()
	nodes := boundNodes(t, r, g)
	if len(nodes) != len(podsOf(g)) {
		msg := fmt.Sprintf("Volcano bound %d of %d pods of %s: binds %v", len(nodes), len(podsOf(g)), g.name, r.binds)
		if tp != nil {
			msg += fmt.Sprintf("\ntopoplace status: %v\ntopoplace log:\n%s", tp.status(), tp.log())
		}
		t.Fatal(msg)
	}
	return nodes
}

// runPlanned runs a session; when topoplace answered it neutrally only because the solve outlasted
// the session (a loaded machine: the first solve also loads OR-Tools in the solver process), it
// runs the same session again: topoplace reuses the finished result for an identical cluster.
func runPlanned(t *testing.T, tp *topoplace, ext extenderSettings, nodes []gpuNode, gangs []gang) sessionResult {
	t.Helper()
	for attempt := 1; ; attempt++ {
		r := runSession(t, ext, nodes, gangs)
		s := tp.status()
		late := strings.Contains(s.Error, "did not finish") || strings.Contains(s.Error, "in the background") ||
			strings.Contains(s.Error, "still being solved")
		if !late || attempt == 10 {
			return r
		}
		t.Logf("session %d answered neutrally (%s); running it again", attempt, s.Error)
		time.Sleep(2 * time.Second)
	}
}

// requirePlanned: topoplace's last session planned the gang (so the binds checked are its plan,
// not Volcano's choice by luck).
func requirePlanned(t *testing.T, tp *topoplace, g gang) {
	t.Helper()
	s := tp.status()
	for _, job := range s.PlacedJobs {
		if job == testNamespace+"/"+g.name {
			return
		}
	}
	t.Fatalf("topoplace did not plan %s\n%s", g.name, tp.explain())
}

func TestHardTierGangStaysInOneLeaf(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	train := gang{name: "train", members: 2, gpus: 8, annotations: map[string]string{modeKey: "hard", tierKey: "1"}}
	// n0 half full: Volcano alone may pair n1 with n2 or n3 (across leaves); only leaf-b has two free nodes.
	r := runPlanned(t, tp, extenderSettings{url: tp.url(), httpTimeout: planTimeout}, fourNodes(), []gang{busy("busy", "n0"), train})
	nodes := requireBound(t, tp, r, train)
	requirePlanned(t, tp, train)
	if nodes[0] == nodes[1] || leafOf(nodes[0]) != "leaf-b" || leafOf(nodes[1]) != "leaf-b" {
		t.Fatalf("hard tier 1: the gang must be on two nodes of leaf-b, Volcano bound it on %v\n%s", nodes, tp.explain())
	}
}

func TestHardTierWithoutRoomBindsNothingSoftSpreads(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout}
	// n0 and n3 half full: one free node per leaf, so no leaf holds the 2×8-GPU gang.
	hard := gang{name: "hard", members: 2, gpus: 8, annotations: map[string]string{modeKey: "hard", tierKey: "1"}}
	r := runPlanned(t, tp, settings, fourNodes(), []gang{busy("busy", "n0", "n3"), hard})
	if nodes := boundNodes(t, r, hard); len(nodes) != 0 {
		t.Fatalf("hard tier 1 has no leaf with room, yet Volcano bound %v\n%s", nodes, tp.explain())
	}
	if s := tp.status(); len(s.UnplacedJobs) != 1 {
		t.Fatalf("topoplace should report the hard gang unplaced with its reason: %v", s)
	}

	soft := gang{name: "soft", members: 2, gpus: 8, annotations: map[string]string{modeKey: "soft", tierKey: "1"}}
	r = runPlanned(t, tp, settings, fourNodes(), []gang{busy("busy", "n0", "n3"), soft})
	nodes := requireBound(t, tp, r, soft)
	requirePlanned(t, tp, soft)
	if strings.Join(nodes, ",") != "n1,n2" {
		t.Fatalf("soft tier: the gang spreads over the two free nodes n1,n2; Volcano bound %v", nodes)
	}
}

// A share lands on a GPU with the memory left for it. Volcano counts vGPUs per node, not memory
// per GPU, so on its own it could pick any of the four nodes.
func TestShareJobGoesWhereAGPUHasTheMemory(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	// n0, n3 full; n1 has GPU7 free; n2 has a 40 GiB share on GPU0 and GPUs 1-7 taken.
	full := gang{name: "full", members: 4, gpus: 8, runningOn: []string{"n0", "n3", "n1", "n2"},
		podNotes: []map[string]string{holding("n0", all...), holding("n3", all...), holding("n1", all[:7]...), holding("n2", all[1:]...)}}
	full.gpus = 7 // what each pod asked for does not matter here: the annotations name the GPUs
	shared := gang{name: "infer-old", members: 1, share: 40000, runningOn: []string{"n2"},
		podNotes: []map[string]string{{vgpuIDs: gpuUUID("n2", 0) + ",NVIDIA,40000,50;"}}}
	// 50 GiB: more than n2's shared GPU0 has left (80 - 40 GiB), so only n1's GPU7 holds it.
	newShare := gang{name: "infer", members: 1, share: 50000}
	r := runPlanned(t, tp, extenderSettings{url: tp.url(), httpTimeout: planTimeout}, fourNodes(), []gang{full, shared, newShare})
	nodes := requireBound(t, tp, r, newShare)
	requirePlanned(t, tp, newShare)
	if nodes[0] != "n1" {
		t.Fatalf("only n1's GPU7 has 50 GiB free; Volcano bound the share on %v\n%s", nodes, tp.explain())
	}
}

// A job asking for a NIC per GPU lands where the NICs are healthy, though Volcano cannot see NICs.
func TestNICJobAvoidsNodeWithDeadNICs(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	nodes := fourNodes()
	for i := range nodes {
		nodes[i].deadNICs = nodes[i].name != "n1"
	}
	job := gang{name: "allreduce", members: 1, gpus: 4, nics: "per-gpu"}
	r := runPlanned(t, tp, extenderSettings{url: tp.url(), httpTimeout: planTimeout}, nodes, []gang{job})
	got := requireBound(t, tp, r, job)
	requirePlanned(t, tp, job)
	if got[0] != "n1" {
		t.Fatalf("only n1 has healthy RDMA NICs; Volcano bound the NIC job on %v", got)
	}
}

// GPUs that disappear from the device plugin's count (nvidia.com/gpu allocatable drops) while the
// topology annotation still lists them must not be planned: Volcano would refuse the planned node
// and topoplace every other one, every session.
func TestNodeLosingGPUsIsNotPlanned(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout}
	job := gang{name: "job", members: 1, gpus: 4}
	// n0 runs 4 GPUs: binpack wants the new 4-GPU job there.
	r := runPlanned(t, tp, settings, fourNodes(), []gang{busy("busy", "n0"), job})
	if got := requireBound(t, tp, r, job); got[0] != "n0" {
		t.Fatalf("healthy cluster: binpack puts the job beside the running one on n0; bound on %v", got)
	}

	// Four of n0's GPUs fail: the device plugin now advertises 4, the annotation is not yet refreshed.
	nodes := fourNodes()
	nodes[0].advertised = 4
	r = runPlanned(t, tp, settings, nodes, []gang{busy("busy", "n0"), job})
	if got := requireBound(t, tp, r, job); got[0] == "n0" {
		t.Fatalf("n0 has no free GPU left, yet the job was bound there")
	}
	requirePlanned(t, tp, job) // bound by the plan, not by Volcano alone in a neutral session

	// Reported unhealthy in the topology annotation, with the count still 8 (the register lags).
	nodes = fourNodes()
	nodes[0].unhealthy = map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true}
	r = runPlanned(t, tp, settings, nodes, []gang{job})
	if got := requireBound(t, tp, r, job); got[0] == "n0" {
		t.Fatalf("every GPU of n0 is unhealthy, yet the job was bound there")
	}
	requirePlanned(t, tp, job)
}

// TestGPUsVolcanoCountsUsedAreNotPlanned: a running pod asks for 4 GPUs but its device annotation
// names only 2 of them (one of two containers' devices, say). By the annotations n0 has 6 free GPUs
// and binpack would put a 6-GPU job beside the running pod; Volcano's own ledger (NodeInfo.Idle:
// allocatable minus what its tasks ask) says 4, and its resource check refuses n0. topoplace reads
// Idle and plans the job elsewhere, so Volcano binds it in this session.
func TestGPUsVolcanoCountsUsedAreNotPlanned(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout}
	running := gang{name: "running", members: 1, gpus: 4, runningOn: []string{"n0"},
		podNotes: []map[string]string{holding("n0", 0, 1)}}
	job := gang{name: "job", members: 1, gpus: 6}
	r := runPlanned(t, tp, settings, fourNodes(), []gang{running, job})
	if got := requireBound(t, tp, r, job); got[0] == "n0" {
		t.Fatalf("Volcano counts 4 GPUs idle on n0, yet the 6-GPU job was bound there")
	}
	requirePlanned(t, tp, job)
	warned := false
	for _, w := range tp.status().Warnings {
		warned = warned || strings.Contains(w, "n0: Volcano counts 4 nvidia.com/gpu idle")
	}
	if !warned {
		t.Fatalf("topoplace did not say why n0's GPUs were taken as used: %v", tp.status().Warnings)
	}
}

// TestPreferredNodeAffinityIsAPreference: on four empty nodes every placement of an 8-GPU pod is
// equal by binpack; the pod prefers rack b (weight 50). Volcano's nodeorder plugin would score
// that, but topoplace's predicate admits only the planned node, so the plan must carry it.
func TestPreferredNodeAffinityIsAPreference(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout}
	job := gang{name: "job", members: 1, gpus: 8, affinity: &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{Weight: 50,
			Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
				{Key: "rack", Operator: v1.NodeSelectorOpIn, Values: []string{"b"}}}}}}}}}
	r := runPlanned(t, tp, settings, fourNodes(), []gang{job})
	if got := requireBound(t, tp, r, job); leafOf(got[0]) != "leaf-b" {
		t.Fatalf("the pod prefers rack b and every node is free, yet it was bound on %v", got)
	}
	requirePlanned(t, tp, job)
}

// podAffinity is a required pod-affinity term to the running pods of gang "db" at topologyKey key.
func podAffinity(key string) *v1.Affinity {
	return &v1.Affinity{PodAffinity: &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"job": "db"}}, TopologyKey: key}}}}
}

// TestRequiredPodAffinityFollowsRunningPods: n0 runs a 6-GPU pod, so binpack wants a 2-GPU job
// there; the job requires pod affinity to "db", which runs on n3. Volcano's predicates plugin
// (InterPodAffinity) admits only n3 at the hostname key, only rack b (n2, n3) at the rack key; a
// plan on n0 would bind nothing. topoplace plans within the nodes the term admits.
func TestRequiredPodAffinityFollowsRunningPods(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout}
	packed := gang{name: "packed", members: 1, gpus: 6, runningOn: []string{"n0"},
		podNotes: []map[string]string{holding("n0", 0, 1, 2, 3, 4, 5)}}
	db := gang{name: "db", members: 1, gpus: 1, runningOn: []string{"n3"},
		podNotes: []map[string]string{holding("n3", 0)}}
	for _, c := range []struct {
		key  string
		want func(string) bool
	}{
		{"kubernetes.io/hostname", func(n string) bool { return n == "n3" }},
		{"rack", func(n string) bool { return leafOf(n) == "leaf-b" }},
	} {
		job := gang{name: "job", members: 1, gpus: 2, affinity: podAffinity(c.key)}
		r := runPlanned(t, tp, settings, fourNodes(), []gang{packed, db, job})
		if got := requireBound(t, tp, r, job); !c.want(got[0]) {
			t.Fatalf("pod affinity to db at %s, yet bound on %v", c.key, got)
		}
		requirePlanned(t, tp, job)
	}
}

// TestRunningPodsAntiAffinityKeepsThePlanAway: "guard" runs 4 GPUs on n0 (binpack's choice for a
// 2-GPU job) and requires that no pod labelled job=job share its node. Kubernetes (and Volcano's
// predicates plugin) checks an existing pod's anti-affinity against a new pod: n0 is refused, so a
// plan there would bind nothing. topoplace keeps the job off n0.
func TestRunningPodsAntiAffinityKeepsThePlanAway(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout}
	guard := gang{name: "guard", members: 1, gpus: 4, runningOn: []string{"n0"},
		podNotes: []map[string]string{holding("n0", 0, 1, 2, 3)},
		runAffinity: &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"job": "job"}}, TopologyKey: "kubernetes.io/hostname"}}}}}
	job := gang{name: "job", members: 1, gpus: 2}
	r := runPlanned(t, tp, settings, fourNodes(), []gang{guard, job})
	if got := requireBound(t, tp, r, job); got[0] == "n0" {
		t.Fatalf("guard's anti-affinity forbids n0, yet the job was bound there")
	}
	requirePlanned(t, tp, job)
}

// postAllocate posts allocateFunc with Volcano's own request type (extender.EventHandlerRequest, the
// body its event handler sends), for a task placed where the test says.
func postAllocate(t *testing.T, tp *topoplace, task *api.TaskInfo) extender.EventHandlerResponse {
	t.Helper()
	body, err := json.Marshal(&extender.EventHandlerRequest{Task: task})
	if err != nil {
		t.Fatalf("marshal TaskInfo: %v", err)
	}
	resp, err := http.Post(tp.url()+"/allocateFunc", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("allocateFunc: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("allocateFunc answered %d (Volcano counts that as a failure)", resp.StatusCode)
	}
	var out extender.EventHandlerResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("allocateFunc reply: %v", err)
	}
	return out
}

// Volcano's choice stands: allocateFunc for a task Volcano put elsewhere than planned answers no
// error (any errorMessage makes Volcano roll the task back) and shows up in /status. Volcano v1.14
// posts allocateFunc itself for the planned members; the off-plan one is posted by the test.
func TestAllocateFuncNeverRollsVolcanosChoiceBack(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	train := gang{name: "train", members: 2, gpus: 8, annotations: map[string]string{modeKey: "hard", tierKey: "1"}}
	checked := false
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout, afterActions: func(ssn *framework.Session) {
		job := ssn.Jobs[api.JobID(testNamespace+"/"+train.name)]
		if job == nil {
			t.Fatalf("job %s not in the session", train.name)
		}
		for _, task := range job.Tasks {
			if task.NodeName == "" {
				continue
			}
			if got := postAllocate(t, tp, task); got.ErrorMessage != "" {
				t.Fatalf("allocateFunc on the planned node %s: %q", task.NodeName, got.ErrorMessage)
			}
			moved := task.Clone()
			moved.NodeName = "n1" // leaf-a: not where the plan put it
			if got := postAllocate(t, tp, moved); got.ErrorMessage != "" {
				t.Fatalf("allocateFunc off plan answered %q: Volcano would roll the task back", got.ErrorMessage)
			}
			checked = true
			break
		}
	}}
	r := runPlanned(t, tp, settings, fourNodes(), []gang{busy("busy", "n0"), train})
	requireBound(t, tp, r, train)
	if !checked {
		t.Fatalf("no allocated task of %s to post", train.name)
	}
	s := tp.status()
	if len(s.OffPlan) != 1 || !strings.Contains(s.OffPlan[0], "allocated on n1 but planned on n") {
		t.Fatalf("/status should record the one off-plan allocation: %v", s)
	}
}

// A node going NotReady (its condition, and the not-ready taint the node lifecycle controller adds,
// which is what Volcano v1.14.1 refuses it by): the next session is planned on what is left (not on
// the plan of the session before, which topoplace reuses only for an identical cluster).
func TestNodeGoingNotReadyIsPlannedAround(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout}
	train := gang{name: "train", members: 2, gpus: 8, annotations: map[string]string{modeKey: "hard", tierKey: "1"}}
	r := runPlanned(t, tp, settings, fourNodes(), []gang{busy("busy", "n0"), train})
	if got := requireBound(t, tp, r, train); strings.Join(got, ",") != "n2,n3" {
		t.Fatalf("healthy cluster: the gang fits only in leaf-b (n2,n3); bound %v", got)
	}

	// n3 goes NotReady; n0's job has finished: only leaf-a (n0, n1) holds the gang now.
	nodes := fourNodes()
	nodes[3].notReady = true
	r = runPlanned(t, tp, settings, nodes, []gang{train})
	got := requireBound(t, tp, r, train)
	requirePlanned(t, tp, train)
	if strings.Join(got, ",") != "n0,n1" {
		t.Fatalf("with n3 NotReady the gang belongs in leaf-a (n0,n1); bound %v\n%s", got, tp.explain())
	}
}

// HyperNodes as Volcano reads them, end to end: tier 0 (the CRD's minimum), a regexMatch and a
// labelMatch leaf, an empty labelMatch (selects no node) and a HyperNode member by regexMatch
// (ignored). A hard tier-0 gang goes to the one tier-0 HyperNode with room.
func TestHyperNodeEdgeCasesAsVolcanoReadsThem(t *testing.T) {
	path := edgeCaseHyperNodes(t)
	tp := startTopoplace(t, path, "--http-timeout", planTimeout)
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout}
	nvl := gang{name: "nvl", members: 2, gpus: 8, annotations: map[string]string{modeKey: "hard", tierKey: "0"}}
	// n0 half full: n1, n2, n3 are free, but only n2, n3 share a tier-0 HyperNode.
	r := runPlanned(t, tp, settings, fourNodes(), []gang{busy("busy", "n0"), nvl})
	got := requireBound(t, tp, r, nvl)
	requirePlanned(t, tp, nvl)
	if strings.Join(got, ",") != "n2,n3" {
		t.Fatalf("hard tier 0: the gang belongs in nvl-b (n2,n3); bound %v\n%s", got, tp.explain())
	}
	warned := strings.Join(tp.status().Warnings, "\n")
	for _, want := range []string{"nothing: an empty labelMatch selects no node", "spine: a HyperNode member not chosen by exactMatch"} {
		if !strings.Contains(warned, want) {
			t.Fatalf("topoplace should warn %q; its warnings:\n%s", want, warned)
		}
	}
}

// edgeCaseHyperNodes writes the HyperNodes of the edge cases: tier 0 (the CRD's minimum), a
// regexMatch and a labelMatch leaf, an empty labelMatch and a HyperNode member by regexMatch.
func edgeCaseHyperNodes(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hypernodes.yaml")
	doc := func(name string, tier int, members string) string {
		return fmt.Sprintf("apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata:\n  name: %s\nspec:\n  tier: %d\n  members:\n%s", name, tier, members)
	}
	yaml := strings.Join([]string{
		doc("nvl-b", 0, "  - type: Node\n    selector:\n      regexMatch:\n        pattern: ^n[23]$\n"),
		doc("leaf-a", 1, "  - type: Node\n    selector:\n      labelMatch:\n        matchLabels:\n          rack: a\n"),
		doc("leaf-b", 1, "  - type: HyperNode\n    selector:\n      exactMatch:\n        name: nvl-b\n"),
		doc("nothing", 1, "  - type: Node\n    selector:\n      labelMatch: {}\n"),
		doc("spine", 2, "  - type: HyperNode\n    selector:\n      exactMatch:\n        name: leaf-a\n"+
			"  - type: HyperNode\n    selector:\n      exactMatch:\n        name: leaf-b\n"+
			"  - type: HyperNode\n    selector:\n      regexMatch:\n        pattern: noth.*\n"),
	}, "---\n")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
