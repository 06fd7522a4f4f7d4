package gosched

// Volcano never stalls because of topoplace: down, hung past extender.httpTimeout, restarted.
// The shipped configuration (deploy/volcano/volcano-scheduler.conf) is run as shipped; the
// configuration the README advised before (ignorable: true, with jobReady and prioritize verbs) is
// run beside it where it behaves differently, to show why the shipped one is what it is.

import (
	"strings"
	"testing"
	"time"
)

// A cluster where Volcano's own rules have one answer: n0 and n1 half full, so the 2x8-GPU gang
// can only go to n2 and n3.
func ownRulesCluster() ([]gpuNode, []gang, gang) {
	g := gang{name: "gang", members: 2, gpus: 8}
	return fourNodes(), []gang{busy("busy", "n0", "n1"), g}, g
}

// The configuration the README advised before: errors ignorable, and jobReady/prioritize verbs.
func advisedBefore(url, timeout string) extenderSettings {
	return extenderSettings{url: url, httpTimeout: timeout, ignorable: boolPtr(true), extraVerbs: map[string]string{
		"extender.prioritizeVerb": "prioritize",
		"extender.jobReadyVerb":   "jobReady",
	}}
}

func requireOwnRules(t *testing.T, what string, r sessionResult, g gang) {
	t.Helper()
	if r.panicked != "" {
		t.Fatalf("%s: Volcano's scheduler panicked: %s", what, r.panicked)
	}
	nodes := boundNodes(t, r, g)
	if strings.Join(nodes, ",") != "n2,n3" {
		t.Fatalf("%s: Volcano's own rules bind the gang on n2,n3; it bound %v (all binds %v)", what, nodes, r.binds)
	}
}

func TestVolcanoAloneBaseline(t *testing.T) {
	nodes, gangs, g := ownRulesCluster()
	requireOwnRules(t, "without the extender plugin", runSession(t, extenderSettings{without: true}, nodes, gangs), g)
}

func TestTopoplaceDownVolcanoSchedulesByItsOwnRules(t *testing.T) {
	tp := startTopoplace(t, "")
	url := tp.url()
	tp.stop() // the port now refuses connections
	nodes, gangs, g := ownRulesCluster()

	r := runSession(t, extenderSettings{url: url, httpTimeout: "1s"}, nodes, gangs)
	requireOwnRules(t, "shipped configuration, topoplace down", r, g)

	// ignorable: true goes on registering the verbs; each call fails and the failed jobReady
	// answers "not ready", so the gang is discarded: every session, for as long as topoplace is down.
	r = runSession(t, advisedBefore(url, "1s"), nodes, gangs)
	if bound := boundNodes(t, r, g); len(bound) != 0 {
		t.Fatalf("expected the previously advised configuration to stall the gang with topoplace down "+
			"(Volcano's failed jobReady answers not-ready); it bound %v — revisit docs/volcano.md", bound)
	}
}

func TestTopoplaceHungPastTimeoutVolcanoSchedulesByItsOwnRules(t *testing.T) {
	tp := startTopoplace(t, "", "--http-timeout", "500ms")
	tp.pause() // accepts connections, never answers
	defer tp.resume()
	nodes, gangs, g := ownRulesCluster()

	alone := runSession(t, extenderSettings{without: true}, nodes, gangs).duration
	r := runSession(t, extenderSettings{url: tp.url(), httpTimeout: "500ms"}, nodes, gangs)
	requireOwnRules(t, "shipped configuration, topoplace hung", r, g)
	// One timeout for onSessionOpen, then nothing registered (onSessionClose is still sent: a second
	// one). Bounded by four, so a loaded machine does not fail it: no per-task call waits.
	if r.duration > alone+4*500*time.Millisecond {
		t.Fatalf("shipped configuration: a hung topoplace cost the session %v (Volcano alone: %v), "+
			"expected about two 500ms timeouts more", r.duration, alone)
	}
	t.Logf("session with topoplace hung, shipped configuration: %v", r.duration.Round(time.Millisecond))

	r = runSession(t, advisedBefore(tp.url(), "500ms"), nodes, gangs)
	if bound := boundNodes(t, r, g); len(bound) != 0 {
		t.Fatalf("expected the previously advised configuration to stall the gang; it bound %v", bound)
	}
	t.Logf("session with topoplace hung, previously advised configuration: %v (every verb waits the timeout)", r.duration.Round(time.Millisecond))
}

