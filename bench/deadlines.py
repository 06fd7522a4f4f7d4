"""Deadlines end to end (issue 18 item 4, issue 23 item 2): does the answer leave in time when the
time cannot pay for building the model?

For each size, bench.quality's request (HGX fat tree, half busy, pods and gangs; time limit 20 s so
that the deadline binds) is solved under each deadline twice: in process (``solve(deadline_s=)``,
caches warm: one call first fills them) and over gRPC against a real ``topoplace serve`` on
127.0.0.1: first cold (the server has never seen its nodes) under the shortest deadline, then, after
a call with time to spare has filled the server's caches, warm. Per
call: wall (client side), whether it was in time, what made the plan (``plan_source``:
``unsearched:first-fit`` when the fallback answered, ``floor:...`` or ``search`` when the model was
built) and jobs placed; the server's log event (``solve``, ``solve_late`` for an answer after its
deadline, ``solve_cancelled`` for work stopped by the deadline).

Runs against whichever ``solver`` is first on the path, so the same file measures another tree side
by side: ``PYTHONPATH=/other/tree:/other/tree/proto python bench/deadlines.py``.

    python -m bench.deadlines --sizes 1024x200:0.5,1,2 --sizes 16384x500:5,15
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

import grpc

import solver.solve as pipeline
from bench import load
from bench.provenance import commit, machine
from bench.quality import request as quality_request
from solver.domain.model import SolveRequest
from solver.service import wire
from solver.service.channel import CHANNEL_OPTIONS
from solver.solve import solve
from topoplace.v1 import placement_pb2

ROOT = Path(pipeline.__file__).resolve().parents[1]  # the tree under test, for the server too
SOLVE = "/topoplace.v1.Placement/Solve"
# The server's parsed log lines, and how it is started: bench.load's, with the node cache sized to
# hold 16,384 HGX nodes and their wire keys (docs/service.md, Memory).
SERVE_FLAGS = ["--max-nodes", "100000", "--node-cache-mib", "4096"]


def start_server() -> tuple[subprocess.Popen[str], int]:
    return load.start_server(SERVE_FLAGS)


def sized(nodes: int, jobs: int) -> SolveRequest:
    return quality_request(nodes, 0.5, jobs, seed=1, time_limit_s=20.0)


def in_process(req: SolveRequest, deadline_s: float) -> dict[str, object]:
    started = time.perf_counter()
    result = solve(req, deadline_s=deadline_s)
    wall = time.perf_counter() - started
    return {
        "where": "in process, warm",
        "deadline_s": deadline_s,
        "wall_s": round(wall, 3),
        "in_time": wall <= deadline_s,
        "plan_source": result.plan_source,
        "placed": sum(j.placed for j in result.jobs),
        "stages_ms": {t.stage: round(t.ms) for t in result.timings},
        "gc_gen2": gc.get_stats()[2]["collections"],
    }


def over_grpc(port: int, req: SolveRequest, deadline_s: float, tag: str) -> dict[str, object]:
    rid = f"{tag}-{deadline_s}-{time.monotonic_ns()}"
    body = wire.request_to_proto(req.model_copy(update={"request_id": rid})).SerializeToString()
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as channel:
        call = channel.unary_unary(
            SOLVE, request_serializer=None, response_deserializer=placement_pb2.SolveResponse.FromString
        )
        started = time.monotonic()
        source, placed, got = "", 0, "OK"
        try:
            response = call(body, timeout=deadline_s)
            source, placed = response.plan_source, sum(j.placed for j in response.jobs)
        except grpc.RpcError as exc:
            got = exc.code().name  # type: ignore[attr-defined]
        wall = time.monotonic() - started
    end = time.monotonic() + 120
    while time.monotonic() < end and not [e for e in load.EVENTS if e.get("request_id") == rid]:
        time.sleep(0.05)
    logged = next((e for e in load.EVENTS if e.get("request_id") == rid), {})
    return {
        "where": f"gRPC {tag}",
        "deadline_s": deadline_s,
        "wall_s": round(wall, 3),
        "in_time": got == "OK",
        "client": got,
        "server_event": logged.get("event"),
        "server_s": round(float(logged.get("ms", "nan")) / 1000, 3),  # type: ignore[arg-type]
        "plan_source": source,
        "placed": placed,
    }


def markdown(rows: list[dict[str, object]]) -> str:
    lines = [
        "| size | deadline s | where | wall s | in time | server logged (done after s) | plan | jobs |",
        "|---|---:|---|---:|---|---|---|---:|",
    ]
    for r in rows:
        server = f"`{r['server_event']}` ({r['server_s']})" if "server_event" in r else "–"
        got = "yes" if r["in_time"] else f"**no** ({r.get('client', 'late')})"
        lines.append(
            f"| {r['size']} | {r['deadline_s']} | {r['where']} | {r['wall_s']} | {got} | {server} "
            f"| `{r['plan_source'] or '–'}` | {r['placed']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", action="append", default=[], metavar="NODESxJOBS:D1,D2", help="a size and its deadlines"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sizes = args.sizes or ["1024x200:0.5,1,2"]
    proc, port = start_server()
    rows: list[dict[str, object]] = []
    try:
        for spec in sizes:
            shape, _, deadlines = spec.partition(":")
            nodes, jobs = (int(x) for x in shape.split("x"))
            req = sized(nodes, jobs)
            limits = [float(d) for d in deadlines.split(",")]
            # The server's first sight of these nodes, under the shortest deadline; then one call
            # with time to spare, so that every cache of the server holds them (a call stopped in
            # its conversion or validation leaves them half filled), and the same in this process.
            first = [over_grpc(port, req, limits[0], "cold")]
            over_grpc(port, req, 120.0, "warm-up")
            in_process(req, 120.0)
            warm = [
                r
                for deadline in limits
                for r in (over_grpc(port, req, deadline, "warm"), in_process(req, deadline))
            ]
            for row in first + warm:
                rows.append({"size": f"{nodes:,} x {jobs}", **row})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print(f"commit {commit()} · {machine()} · solver from {ROOT}")
    print(f"command: python -m bench.deadlines {' '.join(sys.argv[1:])}")
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
