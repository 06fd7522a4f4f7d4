"""``onSessionOpen`` at scale through real HTTP: 1,000 DGX nodes, 100 pending jobs.

    python -m bench.volcano_session                 # 7 runs, prints a table
    python -m bench.volcano_session --write         # and rewrites bench/RESULTS-volcano.md

The cluster is ``fixtures.volcano.build``'s, scaled: 125 leaves of 8 nodes under 25 spines
(HyperNodes with exact, regex and label members), every node with its topology and HAMi register
annotations, about a third of them running pods that hold devices. The 100 jobs: 30 two-node
8-GPU gangs with hard tier-1 locality and aligned NICs, 20 four-node gangs with hard tier 2, 10
soft-locality two-role jobs, 30 single pods of 1-4 GPUs and 10 elastic 4 × 1-GPU jobs. The body
(the JSON Volcano would send) is built once; each run posts it to a fresh extender session on
127.0.0.1 with Volcano's default 1 s timeout, solving in process, and closes the session.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from adapters.volcano import hypernodes as hn
from adapters.volcano.extender import Config, Extender, local_solve
from adapters.volcano.patcher import RecordingPatcher
from adapters.volcano.server import serve
from bench.provenance import commit, machine
from fixtures.volcano import build

RESULTS = Path(__file__).resolve().parent / "RESULTS-volcano.md"
NODES, PER_LEAF, LEAVES_PER_SPINE, WIDTH = 1000, 8, 5, 4


def cluster() -> tuple[dict[str, Any], tuple[hn.HyperNode, ...]]:
    nodes = build.cluster_nodes(NODES, PER_LEAF, WIDTH)
    objects = build.hypernodes_2tier(NODES // PER_LEAF, PER_LEAF, LEAVES_PER_SPINE, WIDTH)
    problems: list[Any] = []
    hypernodes = tuple(h for h in (hn.parse(o, "bench", problems) for o in objects) if h is not None)
    assert not problems, problems
    running = build.running_on_every_third(NODES, WIDTH)
    return build.session(jobs(), nodes, running), hypernodes


def jobs() -> list[tuple[build.GroupSpec, list[build.PodSpec]]]:
    out: list[tuple[build.GroupSpec, list[build.PodSpec]]] = []
    hard = {"Mode": "hard", "HighestTierAllowed": 1}
    for k in range(30):
        g = build.GroupSpec("train", f"ddp-{k}", 2, topology=hard, priority=100)
        out.append((g, build.workers("train", g.name, "worker", 2, 8, annotations=build.ALIGNED, cpu=96)))
    for k in range(20):
        g = build.GroupSpec(
            "train", f"big-{k}", 4, topology={"Mode": "hard", "HighestTierAllowed": 2}, priority=200
        )
        out.append((g, build.workers("train", g.name, "worker", 4, 8, annotations=build.ALIGNED, cpu=96)))
    for k in range(10):
        g = build.GroupSpec(
            "serve", f"pd-{k}", 3, {"prefill": 1, "decode": 2}, topology={"Mode": "soft"}, priority=50
        )
        out.append(
            (
                g,
                build.workers("serve", g.name, "prefill", 1, 4)
                + build.workers("serve", g.name, "decode", 2, 2),
            )
        )
    for k in range(30):
        g = build.GroupSpec("dev", f"nb-{k}", 1)
        out.append((g, build.workers("dev", g.name, "main", 1, 1 + k % 4)))
    for k in range(10):
        g = build.GroupSpec("batch", f"el-{k}", 2)
        out.append((g, build.workers("batch", g.name, "worker", 4, 1)))
    return out


def post(url: str, data: bytes) -> float:
    request = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()
        assert reply.status == 200
    return time.perf_counter() - t0


def measure(body: dict[str, Any], hypernodes: tuple[hn.HyperNode, ...], runs: int) -> dict[str, Any]:
    """First session (cold, nothing known), the wait for the solver, then ``runs`` sessions of the
    same snapshot (steady state: the plan is reused until the snapshot changes)."""
    data = json.dumps(body).encode()
    extender = Extender(
        solve=local_solve,
        patcher=RecordingPatcher(),
        hypernodes=lambda: hypernodes,
        config=Config(),
        solver_process=True,
    )
    running = serve(extender, "127.0.0.1", 0)
    try:
        extender.ready(60)  # `volcano serve` starts its solver process before it takes sessions
        first = post(f"{running.url}/onSessionOpen", data)
        first_status = extender.status_view()
        post(f"{running.url}/onSessionClose", b"{}")
        t0 = time.perf_counter()
        sessions_until_plan = 1
        while sessions_until_plan < 10:
            while not extender.wait_for_solver(120):
                pass
            post(f"{running.url}/onSessionOpen", data)
            sessions_until_plan += 1
            planned = extender.status_view()["placedJobs"]
            post(f"{running.url}/onSessionClose", b"{}")
            if planned:
                break
        plan_ready = time.perf_counter() - t0 + first
        times, statuses = [], []
        for _ in range(runs):
            times.append(post(f"{running.url}/onSessionOpen", data))
            statuses.append(extender.status_view())
            post(f"{running.url}/onSessionClose", b"{}")
            extender.wait_for_solver(120)
    finally:
        running.stop()
        extender.close()
    last = statuses[-1]
    return {
        "first_ms": first * 1000,
        "first_error": first_status["error"],
        "plan_ready_s": plan_ready,
        "sessions_until_plan": sessions_until_plan,
        "runs": runs,
        "median_ms": statistics.median(times) * 1000,
        "min_ms": min(times) * 1000,
        "max_ms": max(times) * 1000,
        "body_mib": len(data) / 2**20,
        "gpu_tasks": last["gpuTasks"],
        "placed": len(last["placedJobs"]),
        "jobs": len(last["placedJobs"]) + len(last["unplacedJobs"]),
        "reused": all(s["reused"] for s in statuses),
        "solver": sorted({s["solverStatus"] for s in statuses}),
        "errors": sorted({s["error"] for s in statuses if s["error"]}),
    }


def without_topology(body: dict[str, Any]) -> dict[str, Any]:
    """The same session with every PodGroup's networkTopology removed."""
    for job in body["Jobs"].values():
        job["PodGroup"]["Spec"]["NetworkTopology"] = None
    return body


