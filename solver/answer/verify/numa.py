"""NUMA: REQUIRED puts every device of a member on one NUMA node, the one ``numa`` names."""

from __future__ import annotations

from collections.abc import Iterator

from solver.answer.verify.view import NodeView, Placed, devices_of, requirement
from solver.domain.model import (
    Requirement,
    Role,
)


def numa(view: NodeView, role: Role, p: Placed) -> Iterator[str]:
    if requirement(role.member.numa) != Requirement.REQUIRED:
        return
    gpus, nics = devices_of(view, p)
    devices = gpus + nics
    if not devices:
        return  # nothing to align
    numas = {d.numa for d in devices}
    if len(numas) != 1 or None in numas:
        where = ", ".join(f"{d.name}@{'unknown' if d.numa is None else d.numa}" for d in devices)
        yield f"{p.who}: NUMA is REQUIRED but its devices are not on one NUMA node ({where})"
    elif p.member.numa not in numas:
        yield f"{p.who}: numa is {p.member.numa} but its devices are on NUMA node {next(iter(numas))}"
