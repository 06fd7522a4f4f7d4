"""Rail alignment: every member of a role uses NICs on the same rails (NIC k of a node on rail k)."""

from __future__ import annotations

from bench.scenario import _chunk, hgx_node
from solver.domain.model import (
    Alignment,
    Distance,
    Inventory,
    Job,
    MemberShape,
    NicMode,
    NicRequest,
    Policy,
    Requirement,
    Role,
    SolveRequest,
)
from solver.solve import solve


def gang(rails: Requirement, members: int = 2, gpus: int = 4) -> Job:
    shape = MemberShape(
        gpus=gpus,
        nics=NicRequest(mode=NicMode.PER_GPU),
        alignment=Alignment(mode=Requirement.REQUIRED, distance=Distance.PIX),
    )
    return Job(id="g", roles=(Role(name="worker", replicas=members, member=shape),), rail_aligned=rails)


def cluster() -> Inventory:
    """``a`` has its lower half busy, ``b`` its upper half, ``c`` is idle: a and b have free halves on
    different rails."""
    nodes = (
        hgx_node("a", "", (_chunk("run-a", [0, 1, 2, 3]),)),
        hgx_node("b", "", (_chunk("run-b", [4, 5, 6, 7]),)),
        hgx_node("c", ""),
    )
    return Inventory(nodes=nodes)


def rails_of(result, inventory: Inventory) -> list[frozenset[int]]:
    nodes = {n.name: n for n in inventory.nodes}
    return [
        frozenset(nic.rail for nic in nodes[m.node].nics if nic.name in m.nics)
        for j in result.jobs
        for m in j.members
    ]


def test_without_the_rule_binpack_mixes_rails() -> None:
    inventory = Inventory(nodes=cluster().nodes[:2])  # the two half-free nodes
    result = solve(SolveRequest(inventory=inventory, jobs=(gang(Requirement.NONE),), policy=Policy()))
    assert {m.node for m in result.jobs[0].members} == {"a", "b"}
    assert len(set(rails_of(result, inventory))) == 2


def test_required_rail_alignment_keeps_every_member_on_one_rail_set() -> None:
    inventory = cluster()
    result = solve(SolveRequest(inventory=inventory, jobs=(gang(Requirement.REQUIRED),), policy=Policy()))
    assert result.jobs[0].placed
    assert len(set(rails_of(result, inventory))) == 1
    assert "c" in {m.node for m in result.jobs[0].members}
    assert len(result.jobs[0].rails) == 4


def test_preferred_rail_alignment_is_met_when_it_can_be_and_reported() -> None:
    inventory = cluster()
    result = solve(SolveRequest(inventory=inventory, jobs=(gang(Requirement.PREFERRED),), policy=Policy()))
    assert len(set(rails_of(result, inventory))) == 1 and result.jobs[0].rules_held
    assert any(v.name == "topology.rails" for v in result.objectives)


def test_required_rail_alignment_that_cannot_hold_leaves_the_gang_out() -> None:
    nodes = (
        hgx_node("a", "", (_chunk("run-a", [0, 1, 2, 3]),)),
        hgx_node("b", "", (_chunk("r", [4, 5, 6, 7]),)),
    )
    inventory = Inventory(nodes=nodes)
    result = solve(SolveRequest(inventory=inventory, jobs=(gang(Requirement.REQUIRED),), policy=Policy()))
    assert not result.jobs[0].placed
    preferred = solve(SolveRequest(inventory=inventory, jobs=(gang(Requirement.PREFERRED),), policy=Policy()))
    assert preferred.jobs[0].placed and not preferred.jobs[0].rules_held
