package gosched

// A cluster as Volcano's scheduler cache sees it, and one scheduling session of Volcano's own code
// over it: the shipped deploy/volcano/volcano-scheduler.conf (its actions, tiers and plugins, the
// extender's arguments with only its URL and timeout pointed at the test's topoplace), Volcano's
// mock scheduler cache with its fake clientsets, and its FakeBinder recording what is bound —
// the way Volcano's own action tests (pkg/scheduler/uthelper) open a session.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"volcano.sh/volcano/cmd/scheduler/app/options"
	"volcano.sh/volcano/pkg/scheduler"
	_ "volcano.sh/volcano/pkg/scheduler/actions" // registers enqueue, allocate, backfill, ...
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	_ "volcano.sh/volcano/pkg/scheduler/plugins" // registers gang, predicates, extender, ...
	"volcano.sh/volcano/pkg/scheduler/util"
)

const (
	gpuResource   = "nvidia.com/gpu"
	vgpuNumber    = "volcano.sh/vgpu-number"
	vgpuMemory    = "volcano.sh/vgpu-memory"
	vgpuCores     = "volcano.sh/vgpu-cores"
	topologyKey   = "topoplace.io/topology"
	nicsKey       = "topoplace.io/nics"
	vgpuIDs       = "volcano.sh/vgpu-ids-new"
	taskSpecKey   = "volcano.sh/task-spec"
	modeKey       = "volcano.sh/network-topology-mode"
	tierKey       = "volcano.sh/network-topology-highest-tier"
	gpuMemoryMiB  = 81920
	gpusPerNode   = 8
	vgpuSplit     = 10 // volcano-vgpu-device-plugin's default device split count
	testNamespace = "ml"
)

// ---------------------------------------------------------------------------- nodes

// gpuNode describes one 8-GPU node: GPU k on PCIe switch k/2, RDMA NIC mlx5_j on switch j.
type gpuNode struct {
	name        string
	unhealthy   map[int]bool // GPU index → reported unhealthy in the topology annotation
	deadNICs    bool         // every NIC reported unhealthy
	advertised  int          // nvidia.com/gpu the device plugin advertises (default 8)
	rack        string
	notReady    bool
	extraLabels map[string]string
	badTopology bool // two GPUs with one id in the annotation: the solver refuses the batch
	maxPods     int  // the node's allocatable pods (default 110): Volcano's predicates check it, topoplace does not
}

func gpuUUID(node string, i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }

// topologyAnnotation is what `topoplace node-report` writes (the domain Node's fields).
func (g gpuNode) topologyAnnotation() string {
	type pcie struct {
		ID     string `json:"id"`
		Kind   string `json:"kind"`
		Parent string `json:"parent,omitempty"`
		Numa   int    `json:"numa"`
	}
	type gpu struct {
		ID         string `json:"id"`
		Index      int    `json:"index"`
		UUID       string `json:"uuid"`
		Model      string `json:"model"`
		MemoryMiB  int    `json:"memory_mib"`
		Numa       int    `json:"numa"`
		PCIeSwitch string `json:"pcie_switch"`
		Healthy    bool   `json:"healthy"`
	}
	type nic struct {
		Name       string `json:"name"`
		PCIeSwitch string `json:"pcie_switch"`
		Numa       int    `json:"numa"`
		RDMA       bool   `json:"rdma"`
		Healthy    bool   `json:"healthy"`
		Bandwidth  int    `json:"bandwidth_gbps"`
	}
	topo := struct {
		CPUMilli     int    `json:"cpu_milli"`
		GPUs         []gpu  `json:"gpus"`
		NICs         []nic  `json:"nics"`
		PCIeSwitches []pcie `json:"pcie_switches"`
	}{CPUMilli: 64000}
	for s := 0; s < 2; s++ {
		topo.PCIeSwitches = append(topo.PCIeSwitches, pcie{ID: fmt.Sprintf("hb%d", s), Kind: "SWITCH_KIND_HOST_BRIDGE", Numa: s})
	}
	for j := 0; j < gpusPerNode/2; j++ {
		topo.PCIeSwitches = append(topo.PCIeSwitches, pcie{ID: fmt.Sprintf("sw%d", j), Kind: "SWITCH_KIND_SWITCH", Parent: fmt.Sprintf("hb%d", j/2), Numa: j / 2})
		topo.NICs = append(topo.NICs, nic{Name: fmt.Sprintf("mlx5_%d", j), PCIeSwitch: fmt.Sprintf("sw%d", j), Numa: j / 2, RDMA: true, Healthy: !g.deadNICs, Bandwidth: 200})
	}
	for i := 0; i < gpusPerNode; i++ {
		id := fmt.Sprintf("GPU%d", i)
		if g.badTopology && i == 1 {
			id = "GPU0"
		}
		topo.GPUs = append(topo.GPUs, gpu{ID: id, Index: i, UUID: gpuUUID(g.name, i), Model: "NVIDIA-H100-80GB",
			MemoryMiB: gpuMemoryMiB, Numa: i / 4, PCIeSwitch: fmt.Sprintf("sw%d", i/2), Healthy: !g.unhealthy[i]})
	}
	b, _ := json.Marshal(topo)
	return string(b)
}