// requireSessionOpen: topoplace answered this session's onSessionOpen with a plan (so the plugin
// registered its verbs and they will be called).
func requireSessionOpen(t *testing.T, tp *topoplace) {
	t.Helper()
	if !tp.status().SessionOpen {
		t.Fatalf("topoplace holds no plan for the open session\n%s", tp.explain())
	}
}

// stopAfterOpen stops topoplace once it has answered onSessionOpen with a plan.
func stopAfterOpen(t *testing.T, tp *topoplace) func() {
	return func() {
		t.Helper()
		requireSessionOpen(t, tp)
		tp.stop()
	}
}

// The solver refuses the batch (here: a node annotation naming one GPU twice): topoplace answers
// onSessionOpen with no plan, every predicate admits, and Volcano schedules by its own rules.
func TestTopoplaceRefusingTheBatchVolcanoSchedulesByItsOwnRules(t *testing.T) {
	tp := startTopoplace(t, "", "--http-timeout", planTimeout)
	nodes, gangs, g := ownRulesCluster()
	nodes[0].badTopology = true
	r := runPlanned(t, tp, extenderSettings{url: tp.url(), httpTimeout: planTimeout}, nodes, gangs)
	requireOwnRules(t, "topoplace refusing the batch", r, g)
	if s := tp.status(); !strings.Contains(s.Error, "refused the batch") {
		t.Fatalf("topoplace should say it refused the batch: %v", s)
	}
}

// Stopped between onSessionOpen and the allocate action: the predicate calls fail, and with
// ignorable: false Volcano refuses the nodes for that session only. The next session's
// onSessionOpen fails, the plugin registers nothing, and the gang binds by Volcano's own rules.
func TestTopoplaceDiesMidSessionCostsOneSession(t *testing.T) {
	tp := startTopoplace(t, "", "--http-timeout", planTimeout)
	nodes, gangs, g := ownRulesCluster()
	runPlanned(t, tp, extenderSettings{url: tp.url(), httpTimeout: planTimeout}, nodes, gangs) // warm
	r := runSession(t, extenderSettings{url: tp.url(), httpTimeout: planTimeout, afterOpen: stopAfterOpen(t, tp)}, nodes, gangs)
	if r.panicked != "" {
		t.Fatalf("Volcano's scheduler panicked: %s", r.panicked)
	}
	if bound := boundNodes(t, r, g); len(bound) != 0 {
		t.Fatalf("topoplace died mid-session: expected Volcano to refuse every node for that session "+
			"(a failed predicate with ignorable: false), it bound %v; revisit docs/volcano.md", bound)
	}
	r = runSession(t, extenderSettings{url: tp.url(), httpTimeout: "1s"}, nodes, gangs)
	requireOwnRules(t, "the session after topoplace died", r, g)
}

