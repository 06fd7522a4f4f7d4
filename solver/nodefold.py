"""Per-node values over an inventory, kept from one request to the next.

A scheduler asks about nearly the same inventory again and again: since its last request one node
took a pod, and the other thousand are the same objects (the wire layer hands back the same ``Node``
for an unchanged node, and so does any caller that keeps its inventory). Validation, the metrics and
the verifier each need a value per node; a :class:`NodeFold` remembers the last inventory it saw and
each node's value, and computes a value again only where the node object at a position changed. A
request's per-node work becomes proportional to what changed, not to the cluster.

The values must depend on nothing but the node and its position: anything else a value depends on
(a workload profile, say) belongs in the key of :func:`fold_for`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from solver.model import Node

T = TypeVar("T")


class NodeFold(Generic[T]):
    """``value(i, node)`` for every node of an inventory, recomputed only where a node changed."""

    def __init__(self, value: Callable[[int, Node], T]) -> None:
        self._value = value
        # One tuple, replaced whole: concurrent callers see an old or a new state, never a mix.
        self._last: tuple[Sequence[Node], list[T]] = ((), [])

    def __call__(self, nodes: Sequence[Node]) -> list[T]:
        seen, values = self._last
        if len(seen) == len(nodes):
            values = list(values)
            for i, (before, now) in enumerate(zip(seen, nodes, strict=True)):
                if before is not now:
                    values[i] = self._value(i, now)
        else:
            values = [self._value(i, node) for i, node in enumerate(nodes)]
        self._last = (nodes, values)  # holding the nodes keeps identity comparisons sound
        return values


_FOLDS: dict[Hashable, NodeFold] = {}


def fold_for(key: Hashable, value: Callable[[int, Node], T]) -> NodeFold[T]:
    """The fold kept under ``key`` (made from ``value`` the first time). Few keys are ever live —
    one per stage and workload profile — so the table is simply emptied if it grows."""
    fold = _FOLDS.get(key)
    if fold is None:
        if len(_FOLDS) >= 256:
            _FOLDS.clear()
        fold = _FOLDS[key] = NodeFold(value)
    return fold
