"""The --standby front's extra hop: prioritize round trips straight to `topoplace volcano serve`
and through its --standby front process, side by side on the same bodies.

Each body is one pending GPU task and the first N nodes of bench.volcano_cost's synthetic cluster in
Go's compact form (N chosen so the body is about the size asked, e.g. Volcano's 4.6 MiB for 1,024
real NodeInfos). No session is open, so both servers answer neutrally after scanning every node
name: the difference is the front's reading, relaying and the second loopback hop.

    PYTHONPATH=$PWD:$PWD/proto nice -n 10 python -m bench.volcano_relay --mib 4.6 --calls 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from bench.volcano_cost import ROOT, Server, cluster


def _body(mib: float) -> tuple[bytes, int]:
    body, _ = cluster(1024)
    compact = (",", ":")
    task = next(
        t for j in body["Jobs"].values() for t in j["Tasks"].values() if t["Resreq"]["ScalarResources"]
    )
    head = b'{"task":' + json.dumps(task, separators=compact).encode() + b',"nodes":'
    nodes = list(body["Nodes"].values())
    for n in range(1, len(nodes) + 1):
        data = head + json.dumps(nodes[:n], separators=compact).encode() + b"}"
        if len(data) >= mib * 1024 * 1024:
            return data, n
    return data, len(nodes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=4.6, help="prioritize body size (default 4.6)")
    parser.add_argument("--calls", type=int, default=40, help="calls to each server, alternating")
    args = parser.parse_args()
    data, nodes = _body(args.mib)
    times: dict[str, list[float]] = {"direct": [], "standby": []}
    with tempfile.TemporaryDirectory() as tmp:
        hyper = Path(tmp) / "hypernodes.yaml"
        hyper.write_text(yaml.safe_dump_all(cluster(8)[1]))
        servers = {
            "direct": Server(hyper, Path(tmp) / "direct.log"),
            "standby": Server(hyper, Path(tmp) / "standby.log", standby=True),
        }
        try:
            conns = {k: s.connection() for k, s in servers.items()}
            for i in range(args.calls + 2):
                for label in ("direct", "standby") if i % 2 else ("standby", "direct"):
                    conn = conns[label]
                    started = time.perf_counter()
                    conn.request("POST", "/prioritize", data, {"Content-Type": "application/json"})
                    reply = conn.getresponse()
                    answer = json.loads(reply.read())
                    took = time.perf_counter() - started
                    if reply.status != 200 or len(answer["nodeScore"]) != nodes:
                        raise RuntimeError(
                            f"{label}: {reply.status} with {len(answer.get('nodeScore', {}))} scores"
                        )
                    if reply.getheader("Connection", "").lower() == "close":
                        conn.close()
                        conns[label] = servers[label].connection()
                    if i >= 2:  # the first two calls of each warm up
                        times[label].append(took)
        finally:
            for s in servers.values():
                s.stop()
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    print(
        f"commit {head.stdout.strip()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
        f"prioritize body {len(data) / 1024 / 1024:.2f} MiB ({nodes} nodes), {args.calls} calls each"
    )
    for label, values in times.items():
        values.sort()
        print(
            f"{label:8s} median {statistics.median(values) * 1000:7.1f} ms  "
            f"p90 {values[int(0.9 * (len(values) - 1))] * 1000:7.1f} ms"
        )
    extra = statistics.median(times["standby"]) - statistics.median(times["direct"])
    print(
        f"the front's extra hop: {extra * 1000:+.1f} ms median "
        f"({statistics.median(times['standby']) / statistics.median(times['direct']):.2f}x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
