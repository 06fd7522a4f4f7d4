"""Load benchmark of the gRPC service (issue 23, item 8): clients x time, small and 1,024-node solves mixed.

A real ``topoplace serve`` process on 127.0.0.1 (its own process, so its RSS is its own and the
clients do not share its interpreter), driven by N client threads for a fixed time per level. Each
client sends, in turn, small requests (4 nodes, one 1-GPU job) and every ``--large-every``-th a
1,024-node HGX scenario (bench/scenario.py, 20 gangs, ``--large-time-limit`` s); each call has a
deadline (small 5 s, large 15 s). A separate thread checks health every 200 ms. Per level: answers
per second, p50/p99 latency of answered calls per kind, refused calls (RESOURCE_EXHAUSTED: shed),
deadlines missed, health latency (p50/p99/max and failures), the server's RSS before and after.

Bounded: levels x ``--seconds`` plus a drain; the server is stopped (SIGTERM) at the end.

    python -m bench.load [--clients 0,1,8,32,64] [--seconds 20] [--large-every 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.provenance import commit, machine
from bench.scenario import scenario
from solver.domain.model import Job, MemberShape, Policy, Role, SolveRequest
from solver.service import wire
from solver.service.channel import CHANNEL_OPTIONS
from topoplace.v1 import placement_pb2

ROOT = Path(__file__).resolve().parents[1]
SOLVE = "/topoplace.v1.Placement/Solve"
DEADLINE_S = {"small": 5.0, "large": 15.0}
HEALTH_EVERY_S = 0.2


def small_request() -> bytes:
    inventory = scenario(4, 1, seed=2).request.inventory
    job = Job(id="small", roles=(Role(name="worker", replicas=1, member=MemberShape(gpus=1)),))
    request = SolveRequest(inventory=inventory, jobs=(job,), policy=Policy(time_limit_s=1))
    return wire.request_to_proto(request).SerializeToString()


def large_request(time_limit_s: float) -> bytes:
    request = scenario(1024, 20, seed=1, time_limit_s=time_limit_s).request
    return wire.request_to_proto(request).SerializeToString()


@dataclass
class Level:
    clients: int
    seconds: float
    calls: list[tuple[str, str, float]] = field(default_factory=list)  # kind, code, seconds
    health: list[float | None] = field(default_factory=list)  # seconds, None = failed
    rss_before_mib: float = 0.0
    rss_after_mib: float = 0.0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


EVENTS: list[dict[str, object]] = []  # the server's log lines, parsed


def _collect(lines: object) -> None:
    for line in lines:  # type: ignore[attr-defined]
        with contextlib.suppress(ValueError):  # a line that is not JSON: not an event
            EVENTS.append(json.loads(line))


def start_server(extra: list[str]) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'proto'}"}
    command = [sys.executable, "-m", "solver.cli", "serve", "--port", "0", *extra]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    first = json.loads(proc.stderr.readline())
    if first.get("event") != "serving":
        proc.kill()
        raise RuntimeError(f"the server did not start: {first}")
    # Read its log as it comes, so a full pipe never blocks it; the probes read the events.
    threading.Thread(target=_collect, args=(proc.stderr,), daemon=True).start()
    return proc, int(first["port"])


def run_level(port: int, pid: int, level: Level, small: bytes, large: bytes, large_every: int) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
    solve = channel.unary_unary(
        SOLVE, request_serializer=None, response_deserializer=placement_pb2.SolveResponse.FromString
    )
    health = health_pb2_grpc.HealthStub(channel)
    lock = threading.Lock()
    end = time.monotonic() + level.seconds
    sent = [0]

    def client() -> None:
        while time.monotonic() < end:
            with lock:
                sent[0] += 1
                kind = "large" if large_every and sent[0] % large_every == 0 else "small"
            started = time.monotonic()
            try:
                solve(large if kind == "large" else small, timeout=DEADLINE_S[kind])
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name  # type: ignore[attr-defined]
                if code == "RESOURCE_EXHAUSTED":
                    time.sleep(0.05)  # a shed client backs off a little, as a real one would
            with lock:
                level.calls.append((kind, code, time.monotonic() - started))

    def checker() -> None:
        while time.monotonic() < end:
            started = time.monotonic()
            try:
                health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                level.health.append(time.monotonic() - started)
            except grpc.RpcError:
                level.health.append(None)
            time.sleep(max(0.0, HEALTH_EVERY_S - (time.monotonic() - started)))

    level.rss_before_mib = rss_mib(pid)
    threads = [threading.Thread(target=client) for _ in range(level.clients)] + [
        threading.Thread(target=checker)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    level.rss_after_mib = rss_mib(pid)
    channel.close()


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(level: Level) -> dict[str, object]:
    out: dict[str, object] = {"clients": level.clients, "seconds": level.seconds}
    for kind in ("small", "large"):
        mine = [(code, s) for k, code, s in level.calls if k == kind]
        ok = [s for code, s in mine if code == "OK"]
        codes = Counter(code for code, _ in mine)
        out[kind] = {
            "sent": len(mine),
            "ok": len(ok),
            "ok_per_s": len(ok) / level.seconds,
            "p50_ms": quantile(ok, 0.5) * 1000,
            "p99_ms": quantile(ok, 0.99) * 1000,
            "shed": codes.get("RESOURCE_EXHAUSTED", 0),
            "deadline": codes.get("DEADLINE_EXCEEDED", 0),
            "other": {
                c: n for c, n in codes.items() if c not in ("OK", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED")
            },
        }
    answered = [s for s in level.health if s is not None]
    out["health"] = {
        "checks": len(level.health),
        "failed": sum(s is None for s in level.health),
        "p50_ms": quantile(answered, 0.5) * 1000,
        "p99_ms": quantile(answered, 0.99) * 1000,
        "max_ms": max(answered, default=float("nan")) * 1000,
    }
    out["rss_mib"] = {"before": round(level.rss_before_mib), "after": round(level.rss_after_mib)}
    return out


def markdown(rows: list[dict[str, object]]) -> str:
    head = (
        "| clients | small ok/s | small p50 / p99 ms | large ok (sent) | large p50 / p99 ms "
        "| shed small / large | deadline missed s / l | health p50 / p99 / max ms (failed) "
        "| server RSS MiB before → after |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        s, g, h, m = r["small"], r["large"], r["health"], r["rss_mib"]  # type: ignore[index]
        lines.append(
            f"| {r['clients']} | {s['ok_per_s']:.1f} | {s['p50_ms']:.0f} / {s['p99_ms']:.0f} "  # type: ignore[index]
            f"| {g['ok']} ({g['sent']}) | {g['p50_ms']:.0f} / {g['p99_ms']:.0f} "  # type: ignore[index]
            f"| {s['shed']} / {g['shed']} | {s['deadline']} / {g['deadline']} "  # type: ignore[index]
            f"| {h['p50_ms']:.1f} / {h['p99_ms']:.1f} / {h['max_ms']:.0f} ({h['failed']}) "  # type: ignore[index]
            f"| {m['before']} → {m['after']} |"  # type: ignore[index]
        )
    return "\n".join(lines)


def probe_deadlines(port: int, deadlines: list[float], cancel_after_s: float) -> list[dict[str, object]]:
    """The issue's probes: a 1,024-node x 200-gang solve (time limit 20 s) under each gRPC deadline,
    and once cancelled by the client after ``cancel_after_s``. Per call: what the client got and
    when, and what the server logged (answered in time, late, or cancelled) and when."""
    request = scenario(1024, 200, seed=1, time_limit_s=20).request
    rows = []
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as channel:
        solve = channel.unary_unary(
            SOLVE, request_serializer=None, response_deserializer=placement_pb2.SolveResponse.FromString
        )
        for deadline in [*deadlines, None]:
            rid = f"probe-{deadline}"
            body = wire.request_to_proto(request.model_copy(update={"request_id": rid})).SerializeToString()
            started = time.monotonic()
            if deadline is None:
                future = solve.future(body)
                time.sleep(cancel_after_s)
                future.cancel()
                got, client_s = "CANCELLED (by the client)", cancel_after_s
            else:
                try:
                    solve(body, timeout=deadline)
                    got = "OK"
                except grpc.RpcError as exc:
                    got = exc.code().name  # type: ignore[attr-defined]
                client_s = time.monotonic() - started
            end = time.monotonic() + 30
            while time.monotonic() < end and not [e for e in EVENTS if e.get("request_id") == rid]:
                time.sleep(0.05)
            logged = next((e for e in EVENTS if e.get("request_id") == rid), {})
            rows.append(
                {
                    "deadline_s": deadline,
                    "client": got,
                    "client_s": round(client_s, 3),
                    "server_event": logged.get("event"),
                    "server_s": round(float(logged.get("ms", "nan")) / 1000, 3),  # type: ignore[arg-type]
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def probe_markdown(rows: list[dict[str, object]]) -> str:
    lines = [
        "| gRPC deadline | client got | after s | server logged | server done after s |",
        "|---:|---|---:|---|---:|",
    ]
    for r in rows:
        deadline = "none (cancelled)" if r["deadline_s"] is None else f"{r['deadline_s']} s"
        lines.append(
            f"| {deadline} | {r['client']} | {r['client_s']} | {r['server_event']} | {r['server_s']} |"
        )
    return "\n".join(lines)


def labelled_request(k: int, nodes: int = 4) -> bytes:
    """``nodes`` nodes never seen before, each with 1 MiB of labels, and one 1-GPU job: what pinned
    memory through the node caches before they were bounded in bytes (issue 23)."""
    base = scenario(nodes, 1, seed=3).request
    blob = (f"{k:08d}" * (1 << 17))[: 1 << 20]
    fresh = tuple(
        n.model_copy(update={"name": f"r{k}-{n.name}", "labels": {"blob": f"{i}{blob}"}})
        for i, n in enumerate(base.inventory.nodes)
    )
    job = Job(id="small", roles=(Role(name="worker", replicas=1, member=MemberShape(gpus=1)),))
    request = SolveRequest(
        inventory=base.inventory.model_copy(update={"nodes": fresh}),
        jobs=(job,),
        policy=Policy(time_limit_s=1),
    )
    return wire.request_to_proto(request).SerializeToString()


def memory_soak(cache_mib: list[int], warm: int = 10, soak: int = 40) -> list[dict[str, object]]:
    """Per ``--node-cache-mib``: a server's RSS at start, after ``warm`` and after ``soak`` more
    requests of new 4 x 1 MiB-labelled nodes (one at a time)."""
    rows = []
    for mib in cache_mib:
        proc, port = start_server(["--node-cache-mib", str(mib)])
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as channel:
                solve = channel.unary_unary(
                    SOLVE,
                    request_serializer=None,
                    response_deserializer=placement_pb2.SolveResponse.FromString,
                )
                start = rss_mib(proc.pid)
                for k in range(warm):
                    solve(labelled_request(k), timeout=60)
                warmed = rss_mib(proc.pid)
                for k in range(warm, warm + soak):
                    solve(labelled_request(k), timeout=60)
                after = rss_mib(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        rows.append(
            {"node_cache_mib": mib, "start": start, "warm": warmed, "after": after, "new_mib": soak * 4}
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def soak_markdown(rows: list[dict[str, object]]) -> str:
    lines = [
        "| --node-cache-mib | RSS at start | after 10 requests | after 40 more (160 MiB of new nodes) "
        "| growth |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        growth = float(r["after"]) - float(r["warm"])  # type: ignore[arg-type]
        row = f"| {r['node_cache_mib']} | {r['start']:.0f} | {r['warm']:.0f} | {r['after']:.0f}"
        lines.append(f"{row} | +{growth:.0f} MiB |")
    return "\n".join(lines)


def cancel_points(at_s: list[float]) -> list[tuple[float, float, str]]:
    """In process, no gRPC: a 1,024-node x 200-gang solve (time limit 30 s, caches warm, as for a
    scheduler's repeated inventory) cancelled ``at`` seconds in; how long after the trip it stopped."""
    from solver.domain.cancel import Cancel, Cancelled
    from solver.solve import solve

    request = scenario(1024, 200, seed=1, time_limit_s=30).request
    policy = request.policy.model_copy(update={"deterministic": False})
    solve(request.model_copy(update={"policy": policy.model_copy(update={"time_limit_s": 1})}))  # warm
    request = request.model_copy(update={"policy": policy})
    rows = []
    for at in at_s:
        cancel, tripped = Cancel(), [0.0]

        def trip(cancel: Cancel = cancel, tripped: list[float] = tripped) -> None:
            tripped[0] = time.monotonic()
            cancel.trip("bench")

        timer = threading.Timer(at, trip)
        timer.start()
        try:
            solve(request, cancel=cancel)
            rows.append((at, float("nan"), "finished before the cancel"))
        except Cancelled:
            rows.append((at, (time.monotonic() - tripped[0]) * 1000, "stopped"))
        timer.cancel()
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def cancel_points_cold(at_s: list[float], nodes: int, pods: int) -> list[tuple[float, float, str]]:
    """In process, no gRPC: a ``nodes`` x ``pods`` request (one-GPU pods, time limit 5 s) from its
    wire message, every cache of nodes emptied before each run — the stages before the search at
    their slowest — cancelled ``at`` seconds in; how long after the trip it stopped. First a run
    uncancelled, for what each stage takes."""
    from solver.domain.cancel import Cancel, Cancelled, cancelling
    from solver.domain.nodefold import NODE_MEMOS
    from solver.solve import solve

    base = scenario(nodes, 1, seed=1).request
    pod = Job(id="pod", roles=(Role(name="worker", replicas=1, member=MemberShape(gpus=1)),))
    jobs = tuple(pod.model_copy(update={"id": f"pod{j}", "priority": j % 4}) for j in range(pods))
    message = wire.request_to_proto(base.model_copy(update={"jobs": jobs, "policy": Policy(time_limit_s=5)}))

    def run(at: float | None) -> tuple[float, float, str]:
        wire.forget_nodes()  # cold: nothing converted or computed for these nodes yet
        NODE_MEMOS.lru.clear()
        cancel, tripped = Cancel(), [0.0]

        def trip() -> None:
            tripped[0] = time.monotonic()
            cancel.trip("bench")

        timer = threading.Timer(at, trip) if at is not None else None
        began = time.monotonic()
        if timer:
            timer.start()
        try:
            with cancelling(cancel):
                request = wire.request_from_proto(message)
                converted = (time.monotonic() - began) * 1000
                result = solve(request, cancel=cancel)
            stages = ", ".join(f"{t.stage} {t.ms:.0f}" for t in result.timings)
            return (-1.0, float("nan"), f"uncancelled: convert {converted:.0f}, {stages} ms")
        except Cancelled:
            return (at or 0.0, (time.monotonic() - tripped[0]) * 1000, "stopped")
        finally:
            if timer:
                timer.cancel()

    rows = [run(None)]
    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    for at in at_s:
        rows.append(run(at))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--clients", default="0,1,8,32,64", help="0: health checks alone (the machine's noise)"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="per level")
    parser.add_argument("--large-every", type=int, default=8, help="every k-th call is a 1,024-node solve")
    parser.add_argument("--large-time-limit", type=float, default=2.0)
    parser.add_argument("--serve-args", default="", help="extra `topoplace serve` options, one string")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--probe-deadlines",
        default="0.5,2,5",
        help="then a 1,024 x 200 solve under each deadline, and one cancelled at 1 s ('' = skip)",
    )
    parser.add_argument(
        "--memory-soak", default="", help="instead: RSS soak with these --node-cache-mib values, e.g. 16,4096"
    )
    parser.add_argument("--cancel-at", default="", help="instead: in-process cancel latency at these seconds")
    parser.add_argument(
        "--cancel-cold",
        default="",
        metavar="NODES,PODS",
        help="with --cancel-at: cold caches, a NODES x PODS request of one-GPU pods from its wire message",
    )
    args = parser.parse_args()
    if args.cancel_at and args.cancel_cold:
        nodes, pods = (int(x) for x in args.cancel_cold.split(","))
        points = cancel_points_cold([float(a) for a in args.cancel_at.split(",")], nodes, pods)
        print(f"commit {commit()} · {machine()}")
        print(f"command: python -m bench.load {' '.join(sys.argv[1:])}")
        print(points[0][2])
        print("| cancelled at | stopped after the trip |\n|---:|---:|")
        for at, ms, _ in points[1:]:
            print(f"| {at} s | {ms:.0f} ms |")
        return
    if args.cancel_at:
        points = cancel_points([float(a) for a in args.cancel_at.split(",")])
        print(f"commit {commit()} · {machine()}")
        print(f"command: python -m bench.load {' '.join(sys.argv[1:])}")
        print("| cancelled at | stopped after the trip |\n|---:|---:|")
        for at, ms, how in points:
            print(f"| {at} s | {ms:.0f} ms |" if how == "stopped" else f"| {at} s | ({how}) |")
        return
    if args.memory_soak:
        soak = memory_soak([int(m) for m in args.memory_soak.split(",")])
        print(f"commit {commit()} · {machine()}")
        print(f"command: python -m bench.load {' '.join(sys.argv[1:])}")
        print(soak_markdown(soak))
        return
    small, large = small_request(), large_request(args.large_time_limit)
    proc, port = start_server(args.serve_args.split())
    rows = []
    try:
        for clients in (int(c) for c in args.clients.split(",") if c):
            level = Level(clients=clients, seconds=args.seconds)
            run_level(port, proc.pid, level, small, large, args.large_every)
            rows.append(summary(level))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            time.sleep(2.0)  # let the last large solves of the level finish before the next
        deadlines = [float(d) for d in args.probe_deadlines.split(",") if d]
        probes = probe_deadlines(port, deadlines, 1.0) if deadlines else []
    finally:
        proc.send_signal(signal.SIGTERM)
        stopped = proc.wait(timeout=60)
    print(
        f"commit {commit()} · {machine()} · large request {len(large) / 1e6:.2f} MB · server exit {stopped}"
    )
    print(f"command: python -m bench.load {' '.join(sys.argv[1:])}")
    print(markdown(rows))
    if probes:
        print()
        print(probe_markdown(probes))
    if args.json:
        args.json.write_text(json.dumps({"levels": rows, "probes": probes}, indent=2) + "\n")


if __name__ == "__main__":
    main()
