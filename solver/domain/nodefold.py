"""Per-node values over an inventory, kept from one request to the next.

A scheduler asks about nearly the same inventory again and again: since its last request one node
took a pod, and the other thousand are the same objects (the wire layer hands back the same ``Node``
for an unchanged node, and so does any caller that keeps its inventory). Validation and the metrics
each need a value per node; a :class:`NodeFold` remembers the node objects it has seen with their
values, and computes a value only for a node object it has not seen. A request's
per-node work becomes proportional to what changed, not to the cluster — also when the request holds
a different subset of the nodes each time (a scheduler's filter stage passes the nodes a pod fits).

The values must depend on nothing but the node: anything else a value depends on (a workload
profile, say) belongs in the key of :func:`fold_for`, and a node's position in the request is the
caller's to add.

Memory is bounded in bytes, not entries (issue 23: 12 requests of 40 nodes with 1 MiB of labels
each pinned 1.5 GB under a 65,536-entry cap). Every per-node memo of the pipeline keeps its values
in one store, :data:`NODE_MEMOS`, whose entries are nodes — each node charged once, by an estimate
of its size (:func:`node_bytes`), whichever memos hold values for it — and which drops the least
recently used nodes once the estimate passes its budget (:func:`set_node_memory_budget`). A node
dropped is merely recomputed if it comes back.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from solver.domain.cancel import checked
from solver.domain.model import Node

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# What a store of per-node values may hold by default, by node_bytes: an HGX node (8 GPUs, 8 NICs,
# 28 NVLink pairs) is about 45 KB, so a 16,384-node inventory (740 MB) stays cached whole — a store
# smaller than the scheduler's inventory would recompute every node on every request.
DEFAULT_NODE_MEMORY_BYTES = 1024 * 1024 * 1024
# Per object of a node, in node_bytes: what CPython and pydantic spend on one small model instance
# (its __dict__, its fields-set, the object), measured with tracemalloc: about 47 KB per HGX node.
OBJECT_BYTES = 800


class BoundedLru(Generic[K, V]):
    """A least-recently-used map bounded by the bytes its entries are charged (not their count);
    safe for the service's concurrent solves."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            return hit[0]

    def put(self, key: K, value: V, size: int) -> V:
        """Keep ``value`` under ``key``, charged ``size`` bytes; the oldest entries go while the
        total is over budget (an entry larger than the whole budget is not kept at all)."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if size > self.max_bytes:
                return value
            self._entries[key] = (value, size)
            self.bytes += size
            self._shrink()
        return value

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            self._shrink()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0

    def _shrink(self) -> None:
        while self.bytes > self.max_bytes and self._entries:
            _, (_, size) = self._entries.popitem(last=False)
            self.bytes -= size


def node_bytes(node: Node) -> int:
    """An estimate of the memory ``node`` holds: its strings (names, labels — the part a caller can
    make huge) and a fixed cost per object. Cheap next to any per-node value worth memoising."""
    total = OBJECT_BYTES + len(node.name) + len(node.leaf) + len(node.nvlink_domain)
    total += sum(len(k) + len(v) + OBJECT_BYTES // 2 for k, v in node.labels.items())
    for gpu in node.gpus:
        total += OBJECT_BYTES + len(gpu.id) + len(gpu.uuid) + len(gpu.model) + len(gpu.pcie_switch)
    for nic in node.nics:
        total += OBJECT_BYTES + len(nic.name) + len(nic.pcie_switch)
    for switch in node.pcie_switches:
        total += OBJECT_BYTES + len(switch.id) + len(switch.parent)
    total += OBJECT_BYTES * (len(node.nvlinks) + len(node.numa_nodes))
    for a in node.allocations:
        total += OBJECT_BYTES + len(a.owner) + sum(map(len, a.gpus)) + sum(map(len, a.nics))
        total += sum(len(k) + len(v) for k, v in a.labels.items()) + OBJECT_BYTES * len(a.gpu_shares)
    return total


class NodeMemos:
    """Values of several memos per node *object*, in one byte-bounded LRU of nodes. Holding the
    node keeps its ``id`` from being reused while its values are kept."""

    def __init__(self, max_bytes: int = DEFAULT_NODE_MEMORY_BYTES) -> None:
        self.lru: BoundedLru[int, tuple[Node, dict[Hashable, Any]]] = BoundedLru(max_bytes)

    def get(self, memo: Hashable, node: Node) -> Any | None:
        hit = self.lru.get(id(node))
        if hit is None or hit[0] is not node:
            return None
        return hit[1].get(memo)

    def put(self, memo: Hashable, node: Node, value: V) -> V:
        hit = self.lru.get(id(node))
        if hit is not None and hit[0] is node:
            hit[1][memo] = value  # the node is charged already
            return value
        self.lru.put(id(node), (node, {memo: value}), node_bytes(node))
        return value


NODE_MEMOS = NodeMemos()
_FOLD_NUMBERS = itertools.count()  # a memo name per fold, never reused (ids of dropped folds are)
"""The store of every per-node memo in the process (validation, normalisation, metrics, verify)."""


class NodeMemo(Generic[V]):
    """One memo's view of :data:`NODE_MEMOS`: ``get(node)`` / ``put(node, value)`` by node object."""

    def __init__(self, name: Hashable) -> None:
        self.name = name

    def get(self, node: Node) -> V | None:
        return NODE_MEMOS.get(self.name, node)

    def put(self, node: Node, value: V) -> V:
        return NODE_MEMOS.put(self.name, node, value)


def set_node_memory_budget(max_bytes: int) -> None:
    """Bound what per-node memos hold (by :func:`node_bytes`) in this process."""
    NODE_MEMOS.lru.resize(max_bytes)


class NodeFold(Generic[T]):
    """``value(node)`` for every node of an inventory, computed once per node object."""

    def __init__(self, value: Callable[[Node], T]) -> None:
        self._value = value
        # One tuple, replaced whole: concurrent callers see an old or a new state, never a mix.
        self._last: tuple[Sequence[Node], list[T]] = ((), [])
        # Every node object seen, with its value, in the process's byte-bounded store of nodes.
        self._memo: NodeMemo[tuple[T]] = NodeMemo(("fold", next(_FOLD_NUMBERS)))

    def __call__(self, nodes: Sequence[Node]) -> list[T]:
        seen, values = self._last
        if len(seen) == len(nodes):  # the same nodes as last time, a few replaced in place
            values = list(values)
            # checked: a fold walks the whole inventory, cold seconds at 16,384 nodes (solver.domain.cancel)
            for i, (before, now) in enumerate(checked(zip(seen, nodes, strict=True))):
                if before is not now:
                    values[i] = self._of(now)
        else:  # another subset (a filter stage's): each node by its identity
            values = [self._of(node) for node in checked(nodes)]
        self._last = (nodes, values)
        return values

    def _of(self, node: Node) -> T:
        hit = self._memo.get(node)
        if hit is None:  # boxed: a value may itself be None
            hit = self._memo.put(node, (self._value(node),))
        return hit[0]


_FOLDS: dict[Hashable, NodeFold] = {}


def fold_for(key: Hashable, value: Callable[[Node], T]) -> NodeFold[T]:
    """The fold kept under ``key`` (made from ``value`` the first time). Few keys are ever live —
    one per stage and workload profile — so the table is simply emptied if it grows."""
    fold = _FOLDS.get(key)
    if fold is None:
        if len(_FOLDS) >= 256:
            _FOLDS.clear()
        fold = _FOLDS[key] = NodeFold(value)
    return fold
