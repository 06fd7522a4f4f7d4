"""What one Volcano session costs the extender at 128 / 256 / 1,024 nodes, over real HTTP.

    python -m bench.volcano_cost                     # 128, 256 and 1024 nodes, prints a table
    python -m bench.volcano_cost --nodes 1024        # one size
    python -m bench.volcano_cost --profile 1024      # cProfile of a changed session's open, in process

``topoplace volcano serve`` runs as its own process (as deployed: `--dry-run`, HyperNodes from a
file, Volcano's default 1 s `httpTimeout`), and this process plays Volcano's extender plugin:

* **cold**: the first ``onSessionOpen`` of a fresh server, and how long until a session has a plan
  (sessions opened and closed back to back, as Volcano's 1 s schedule period would);
* **changed**: a later session whose snapshot differs from the last in one place — one planned
  job bound on its planned nodes (its pods Bound, on their nodes' ``Tasks``, ``Idle``/``Used``
  charged), the commonest change between two sessions — its ``onSessionOpen`` and the time until
  its plan is ready;
* **predicate**: ``--calls`` calls (pending GPU task × node, full ``TaskInfo`` and ``NodeInfo``
  bodies, drawn at random) from 16 threads, each with its own kept-alive connection (Volcano's
  allocate action runs 16 predicate workers); latency per call and calls per second;
* **allocateFunc**: every planned task on its planned node, one connection;
* **prioritize** (``volcano-scheduler-large.conf``): one call per pending GPU task with every node's
  whole ``NodeInfo`` in Go's compact form (Volcano v1.10's batch node-order call with
  ``--percentage-nodes-to-find=100``), one after another on one connection as the allocate action
  asks; the round trip, topoplace's own server time (``/status`` ``callMs``), and how many answers
  scored a planned node; **jobReady** (the large configuration's veto): once per job.

topoplace's own share of a large-configuration session is then ``changed open + prioritize calls ×
their server time + jobReady calls + close``; the rest of a session (Volcano's predicates and
scoring, and the Go side writing each 1,024-node prioritize body) is Volcano's, measured with its
own scheduler by ``tests/volcano/gosched`` (``TestSessionLatency``).

The cluster is ``fixtures.volcano.build``'s DGX A100 nodes (8 GPUs, 10 NICs, topology and HAMi
register annotations) in leaves of 8 under spines of 5 leaves, a third of them running a pod that
holds 2-6 GPUs; the jobs are ``bench.volcano_session``'s mix scaled to the size (at 1,024 nodes:
102 jobs, ~240 pending GPU pods).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import http.client
import io
import json
import os
import pstats
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from bench.provenance import commit, machine
from fixtures.volcano import build

ROOT = Path(__file__).resolve().parents[1]
PER_LEAF, LEAVES_PER_SPINE, WIDTH = 8, 5, 4
WORKERS = 16  # Volcano's allocate action: workqueue.ParallelizeUntil(ctx, 16, ...) over the nodes


# --------------------------------------------------------------------------- the cluster


def jobs(scale: float) -> list[tuple[build.GroupSpec, list[build.PodSpec]]]:
    """bench.volcano_session's 100-job mix, each kind's count times ``scale`` (at least one)."""

    def count(n: int) -> int:
        return max(1, round(n * scale))

    out: list[tuple[build.GroupSpec, list[build.PodSpec]]] = []
    for k in range(count(30)):
        g = build.GroupSpec(
            "train", f"ddp-{k}", 2, topology={"Mode": "hard", "HighestTierAllowed": 1}, priority=100
        )
        out.append((g, build.workers("train", g.name, "worker", 2, 8, annotations=build.ALIGNED, cpu=96)))
    for k in range(count(20)):
        g = build.GroupSpec(
            "train", f"big-{k}", 4, topology={"Mode": "hard", "HighestTierAllowed": 2}, priority=200
        )
        out.append((g, build.workers("train", g.name, "worker", 4, 8, annotations=build.ALIGNED, cpu=96)))
    for k in range(count(10)):
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
    for k in range(count(30)):
        g = build.GroupSpec("dev", f"nb-{k}", 1)
        out.append((g, build.workers("dev", g.name, "main", 1, 1 + k % 4)))
    for k in range(count(10)):
        g = build.GroupSpec("batch", f"el-{k}", 2)
        out.append((g, build.workers("batch", g.name, "worker", 4, 1)))
    return out


def cluster(nodes: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(onSessionOpen body, HyperNode objects) for ``nodes`` nodes."""
    objects = build.hypernodes_2tier(nodes // PER_LEAF, PER_LEAF, LEAVES_PER_SPINE, WIDTH)
    running = build.running_on_every_third(nodes, WIDTH)
    body = build.session(jobs(nodes / 1024), build.cluster_nodes(nodes, PER_LEAF, WIDTH), running)
    return body, objects


def bind(body: dict[str, Any], job_key: str, where: dict[str, str]) -> dict[str, Any]:
    """``body`` after Volcano bound ``job_key``'s pods as ``where`` (task uid → node) says."""
    changed = copy.deepcopy(body)
    for uid, task in changed["Jobs"][job_key]["Tasks"].items():
        node = where.get(uid)
        if node is None:
            continue
        task["Status"] = 1 << 4  # Bound
        task["NodeName"] = node
        task["Pod"]["spec"]["nodeName"] = node
        meta = task["Pod"]["metadata"]  # the binding is a write: the API server bumps the version
        meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
        info = changed["Nodes"][node]
        info["Tasks"][f"{task['Namespace']}/{task['Name']}"] = task
        for key in ("MilliCPU", "Memory"):
            info["Idle"][key] -= task["Resreq"][key]
            info["Used"][key] += task["Resreq"][key]
        for name, value in (task["Resreq"].get("ScalarResources") or {}).items():
            info["Idle"]["ScalarResources"][name] = info["Idle"]["ScalarResources"].get(name, 0) - value
            used = info["Used"].setdefault("ScalarResources", {}) or {}
            used[name] = used.get(name, 0) + value
            info["Used"]["ScalarResources"] = used
    return changed


# --------------------------------------------------------------------------- the server, as deployed


class Server:
    """``topoplace volcano serve`` in its own process group on a free loopback port."""

    def __init__(self, hypernodes: Path, log: Path, root: Path = ROOT, standby: bool = False) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'proto'}"}
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "solver.cli", "volcano", "serve", "--port", str(self.port),
             "--dry-run", "--hypernodes", str(hypernodes), "--http-timeout", "1s", *["--standby"] * standby],
            cwd=root, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        started = deadline = time.monotonic()
        deadline += 120
        while time.monotonic() < deadline:
            try:
                health = self.get("/healthz")
                # Servers before the solverReady field: answered is ready (their solver loads lazily).
                if health.get("solverReady", True):
                    self.startup_s = time.monotonic() - started
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"topoplace volcano serve did not come up; log: {log}")

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def get(self, path: str) -> dict[str, Any]:
        for _ in range(100):
            conn = self.connection()
            try:
                conn.request("GET", path)
                answer = json.loads(conn.getresponse().read())
            finally:
                conn.close()
            if not answer.get("standby"):
                return answer
            time.sleep(0.1)  # the --standby front answered: its serving process is checked or restarting
        raise RuntimeError(f"GET {path}: only the --standby front answered for 10 s")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()


