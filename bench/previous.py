"""The previous plan as a start (``SolveRequest.previous``, issue 18): a scheduler asks about the same
cluster session after session, each time with a short limit. Does handing back its last answer pay?

Per seed, on bench.quality's fat tree and queue: the batch solved with a long limit (the last
session's answer); then the next session — a fifth of the jobs that answer placed have started (their
placements are now running work on the nodes) and left the batch — solved with a short limit, alone
and with the last answer as ``previous``. Columns: GPUs placed by priority (highest first) and jobs
placed, as STRICT compares plans; *moved*: jobs placed in both answers whose nodes are not the ones
the last answer gave them (a plan that changes under a job is work for the scheduler); wall seconds.
Every answer is verified inside ``solve``.

    python -m bench.previous --nodes 1024 --load 0.5 --jobs 200 --seeds 1-3 --long 5 --short 1
"""

from __future__ import annotations

import argparse
import time

from bench.provenance import commit, machine
from bench.quality import first_tier, request, seeds_of
from solver.domain.model import Inventory, SolveRequest, SolveResult
from solver.search.sequence import held_allocations
from solver.solve import solve

STARTED_SHARE = 5  # one job in this many of those placed has started by the next session


def next_session(req: SolveRequest, last: SolveResult) -> SolveRequest:
    """``req`` a session later: every fifth job ``last`` placed is running on its nodes and gone
    from the batch; the rest still pending."""
    placed = [jr for jr in last.jobs if jr.placed]
    started = {jr.job_id: jr for jr in placed[::STARTED_SHARE]}
    nodes = {n.name: n for n in req.inventory.nodes}
    for job in req.jobs:
        if job.id in started:
            for name, allocations in held_allocations(job, started[job.id]).items():
                nodes[name] = nodes[name].model_copy(
                    update={"allocations": (*nodes[name].allocations, *allocations)}
                )
    return req.model_copy(
        update={
            "inventory": Inventory.model_construct(
                nodes=tuple(nodes.values()), switches=req.inventory.switches
            ),
            "jobs": tuple(job for job in req.jobs if job.id not in started),
        }
    )


def moved(last: SolveResult, now: SolveResult) -> int:
    """Jobs placed in both whose nodes differ."""
    before = {jr.job_id: sorted(m.node for m in jr.members) for jr in last.jobs if jr.placed}
    return sum(
        1
        for jr in now.jobs
        if jr.placed and jr.job_id in before and sorted(m.node for m in jr.members) != before[jr.job_id]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--load", type=float, default=0.5)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seeds", default="1-3")
    parser.add_argument("--long", type=float, default=5.0, help="the last session's time limit")
    parser.add_argument("--short", type=float, default=1.0, help="the next session's time limit")
    args = parser.parse_args()
    print(f"commit {commit()} · {machine()}\n")
    cell = f"{args.nodes:,} nodes, {args.load:.0%} busy, {args.jobs} jobs"
    print(f"**{cell}; last session {args.long:g} s, next {args.short:g} s**\n")
    print("| seed | next session | GPUs by priority · jobs | moved | wall s | plan |")
    print("|---|---|---|---|---|---|")
    for seed in seeds_of(args.seeds):
        req = request(args.nodes, args.load, args.jobs, seed, args.long)
        last = solve(req)
        later = next_session(req, last)
        short = later.model_copy(
            update={"policy": later.policy.model_copy(update={"time_limit_s": args.short})}
        )
        for name, ask in (
            ("alone", short),
            ("with previous", short.model_copy(update={"previous": last.jobs})),
        ):
            started = time.perf_counter()
            now = solve(ask)
            wall = time.perf_counter() - started
            gpus, jobs = first_tier(later, now)
            cells = [
                "/".join(str(g) for g in gpus) + f" · {jobs:g}",
                str(moved(last, now)),
                f"{wall:.2f}",
                now.plan_source,
            ]
            print(f"| {seed} | {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
