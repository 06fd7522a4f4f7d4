// Package godecode decodes the pod annotations topoplace's Volcano extender writes with Volcano's
// own Go package for vGPU devices (volcano.sh/volcano pkg/scheduler/api/devices/nvidia/vgpu, the
// deviceshare plugin's ledger, at the release pinned in go.mod).
//
// The cases are JSON files written by a Python test run (tests/volcano/godecode_cases.py): a real
// extender allocates the planned tasks and every pod patch it sends is applied to the pod. The
// expected devices in each case come from the solver's placement, not from the annotation, so a
// wrong encoding cannot agree with itself.
//
// What is checked, per node: Volcano's NewGPUDevices reads the node's volcano.sh/node-vgpu-register;
// AddResource decodes each pod's volcano.sh/vgpu-ids-new exactly as deviceshare does when it
// rebuilds its ledger every session; the planned GPU UUIDs are charged with the planned memory and
// cores, nothing is charged twice, and no GPU ends over its memory or 100 % of its cores. The
// hand-off keys volcano-vgpu-device-plugin reads (devices-to-allocate, vgpu-node, vgpu-time,
// bind-phase, bind-time) are checked for the values its GetPendingPod and GetNextDeviceRequest need.
package godecode

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	deviceconfig "volcano.sh/volcano/pkg/scheduler/api/devices/config"
	"volcano.sh/volcano/pkg/scheduler/api/devices/nvidia/vgpu"
)

type expectedDevice struct {
	UUID      string `json:"uuid"`
	Type      string `json:"type"`
	UsedMem   uint   `json:"usedmem"`
	UsedCores uint   `json:"usedcores"`
}

type expectedPod struct {
	Namespace  string             `json:"namespace"`
	Name       string             `json:"name"`
	Containers [][]expectedDevice `json:"containers"`
}

type decodeCase struct {
	Name   string        `json:"name"`
	Node   v1.Node       `json:"node"`
	Pods   []v1.Pod      `json:"pods"`
	Expect []expectedPod `json:"expect"`
}

func loadCases(t *testing.T) []decodeCase {
	t.Helper()
	dir := os.Getenv("TOPOPLACE_DECODE_CASES")
	if dir == "" {
		t.Fatal("TOPOPLACE_DECODE_CASES is not set: run `make test-go-decode`, which writes the cases first")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no case files in %s (%v)", dir, err)
	}
	var cases []decodeCase
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var c decodeCase
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatalf("%s: not a case: %v", file, err)
		}
		cases = append(cases, c)
	}
	return cases
}

