"""Prometheus metrics of the service: what an SRE watches to see it is answering, in time, well.

One :class:`ServiceMetrics` per server, on its own registry (several servers in one process, as in
the tests, do not collide), exposed by :func:`start_metrics_server` on an HTTP port of its own —
never on the gRPC port, so a scrape never waits behind a solve.

Names follow Prometheus conventions (``_seconds``, ``_total``); label values are few and fixed
(method, lane, stage, code, reason), never request ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from solver.domain.nodefold import NODE_BUDGET

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
        self.serving = Gauge(
            "topoplace_serving",
            "1 while the server admits calls; 0 from the start of a stop (health NOT_SERVING).",
            registry=r,
        )
        self.cancelled = Counter(
            "topoplace_cancelled_calls",
            "Admitted calls whose work was stopped by their cancel token, by why: deadline (the "
            "caller's passed), caller (it cancelled or went away), stopping (the server stopping).",
            ["method", "reason"],
            registry=r,
        )
        self.node_cache_bytes = Gauge(
            "topoplace_node_cache_bytes",
            "What the caches of nodes (per-node values, converted wire nodes) hold, by node size.",
            registry=r,
        )
        self.node_cache_bytes.set_function(lambda: NODE_BUDGET.bytes)
        self.node_cache_budget = Gauge(
            "topoplace_node_cache_budget_bytes", "Their one budget (--node-cache-mib).", registry=r
        )
        self.node_cache_budget.set_function(lambda: NODE_BUDGET.max_bytes)
        r.register(
            _CounterOf(
                "topoplace_node_cache_evicted_bytes",
                "Bytes the caches of nodes evicted.",
                lambda: {(): NODE_BUDGET.evicted},
            )
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

    def count_tls_reloads(self, reloads: Callable[[], int], failures: Callable[[], int]) -> None:
        """``topoplace_tls_reloads_total{outcome}``: certificate files re-read, or failing to be."""
        self.registry.register(
            _CounterOf(
                "topoplace_tls_reloads",
                "Certificate files re-read after a change (ok), or found unreadable (failed).",
                lambda: {("ok",): reloads(), ("failed",): failures()},
                ("outcome",),
            )
        )


class _CounterOf(Collector):
    """A counter whose values something else keeps (the cache budget, the certificate files): read
    at scrape time, so the hot path keeps no second count."""

    def __init__(
        self,
        name: str,
        documentation: str,
        values: Callable[[], dict[tuple[str, ...], float]],
        labels: tuple[str, ...] = (),
    ) -> None:
        self.name, self.documentation, self.values, self.labels = name, documentation, values, labels

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=list(self.labels))
        for label_values, value in self.values().items():
            family.add_metric(list(label_values), value)
        yield family


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
