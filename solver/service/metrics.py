"""Prometheus metrics of the service: what an SRE watches to see it is answering, in time, well.

One :class:`ServiceMetrics` per server, on its own registry (several servers in one process, as in
the tests, do not collide), exposed by :func:`start_metrics_server` on an HTTP port of its own —
never on the gRPC port, so a scrape never waits behind a solve.

Names follow Prometheus conventions (``_seconds``, ``_total``); label values are few and fixed
(method, lane, stage, code, reason), never request ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

# Stages run from a millisecond (a lone pod's validate) to the policy's time limit (the search).
STAGE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
GAP_BUCKETS = (0.0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass
class ServiceMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.stage_seconds = Histogram(
            "topoplace_stage_seconds",
            "Time per stage of a call: queue (waiting for a slot), convert (wire to domain), the "
            "pipeline's own stages (validate, normalise, compile, solve, decode, explain, verify), total.",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "topoplace_queue_depth",
            "Calls waiting for a slot, per method and lane.",
            ["method", "lane"],
            registry=r,
        )
        self.in_flight = Gauge(
            "topoplace_in_flight",
            "Calls holding a slot, per method and lane.",
            ["method", "lane"],
            registry=r,
        )
        self.shed = Counter(
            "topoplace_shed_calls",
            "Calls refused before any work: queue_full, too_large, shutting_down, or expired/cancelled "
            "while queued.",
            ["method", "reason"],
            registry=r,
        )
        self.calls = Counter(
            "topoplace_calls",
            "Calls finished, by method and gRPC status code.",
            ["method", "code"],
            registry=r,
        )
        self.late = Counter(
            "topoplace_late_answers",
            "Answers computed after the caller's deadline (nobody received them).",
            ["method"],
            registry=r,
        )
        self.gap = Histogram(
            "topoplace_gap",
            "Relative gap of the highest objective tier per answer.",
            buckets=GAP_BUCKETS,
            registry=r,
        )
        self.jobs = Counter(
            "topoplace_jobs", "Jobs answered, by outcome: placed or unplaced.", ["outcome"], registry=r
        )


@dataclass(frozen=True)
class MetricsServer:
    server: WSGIServer
    thread: Thread
    port: int

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def start_metrics_server(metrics: ServiceMetrics, host: str, port: int) -> MetricsServer:
    """Serve ``/metrics`` in the Prometheus text format on ``host:port`` (0 = a free port)."""
    server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    return MetricsServer(server=server, thread=thread, port=server.server_port)
