package gosched

// deploy/volcano/volcano-scheduler-large.conf: the plan steers Volcano through one batch prioritize
// call per task (no predicate verb), with vc-scheduler's --percentage-nodes-to-find=100 so every
// node that passes Volcano's own predicates is scored. Same real scheduler and extender plugin as
// the other scenarios; only the configuration file differs.

import (
	"strings"
	"testing"
)

const largeConf = "volcano-scheduler-large.conf"

func largeSettings(url, timeout string) extenderSettings {
	return extenderSettings{url: url, httpTimeout: timeout, conf: largeConf, percentageNodesToFind: 100}
}

// The large configuration registers no predicate: the test would prove nothing if it did.
func TestLargeConfHasNoPredicateVerb(t *testing.T) {
	_, tiers, _ := shippedConf(t, largeConf)
	for _, tier := range tiers {
		for _, plugin := range tier.Plugins {
			if plugin.Name != "extender" {
				continue
			}
			if v, _ := plugin.Arguments["extender.predicateVerb"].(string); v != "" {
				t.Fatalf("%s sets extender.predicateVerb %q: one call per task and node", largeConf, v)
			}
			if v, _ := plugin.Arguments["extender.prioritizeVerb"].(string); v != "prioritize" {
				t.Fatalf("%s must steer through extender.prioritizeVerb: prioritize, has %q", largeConf, v)
			}
			if ignorable, _ := plugin.Arguments["extender.ignorable"].(bool); ignorable {
				t.Fatalf("%s: extender.ignorable must be false (a failed onSessionOpen registers nothing)", largeConf)
			}
			return
		}
	}
	t.Fatalf("%s enables no extender plugin", largeConf)
}

// Placements equal the plan where Volcano alone has other choices: a hard-tier gang kept in the one
// leaf with room, a share sent to the only GPU with the memory, a NIC job to the node whose NICs work.
func TestLargeConfBindsThePlan(t *testing.T) {
	t.Run("hard tier in one leaf", func(t *testing.T) {
		tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
		train := gang{name: "train", members: 2, gpus: 8, annotations: map[string]string{modeKey: "hard", tierKey: "1"}}
		r := runPlanned(t, tp, largeSettings(tp.url(), planTimeout), fourNodes(), []gang{busy("busy", "n0"), train})
		nodes := requireBound(t, tp, r, train)
		requirePlanned(t, tp, train)
		if strings.Join(nodes, ",") != "n2,n3" {
			t.Fatalf("hard tier 1: the plan is n2,n3 (leaf-b); Volcano bound %v\n%s", nodes, tp.explain())
		}
	})
	t.Run("share on the GPU with the memory", func(t *testing.T) {
		tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
		all := []int{0, 1, 2, 3, 4, 5, 6, 7}
		full := gang{name: "full", members: 4, gpus: 7, runningOn: []string{"n0", "n3", "n1", "n2"},
			podNotes: []map[string]string{holding("n0", all...), holding("n3", all...), holding("n1", all[:7]...), holding("n2", all[1:]...)}}
		shared := gang{name: "infer-old", members: 1, share: 40000, runningOn: []string{"n2"},
			podNotes: []map[string]string{{vgpuIDs: gpuUUID("n2", 0) + ",NVIDIA,40000,50;"}}}
		newShare := gang{name: "infer", members: 1, share: 50000}
		r := runPlanned(t, tp, largeSettings(tp.url(), planTimeout), fourNodes(), []gang{full, shared, newShare})
		nodes := requireBound(t, tp, r, newShare)
		requirePlanned(t, tp, newShare)
		if nodes[0] != "n1" {
			t.Fatalf("only n1's GPU7 has 50 GiB free; Volcano bound the share on %v\n%s", nodes, tp.explain())
		}
	})
	t.Run("NIC job where the NICs work", func(t *testing.T) {
		tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
		nodes := fourNodes()
		for i := range nodes {
			nodes[i].deadNICs = nodes[i].name != "n1"
		}
		job := gang{name: "allreduce", members: 1, gpus: 4, nics: "per-gpu"}
		// Several sessions of the same cluster (the plan reused): Volcano alone breaks the tie
		// between the four empty nodes at random, so one lucky bind would prove nothing.
		for i := 0; i < 4; i++ {
			r := runPlanned(t, tp, largeSettings(tp.url(), planTimeout), nodes, []gang{job})
			got := requireBound(t, tp, r, job)
			requirePlanned(t, tp, job)
			if got[0] != "n1" {
				t.Fatalf("session %d: only n1 has healthy RDMA NICs; Volcano bound the NIC job on %v", i+1, got)
			}
			if s := tp.status(); s.Calls["prioritize"] == 0 || s.Calls["predicate"] != 0 {
				t.Fatalf("expected prioritize calls and no predicate calls, got %v", s.Calls)
			}
		}
	})
}