// Hung between onSessionOpen and allocate: every predicate call waits the timeout (Volcano makes
// them 16 at a time, and skips the rest of a role once one member found no node), the session
// binds nothing; the next session's onSessionOpen times out and Volcano schedules alone.
func TestTopoplaceHungMidSessionCostsOneSession(t *testing.T) {
	tp := startTopoplace(t, "", "--http-timeout", planTimeout)
	nodes, gangs, g := ownRulesCluster()
	// A first session warms the solver and leaves its result for the identical cluster, so the
	// next onSessionOpen answers well within 500 ms and the plugin registers its verbs.
	runPlanned(t, tp, extenderSettings{url: tp.url(), httpTimeout: planTimeout}, nodes, gangs)
	pause := func() {
		requireSessionOpen(t, tp)
		tp.pause()
	}
	alone := runSession(t, extenderSettings{without: true}, nodes, gangs).duration
	r := runSession(t, extenderSettings{url: tp.url(), httpTimeout: "500ms", afterOpen: pause}, nodes, gangs)
	defer tp.resume()
	if bound := boundNodes(t, r, g); len(bound) != 0 {
		t.Fatalf("topoplace hung mid-session: expected the nodes refused for that session, bound %v", bound)
	}
	// 4 nodes: one round of parallel predicate calls per pending task, then the close.
	if r.duration > alone+6*500*time.Millisecond {
		t.Fatalf("a hang mid-session cost %v (Volcano alone %v): more than a few 500ms timeouts", r.duration, alone)
	}
	t.Logf("session with topoplace hung after onSessionOpen: %v (Volcano alone %v)", r.duration.Round(time.Millisecond), alone.Round(time.Millisecond))
	r = runSession(t, extenderSettings{url: tp.url(), httpTimeout: "500ms"}, nodes, gangs)
	requireOwnRules(t, "the session after topoplace hung", r, g)
}

// Restarted between onSessionOpen and allocate: the new process has no plan, answers neutrally,
// and Volcano binds by its own rules; the session after, the new process plans again.
func TestTopoplaceRestartedMidSession(t *testing.T) {
	tp := startTopoplace(t, hyperNodesFile(t, twoLeaves), "--http-timeout", planTimeout)
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout}
	nodes, gangs, g := ownRulesCluster()
	settings.afterOpen = tp.restart
	r := runSession(t, settings, nodes, gangs)
	requireOwnRules(t, "topoplace restarted mid-session", r, g)
	if s := tp.status(); len(s.PlacedJobs) != 0 || s.Jobs != 0 {
		t.Fatalf("the restarted topoplace should have seen no session yet: %v", s)
	}

	// Next session: planned again by the new process (hard tier 1: n2,n3 of leaf-b is the only room).
	settings.afterOpen = nil
	train := gang{name: "train", members: 2, gpus: 8, annotations: map[string]string{modeKey: "hard", tierKey: "1"}}
	r = runPlanned(t, tp, settings, nodes, []gang{busy("busy", "n0", "n1"), train})
	bound := requireBound(t, tp, r, train)
	requirePlanned(t, tp, train)
	if strings.Join(bound, ",") != "n2,n3" {
		t.Fatalf("after the restart the plan puts the gang on n2,n3; Volcano bound %v", bound)
	}
}

// Why the shipped configuration has no prioritizeVerb: a failed prioritize call with ignorable:
// false leaves the allocate action without scores. Volcano v1.10.0 then dereferenced a nil best node
// (the real vc-scheduler crashed every session); in v1.14.1 (util.PrioritizeNodes returns no scores,
// SelectBestNodeAndScore no node) the task is simply not placed: the session is lost for it.
func TestFailedPrioritizeLosesTheSession(t *testing.T) {
	tp := startTopoplace(t, "", "--http-timeout", planTimeout)
	nodes := fourNodes()
	g := gang{name: "gang", members: 1, gpus: 8}
	settings := extenderSettings{url: tp.url(), httpTimeout: planTimeout, afterOpen: stopAfterOpen(t, tp), extraVerbs: map[string]string{
		"extender.prioritizeVerb": "prioritize",
		"extender.predicateVerb":  "", // so the prioritize call is the one that fails
	}}
	r := runSession(t, settings, nodes, []gang{g})
	if r.panicked != "" {
		t.Fatalf("Volcano v1.14 crashed on a failed prioritize call, as v1.10.0 did: %s", r.panicked)
	}
	if len(r.binds) != 0 {
		t.Fatalf("a failed prioritize with ignorable: false leaves no best node; Volcano bound %v: "+
			"a prioritizeVerb may be harmless on this release, revisit docs/volcano.md", r.binds)
	}
}
