package gosched

// Session latency of Volcano's own scheduler with topoplace in the loop, beside Volcano alone.
// A measurement, not a test: it runs only with GOSCHED_BENCH=1 and prints figures for
// bench/RESULTS-volcano.md; it asserts nothing about speed.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins/extender"
)

func benchCluster(nodes, leafSize int) ([]gpuNode, map[string][]string, []gang) {
	var cluster []gpuNode
	leaves := map[string][]string{}
	var busyNodes []string
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("n%03d", i)
		leaf := fmt.Sprintf("leaf-%02d", i/leafSize)
		cluster = append(cluster, gpuNode{name: name, rack: leaf})
		leaves[leaf] = append(leaves[leaf], name)
		if i%3 == 0 {
			busyNodes = append(busyNodes, name)
		}
	}
	gangs := []gang{busy("busy", busyNodes...)}
	for j := 0; j < nodes/16; j++ {
		gangs = append(gangs, gang{name: fmt.Sprintf("train-%02d", j), members: 2, gpus: 8,
			annotations: map[string]string{modeKey: "hard", tierKey: "1"}})
		gangs = append(gangs, gang{name: fmt.Sprintf("single-%02d", j), members: 1, gpus: 4})
	}
	return cluster, leaves, gangs
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// GOSCHED_BENCH_CONFS picks the configurations, in order, one topoplace process for all (so they
// follow the same plan): "large" (volcano-scheduler-large.conf, prioritize, every node scored) and
// "predicate" (volcano-scheduler.conf). Default: both.
func TestSessionLatency(t *testing.T) {
	if os.Getenv("GOSCHED_BENCH") == "" {
		t.Skip("a measurement: run with GOSCHED_BENCH=1 (figures go to bench/RESULTS-volcano.md)")
	}
	nodes := 256
	if n, err := strconv.Atoi(os.Getenv("GOSCHED_BENCH_NODES")); err == nil && n > 0 {
		nodes = n
	}
	cluster, leaves, gangs := benchCluster(nodes, 16)
	repeats := 5
	if n, err := strconv.Atoi(os.Getenv("GOSCHED_BENCH_REPEATS")); err == nil && n > 0 {
		repeats = n
	}
	confs := []string{"large", "predicate"}
	if v := os.Getenv("GOSCHED_BENCH_CONFS"); v != "" {
		confs = strings.Split(v, ",")
	}
	var alone, aloneAll []time.Duration
	for i := 0; i < repeats; i++ {
		alone = append(alone, runSession(t, extenderSettings{without: true}, cluster, gangs).duration)
		aloneAll = append(aloneAll, runSession(t, extenderSettings{without: true, percentageNodesToFind: 100}, cluster, gangs).duration)
	}
	fmt.Printf("Volcano alone: session median %v (min %v); with --percentage-nodes-to-find=100: median %v (min %v)\n",
		median(alone).Round(time.Millisecond), minOf(alone).Round(time.Millisecond),
		median(aloneAll).Round(time.Millisecond), minOf(aloneAll).Round(time.Millisecond))
	// --decline-without-plan (recommended with the large configuration): a session without a plan
	// (the first of a large cluster) runs as Volcano alone, without a call per task.
	tp := startTopoplace(t, hyperNodesFile(t, leaves), "--http-timeout", "3s", "--decline-without-plan")
	lastBinds := map[string]map[string]string{}
	for c, name := range confs {
		if name == "stub" {
			benchStub(t, cluster, gangs, repeats)
			continue
		}
		settings := extenderSettings{url: tp.url(), httpTimeout: "3s"}
		if name == "large" {
			settings = largeSettings(tp.url(), "3s")
		}
		if c == 0 {
			first := runSession(t, settings, cluster, gangs)
			s := tp.status()
			fmt.Printf("[%s] first session: %v, topoplace openMs %.0f, placed %d, error %q, calls %v\n", name,
				first.duration.Round(time.Millisecond), s.OpenMs, len(s.PlacedJobs), s.Error, s.Calls)
		}
		var warm []time.Duration
		var r sessionResult
		var s status
		if name == "large" {
			settings.afterActions = func(ssn *framework.Session) { printMarshalCost(ssn) }
		}
		for i := 0; i < repeats; i++ {
			r = runSession(t, settings, cluster, gangs)
			warm = append(warm, r.duration)
			s = tp.status() // read before the next session's open resets the counts
			verb := "predicate"
			if name == "large" {
				verb = "prioritize"
			}
			share := s.OpenMs
			for _, ms := range s.CallMs {
				share += ms
			}
			fmt.Printf("[%s] session %d: %v, %s calls %d, server time %.0f ms (%.3f ms a call), open %.0f ms, "+
				"topoplace's share (open + every call's server time) %.0f ms, calls %v, panicked %q\n",
				name, i+1, r.duration.Round(time.Millisecond), verb, s.Calls[verb], s.CallMs[verb],
				s.CallMs[verb]/float64(max(1, s.Calls[verb])), s.OpenMs, share, s.Calls, r.panicked)
		}
		lastBinds[name] = r.binds
		fmt.Printf("[%s] nodes %d, pending pods %d (jobs %d); later sessions: median %v (min %v), reused %v, pods bound %d\n",
			name, nodes, s.GpuTasks, s.Jobs, median(warm).Round(time.Millisecond), minOf(warm).Round(time.Millisecond), s.Reused, len(r.binds))
	}
	if a, b := lastBinds["large"], lastBinds["predicate"]; a != nil && b != nil {
		fmt.Printf("gangs bound on the same nodes by both configurations (the predicate one admits only planned nodes): %s\n",
			sameGangNodes(a, b))
	}
}

