package gosched

// Session latency of Volcano's own scheduler with topoplace in the loop, beside Volcano alone.
// A measurement, not a test: it runs only with GOSCHED_BENCH=1 and prints figures for
// bench/RESULTS-volcano.md; it asserts nothing about speed.

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"
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
	var alone []time.Duration
	for i := 0; i < repeats; i++ {
		alone = append(alone, runSession(t, extenderSettings{without: true}, cluster, gangs).duration)
	}
	tp := startTopoplace(t, hyperNodesFile(t, leaves), "--http-timeout", "3s")
	settings := extenderSettings{url: tp.url(), httpTimeout: "3s"}
	first := runSession(t, settings, cluster, gangs)
	firstStatus := tp.status()
	var warm []time.Duration
	var bound int
	var s status
	for i := 0; i < repeats; i++ {
		r := runSession(t, settings, cluster, gangs)
		warm = append(warm, r.duration)
		bound = len(r.binds)
		s = tp.status() // read before the next session's open resets the counts
		fmt.Printf("session %d: %v, predicate calls %d, server time %.0f ms (%.3f ms a call), open %.0f ms\n",
			i+1, r.duration.Round(time.Millisecond), s.Calls["predicate"], s.CallMs["predicate"],
			s.CallMs["predicate"]/float64(max(1, s.Calls["predicate"])), s.OpenMs)
	}
	fmt.Printf("predicate bodies not in Go's form (read in full): %d\n", s.FullReads)
	fmt.Printf("nodes %d, pending pods %d (jobs %d)\n", nodes, s.GpuTasks, s.Jobs)
	fmt.Printf("Volcano alone: session median %v (min %v)\n", median(alone).Round(time.Millisecond), minOf(alone).Round(time.Millisecond))
	fmt.Printf("with topoplace, first session: %v, topoplace openMs %.0f, placed %d, error %q\n",
		first.duration.Round(time.Millisecond), firstStatus.OpenMs, len(firstStatus.PlacedJobs), firstStatus.Error)
	fmt.Printf("with topoplace, later sessions: median %v (min %v), topoplace openMs %.0f, reused %v, pods bound %d\n",
		median(warm).Round(time.Millisecond), minOf(warm).Round(time.Millisecond), s.OpenMs, s.Reused, bound)
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
