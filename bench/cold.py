"""One cold call: ``solve()`` of bench.quality's request in a fresh process, with its time limit,
as a scheduler's first request on a cluster the process has never seen. Prints the wall, where the
plan came from, the first tier (GPUs placed by priority level, then jobs) and each stage's time, so
that two trees can be compared run by run, alternated::

    python -m bench.cold --nodes 16384 --seed 1 --limit 5
    PYTHONPATH=/other/tree:/other/tree/proto python -m bench.cold --nodes 16384 --seed 1 --limit 5

At 16,384 nodes and 5 s the model cannot be built in time and ``solver.fallback`` answers; the
greedy's best of 11 tie orders, for comparison, is in ``bench.quality``'s rows (seven minutes a seed).
``--warm-with 20 --calls 2``: the same cluster asked again, as a scheduler does (the model of the
first call on the shelf); the first call is printed too. ``--warm-with 5 --limit 15`` at 16,384 nodes
is session 32's and 33's check that a 15 s call answers no worse than a 5 s one (jobs, and the
mean lowest common switch tier of the gangs placed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench.provenance import commit
from bench.quality import first_tier, measures, request, request_arguments
from solver.domain.model import SolveRequest
from solver.solve import solve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    request_arguments(parser, nodes=16384, seed=1, limit=5.0)
    parser.add_argument(
        "--warm-with",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first one call with this limit on the same cluster, untimed: the calls after are warm "
        "(nodes seen, the model on the shelf)",
    )
    parser.add_argument("--calls", type=int, default=1, help="timed calls, one after the other")
    args = parser.parse_args()
    base = request(args.nodes, args.load, args.jobs, args.seed)

    def limited(seconds: float) -> SolveRequest:
        return base.model_copy(update={"policy": base.policy.model_copy(update={"time_limit_s": seconds})})

    def call(seconds: float, what: str) -> None:
        started = time.perf_counter()
        out = solve(limited(seconds))
        wall = time.perf_counter() - started
        stages = " ".join(f"{s.stage}={s.ms:.0f}ms" for s in out.timings)
        gangs = measures(base, out)["gang_tiers"]
        tier = f"{statistics.mean(gangs.values()):.3f}" if gangs else "-"
        print(
            f"commit {commit()} load {os.getloadavg()[0]:.2f} · {args.nodes} nodes seed {args.seed} "
            f"limit {seconds:g} s{what} · wall {wall:.2f} s · {out.plan_source} · first tier "
            f"{first_tier(base, out)} · gangs' mean tier {tier} ({len(gangs)}) · {stages}",
            flush=True,
        )

    if args.warm_with:
        call(args.warm_with, " (the call that warms)")
    for _ in range(args.calls):
        call(args.limit, " warm" if args.warm_with else "")


if __name__ == "__main__":
    main()
