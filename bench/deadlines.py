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
    python -m bench.deadlines --against /path/to/main --sizes 1024x200:0.5,2,5,15   # side by side

Cold: every deadline gets its own copy of the request with node names no server has seen.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
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
        # Where a late or cancelled call's time went, as the server logged it.
        "server_stages_ms": {"convert": logged.get("convert_ms"), **logged.get("stages_ms", {})}
        if logged.get("event") in ("solve_late", "solve_cancelled")
        else None,
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


def unseen(req: SolveRequest, tag: str) -> SolveRequest:
    """``req`` with node names no server has seen (new wire bytes, new node objects): a cold call."""
    nodes = tuple(n.model_copy(update={"name": f"{tag}-{n.name}"}) for n in req.inventory.nodes)
    return req.model_copy(update={"inventory": req.inventory.model_copy(update={"nodes": nodes})})


def one_side(sizes: list[str], with_in_process: bool) -> list[dict[str, object]]:
    """Every size and deadline against a real server of the tree on the path: cold (nodes never
    seen, one fresh copy per deadline), then warm (after a call with time to spare)."""
    proc, port = start_server()
    rows: list[dict[str, object]] = []
    try:
        for spec in sizes:
            shape, _, deadlines = spec.partition(":")
            nodes, jobs = (int(x) for x in shape.split("x"))
            req = sized(nodes, jobs)
            limits = [float(d) for d in deadlines.split(",")]
            got = [over_grpc(port, unseen(req, f"c{i}"), d, "cold") for i, d in enumerate(limits)]
            # One call with time to spare fills every cache of the server (a call stopped in its
            # conversion or validation leaves them half filled).
            over_grpc(port, req, 120.0, "warm-up")
            got += [over_grpc(port, req, d, "warm") for d in limits]
            if with_in_process:
                in_process(req, 120.0)
                got += [in_process(req, d) for d in limits]
            for row in got:
                rows.append({"size": f"{nodes:,} x {jobs}", **row})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return rows


def cell(r: dict[str, object] | None) -> str:
    if r is None:
        return "–"
    if not r["in_time"]:
        return f"**late {r['wall_s']}** ({r.get('client', 'late')}, server `{r.get('server_event')}`)"
    return f"{r['wall_s']} · `{r['plan_source'] or '–'}` · {r['placed']}"


def side_by_side(ours: list[dict[str, object]], theirs: list[dict[str, object]]) -> str:
    key = lambda r: (r["size"], r["where"], r["deadline_s"])  # noqa: E731
    other = {key(r): r for r in theirs}
    lines = [
        "| size | deadline s | call | other tree: wall s · plan · jobs | this tree: wall s · plan · jobs |",
        "|---|---:|---|---|---|",
    ]
    for r in ours:
        lines.append(
            f"| {r['size']} | {r['deadline_s']} | {r['where']} | {cell(other.get(key(r)))} | {cell(r)} |"
        )
    in_time = sum(bool(r["in_time"]) for r in ours), sum(bool(r["in_time"]) for r in theirs)
    lines.append(f"\nin time: this tree {in_time[0]}/{len(ours)}, other tree {in_time[1]}/{len(theirs)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", action="append", default=[], metavar="NODESxJOBS:D1,D2", help="a size and its deadlines"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--in-process", action="store_true", help="also solve in this process, warm")
    parser.add_argument(
        "--against", type=Path, help="another tree (e.g. main's worktree), run first by this same file"
    )
    args = parser.parse_args()
    sizes = args.sizes or ["1024x200:0.5,1,2"]
    theirs: list[dict[str, object]] = []
    if args.against:
        other = args.against.resolve()
        out = Path(f"/tmp/deadlines-{os.getpid()}.json")
        env = {**os.environ, "PYTHONPATH": f"{other}{os.pathsep}{other / 'proto'}"}
        command = [sys.executable, str(Path(__file__).resolve()), "--json", str(out)]
        command += [f"--sizes={s}" for s in sizes] + (["--in-process"] if args.in_process else [])
        subprocess.run(command, cwd=other, env=env, check=True)
        theirs = json.loads(out.read_text())
        out.unlink()
    rows = one_side(sizes, args.in_process)
    print(f"commit {commit()} · {machine()} · solver from {ROOT} · load average {os.getloadavg()}")
    print(f"command: python -m bench.deadlines {' '.join(sys.argv[1:])}")
    print(side_by_side(rows, theirs) if args.against else markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
