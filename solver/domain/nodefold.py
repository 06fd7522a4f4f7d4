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
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from solver.domain.model import Node

T = TypeVar("T")


class NodeFold(Generic[T]):
    """``value(node)`` for every node of an inventory, computed once per node object."""

    def __init__(self, value: Callable[[Node], T]) -> None:
        self._value = value
        # One tuple, replaced whole: concurrent callers see an old or a new state, never a mix.
        self._last: tuple[Sequence[Node], list[T]] = ((), [])
        # Every node object seen, with its value; holding the node keeps its id from being reused.
        self._memo: dict[int, tuple[Node, T]] = {}

    def __call__(self, nodes: Sequence[Node]) -> list[T]:
        seen, values = self._last
        if len(seen) == len(nodes):  # the same nodes as last time, a few replaced in place
            values = list(values)
            for i, (before, now) in enumerate(zip(seen, nodes, strict=True)):
                if before is not now:
                    values[i] = self._of(now)
        else:  # another subset (a filter stage's): each node by its identity
            values = [self._of(node) for node in nodes]
        self._last = (nodes, values)
        return values

    def _of(self, node: Node) -> T:
        hit = self._memo.get(id(node))
        if hit is None or hit[0] is not node:
            if len(self._memo) >= 65_536:  # a long-lived service sees ever new node objects
                self._memo.clear()
            hit = self._memo[id(node)] = (node, self._value(node))
        return hit[1]


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
