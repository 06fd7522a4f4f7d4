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
dropped is merely recomputed if it comes back. That budget, :data:`NODE_BUDGET`, is shared with the
wire layer's cache of converted nodes, which mostly holds the same node objects: one accountant
(:class:`CacheBudget`) charges each node once across both, so together they stay within the one
setting rather than each within it.
"""

from __future__ import annotations

import itertools
import threading
import weakref
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


class CacheBudget:
    """One byte budget shared by several caches of nodes: the accountant of what they hold together.

    The wire layer's cache of converted nodes and the store of per-node values hold mostly the same
    node objects; with a budget each, the worst case was twice the operator's setting. Here a node
    is charged once (:func:`node_bytes`) however many caches hold it, each entry is charged its own
    extra bytes on top (the wire cache's key), and when the total passes the budget the least
    recently used entry of *all* the caches goes first. A node's charge is released when its last
    entry goes.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.evicted = 0  # bytes released by evictions, ever: the service trims the allocator by it
        # One lock for the budget and every cache in it: an eviction walks them all.
        self.lock = threading.RLock()
        self._caches: weakref.WeakSet[BoundedLru[Any, Any]] = weakref.WeakSet()
        self._nodes: dict[int, list[Any]] = {}  # id(node) → [node, entries holding it, its bytes]
        self._ticks = itertools.count()  # last use of an entry, comparable across the caches

    def join(self, cache: BoundedLru[Any, Any]) -> None:
        with self.lock:
            self._caches.add(cache)

    def tick(self) -> int:
        return next(self._ticks)

    def node_size(self, node: Node | None) -> tuple[int, bool]:
        """``node``'s bytes (0 for none), and whether an entry of the budget holds it already."""
        if node is None:
            return 0, False
        held = self._nodes.get(id(node))
        if held is not None and held[0] is node:
            return held[2], True
        return node_bytes(node), False

    def hold(self, node: Node | None, node_size: int, extra: int) -> None:
        """Charge an entry's ``extra`` bytes, and ``node`` (of ``node_size``, from :meth:`node_size`)
        if no entry holds it yet (lock held)."""
        self.bytes += extra
        if node is None:
            return
        held = self._nodes.get(id(node))
        if held is not None and held[0] is node:
            held[1] += 1
            return
        self._nodes[id(node)] = [node, 1, node_size]
        self.bytes += node_size

    def release(self, node: Node | None, extra: int) -> None:
        """Undo :meth:`hold` (lock held): the node's charge goes with its last entry."""
        self.bytes -= extra
        if node is None:
            return
        held = self._nodes[id(node)]
        held[1] -= 1
        if held[1] == 0:
            del self._nodes[id(node)]
            self.bytes -= held[2]

    def resize(self, max_bytes: int) -> None:
        with self.lock:
            self.max_bytes = max_bytes
            self.shrink()

    def shrink(self) -> None:
        """Drop the least recently used entries of all the caches until the total fits (lock held)."""
        before = self.bytes
        while self.bytes > self.max_bytes:
            oldest = min(
                (cache for cache in self._caches if len(cache)), key=lambda c: c.oldest_tick(), default=None
            )
            if oldest is None:
                break
            oldest.pop_oldest()
        self.evicted += before - self.bytes


class BoundedLru(Generic[K, V]):
    """A least-recently-used map bounded by bytes (not its count), on a :class:`CacheBudget` of its
    own or shared with other caches; safe for the service's concurrent solves.

    Each entry is charged its ``size`` plus, once per node object in the budget, the ``node`` it
    holds. ``bytes`` is what this cache's entries are charged as if it were alone (shared nodes
    counted in each cache); the budget's ``bytes`` counts them once and is what is bounded.
    """

    def __init__(self, max_bytes: int | None = None, *, budget: CacheBudget | None = None) -> None:
        if budget is None:
            budget = CacheBudget(max_bytes if max_bytes is not None else DEFAULT_NODE_MEMORY_BYTES)
        self.budget = budget
        self.bytes = 0
        # key → [value, size, node, last use, the node's bytes]
        self._entries: OrderedDict[K, list[Any]] = OrderedDict()
        self._lock = budget.lock
        budget.join(self)

    @property
    def max_bytes(self) -> int:
        return self.budget.max_bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            hit[3] = self.budget.tick()
            return hit[0]

    def put(self, key: K, value: V, size: int, node: Node | None = None) -> V:
        """Keep ``value`` under ``key``, charged ``size`` bytes and ``node`` (once in the budget);
        the least recently used entries of the budget's caches go while the total is over it. An
        entry that alone would pass the budget is not kept at all."""
        with self._lock:
            self._drop(key)
            budget = self.budget
            node_size, held = budget.node_size(node)
            if size + (0 if held else node_size) > budget.max_bytes:
                return value
            self._entries[key] = [value, size, node, budget.tick(), node_size]
            budget.hold(node, node_size, size)
            self.bytes += size + node_size
            budget.shrink()
        return value

    def resize(self, max_bytes: int) -> None:
        """Set the budget (shared: every cache in it)."""
        self.budget.resize(max_bytes)

    def clear(self) -> None:
        with self._lock:
            for key in list(self._entries):
                self._drop(key)

    def oldest_tick(self) -> int:
        return next(iter(self._entries.values()))[3]

    def pop_oldest(self) -> None:
        self._drop(next(iter(self._entries)))

    def _drop(self, key: K) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        _, size, node, _, node_size = entry
        self.budget.release(node, size)
        self.bytes -= size + node_size


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

    def __init__(self, budget: CacheBudget) -> None:
        self.lru: BoundedLru[int, tuple[Node, dict[Hashable, Any]]] = BoundedLru(budget=budget)

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
        self.lru.put(id(node), (node, {memo: value}), 0, node=node)  # charged: the node alone
        return value


NODE_BUDGET = CacheBudget(DEFAULT_NODE_MEMORY_BYTES)
"""The one budget of every cache of nodes in the process: this store, and the wire layer's cache of
converted nodes (``solver.service.wire.NODE_CACHE``). ``topoplace serve --node-cache-mib`` sets it."""
NODE_MEMOS = NodeMemos(NODE_BUDGET)
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
    """Bound what every cache of nodes in this process holds together (by :func:`node_bytes`)."""
    NODE_BUDGET.resize(max_bytes)


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
            # The identity test runs over every node without a cancellation check per node (a
            # replay's step replaces one node of 1,500); the values are computed checked, cold
            # seconds at 16,384 nodes (solver.domain.cancel).
            pairs = enumerate(zip(seen, nodes, strict=True))
            replaced = [i for i, (before, now) in pairs if before is not now]
            for i in checked(replaced):
                values[i] = self._of(nodes[i])
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