def post(conn: http.client.HTTPConnection, verb: str, data: bytes) -> float:
    started = time.perf_counter()
    conn.request("POST", f"/{verb}", data, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    text = reply.read()
    took = time.perf_counter() - started
    # A 503 open is Volcano's "schedule alone" (the --standby front's answer to an open past its budget).
    if reply.status != 200 and not (verb == "onSessionOpen" and reply.status == 503):
        raise RuntimeError(f"{verb} answered {reply.status}: {text[:200]!r}")
    return took


class NoPlan(RuntimeError):
    """No session had a plan placing a job: the row says so instead of the figures that need one."""


SESSIONS = 60  # sessions a server gets to have a plan (--sessions)


def until_planned(
    server: Server, conn: http.client.HTTPConnection, data: bytes, started: float, most: int = SESSIONS
) -> tuple[float, int, dict[str, Any]]:
    """Open and close sessions of ``data`` until one has a plan: (seconds since ``started``,
    sessions, its /status). Sessions follow each other as fast as Volcano's would (period 1 s)."""
    status: dict[str, Any] = {}
    for sessions in range(2, most + 1):
        opened = time.perf_counter()
        post(conn, "onSessionOpen", data)
        status = server.get("/status")
        if status["placedJobs"]:
            return time.perf_counter() - started, sessions, status
        post(conn, "onSessionClose", b"{}")
        time.sleep(max(0.0, 1.0 - (time.perf_counter() - opened)))
    raise NoPlan(
        f"no plan placing a job in {most} sessions ({len(status.get('unplacedJobs') or {})} jobs "
        f"unplaced; last error: {status.get('error') or 'none'})"
    )


def predicate_calls(server: Server, bodies: list[bytes], fresh: bool) -> tuple[list[float], float]:
    """(seconds per call, wall seconds) for ``bodies`` posted by WORKERS threads; ``fresh``: a new
    connection for every call, as most of Volcano's workers make one (Go's default transport keeps
    two idle connections per host, so 14 of 16 parallel callers dial again)."""
    times: list[float] = []
    lock = threading.Lock()
    chunks = [bodies[i::WORKERS] for i in range(WORKERS)]

    def work(chunk: list[bytes]) -> None:
        conn = server.connection()
        mine = []
        for b in chunk:
            if fresh:
                conn.close()
                conn = server.connection()
            mine.append(post(conn, "predicate", b))
        conn.close()
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times, time.perf_counter() - started


def prioritize_calls(
    server: Server, conn: http.client.HTTPConnection, body: dict[str, Any], pending: list[tuple[str, Any]]
) -> dict[str, Any]:
    """The large configuration's calls in a session with a plan: prioritize per pending GPU task
    (every node, Go's compact form), then jobReady per job. Round trips and topoplace's server time."""
    compact = (",", ":")
    nodes_json = json.dumps(list(body["Nodes"].values()), separators=compact).encode()
    gpu_tasks = [t for _, t in pending if t["Resreq"]["ScalarResources"]]
    before = server.get("/status")
    times, steered = [], 0
    for task in gpu_tasks:
        data = b'{"task":' + json.dumps(task, separators=compact).encode() + b',"nodes":' + nodes_json + b"}"
        started = time.perf_counter()
        conn.request("POST", "/prioritize", data, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        scores = json.loads(reply.read())["nodeScore"]
        times.append(time.perf_counter() - started)
        if reply.status != 200:
            raise RuntimeError(f"prioritize answered {reply.status}")
        steered += any(v > 0 for v in scores.values())
    ready_times = [
        post(conn, "jobReady", json.dumps({"job": job}, separators=compact).encode())
        for job in body["Jobs"].values()
    ]
    after = server.get("/status")

    def server_ms(verb: str) -> float:
        return after["callMs"].get(verb, 0.0) - before["callMs"].get(verb, 0.0)

    return {
        "prioritize_calls": len(times),
        "prioritize_body_mib": (len(nodes_json) + 2000) / 2**20,
        "prioritize_median_ms": ms(times),
        "prioritize_p99_ms": ms(times, 0.99),
        "prioritize_total_s": sum(times),
        "prioritize_server_s": server_ms("prioritize") / 1000,
        "prioritize_steered": steered,
        "prioritize_full_reads": after.get("prioritizeFullReads", 0),
        "jobready_calls": len(ready_times),
        "jobready_median_ms": ms(ready_times),
        "jobready_server_s": server_ms("jobReady") / 1000,
    }


def ms(values: list[float], q: float = 0.5) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def measure(
    nodes: int, calls: int, seed: int, root: Path = ROOT, standby: bool = False, sessions: int = SESSIONS
) -> dict[str, Any]:
    body, objects = cluster(nodes)
    data = json.dumps(body).encode()
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        hyper = Path(tmp) / "hypernodes.yaml"
        hyper.write_text(yaml.safe_dump_all(objects))
        server = Server(hyper, Path(tmp) / "serve.log", root, standby)
        try:
            conn = server.connection()
            started = time.perf_counter()
            cold_open = post(conn, "onSessionOpen", data)
            cold_status = server.get("/status")
            post(conn, "onSessionClose", b"{}")
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - started)))
            try:
                cold_ready, cold_sessions, status = (
                    (cold_open, 1, cold_status)
                    if cold_status["placedJobs"]
                    else until_planned(server, conn, data, started, sessions)
                )
            except NoPlan as err:
                conn.close()
                return {
                    "nodes": nodes,
                    "gpu_tasks": server.get("/status")["gpuTasks"],  # the cold open's is 0: not converted
                    "jobs": cold_status["jobs"],
                    "placed": 0,
                    "body_mib": len(data) / 2**20,
                    "startup_s": server.startup_s,
                    "cold_open_ms": cold_open * 1000,
                    "cold_error": cold_status["error"],
                    "no_plan": str(err),
                }
            # The plan is in use: predicate and allocateFunc against it.
            pending = [
                (key, t)
                for key, job in body["Jobs"].items()
                for t in job["Tasks"].values()
                if t["Status"] == 1
            ]
            node_infos = list(body["Nodes"].values())
            bodies = []
            for _ in range(calls):
                _, task = rng.choice(pending)
                bodies.append(json.dumps({"task": task, "node": rng.choice(node_infos)}).encode())
            prio = prioritize_calls(server, conn, body, pending)
            pred_times, pred_wall = predicate_calls(server, bodies, fresh=False)
            fresh_times, fresh_wall = predicate_calls(server, bodies[: calls // 2], fresh=True)
            # allocateFunc: each task on a node its plan admits (asked through predicate, one
            # node at a time, as Volcano would find it), then allocated there.
            where: dict[str, str] = {}
            alloc_times: list[float] = []
            placed_here: dict[str, dict[str, Any]] = {}  # node → tasks allocated there so far
            for key, task in pending:
                if key not in status["placedJobs"]:
                    continue
                for info in node_infos:
                    tasks = {**(info["Tasks"] or {}), **placed_here.get(info["Name"], {})}
                    asked = json.dumps({"task": task, "node": dict(info, Tasks=tasks)}).encode()
                    conn.request("POST", "/predicate", asked, {"Content-Type": "application/json"})
                    if json.loads(conn.getresponse().read()).get("code") == 0:
                        break
                else:
                    continue
                placed = dict(task, NodeName=info["Name"])
                alloc_times.append(post(conn, "allocateFunc", json.dumps({"task": placed}).encode()))
                where[task["UID"]] = info["Name"]
                placed_here.setdefault(info["Name"], {})[f"{task['Namespace']}/{task['Name']}"] = placed
                if len(alloc_times) >= 16:
                    break
            post(conn, "onSessionClose", b"{}")
            # The next session: one job bound where it was planned.
            job_key = next(k for k in body["Jobs"] if any(u in where for u in body["Jobs"][k]["Tasks"]))
            changed = bind(body, job_key, where)
            changed_data = json.dumps(changed).encode()
            started = time.perf_counter()
            changed_open = post(conn, "onSessionOpen", changed_data)
            changed_status = server.get("/status")
            post(conn, "onSessionClose", b"{}")
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - started)))
            changed_ready, changed_sessions, changed_planned = (
                (changed_open, 1, changed_status)
                if changed_status["placedJobs"]
                else until_planned(server, conn, changed_data, started, sessions)
            )
            conn.close()
        except Exception:
            print((Path(tmp) / "serve.log").read_text()[-6000:], file=sys.stderr)  # why, before it is gone
            raise
        finally:
            server.stop()
        log = (Path(tmp) / "serve.log").read_text()
    return {
        "standby_kills": log.count("serving process hung: killed"),
        "standby_neutral": log.count("answered neutrally"),
        "unsearched_plans": log.count("an unsearched plan is not reused"),  # greedy answers, not reused
        "nodes": nodes,
        "gpu_tasks": status["gpuTasks"],
        "jobs": status["jobs"],
        "placed": len(status["placedJobs"]),
        "cold_source": status.get("planSource", ""),  # servers before planSource: ""
        "body_mib": len(data) / 2**20,
        "startup_s": server.startup_s,
        "cold_open_ms": cold_open * 1000,
        "cold_error": cold_status["error"],
        "cold_ready_s": cold_ready,
        "cold_sessions": cold_sessions,
        "changed_open_ms": changed_open * 1000,
        "changed_error": changed_status["error"],
        "changed_placed": len(changed_planned["placedJobs"]),
        "changed_source": changed_planned.get("planSource", ""),
        "changed_ready_s": changed_ready,
        "changed_sessions": changed_sessions,
        "predicate_calls": len(pred_times),
        "predicate_median_ms": ms(pred_times),
        "predicate_p99_ms": ms(pred_times, 0.99),
        "predicate_per_s": len(pred_times) / pred_wall,
        "fresh_median_ms": ms(fresh_times),
        "fresh_p99_ms": ms(fresh_times, 0.99),
        "fresh_per_s": len(fresh_times) / fresh_wall,
        **prio,
        "allocate_calls": len(alloc_times),
        "allocate_median_ms": ms(alloc_times) if alloc_times else 0.0,
        "allocate_p99_ms": ms(alloc_times, 0.99) if alloc_times else 0.0,
    }


