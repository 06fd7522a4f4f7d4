"""NVLink: REQUIRED links every GPU pair of a member."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

from solver.answer.verify.view import NodeView, Placed, requirement
from solver.domain.model import (
    Requirement,
    Role,
)


def nvlink(view: NodeView, role: Role, p: Placed) -> Iterator[str]:
    if requirement(role.member.nvlink) != Requirement.REQUIRED:
        return
    for a, b in combinations(dict.fromkeys(p.member.gpus), 2):
        if (a, b) not in view.nvlinks:
            yield f"{p.who}: NVLink is REQUIRED but GPU {a} and GPU {b} are not NVLinked"