def run(runs: int) -> dict[str, Any]:
    body, hypernodes = cluster()
    with_rules = measure(body, hypernodes, runs)
    plain = measure(without_topology(body), hypernodes, runs)
    return {"with_topology": with_rules, "without_topology": plain}


def row(label: str, r: dict[str, Any]) -> str:
    steady = f"{r['median_ms']:.0f} ms ({r['min_ms']:.0f}–{r['max_ms']:.0f}), reused: {r['reused']}"
    placed = f"{r['placed']}/{r['jobs']} jobs, {', '.join(s for s in r['solver'] if s) or '-'}"
    ready = f"session {r['sessions_until_plan']}, after {r['plan_ready_s']:.1f} s"
    if not r["placed"]:
        placed = "no plan: every session neutral"
        ready = f"none in {r['sessions_until_plan']} sessions ({r['plan_ready_s']:.0f} s)"
    return f"| {label} | {r['first_ms']:.0f} ms, neutral | {ready} | {steady} | {placed} |"


def report(r: dict[str, Any]) -> str:
    a, b = r["with_topology"], r["without_topology"]
    spines = NODES // PER_LEAF // LEAVES_PER_SPINE
    return f"""# Volcano adapter: onSessionOpen at scale

`python -m bench.volcano_session --write` — commit `{commit()}`, {machine()}.

{NODES} DGX A100 nodes (8 GPUs, 10 NICs, full `v1.Node` with topology and HAMi register
annotations) under {NODES // PER_LEAF} leaf and {spines} spine HyperNodes; 100 pending jobs
({a["gpu_tasks"]} GPU pods: 30 two-node gangs with hard tier-1 network topology and aligned NICs, 20
four-node gangs with hard tier 2, 10 two-role jobs with soft topology, 30 single pods, 10 elastic jobs);
a third of the nodes run pods holding GPUs. The body is {a["body_mib"]:.1f} MiB of JSON, posted to the
extender over HTTP on 127.0.0.1, with Volcano's default `extender.httpTimeout` of 1 s; the solver runs
in a child process (as `topoplace volcano serve` runs it). Steady state = {a["runs"]} further sessions
of the same snapshot, median (min–max).

| scenario | first session (cold) | plan in use from | steady-state session | placed |
|---|---|---|---|---|
{row("as described (hard/soft topology)", a)}
{row("same, networkTopology removed", b)}

Reading it: one solve of a 1,000-node batch takes longer than a session (without topology ~1 s in all,
mostly validate/normalise/verify; with topology the core splits node classes per leaf — 125 leaves
give ~460 classes — and compile + explain take seconds), so the extender answers neutrally (Volcano
schedules as if topoplace were absent), solves in a child process in the background (10 s search
limit), and every later session with the same inventory and jobs uses that plan; a session whose body
is byte-identical to the last one skips parsing and conversion entirely (the steady-state column).
A changed snapshot converts again (~0.6–1 s at this size on this machine) and starts a new solve.
The first, cold session is over Volcano's 1 s default here: set `extender.httpTimeout: 3s` for
clusters of this size (and keep `extender.ignorable: false`: docs/volcano.md).
First session note: {a["first_error"] or "none"}.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--write", action="store_true", help=f"rewrite {RESULTS.name}")
    args = parser.parse_args()
    result = run(args.runs)
    print(json.dumps(result, indent=2))
    if args.write:
        RESULTS.write_text(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
