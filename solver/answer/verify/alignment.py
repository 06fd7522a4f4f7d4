"""GPU↔NIC alignment: REQUIRED holds (a perfect matching of GPUs to NICs within the asked PCIe
distance), and ``aligned`` tells the truth for PREFERRED and REQUIRED.
"""

from __future__ import annotations

from collections.abc import Iterator

from solver.answer.verify.view import NodeView, Placed, devices_of, requirement
from solver.domain.model import (
    Distance,
    NicMode,
    Requirement,
    Role,
)


def perfect_matching(n_left: int, n_right: int, near: set[tuple[int, int]]) -> bool:
    """Whether every left item can get its own right item it is ``near`` (Kuhn's augmenting paths;
    members have at most a few dozen devices, so the cubic worst case is nothing)."""
    if n_left != n_right:
        return False
    owner: dict[int, int] = {}  # right -> left

    def claim(left: int, seen: set[int]) -> bool:
        for right in range(n_right):
            if (left, right) in near and right not in seen:
                seen.add(right)
                if right not in owner or claim(owner[right], seen):
                    owner[right] = left
                    return True
        return False

    return all(claim(left, set()) for left in range(n_left))


def alignment_holds(view: NodeView, role: Role, p: Placed) -> tuple[bool, str]:
    """Whether the member's GPU↔NIC alignment rule holds, and if not, a clause saying why."""
    shape = role.member
    limit = shape.alignment.distance if shape.alignment.distance != Distance.UNSPECIFIED else Distance.PIX
    gpus, nics = devices_of(view, p)
    near = {
        (g, n) for g, gpu in enumerate(gpus) for n, nic in enumerate(nics) if view.distance(gpu, nic) <= limit
    }
    if shape.nics.mode == NicMode.PER_GPU:
        if perfect_matching(len(gpus), len(nics), near):
            return True, ""
        return False, f"its GPUs cannot each be paired with their own NIC at {limit.name} or closer"
    far = [nic.name for n, nic in enumerate(nics) if not any((g, n) in near for g in range(len(gpus)))]
    if far:
        return False, f"NIC {', '.join(far)} is farther than {limit.name} from every GPU of the member"
    return True, ""


def alignment(view: NodeView, role: Role, p: Placed) -> Iterator[str]:
    mode = requirement(role.member.alignment.mode)
    if mode == Requirement.NONE:
        return
    holds, why = alignment_holds(view, role, p)
    if mode == Requirement.REQUIRED and not holds:
        yield f"{p.who}: alignment is REQUIRED but {why}"
    if p.member.aligned != holds:
        truth = "holds" if holds else f"does not hold ({why})"
        yield f"{p.who}: aligned is {p.member.aligned} but the {mode.name} alignment {truth}"
