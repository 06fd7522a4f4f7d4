"""Bounded memory (issue 23, item 4): callers cannot pin memory through the per-node caches.

The soak sends, over gRPC, requests whose nodes each carry 1 MiB of labels and are new every time
(what pinned 1.5 GB before: 12 requests x 40 nodes), to a server whose node caches may hold 16 MiB,
and watches the process's resident memory: after a warm-up it stays flat while 160 MiB more of
new nodes pass through. The loop is bounded (a fixed number of requests).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from solver.domain.model import NicMode, Requirement
from solver.domain.nodefold import NODE_MEMOS, BoundedLru, NodeMemo, node_bytes, set_node_memory_budget
from solver.service import wire
from solver.service.admission import ServiceLimits
from solver.service.server import RunningServer, serve
from tests import kit
from topoplace.v1 import placement_pb2, placement_pb2_grpc

MIB = 1024 * 1024


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def heavy_request(k: int, nodes: int = 4) -> placement_pb2.SolveRequest:
    """``nodes`` nodes never seen before, each with a 1 MiB label value, and one small job."""
    filler = (f"{k:08d}" * (MIB // 8))[:MIB]
    inventory = kit.inventory(
        *(kit.node(f"r{k}n{i}", gpus=2, nics=2, labels={"blob": f"{i}{filler}"}) for i in range(nodes))
    )
    return wire.request_to_proto(
        kit.request(
            inventory, [kit.job("a", 1, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)], time_limit_s=1
        )
    )


@pytest.fixture
def small_cache_server() -> Iterator[RunningServer]:
    running = serve("127.0.0.1", 0, limits=ServiceLimits(node_cache_bytes=16 * MIB))
    yield running
    running.stop(grace_s=None)
    set_node_memory_budget(ServiceLimits().node_cache_bytes)
    wire.NODE_CACHE.resize(ServiceLimits().node_cache_bytes)


@pytest.mark.needs_pipeline
def test_rss_stays_flat_while_large_new_nodes_keep_coming(small_cache_server: RunningServer) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{small_cache_server.port}", options=_big_messages()) as channel:
        stub = placement_pb2_grpc.PlacementStub(channel)
        for k in range(10):  # warm-up: the caches fill to their budget, the allocator its arenas
            assert stub.Solve(heavy_request(k), timeout=60).jobs[0].placed
        warm = rss_mib()
        for k in range(10, 50):  # 40 requests x 4 nodes x 1 MiB = 160 MiB of new nodes
            assert stub.Solve(heavy_request(k), timeout=60).jobs[0].placed
        after = rss_mib()
    assert wire.NODE_CACHE.bytes <= 16 * MIB
    assert NODE_MEMOS.lru.bytes <= 16 * MIB
    # Flat: far less than one request's worth of nodes pinned per request (160 MiB if unbounded).
    print(f"RSS {warm:.0f} -> {after:.0f} MiB")
    assert after - warm < 48, f"RSS grew {after - warm:.0f} MiB (from {warm:.0f} MiB)"


def test_the_node_store_is_bounded_by_bytes_and_drops_the_least_recently_used() -> None:
    lru: BoundedLru[str, int] = BoundedLru(max_bytes=100)
    lru.put("a", 1, 40)
    lru.put("b", 2, 40)
    assert lru.get("a") == 1  # a is now the most recently used
    lru.put("c", 3, 40)  # over 100: b, the least recently used, goes
    assert (lru.get("a"), lru.get("b"), lru.get("c")) == (1, None, 3)
    assert lru.bytes == 80
    lru.put("huge", 4, 101)  # larger than the whole budget: not kept, nothing else dropped
    assert lru.get("huge") is None and len(lru) == 2


def test_node_memos_charge_a_node_once_by_its_size() -> None:
    small, large = kit.node("s"), kit.node("l", labels={"k": "v" * MIB})
    assert node_bytes(large) - node_bytes(small) >= MIB
    first, second = NodeMemo[int]("test.first"), NodeMemo[int]("test.second")
    before = NODE_MEMOS.lru.bytes
    first.put(large, 1)
    second.put(large, 2)
    assert (first.get(large), second.get(large)) == (1, 2)
    assert NODE_MEMOS.lru.bytes - before == node_bytes(large)  # one node, charged once
    assert first.get(kit.node("l", labels={"k": "v" * MIB})) is None  # an equal node is another object


def _big_messages() -> tuple[tuple[str, int], ...]:
    return (("grpc.max_send_message_length", 64 * MIB), ("grpc.max_receive_message_length", 64 * MIB))
