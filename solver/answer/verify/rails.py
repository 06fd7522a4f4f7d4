"""Rails: in a REQUIRED rail-aligned job, all members of a role have NICs on the same rails."""

from __future__ import annotations

from collections.abc import Iterator

from solver.domain.model import (
    Job,
    MemberPlacement,
    Node,
)


def rails_aligned(nodes: dict[str, Node], job: Job, members: list[MemberPlacement]) -> Iterator[str]:
    """Every member of a role has its NICs on the same rails (and every one of them on a rail)."""
    first: dict[str, tuple[frozenset, MemberPlacement]] = {}
    for m in members:
        nics = [nic for nic in nodes[m.node].nics if nic.name in m.nics]
        if any(nic.rail is None for nic in nics):
            yield f"job {job.id} role {m.role} member {m.index}: a NIC on no rail in a rail-aligned job"
            continue
        rails = frozenset(nic.rail for nic in nics)
        seen = first.setdefault(m.role, (rails, m))
        if seen[0] != rails:
            yield (
                f"job {job.id} role {m.role}: member {m.index} uses rails {sorted(rails)}, "
                f"member {seen[1].index} rails {sorted(seen[0])}: the job is rail-aligned"
            )
