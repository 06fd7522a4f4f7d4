"""NodeFold: per-node values kept between requests, recomputed only where a node changed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from solver.domain.model import Node
from solver.domain.nodefold import NodeFold


def test_only_node_objects_not_seen_before_are_computed() -> None:
    calls: list[str] = []
    fold = NodeFold(lambda node: calls.append(node.name) or node.cpu_milli)
    nodes = tuple(Node(name=f"n{i}", cpu_milli=i) for i in range(4))
    assert fold(nodes) == [0, 1, 2, 3] and len(calls) == 4
    changed = (*nodes[:2], nodes[2].model_copy(update={"cpu_milli": 7}), nodes[3])
    assert fold(changed) == [0, 1, 7, 3]
    assert calls[4:] == ["n2"]
    # A subset in another order (a filter stage's): the same objects, nothing computed again.
    assert fold((changed[3], changed[0])) == [3, 0] and len(calls) == 5
    assert fold(changed) == [0, 1, 7, 3] and len(calls) == 5  # nor when they are all back


@given(st.lists(st.lists(st.integers(0, 5), max_size=6), min_size=1, max_size=8))
def test_the_values_are_always_those_of_a_fresh_computation(inventories: list[list[int]]) -> None:
    # Odd figures reuse one Node object across requests, even ones are new (equal-looking) objects;
    # the value names the object, so a value kept for another object shows.
    fold = NodeFold(lambda node: id(node))
    pool: dict[int, Node] = {}
    alive: list[tuple[Node, ...]] = []  # no id is reused while the test runs
    for cpus in inventories:
        nodes = tuple(
            pool.setdefault(c, Node(name=f"n{c}", cpu_milli=c)) if c % 2 else Node(name=f"n{c}", cpu_milli=c)
            for c in cpus
        )
        alive.append(nodes)
        assert fold(nodes) == [id(n) for n in nodes]