def profile(nodes: int) -> str:
    """cProfile of onSessionOpen in process: a cold open, then a changed snapshot's open."""
    from adapters.volcano import hypernodes as hn
    from adapters.volcano.extender import Config, Extender, local_solve
    from adapters.volcano.patcher import RecordingPatcher
    from solver.service.logging import configure_logging

    configure_logging(stream=io.StringIO())
    body, objects = cluster(nodes)
    problems: list[Any] = []
    hyper = tuple(h for h in (hn.parse(o, "bench", problems) for o in objects) if h is not None)
    extender = Extender(
        solve=local_solve,
        patcher=RecordingPatcher(),
        hypernodes=lambda: hyper,
        config=Config(),
        solver_process=True,
    )
    extender.ready(60)
    extender.on_session_open(json.loads(json.dumps(body)))
    extender.wait_for_solver(120)
    key = next(iter(body["Jobs"]))
    changed = bind(body, key, {})
    changed["Nodes"][next(iter(changed["Nodes"]))]["Node"]["metadata"]["resourceVersion"] = "2"
    raw = json.dumps(changed).encode()
    out = io.StringIO()
    prof = cProfile.Profile()
    prof.enable()
    extender.on_session_open(json.loads(raw))
    prof.disable()
    extender.close()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(35)
    return out.getvalue()


