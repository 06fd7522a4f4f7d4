"""Node capacity: per node, the members' CPU and memory fit what the allocations leave free (a node
with 0 CPU or memory does not track it).
"""

from __future__ import annotations

from collections.abc import Iterator

from solver.answer.verify.view import NodeView, Placed
from solver.domain.cancel import checked


def node_capacity(nodes: dict[str, NodeView], placed: list[Placed]) -> Iterator[str]:
    """Per node, the new members' CPU and memory fit what the existing allocations leave free."""
    on_node: dict[str, list[Placed]] = {}
    for p in placed:
        if p.role is not None and p.member.node in nodes:
            on_node.setdefault(p.member.node, []).append(p)
    for name, members in checked(on_node.items()):
        view = nodes[name]
        jobs = ", ".join(dict.fromkeys(p.job.id for p in members))
        for unit, free, ask in (
            ("milli-CPU", view.cpu_free, sum(p.role.member.cpu_milli for p in members if p.role)),
            ("MiB of memory", view.memory_free, sum(p.role.member.memory_mib for p in members if p.role)),
        ):
            if free is not None and ask > free:
                yield f"node {name}: members of job {jobs} ask for {ask} {unit} but only {free} are free"
