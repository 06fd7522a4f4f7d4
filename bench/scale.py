"""Scale benchmark (issue 4): 1,024 / 4,096 / 16,384 HGX nodes × batches of 1 / 50 / 200 / 500 gangs.

Each cell runs in its own process so that its peak RSS is its own. Per cell, on one seeded scenario
(bench/scenario.py), side by side: the time to parse the request protobuf (the floor), topoplace's
solve (median wall time of ``--runs``, status, the gap of the highest tier, node classes, model
variables) and the greedy one-job-at-a-time baseline (best-fit nodes, first aligned GPUs:
solver/baselines/bestfit.py): jobs placed, GPUs placed and GPU↔NIC pairs left misaligned by each.

    python -m bench.scale [--nodes 1024,4096,16384] [--jobs 1,50,200,500] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

from bench.provenance import commit, machine
from bench.scenario import scenario
from solver.baselines import bestfit
from solver.domain.model import SolveResult
from solver.service.wire import request_from_proto, request_to_proto
from solver.solve import solve
from topoplace.v1 import placement_pb2


def time_limit(nodes: int) -> float:
    return 15.0 if nodes > 4096 else 10.0


def misaligned(result: SolveResult) -> int:
    """GPUs of members with NICs whose GPU↔NIC pairing is not within the asked distance."""
    return sum(len(m.gpus) for j in result.jobs for m in j.members if m.nics and not m.aligned)


def placed(result: SolveResult) -> tuple[int, int]:
    jobs = sum(j.placed for j in result.jobs)
    gpus = sum(len(m.gpus) for j in result.jobs for m in j.members if not m.gpu_shares)
    return jobs, gpus


def run_cell(nodes: int, jobs: int, runs: int) -> dict[str, object]:
    request = scenario(nodes, jobs, seed=1, time_limit_s=time_limit(nodes)).request
    wire = request_to_proto(request).SerializeToString()
    parse = []
    for _ in range(runs):
        t0 = time.perf_counter()
        msg = placement_pb2.SolveRequest.FromString(wire)
        parse.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    request_from_proto(msg)
    to_domain = time.perf_counter() - t0
    walls, results = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        results.append(solve(request))
        walls.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    greedy = bestfit.place(request)
    greedy_s = time.perf_counter() - t0
    last = results[-1]
    ours_jobs, ours_gpus = placed(last)
    base_jobs, base_gpus = placed(greedy)
    return {
        "nodes": nodes,
        "jobs": jobs,
        "wire_mb": len(wire) / 1e6,
        "parse_ms": statistics.median(parse) * 1000,
        "to_domain_ms": to_domain * 1000,
        "wall_s": statistics.median(walls),
        "status": last.status.name,
        "gap": last.gap,
        "tiers_proven": sum(v.optimal for v in last.objectives),
        "tiers": len(last.objectives),
        "classes": last.model_size.node_classes,
        "variables": last.model_size.variables,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "ours": {"jobs": ours_jobs, "gpus": ours_gpus, "misaligned": misaligned(last)},
        "greedy": {"jobs": base_jobs, "gpus": base_gpus, "misaligned": misaligned(greedy), "s": greedy_s},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default="1024,4096,16384")
    parser.add_argument("--jobs", default="1,50,200,500")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cell", nargs=2, type=int, metavar=("NODES", "JOBS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(run_cell(*args.cell, args.runs)))
        return
    print(f"commit {commit()} · {machine()} · median of {args.runs} runs\n")
    print(
        "| nodes | gangs | parse ms | wall s | status | gap | tiers proven | classes | vars | peak RSS MB "
        "| jobs ours / greedy | GPUs ours / greedy | misaligned ours / greedy |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for nodes in map(int, args.nodes.split(",")):
        for jobs in map(int, args.jobs.split(",")):
            cmd = [
                sys.executable,
                "-m",
                "bench.scale",
                "--cell",
                str(nodes),
                str(jobs),
                "--runs",
                str(args.runs),
            ]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"| {nodes} | {jobs} | failed: {out.stderr.strip().splitlines()[-1:]} |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            o, g = r["ours"], r["greedy"]
            print(
                f"| {nodes} | {jobs} | {r['parse_ms'] + r['to_domain_ms']:.0f} | {r['wall_s']:.2f} "
                f"| {r['status']} "
                f"| {r['gap']:.2%} | {r['tiers_proven']}/{r['tiers']} | {r['classes']} | {r['variables']} "
                f"| {r['rss_mb']:.0f} | {o['jobs']} / {g['jobs']} | {o['gpus']} / {g['gpus']} "
                f"| {o['misaligned']} / {g['misaligned']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