// benchStub: the large configuration against an extender that answers every verb at once and
// neutrally (a Go handler in this process: a stand-in for topoplace, in a measurement only). Its
// sessions are Volcano plus its extender plugin's own cost (writing each PrioritizeRequest, the
// HTTP round trips) with no topoplace time at all: the rest of a real session is topoplace's.
func benchStub(t *testing.T, cluster []gpuNode, gangs []gang, repeats int) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		switch {
		case strings.HasSuffix(r.URL.Path, "/prioritize"):
			_, _ = w.Write([]byte(`{"nodeScore":{},"errorMessage":""}`))
		case strings.HasSuffix(r.URL.Path, "/jobReady"):
			_, _ = w.Write([]byte(`{"status":true}`))
		default:
			_, _ = w.Write([]byte(`{}`))
		}
	}))
	defer srv.Close()
	var times []time.Duration
	for i := 0; i < repeats; i++ {
		calls.Store(0)
		r := runSession(t, largeSettings(srv.URL, "3s"), cluster, gangs)
		times = append(times, r.duration)
		fmt.Printf("[stub] session %d: %v, calls %d, pods bound %d, panicked %q\n", i+1,
			r.duration.Round(time.Millisecond), calls.Load(), len(r.binds), r.panicked)
	}
	fmt.Printf("[stub] large configuration, instant neutral extender: median %v (min %v)\n",
		median(times).Round(time.Millisecond), minOf(times).Round(time.Millisecond))
}

// printMarshalCost times what Volcano's extender plugin does before each prioritize call: Go's
// encoding/json writing a PrioritizeRequest with every node of the session (the candidate list
// when every node passes the predicates). Volcano's own cost, whatever the extender answers.
func printMarshalCost(ssn *framework.Session) {
	var task *api.TaskInfo
	for _, job := range ssn.Jobs {
		for _, t := range job.Tasks {
			task = t
			break
		}
		if task != nil {
			break
		}
	}
	var times []time.Duration
	var size int
	for i := 0; i < 3; i++ {
		started := time.Now()
		out, err := json.Marshal(&extender.PrioritizeRequest{Task: task, Nodes: ssn.NodeList})
		times = append(times, time.Since(started))
		if err != nil {
			fmt.Printf("marshal: %v\n", err)
			return
		}
		size = len(out)
	}
	fmt.Printf("PrioritizeRequest with %d nodes: %.1f MiB, json.Marshal median %v\n",
		len(ssn.NodeList), float64(size)/(1<<20), median(times).Round(time.Millisecond))
}

// sameGangNodes compares two sessions' binds gang by gang (a gang's members are interchangeable,
// so the sorted node lists are compared): "k of n gangs".
func sameGangNodes(a, b map[string]string) string {
	byGang := func(binds map[string]string) map[string]string {
		nodes := map[string][]string{}
		for pod, node := range binds {
			gang := pod[:strings.LastIndex(pod, "-")]
			nodes[gang] = append(nodes[gang], node)
		}
		out := map[string]string{}
		for g, ns := range nodes {
			sort.Strings(ns)
			out[g] = strings.Join(ns, ",")
		}
		return out
	}
	ga, gb := byGang(a), byGang(b)
	same := 0
	for g, ns := range gb {
		if ga[g] == ns {
			same++
		}
	}
	return fmt.Sprintf("%d of %d gangs (large bound %d gangs)", same, len(gb), len(ga))
}

func minOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		if d < m {
			m = d
		}
	}
	return m
}