# --------------------------------------------------------------------------- report


def summary(rows: list[dict[str, Any]]) -> str:
    """The session figures of issue 19 item 5, one row per server: the first session, the time
    until a plan and what it places, and a changed session."""
    lines = [
        "| server | nodes | pending GPU pods (jobs) | cold open | cold: plan ready | jobs the plan places "
        "| changed open | changed: plan ready (jobs it places) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| {r['server']} | {r['nodes']} | {r['gpu_tasks']} ({r['jobs']}) "
        head += f"| {r['cold_open_ms']:.0f} ms "
        if "no_plan" in r:
            lines.append(head + f"| {r['no_plan']} | 0 of {r['jobs']} | - | - |")
            continue
        source = f", {r['cold_source']}" if r.get("cold_source") else ""
        cold = f"{r['cold_ready_s']:.2f} s (session {r['cold_sessions']}{source})"
        changed = f"{r['changed_ready_s']:.2f} s (session {r['changed_sessions']}"
        changed += f", {r['changed_source']}" if r.get("changed_source") else ""
        changed += f"; {r['changed_placed']} of {r['jobs'] - 1})"
        lines.append(
            head + f"| {cold} | {r['placed']} of {r['jobs']} | {r['changed_open_ms']:.0f} ms | {changed} |"
        )
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    rows = [r for r in rows if "no_plan" not in r]  # no plan: no per-call figures (see summary)
    lines = [
        "| server | nodes | pending GPU pods (jobs) | body | cold open | cold: plan ready | changed open "
        "| changed: plan ready | predicate median / p99 | predicate calls/s (16 conns) "
        "| new connection each call: median / p99, calls/s | allocateFunc median / p99 "
        "| prioritize (every node): body, median / p99, topoplace's server time for all, steered "
        "| jobReady: calls, median, server time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['server']} | {r['nodes']} | {r['gpu_tasks']} ({r['jobs']}) | {r['body_mib']:.1f} MiB "
            f"| {r['cold_open_ms']:.0f} ms | {r['cold_ready_s']:.2f} s (session {r['cold_sessions']}) "
            f"| {r['changed_open_ms']:.0f} ms "
            f"| {r['changed_ready_s']:.2f} s (session {r['changed_sessions']}) "
            f"| {r['predicate_median_ms']:.2f} / {r['predicate_p99_ms']:.1f} ms | {r['predicate_per_s']:.0f} "
            f"| {r['fresh_median_ms']:.2f} / {r['fresh_p99_ms']:.1f} ms, {r['fresh_per_s']:.0f} "
            f"| {r['allocate_median_ms']:.2f} / {r['allocate_p99_ms']:.1f} ms ({r['allocate_calls']}) "
            f"| {r['prioritize_body_mib']:.1f} MiB, "
            f"{r['prioritize_median_ms']:.1f} / {r['prioritize_p99_ms']:.1f} ms, "
            f"{r['prioritize_server_s']:.2f} s for {r['prioritize_calls']}, "
            f"{r['prioritize_steered']}/{r['prioritize_calls']} "
            f"| {r['jobready_calls']}, {r['jobready_median_ms']:.2f} ms, "
            f"{r['jobready_server_s'] * 1000:.0f} ms |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, action="append", help="cluster sizes (default 128, 256, 1024)")
    parser.add_argument("--calls", type=int, default=2000, help="predicate calls per size")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="also serve from this checkout (e.g. `git archive <commit> | tar -x -C DIR`), alternating",
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="also serve behind --standby's front process (the extra relay hop), side by side",
    )
    parser.add_argument(
        "--profile", type=int, metavar="NODES", help="profile a changed session's open instead"
    )
    parser.add_argument(
        "--sessions", type=int, default=SESSIONS, help="sessions a server gets to have a plan"
    )
    args = parser.parse_args()
    if args.profile:
        print(profile(args.profile))
        return 0
    rows = []
    for n in args.nodes or [128, 256, 1024]:
        for label, root in [("before", args.before)] * bool(args.before) + [(commit(), ROOT)]:
            rows.append({"server": label, **measure(n, args.calls, args.seed, root, sessions=args.sessions)})
            print(json.dumps(rows[-1]), flush=True)
            if args.standby:
                row = measure(n, args.calls, args.seed, root, True, args.sessions)
                rows.append({"server": f"{label} --standby", **row})
                print(json.dumps(rows[-1]), flush=True)
    print(f"commit {commit()}, {machine()}, load {os.getloadavg()[0]:.1f}")
    print(summary(rows))
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
