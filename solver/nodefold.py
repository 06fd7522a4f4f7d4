"""Per-node values over an inventory, kept from one request to the next.

A scheduler asks about nearly the same inventory again and again: since its last request one node
took a pod, and the other thousand are the same objects (the wire layer hands back the same ``Node``
for an unchanged node, and so does any caller that keeps its inventory). Validation and the metrics
each need a value per node; a :class:`NodeFold` remembers each node object of the last inventory it
saw with its value, and computes a value again only for a node object it has not seen. A request's
per-node work becomes proportional to what changed, not to the cluster — also when the request holds
a different subset of the nodes each time (a scheduler's filter stage passes the nodes a pod fits).

The values must depend on nothing but the node: anything else a value depends on (a workload
profile, say) belongs in the key of :func:`fold_for`, and a node's position in the request is the
caller's to add.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from solver.model import Node

T = TypeVar("T")


class NodeFold(Generic[T]):
    """``value(node)`` for every node of an inventory, computed only for node objects not in the
    inventory before."""

    def __init__(self, value: Callable[[Node], T]) -> None:
        self._value = value
        # One tuple, replaced whole: concurrent callers see an old or a new state, never a mix.
        # The nodes are held with their values, which keeps comparisons by identity sound.
        self._last: tuple[Sequence[Node], list[T]] = ((), [])

    def __call__(self, nodes: Sequence[Node]) -> list[T]:
        seen, values = self._last
        if len(seen) == len(nodes):  # the common case: the same nodes, a few replaced in place
            values = list(values)
            stale = [i for i, (before, now) in enumerate(zip(seen, nodes, strict=True)) if before is not now]
        else:
            values, stale = [None] * len(nodes), list(range(len(nodes)))  # type: ignore[list-item]
        if stale:
            known = {id(node): k for k, node in enumerate(seen)} if seen else {}
            last_values = self._last[1]
            for i in stale:
                k = known.get(id(nodes[i]))
                values[i] = last_values[k] if k is not None else self._value(nodes[i])
        self._last = (nodes, values)
        return values


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
