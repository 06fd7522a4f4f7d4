"""Per-call latency of the extender's HTTP face: ``predicate`` round trips on one kept-alive connection.

    python -m bench.volcano_http              # prints the table
    python -m bench.volcano_http --write      # and writes bench/RESULTS-volcano-http.md

The server as shipped (``TCP_NODELAY`` on accepted sockets) side by side with the same server with
Nagle's algorithm left on, as it was: a reply is two writes (headers, then body), and with Nagle on
the body waits for the client's delayed ACK of the headers. The body is a real ``predicate`` request
of the fixture session (a 16-pod gang's task and a DGX node), answered from the session's plan.
Rounds alternate the two variants; medians and p99 per round.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import statistics
import time
from pathlib import Path

from adapters.volcano.extender import Config, Extender, local_solve
from adapters.volcano.patcher import RecordingPatcher
from adapters.volcano.server import RunningServer, serve
from bench.provenance import commit, machine
from solver.service.logging import configure_logging

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "volcano" / "session-open.json"
RESULTS = Path(__file__).resolve().parent / "RESULTS-volcano-http.md"


def _calls(running: RunningServer, body: bytes, n: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
    times = []
    for _ in range(n):
        started = time.perf_counter()
        conn.request("POST", "/predicate", body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        times.append(time.perf_counter() - started)
        if reply.status != 200:
            raise RuntimeError(f"predicate answered {reply.status}")
    conn.close()
    return times


def run(calls: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    configure_logging(stream=io.StringIO())  # no log rendering in the measured path
    session = json.loads(FIXTURE.read_text())
    job = session["Jobs"]["team-a/train-16"]
    body = json.dumps(
        {"task": next(iter(job["Tasks"].values())), "node": session["Nodes"]["gpu-01"]}
    ).encode()
    extender = Extender(solve=local_solve, patcher=RecordingPatcher(), config=Config(http_timeout_s=20.0))
    extender.on_session_open(session)
    results: dict[str, list[tuple[float, float]]] = {}
    try:
        for _ in range(rounds):
            for name, nodelay in (("TCP_NODELAY (shipped)", True), ("Nagle on (before)", False)):
                running = serve(extender, port=0)
                handler = running.server.RequestHandlerClass
                running.server.RequestHandlerClass = type(  # type: ignore[assignment]
                    "Variant", (handler,), {"disable_nagle_algorithm": nodelay}
                )
                try:
                    times = sorted(_calls(running, body, calls))
                finally:
                    running.stop()
                results.setdefault(name, []).append(
                    (statistics.median(times) * 1000, times[int(0.99 * (len(times) - 1))] * 1000)
                )
    finally:
        extender.close()
    return results


def table(results: dict[str, list[tuple[float, float]]], calls: int) -> str:
    lines = [
        f"| server | median ms per call, by round ({calls} calls each) | p99 ms, by round |",
        "|---|---|---|",
    ]
    for name, rows in results.items():
        medians = ", ".join(f"{m:.2f}" for m, _ in rows)
        p99 = ", ".join(f"{p:.2f}" for _, p in rows)
        lines.append(f"| {name} | {medians} | {p99} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    results = run(args.calls, args.rounds)
    text = table(results, args.calls)
    print(text)
    if args.write:
        RESULTS.write_text(
            "# Volcano extender: per-call HTTP latency\n\n"
            f"`python -m bench.volcano_http --write` — commit `{commit()}`, {machine()}.\n\n"
            "One kept-alive connection (Python's `http.client`), `predicate` with a real task and node body\n"
            "of the fixture session, answered from the session's plan; rounds alternate the variants.\n\n"
            f"{text}\n\n"
            "Reading it: with Nagle's algorithm on, the reply's body (the second write) waited for the\n"
            "client's delayed ACK of the headers, about 40 ms on Linux, on every call; Volcano calls\n"
            "predicate once per task and node. The load average of the machine was high during the run\n"
            "(other work on 2 cores), so the absolute figures are rough; the ratio is the finding. Go's\n"
            "HTTP client (Volcano's) was not measured here.\n"
        )


if __name__ == "__main__":
    main()
