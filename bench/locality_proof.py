"""Could topoplace's gangs sit under lower switches without giving up work or jobs? One call's plan,
each gang spread over leaves searched again to a proof with everything above the locality tier held.

``bench.quality`` compares the gangs' mean lowest common switch tier with the greedy's on the gangs
both place. Where topoplace places more top-priority work or more jobs than the greedy, its gangs
may sit higher because the room the greedy left them is taken; this bench says whether that is so
or whether the search left something on the table::

    python -m bench.locality_proof --nodes 8192 --seed 3 --limit 15

It runs one ``solve()`` of ``bench.quality``'s request, reads the answer back into a freshly built
model (``solver.search.previous``), holds every tier above ``topology.locality`` at the answer's
values (``solver.compile.objective.hold``), and for each gang whose members sit under more than one
leaf solves the neighbourhood ``solver.search.neighbourhood`` would search for it — every member of
every job in the regions (spines) the gang uses, and in the regions where the greedy's first order
put it, and every job the answer left out — with the locality tier as the objective, for up to
``--per`` seconds. ``proven``: no plan of that neighbourhood does better; ``better``: one does (the
search left it; kept for the next gang); ``open``: not settled in time. A table row per gang, and
the gangs' mean tier after (a better plan may place other gangs: it holds the work and the jobs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench.provenance import commit, machine
from bench.quality import measures, request, request_arguments
from solver.answer.decode import decode
from solver.baselines import volcano
from solver.compile import compile_model
from solver.compile.objective import hold
from solver.domain.fabric import Fabric
from solver.reduce.chain import problem_of, rewrite
from solver.search.floor import Floor
from solver.search.neighbourhood import Neighbourhoods, narrowed
from solver.search.previous import from_previous
from solver.search.tiers import apply_hint, maximize, run_tier, variable_names
from solver.solve import solve

LOCALITY = "topology.locality"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    request_arguments(parser, nodes=8192, seed=3, limit=15.0)
    parser.add_argument("--per", type=float, default=10.0, help="each gang's search, seconds at most")
    args = parser.parse_args()
    base = request(args.nodes, args.load, args.jobs, args.seed)
    asked = request(args.nodes, args.load, args.jobs, args.seed, time_limit_s=args.limit)
    answer = solve(asked)
    measured = measures(base, answer)
    ours, gpus = measured["gang_tiers"], measured["gang_gpus"]
    greedy = {job.job_id: job for job in volcano.place(base).jobs if job.placed}

    rewritten = rewrite(asked)
    problem = problem_of(rewritten)
    compiled = compile_model(problem, rewritten.policy)
    read = from_previous(problem, compiled, Floor(problem, compiled), answer.jobs, [j.id for j in asked.jobs])
    if read is None:
        raise SystemExit("the answer placed no job of the batch: nothing to look at")
    names = [t.name for t in compiled.tiers]
    if LOCALITY not in names:
        raise SystemExit(f"the policy has no {LOCALITY} tier")
    at = names.index(LOCALITY)
    for tier in compiled.tiers[:at]:
        hold(compiled.model, tier, tier.value_of(read.plan))
    tier = compiled.tiers[at]
    maximize(compiled.model, tier)
    hoods = Neighbourhoods.of(problem, compiled)
    if hoods is None:
        raise SystemExit("the model has no neighbourhoods (too small, no spines or no gangs)")
    fabric = Fabric.of(asked.inventory)
    leaf_of = {node.name: node.leaf for node in asked.inventory.nodes}
    order = variable_names(compiled.model)
    plan, value = read.plan, tier.value_of(read.plan)
    values = [plan[name] for name in order]
    started_at = value
    print(
        f"commit {commit()} · {machine()} · load {os.getloadavg()[0]:.2f} · {args.nodes} nodes seed "
        f"{args.seed}, the answer of a {args.limit:g} s call ({answer.plan_source}), "
        f"{len(ours)} gangs, locality tier {value}, tiers above held\n"
    )
    print("| gang | GPUs | tier: ours / greedy | regions freed | members freed | seconds | outcome |")
    print("|---|---|---|---|---|---|---|")
    counts = {"proven": 0, "better": 0, "open": 0}
    for j in hoods.spread(values):
        job = problem.request.jobs[j]
        theirs = greedy.get(job.id)
        into: set[str] = set()
        if theirs is not None:
            into = {fabric.domain(leaf_of[m.node], fabric.tiers[1]) or "" for m in theirs.members} - {""}
        # The jobs the answer left out are free too: the neighbourhood may place one of them in the
        # place of one it moves out, as long as the held tiers (work, jobs) stay where they are.
        left_out = hoods.left_out(values)
        fixed = [i for i in hoods.fixed(j, into, values) if i not in left_out]
        freed = len(hoods.bounds) - len(fixed)
        regions = {hoods.region[c] for c in hoods.used(j, values)} | into
        apply_hint(compiled.model, plan)
        began = time.perf_counter()
        with narrowed(hoods, fixed, values):
            outcome = run_tier(compiled.model, tier, rewritten.policy, args.per)
        seconds = time.perf_counter() - began
        found = outcome.solution
        if found is not None and tier.value_of(found) > value:
            plan, value, verdict = found, tier.value_of(found), "better"
            values = [plan[name] for name in order]
        elif outcome.value.optimal or (found is not None and outcome.value.bound <= value):
            verdict = "proven"
        else:
            verdict = "open"
        counts[verdict] += 1
        theirs_tier = "-" if theirs is None else str(theirs.locality_tier)
        print(
            f"| {job.id} | {gpus.get(job.id, 0)} "
            f"| {ours.get(job.id, '-')} / {theirs_tier} | {len(regions)} | {freed:,} "
            f"| {seconds:.2f} | {verdict} |"
        )
    print(
        f"\n{counts['proven']} proven, {counts['better']} better, {counts['open']} open; "
        f"locality tier {started_at} -> {value}"
    )
    if counts["better"]:
        # Held at least where they were: a neighbourhood may raise them (more work, more jobs).
        above = [
            f"{t.name} {t.value_of(read.plan)} -> {t.value_of(plan)}"
            for t in compiled.tiers[:at]
            if t.value_of(plan) != t.value_of(read.plan)
        ]
        print("tiers above: " + ("; ".join(above) if above else "the same"))
        # Decoded as the answer would be: each gang's lowest common switch tier, on the same gangs.
        # A pool's pods decode as one job of many members: not a gang, left out as the answer's are.
        after = {
            job.job_id: job.locality_tier
            for j, job in enumerate(decode(problem, compiled, plan))
            if job.placed and len(job.members) > 1 and j not in problem.pools
        }
        both = ours.keys() & after.keys()
        print(
            f"gangs' mean tier {statistics.mean(ours.values()):.3f} ({len(ours)}) -> "
            f"{statistics.mean(after.values()):.3f} ({len(after)}); on the {len(both)} placed in both "
            f"{statistics.mean(ours[k] for k in both):.3f} -> {statistics.mean(after[k] for k in both):.3f}"
        )


if __name__ == "__main__":
    main()
