"""Core benchmark: solve time and gap for a batch of 50 mixed gangs on the 64-node fixture and on a
generated 1,000-node cluster (issue 2). Prints a Markdown table; medians of ``--runs`` runs.

    python -m bench.core [--runs 3] [--time-limit 10]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.provenance import commit, machine
from bench.scenario import scenario
from solver.domain.model import SolveRequest, SolveStatus
from solver.ingest.files import load_request
from solver.solve import solve

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "requests" / "twotier-64.json"


def measure(name: str, request: SolveRequest, runs: int) -> dict[str, object]:
    walls, results = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        results.append(solve(request))
        walls.append(time.perf_counter() - t0)
    last = results[-1]
    placed = sum(j.placed for j in last.jobs)
    return {
        "scenario": name,
        "nodes": len(request.inventory.nodes),
        "jobs": len(request.jobs),
        "wall_s": statistics.median(walls),
        "status": SolveStatus(last.status).name,
        "gap": last.gap,
        "placed": f"{placed}/{len(last.jobs)}",
        "gpus": last.metrics.gpus_used_after - last.metrics.gpus_used_before,
        "classes": last.model_size.node_classes,
        "vars": last.model_size.variables,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=10.0)
    args = parser.parse_args()
    cases = []
    fixture = load_request(FIXTURE)
    fixture = fixture.model_copy(
        update={"policy": fixture.policy.model_copy(update={"time_limit_s": args.time_limit})}
    )
    cases.append(("fixtures/requests/twotier-64.json", fixture))
    generated = scenario(1000, 50, seed=1, time_limit_s=args.time_limit).request
    cases.append(("generated 1,000 HGX nodes, 50 gangs (seed 1)", generated))

    print(f"commit {commit()} · {machine()} · median of {args.runs} runs · time limit {args.time_limit} s\n")
    columns = (
        "scenario",
        "nodes",
        "jobs",
        "wall s",
        "status",
        "gap",
        "jobs placed",
        "GPUs placed",
        "classes",
        "vars",
    )
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, request in cases:
        row = measure(name, request, args.runs)
        print(
            f"| {row['scenario']} | {row['nodes']} | {row['jobs']} | {row['wall_s']:.2f} | {row['status']} | "
            f"{row['gap']:.2%} | {row['placed']} | {row['gpus']} | {row['classes']} | {row['vars']} |"
        )


if __name__ == "__main__":
    main()
