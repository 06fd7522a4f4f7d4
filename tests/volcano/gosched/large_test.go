package gosched

// deploy/volcano/volcano-scheduler-large.conf: the plan steers Volcano through one batch prioritize
// call per task (no predicate verb), with vc-scheduler's --percentage-nodes-to-find=100 so every
// node that passes Volcano's own predicates is scored. Same real scheduler and extender plugin as
// the other scenarios; only the configuration file differs.

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

const largeConf = "volcano-scheduler-large.conf"

func largeSettings(url, timeout string) extenderSettings {
	return extenderSettings{url: url, httpTimeout: timeout, conf: largeConf, percentageNodesToFind: 100}
}

// The large configuration registers no predicate (the test would prove nothing if it did) and vetoes
// through jobReady, with ignorable false (a failed jobReady then answers "ready").
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
			if v, _ := plugin.Arguments["extender.jobReadyVerb"].(string); v != "jobReady" {
				t.Fatalf("%s must veto through extender.jobReadyVerb: jobReady, has %q", largeConf, v)
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

// The veto: jobReady. A hard-tier gang the plan leaves unplaced (no leaf has two free nodes) is not
// bound: Volcano's allocate action asks jobReady once gang's own minAvailable is allocated, topoplace
// answers "not ready", and the statement is not committed. A gang the plan places is bound in the
// same session. The calls are per member allocated and per commit, never per
// node. With topoplace down, the same gang is bound by Volcano's own rules: the veto never stalls it.
func TestLargeConfHoldsAGangThePlanLeavesUnplaced(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	hard := gang{name: "hard", members: 2, gpus: 8, annotations: map[string]string{modeKey: "hard", tierKey: "1"}}
	small := gang{name: "small", members: 1, gpus: 4}
	gangs := []gang{busy("busy", "n0", "n3"), hard, small}
	r := runPlanned(t, tp, largeSettings(tp.url(), planTimeout), fourNodes(), gangs)
	s := tp.status()
	if _, left := s.UnplacedJobs[testNamespace+"/hard"]; !left {
		t.Fatalf("topoplace should leave the hard gang unplaced: %v", s)
	}
	if r.panicked != "" {
		t.Fatalf("Volcano's scheduler panicked: %s", r.panicked)
	}
	if nodes := boundNodes(t, r, hard); len(nodes) != 0 {
		t.Fatalf("jobReady should hold the gang the plan leaves unplaced; Volcano bound it on %v\n%s", nodes, tp.explain())
	}
	requireBound(t, tp, r, small)
	requirePlanned(t, tp, small)
	// v1.14's allocate asks jobReady after each member it allocates and again before committing
	// (v1.10.0: once or twice per gang): per pending member, never per node (that would be 4 × 3).
	if n := s.Calls["jobReady"]; n == 0 || n > 3*3 {
		t.Fatalf("expected at most three jobReady calls per pending member (3 members), got %d: %v", n, s.Calls)
	}
	if s.Calls["predicate"] != 0 {
		t.Fatalf("the large configuration made %d predicate calls", s.Calls["predicate"])
	}
	// v1.14.1 posts allocateFunc for the held gang's members before asking jobReady, and after "not
	// ready" neither commits nor discards the statement: no deallocateFunc. topoplace writes no
	// devices for a held gang's members (they would stay on pods that are not bound).
	held := 0
	for _, note := range s.OffPlan {
		if strings.Contains(note, "held by jobReady") {
			held++
		}
	}
	if held == 0 || s.Calls["deallocateFunc"] != 0 {
		t.Fatalf("expected allocateFunc for the held gang answered without devices and no deallocateFunc: %v", s)
	}
	url := tp.url()
	tp.stop()
	r = runSession(t, largeSettings(url, "1s"), fourNodes(), gangs)
	if r.panicked != "" {
		t.Fatalf("topoplace down: Volcano's scheduler panicked: %s", r.panicked)
	}
	if nodes := boundNodes(t, r, hard); strings.Join(nodes, ",") != "n1,n2" {
		t.Fatalf("topoplace down: Volcano's own rules bind the hard gang on n1,n2 (the only free nodes); got %v", nodes)
	}
}

// The crash window, closed: with --standby, the serving process killed (SIGKILL) between a
// successful onSessionOpen and the allocate action leaves the port answering: prioritize gets no
// scores and jobReady "ready" from the standby, so Volcano finishes the session by its own rules
// instead of dereferencing a nil node. The standby restarts the server and the next session is
// planned again. Without --standby the same kill crashes Volcano's allocate action (shown first).
func TestLargeConfServerKilledMidSession(t *testing.T) {
	nodes, gangs, g := ownRulesCluster()
	bare := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	settings := largeSettings(bare.url(), planTimeout)
	settings.afterOpen = func() { bare.stop() }
	// Without --standby every prioritize call of the session fails: v1.10.0's allocate action crashed
	// on it; v1.14 survives but places nothing this session.
	if r := runSession(t, settings, nodes, gangs); r.panicked != "" || len(boundNodes(t, r, g)) != 0 {
		t.Fatalf("without --standby, topoplace gone after onSessionOpen (every prioritize fails) should cost "+
			"Volcano v1.14 the session without a crash; panicked %q, bound %v — revisit docs/volcano.md, Two configurations",
			r.panicked, boundNodes(t, r, g))
	}

	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout, "--standby")
	runPlanned(t, tp, largeSettings(tp.url(), planTimeout), nodes, gangs) // a plan in place
	settings = largeSettings(tp.url(), planTimeout)
	killed := 0
	settings.afterOpen = func() {
		killed = tp.status().Pid
		if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
			t.Fatalf("kill the serving process %d: %v", killed, err)
		}
	}
	r := runSession(t, settings, nodes, gangs)
	requireOwnRules(t, "serving process killed mid-session, --standby", r, g)
	if !strings.Contains(tp.fullLog(), "answered neutrally") {
		t.Fatalf("the standby answered no call; the test proves nothing\n%s", tp.log())
	}
	deadline := time.Now().Add(90 * time.Second)
	for !tp.healthy() {
		if time.Now().After(deadline) {
			t.Fatalf("the standby did not bring the server back within 90 s\n%s", tp.log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if pid := tp.status().Pid; pid == killed || pid == 0 {
		t.Fatalf("expected a new serving process, /status names pid %d (killed %d)", pid, killed)
	}
	r = runPlanned(t, tp, largeSettings(tp.url(), planTimeout), nodes, gangs)
	requireBound(t, tp, r, g)
	requirePlanned(t, tp, g)
}

// Alive but hung (SIGSTOP: a deadlock looks the same from outside) between onSessionOpen and the
// allocate action, with --standby: the front relays the first call, gets no answer within its budget
// (a little under Volcano's httpTimeout) and answers it neutrally; the process is then suspect and
// every later call of the session is answered at once. Volcano finishes the session by its own rules,
// no panic, in about one budget more than alone; the front kills the hung process and the next
// session is planned by a new one. Then a call in flight when the serving process is SIGKILLed:
// the kernel resets the relayed connection, the front answers neutrally, no panic.
func TestLargeConfServerHungMidSession(t *testing.T) {
	const timeout = "3s"
	nodes, gangs, g := ownRulesCluster()
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", timeout, "--standby")
	runPlanned(t, tp, largeSettings(tp.url(), timeout), nodes, gangs) // a plan in place
	requirePlanned(t, tp, g)
	alone := runSession(t, extenderSettings{without: true}, nodes, gangs).duration
	settings := largeSettings(tp.url(), timeout)
	hung := 0
	settings.afterOpen = func() {
		requireSessionOpen(t, tp)
		hung = tp.status().Pid
		if err := syscall.Kill(hung, syscall.SIGSTOP); err != nil {
			t.Fatalf("stop the serving process %d: %v", hung, err)
		}
	}
	r := runSession(t, settings, nodes, gangs)
	requireOwnRules(t, "serving process hung mid-session, --standby", r, g)
	if !strings.Contains(tp.fullLog(), "no answer within") {
		t.Fatalf("the front saw no relay run out of budget; the test proves nothing\n%s", tp.log())
	}
	if r.duration > alone+4*time.Second {
		t.Fatalf("a hung serving process cost the session %v (Volcano alone %v): more than one 3s budget", r.duration, alone)
	}
	t.Logf("session with the serving process hung after onSessionOpen: %v (Volcano alone %v)",
		r.duration.Round(time.Millisecond), alone.Round(time.Millisecond))
	victim := waitNewServer(t, tp, hung)
	if !strings.Contains(tp.fullLog(), "serving process hung: killed") {
		t.Fatalf("the front did not kill the hung serving process\n%s", tp.log())
	}
	r = runPlanned(t, tp, largeSettings(tp.url(), timeout), nodes, gangs)
	requireBound(t, tp, r, g)
	requirePlanned(t, tp, g)

	// A call in flight at the kill: stop the process so the first prioritize waits on it, kill it 300 ms later.
	settings.afterOpen = func() {
		requireSessionOpen(t, tp)
		if err := syscall.Kill(victim, syscall.SIGSTOP); err != nil {
			t.Fatalf("stop the serving process %d: %v", victim, err)
		}
		time.AfterFunc(300*time.Millisecond, func() { _ = syscall.Kill(victim, syscall.SIGKILL) })
	}
	before := strings.Count(tp.fullLog(), "serving process failed a call")
	r = runSession(t, settings, nodes, gangs)
	requireOwnRules(t, "serving process killed with a call in flight, --standby", r, g)
	failed := tp.fullLog()
	if strings.Count(failed, "serving process failed a call") == before || strings.Count(failed, "ConnectionResetError")+strings.Count(failed, "a cut answer")+strings.Count(failed, "not an HTTP answer") == 0 {
		t.Fatalf("no relayed call failed by the kill (reset or cut); the test proves nothing\n%s", tp.log())
	}
	waitNewServer(t, tp, victim)
}

// waitNewServer: the pid of a serving process other than old, healthy behind the front.
func waitNewServer(t *testing.T, tp *topoplace, old int) int {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if tp.healthy() {
			if pid := tp.status().Pid; pid != old && pid != 0 {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new serving process within 90 s (old %d)\n%s", old, tp.log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A planned node Volcano's own predicates refuse for a reason the plan does not model (here the
// node's pod count: allocatable pods 1, one pod running). Binpack plans the hard-tier gang (2 x 6
// GPUs) on n0,n1 (6 GPUs free on each, leaf-a) rather than the empty n2,n3; Volcano never offers n0 to prioritize. With --all-nodes-scored
// topoplace sees its planned node missing, holds the gang that session (jobReady "not ready": no
// member on n1 and one wherever Volcano likes, across leaves), and plans it without n0 next
// session: both members bound in leaf-b (n2,n3), where the hard tier allows them. Without
// --all-nodes-scored the same session binds the gang split across the leaves (n1 and n2: seen
// when this test was written), breaking its hard tier.
func TestLargeConfPlannedNodeVolcanoRefusesIsPlannedAround(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout, "--all-nodes-scored")
	nodes := fourNodes()
	nodes[0].maxPods = 1
	busy0 := gang{name: "busy-0", members: 1, gpus: 2, runningOn: []string{"n0"}, podNotes: []map[string]string{holding("n0", 0, 1)}}
	busy1 := gang{name: "busy-1", members: 1, gpus: 2, runningOn: []string{"n1"}, podNotes: []map[string]string{holding("n1", 0, 1)}}
	train := gang{name: "train", members: 2, gpus: 6, annotations: map[string]string{modeKey: "hard", tierKey: "1"}}
	gangs := []gang{busy0, busy1, train}
	r := runPlanned(t, tp, largeSettings(tp.url(), planTimeout), nodes, gangs)
	if r.panicked != "" {
		t.Fatalf("Volcano's scheduler panicked: %s", r.panicked)
	}
	s := tp.status()
	if len(s.Refused) == 0 {
		t.Fatalf("topoplace saw no planned node refused; the plan did not choose n0 and the test proves nothing (bound %v): %+v\n%s", boundNodes(t, r, train), s, tp.explain())
	}
	if got := boundNodes(t, r, train); len(got) != 0 {
		t.Fatalf("the gang whose planned node Volcano refused should be held this session; bound on %v", got)
	}
	r = runSession(t, largeSettings(tp.url(), planTimeout), nodes, gangs)
	got := requireBound(t, tp, r, train)
	requirePlanned(t, tp, train)
	if strings.Join(got, ",") != "n2,n3" {
		t.Fatalf("re-planned without n0, the hard-tier gang belongs in leaf-b (n2,n3); bound on %v\n%s", got, tp.explain())
	}
}