func (g gpuNode) build() *v1.Node {
	advertised := g.advertised
	if advertised == 0 {
		advertised = gpusPerNode
	}
	maxPods := g.maxPods
	if maxPods == 0 {
		maxPods = 110
	}
	alloc := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("64"),
		v1.ResourceMemory: resource.MustParse("512Gi"),
		v1.ResourcePods:   *resource.NewQuantity(int64(maxPods), resource.DecimalSI),
		gpuResource:       *resource.NewQuantity(int64(advertised), resource.DecimalSI),
		vgpuNumber:        *resource.NewQuantity(int64(advertised*vgpuSplit), resource.DecimalSI),
		// volcano-vgpu-device-plugin also advertises the memory (MiB) and cores (% per GPU) it
		// shares: v1.14.1 refuses a pod asking volcano.sh/vgpu-memory on a node without it (v1.10.0 did not).
		vgpuMemory: *resource.NewQuantity(int64(advertised*gpuMemoryMiB), resource.DecimalSI),
		vgpuCores:  *resource.NewQuantity(int64(advertised*100), resource.DecimalSI),
	}
	labels := map[string]string{"kubernetes.io/hostname": g.name, "rack": g.rack}
	for k, v := range g.extraLabels {
		labels[k] = v
	}
	node := util.BuildNode(g.name, alloc, labels)
	node.Annotations[topologyKey] = g.topologyAnnotation()
	ready := v1.ConditionTrue
	if g.notReady {
		ready = v1.ConditionFalse
	}
	node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: ready}}
	if g.notReady {
		// As the node lifecycle controller marks it: v1.14.1 ignores node conditions (v1.10.0 read them)
		// and refuses a NotReady node by this taint (taint-node-by-condition).
		node.Spec.Taints = append(node.Spec.Taints, v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule})
	}
	return node
}

// ---------------------------------------------------------------------------- HyperNodes

// hyperNodesFile writes HyperNodes (topology.volcano.sh/v1alpha1) for leaves of nodes under one
// spine, the objects `topoplace volcano serve --hypernodes` reads as it reads them from the API.
func hyperNodesFile(t *testing.T, leaves map[string][]string) string {
	t.Helper()
	var docs []string
	var names []string
	for leaf := range leaves {
		names = append(names, leaf)
	}
	sort.Strings(names)
	for _, leaf := range names {
		var members []string
		for _, n := range leaves[leaf] {
			members = append(members, fmt.Sprintf("  - type: Node\n    selector:\n      exactMatch:\n        name: %s", n))
		}
		docs = append(docs, fmt.Sprintf("apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata:\n  name: %s\nspec:\n  tier: 1\n  members:\n%s\n", leaf, strings.Join(members, "\n")))
	}
	var spine []string
	for _, leaf := range names {
		spine = append(spine, fmt.Sprintf("  - type: HyperNode\n    selector:\n      exactMatch:\n        name: %s", leaf))
	}
	docs = append(docs, fmt.Sprintf("apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata:\n  name: spine\nspec:\n  tier: 2\n  members:\n%s\n", strings.Join(spine, "\n")))
	path := filepath.Join(t.TempDir(), "hypernodes.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatalf("write HyperNodes: %v", err)
	}
	return path
}

// ---------------------------------------------------------------------------- jobs and pods

// gang is a Volcano Job's PodGroup and its pods: `members` pods of `gpus` GPUs each.
type gang struct {
	name        string
	members     int
	gpus        int
	share       int // vGPU memory MiB: a share of one GPU instead of whole GPUs
	nics        string
	phase       schedulingv1beta1.PodGroupPhase // default Pending: newly submitted
	annotations map[string]string               // PodGroup annotations (network topology)
	runningOn   []string                        // already running there (one pod per entry)
	podNotes    []map[string]string             // per running pod: its device annotations
	affinity    *v1.Affinity                    // on its pending pods
	runAffinity *v1.Affinity                    // on its running pods
	runningGPUs []int                           // per running pod: GPUs it asks for (default gpus)
	// topology is the PodGroup's spec.networkTopology (v1.14.1 reads it; v1.10.0 had only
	// the volcano.sh/network-topology-* annotations, which topoplace also reads).
	topology *schedulingv1beta1.NetworkTopologySpec
}