// Fail-open: topoplace down or hung past httpTimeout, the large configuration schedules by
// Volcano's own rules (the failed onSessionOpen registers nothing), without a crash.
func TestLargeConfTopoplaceDownOrHungVolcanoSchedulesByItsOwnRules(t *testing.T) {
	nodes, gangs, g := ownRulesCluster()
	tp := startTopoplace(t, "", "--http-timeout", "500ms")
	tp.pause()
	r := runSession(t, largeSettings(tp.url(), "500ms"), nodes, gangs)
	tp.resume()
	requireOwnRules(t, "large configuration, topoplace hung", r, g)
	url := tp.url()
	tp.stop()
	r = runSession(t, largeSettings(url, "1s"), nodes, gangs)
	requireOwnRules(t, "large configuration, topoplace down", r, g)
}

// With --decline-without-plan, a session topoplace has no plan for (here: it refuses the batch)
// gets a 503 from onSessionOpen, so Volcano's plugin registers no verb: Volcano's own rules, and
// not one prioritize call for answers that would all have been neutral.
func TestLargeConfSessionWithoutAPlanMakesNoCalls(t *testing.T) {
	tp := startTopoplace(t, "", "--http-timeout", planTimeout, "--decline-without-plan")
	nodes, gangs, g := ownRulesCluster()
	nodes[0].badTopology = true
	r := runSession(t, largeSettings(tp.url(), planTimeout), nodes, gangs)
	requireOwnRules(t, "large configuration, no plan, declined", r, g)
	s := tp.status()
	if !strings.Contains(s.Error, "refused the batch") || !s.Declined {
		t.Fatalf("topoplace should have refused the batch and declined the session: %v", s)
	}
	if s.Calls["prioritize"] != 0 {
		t.Fatalf("a declined session registers no verb, yet Volcano made %d prioritize calls", s.Calls["prioritize"])
	}
}

// What the large configuration gives up, shown so that docs/volcano.md is revisited if it changes:
// prioritize can only rank, so a hard-tier gang the plan leaves unplaced (no leaf has room) is
// bound by Volcano's own rules across leaves; volcano-scheduler.conf's predicate holds it
// (TestHardTierWithoutRoomBindsNothingSoftSpreads).
func TestLargeConfCannotHoldAGangThePlanLeavesUnplaced(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	hard := gang{name: "hard", members: 2, gpus: 8, annotations: map[string]string{modeKey: "hard", tierKey: "1"}}
	r := runPlanned(t, tp, largeSettings(tp.url(), planTimeout), fourNodes(), []gang{busy("busy", "n0", "n3"), hard})
	if s := tp.status(); len(s.UnplacedJobs) != 1 {
		t.Fatalf("topoplace should leave the hard gang unplaced: %v", s)
	}
	if nodes := boundNodes(t, r, hard); strings.Join(nodes, ",") != "n1,n2" {
		t.Fatalf("expected Volcano to bind the gang the plan left unplaced on n1,n2 (prioritize cannot "+
			"refuse); it bound %v — revisit docs/volcano.md, Two configurations", nodes)
	}
}