func TestVolcanoDecodesTopoplaceAnnotations(t *testing.T) {
	for _, c := range loadCases(t) {
		c := c
		t.Run(c.Name, func(t *testing.T) {
			if len(c.Expect) == 0 {
				t.Fatal("a case with no planned pod checks nothing")
			}
			node := c.Node.DeepCopy()
			// The handshake is the device plugin's heartbeat on the node, not something topoplace
			// writes; a fresh "Requesting_" stamp makes NewGPUDevices read the register without
			// patching the node (it has no API server here). v1.14 moved the key to devices/config;
			// v1.15 no longer reads it and requires the node's allocatable volcano.sh/vgpu-* instead.
			node.Annotations[deviceconfig.VolcanoVGPUHandshake] = "Requesting_" + time.Now().Format("2006.01.02 15:04:05")
			gs := vgpu.NewGPUDevices(node.Name, node)
			if gs == nil {
				t.Fatalf("Volcano read no vGPU devices from node %s", node.Name)
			}
			byUUID := map[string]*vgpu.GPUDevice{}
			for _, d := range gs.Device {
				byUUID[d.UUID] = d
			}
			wantMem := map[string]uint{}
			wantCores := map[string]uint{}
			wantNum := map[string]int{}
			planned := map[string]bool{}
			for _, e := range c.Expect {
				planned[e.Namespace+"/"+e.Name] = true
				for _, ctr := range e.Containers {
					for _, d := range ctr {
						wantMem[d.UUID] += d.UsedMem
						wantCores[d.UUID] += d.UsedCores
						wantNum[d.UUID]++
					}
				}
			}
			// Volcano's ledger keys a GPU's PodMap by the pod's UID (v1.10 keyed it by pod name).
			plannedUID := map[string]bool{}
			for i := range c.Pods {
				pod := &c.Pods[i]
				if planned[pod.Namespace+"/"+pod.Name] {
					checkHandOff(t, pod, node.Name)
					if pod.UID == "" {
						t.Fatalf("case pod %s/%s has no uid: Volcano's ledger could not tell it apart", pod.Namespace, pod.Name)
					}
					plannedUID[string(pod.UID)] = true
				}
				gs.AddResource(pod)
			}
			for uuid, mem := range wantMem {
				d, ok := byUUID[uuid]
				if !ok {
					t.Errorf("planned GPU %s is not registered on %s", uuid, node.Name)
					continue
				}
				if !d.Health {
					t.Errorf("GPU %s is unhealthy in the register but was planned", uuid)
				}
				// Pods already running on the node are in the ledger too: the planned usage is what
				// the planned pods add, so compare against each device's PodMap entries of them.
				var gotMem, gotCores uint
				gotNum := 0
				for uid, use := range d.PodMap {
					if plannedUID[uid] {
						gotMem += use.UsedMem
						gotCores += use.UsedCore
						gotNum++
					}
				}
				if gotMem != mem || gotCores != wantCores[uuid] || gotNum != wantNum[uuid] {
					t.Errorf("GPU %s: Volcano charged %d MiB, %d %% cores to %d planned pod(s); the plan gave %d MiB, %d %%, %d",
						uuid, gotMem, gotCores, gotNum, mem, wantCores[uuid], wantNum[uuid])
				}
			}
			for _, d := range gs.Device {
				if d.UsedMem > d.Memory {
					t.Errorf("GPU %s over-subscribed in Volcano's ledger: %d of %d MiB", d.UUID, d.UsedMem, d.Memory)
				}
				if d.UsedCore > 100 {
					t.Errorf("GPU %s over-subscribed in Volcano's ledger: %d %% cores", d.UUID, d.UsedCore)
				}
				if d.UsedNum > d.Number {
					t.Errorf("GPU %s shared by %d pods, its register allows %d", d.UUID, d.UsedNum, d.Number)
				}
			}
		})
	}
}

// checkHandOff checks the keys volcano-vgpu-device-plugin's Allocate reads: GetPendingPod selects
// pods whose volcano.sh/vgpu-node is its node and whose volcano.sh/devices-to-allocate holds as many
// devices as the kubelet asks for, oldest volcano.sh/vgpu-time first; GetNextDeviceRequest takes the
// next container's entries of type NVIDIA; PodAllocationTrySuccess finishes when no GPU is left.
func checkHandOff(t *testing.T, pod *v1.Pod, node string) {
	t.Helper()
	a := pod.Annotations
	key := pod.Namespace + "/" + pod.Name
	if a[vgpu.AssignedNodeAnnotations] != node {
		t.Errorf("%s: %s = %q, want %q", key, vgpu.AssignedNodeAnnotations, a[vgpu.AssignedNodeAnnotations], node)
	}
	if a[vgpu.AssignedIDsToAllocateAnnotations] == "" || a[vgpu.AssignedIDsToAllocateAnnotations] != a[vgpu.AssignedIDsAnnotations] {
		t.Errorf("%s: %s must repeat %s as Volcano writes them, got %q and %q", key,
			vgpu.AssignedIDsToAllocateAnnotations, vgpu.AssignedIDsAnnotations,
			a[vgpu.AssignedIDsToAllocateAnnotations], a[vgpu.AssignedIDsAnnotations])
	}
	if a[vgpu.DeviceBindPhase] != "allocating" {
		t.Errorf("%s: %s = %q, want allocating", key, vgpu.DeviceBindPhase, a[vgpu.DeviceBindPhase])
	}
	for _, k := range []string{vgpu.AssignedTimeAnnotations, vgpu.BindTimeAnnotations} {
		if _, err := strconv.ParseUint(a[k], 10, 64); err != nil {
			t.Errorf("%s: %s = %q is not the unsigned Unix time the plugin parses: %v", key, k, a[k], err)
		}
	}
	for _, entry := range strings.Split(a[vgpu.AssignedIDsToAllocateAnnotations], ";") {
		for _, dev := range strings.Split(entry, ":") {
			if dev == "" {
				continue
			}
			if fields := strings.Split(dev, ","); len(fields) != 4 || fields[1] != vgpu.NvidiaGPUDevice {
				t.Errorf("%s: device entry %q is not UUID,NVIDIA,mem,cores", key, dev)
			}
		}
	}
}