func (g gang) objects() ([]*v1.Pod, *schedulingv1beta1.PodGroup) {
	phase := g.phase
	if phase == "" {
		phase = schedulingv1beta1.PodGroupPending
	}
	if len(g.runningOn) > 0 {
		phase = schedulingv1beta1.PodGroupRunning
	}
	pg := util.BuildPodGroup(g.name, testNamespace, "default", int32(g.members), nil, phase)
	pg.Annotations = g.annotations
	pg.Spec.NetworkTopology = g.topology
	req := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("4"),
		v1.ResourceMemory: resource.MustParse("16Gi"),
	}
	if g.share > 0 {
		req[vgpuNumber] = *resource.NewQuantity(1, resource.DecimalSI)
		req[vgpuMemory] = *resource.NewQuantity(int64(g.share), resource.DecimalSI)
	} else if g.gpus > 0 {
		req[gpuResource] = *resource.NewQuantity(int64(g.gpus), resource.DecimalSI)
	}
	var pods []*v1.Pod
	for i := 0; i < g.members; i++ {
		node, podPhase := "", v1.PodPending
		if i < len(g.runningOn) {
			node, podPhase = g.runningOn[i], v1.PodRunning
		}
		podReq := req
		if i < len(g.runningGPUs) {
			podReq = req.DeepCopy()
			podReq[gpuResource] = *resource.NewQuantity(int64(g.runningGPUs[i]), resource.DecimalSI)
		}
		pod := util.BuildPod(testNamespace, fmt.Sprintf("%s-%d", g.name, i), node, podPhase, podReq, g.name, map[string]string{"job": g.name}, nil)
		if node == "" {
			pod.Spec.Affinity = g.affinity
		} else {
			pod.Spec.Affinity = g.runAffinity
		}
		// As Volcano's job controller creates a vcjob's pods: the task (role) they belong to. It also
		// turns on the allocate action's per-role predicate error cache.
		pod.Annotations[taskSpecKey] = "worker"
		if g.nics != "" {
			pod.Annotations[nicsKey] = g.nics
		}
		if i < len(g.podNotes) {
			for k, v := range g.podNotes[i] {
				pod.Annotations[k] = v
			}
		}
		pods = append(pods, pod)
	}
	return pods, pg
}

// ---------------------------------------------------------------------------- one session

// extenderSettings are the arguments the test changes in the shipped extender configuration.
type extenderSettings struct {
	url         string
	httpTimeout string
	ignorable   *bool             // nil: as shipped
	extraVerbs  map[string]string // e.g. {"extender.jobReadyVerb": "jobReady"}: a configuration to compare with
	without     bool              // drop the extender plugin: Volcano alone
	// conf is the file under deploy/volcano/ read with Volcano's loader ("" is volcano-scheduler.conf).
	conf string
	// percentageNodesToFind is vc-scheduler's --percentage-nodes-to-find (0: its default, adaptive).
	percentageNodesToFind int32
	afterOpen             func() // runs between OnSessionOpen and the actions (e.g. stop topoplace)
	// afterActions runs before the session closes (topoplace still holds the session's plan).
	afterActions func(ssn *framework.Session)
	// hyperNodes is a HyperNode YAML file put into Volcano's own cache (api.HyperNodesInfo), the
	// file topoplace reads with --hypernodes; "" leaves Volcano without HyperNodes.
	hyperNodes string
	// confEdit rewrites the configuration text before Volcano's loader reads it (e.g. to enable
	// the network-topology-aware plugin).
	confEdit func(string) string
}

// shippedConf is deploy/volcano/volcano-scheduler.conf, read with Volcano's own loader.
func shippedConf(t *testing.T, file ...string) ([]framework.Action, []conf.Tier, []conf.Configuration) {
	t.Helper()
	name := ""
	if len(file) > 0 {
		name = file[0]
	}
	return editedConf(t, name, nil)
}

// editedConf is a file under deploy/volcano/ ("" is volcano-scheduler.conf), its text passed
// through edit (nil: as shipped), read with Volcano's own loader.
func editedConf(t *testing.T, name string, edit func(string) string) ([]framework.Action, []conf.Tier, []conf.Configuration) {
	t.Helper()
	if name == "" {
		name = "volcano-scheduler.conf"
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "volcano", name))
	if err != nil {
		t.Fatalf("read the shipped scheduler configuration: %v", err)
	}
	text := string(data)
	if edit != nil {
		text = edit(text)
	}
	actions, tiers, configurations, _, err := scheduler.UnmarshalSchedulerConf(text)
	if err != nil {
		t.Fatalf("Volcano refuses deploy/volcano/%s: %v", name, err)
	}
	return actions, tiers, configurations
}

// shippedExtenderArgs is the extender plugin's arguments as shipped.
func shippedExtenderArgs(t *testing.T) map[string]interface{} {
	t.Helper()
	_, tiers, _ := shippedConf(t)
	for _, tier := range tiers {
		for _, plugin := range tier.Plugins {
			if plugin.Name == "extender" {
				return plugin.Arguments
			}
		}
	}
	t.Fatalf("deploy/volcano/volcano-scheduler.conf enables no extender plugin")
	return nil
}

type sessionResult struct {
	binds    map[string]string // ns/pod → node, as Volcano's binder was asked
	duration time.Duration     // open + actions + close
	panicked string            // what an action panicked with (the real vc-scheduler would crash)
}

// runSession opens one Volcano session over the cluster, runs the shipped actions and closes it.
func runSession(t *testing.T, ext extenderSettings, nodes []gpuNode, gangs []gang) sessionResult {
	t.Helper()
	actions, tiers, configurations := editedConf(t, ext.conf, ext.confEdit)
	var kept []conf.Tier
	for _, tier := range tiers {
		var plugins []conf.PluginOption
		for _, plugin := range tier.Plugins {
			if plugin.Name == "extender" {
				if ext.without {
					continue
				}
				args := map[string]interface{}{}
				for k, v := range plugin.Arguments {
					args[k] = v
				}
				args["extender.urlPrefix"] = ext.url
				if ext.httpTimeout != "" {
					args["extender.httpTimeout"] = ext.httpTimeout
				}
				if ext.ignorable != nil {
					args["extender.ignorable"] = *ext.ignorable
				}
				for k, v := range ext.extraVerbs {
					args[k] = v
				}
				plugin.Arguments = args
			}
			plugins = append(plugins, plugin)
		}
		tier.Plugins = plugins
		kept = append(kept, tier)
	}

	binder := util.NewFakeBinder(1000)
	sc := cache.NewCustomMockSchedulerCache("volcano", binder, util.NewFakeEvictor(1000),
		&util.FakeStatusUpdater{}, nil, nil)
	var built []*v1.Node
	for _, n := range nodes {
		node := n.build()
		built = append(built, node)
		sc.AddOrUpdateNode(node)
	}
	if ext.hyperNodes != "" {
		sc.HyperNodesInfo = volcanoHyperNodes(t, ext.hyperNodes, built)
	}
	sc.AddQueueV1beta1(util.BuildQueue("default", 1, nil))
	for _, g := range gangs {
		pods, pg := g.objects()
		sc.AddPodGroupV1beta1(pg)
		for _, p := range pods {
			sc.AddPod(p)
		}
	}

	// vc-scheduler's flag defaults (--minimum-feasible-nodes 100, --minimum-percentage-nodes-to-find
	// 5, --percentage-nodes-to-find 0): the allocate action reads them.
	options.ServerOpts = &options.ServerOption{MinNodesToFind: 100, MinPercentageOfNodesToFind: 5,
		PercentageOfNodesToFind: ext.percentageNodesToFind}
	conf.EnabledActionMap = map[string]bool{}
	for _, a := range actions {
		conf.EnabledActionMap[a.Name()] = true
	}
	stop := make(chan struct{})
	defer close(stop)
	started := time.Now()
	ssn := framework.OpenSession(sc, kept, configurations)
	sc.Run(stop)
	if ext.afterOpen != nil {
		ext.afterOpen()
	}
	panicked := runActions(actions, ssn)
	if ext.afterActions != nil {
		ext.afterActions(ssn)
	}
	framework.CloseSession(ssn)
	elapsed := time.Since(started)
	// Binding is asynchronous (the cache's bind worker runs every 20 ms): wait until it settles.
	last, stableSince := -1, time.Now()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n := binder.Length(); n != last {
			last, stableSince = n, time.Now()
		} else if time.Since(stableSince) > 300*time.Millisecond {
			break
		}
	}
	return sessionResult{binds: binder.Binds(), duration: elapsed, panicked: panicked}
}

// runActions runs the actions in order; a panic is returned, not raised, so that a test can show
// which configuration crashes Volcano's scheduler.
func runActions(actions []framework.Action, ssn *framework.Session) (panicked string) {
	defer func() {
		if r := recover(); r != nil {
			// The stack says which of Volcano's actions or plugins crashed.
			panicked = fmt.Sprintf("%v\n%s", r, debug.Stack())
		}
	}()
	for _, a := range actions {
		a.Initialize()
		a.Execute(ssn)
		a.UnInitialize()
	}
	return ""
}

// podsOn lists ns/pod keys of a gang, for comparing binds.
func podsOf(g gang) []string {
	var keys []string
	for i := len(g.runningOn); i < g.members; i++ {
		keys = append(keys, fmt.Sprintf("%s/%s-%d", testNamespace, g.name, i))
	}
	return keys
}

func boolPtr(b bool) *bool { return &b }
