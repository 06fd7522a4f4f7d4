"""A gang of one role on distinct nodes answered by enumeration (``solver.search.gang``) as the model
would answer it: the same tier values, a plan the verifier accepts, not placed exactly when the model
places nothing; anything else goes the model's way."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import solver.solve as pipeline
from solver.answer.verify import verify
from solver.domain.model import (
    DEFAULT_TIERS,
    Allocation,
    Distance,
    Locality,
    NicMode,
    ObjectiveTier,
    PriorityMode,
    Requirement,
    Scope,
    SolveRequest,
    SolveResult,
)
from solver.domain.validate import validate
from solver.reduce.chain import rewrite
from solver.search.gang import enumerable
from tests import kit

PLAN = {"slurm/plan": "g"}  # the hook's label: the gang's own, its members apart


def tier_values(result: SolveResult) -> list[tuple[str, float]]:
    return [(v.name, v.value) for v in result.objectives]


def by_model(request: SolveRequest) -> SolveResult:
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(pipeline, "gang_enumerable", lambda _: False)
        return pipeline.solve(request)


@st.composite
def hook_gangs(draw: st.DrawFn) -> SolveRequest:
    """What the Slurm hook asks for ``sbatch -N k`` (session 31), and more: one role of 2-4
    members kept apart by their own label, kept close (PREFERRED, maybe with a tier) or not, a NIC
    per GPU or none, alignment and NVLink rules of any strength, on 2-9 nodes of three kinds under
    a fat tree (a node maybe outside it), partly held — some by work of the gang's own label —
    under binpack, spread or fill, maybe with a preferred node order, priorities strict or weighted."""
    spines = draw(st.integers(1, 2))
    leaves = draw(st.integers(1, 4))
    switches = kit.fat_tree(leaves, spines)
    nodes = []
    for i in range(draw(st.integers(2, 9))):
        hardware = draw(st.sampled_from((kit.HGX, kit.SMALL, kit.DISTANCE_TREE_CROSSED)))
        gpus = hardware.gpus
        own = draw(st.integers(0, 9)) == 0
        nodes.append(
            kit.node(
                f"n{i}",
                hardware,
                leaf=draw(st.sampled_from([*(f"leaf{k}" for k in range(leaves)), "leaf0", ""])),
                nvlink=draw(st.sampled_from(("all", "pairs", "none"))),
                used_gpus=draw(st.lists(st.integers(0, gpus - 1), max_size=gpus - 1, unique=True)),
                used_nics=draw(st.lists(st.integers(0, hardware.nics - 1), max_size=2, unique=True)),
                allocations=(Allocation(owner="same-plan", labels=PLAN),) if own else (),
            )
        )
    rule = st.sampled_from((Requirement.NONE, Requirement.PREFERRED, Requirement.REQUIRED))
    kept = draw(st.sampled_from((None, 0, 1, 2)))
    gang = kit.job(
        "gang",
        draw(st.integers(1, 4)),
        draw(st.integers(2, 4)),
        labels=PLAN,
        away=PLAN,
        scope=Scope.NODE,
        locality=None if kept is None else Locality(mode=Requirement.PREFERRED, highest_tier=kept),
        nics=draw(st.sampled_from((NicMode.NONE, NicMode.PER_GPU))),
        align=draw(rule),
        distance=draw(st.sampled_from((Distance.PIX, Distance.PXB))),
        nvlink=draw(rule),
        priority=draw(st.integers(0, 2)),
    )
    policy = draw(kit.hook_policy([n.name for n in nodes]))
    return kit.request(nodes, [gang], switches, priority_mode=draw(st.sampled_from(PriorityMode)), **policy)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hook_gangs())
def test_the_hooks_gang_is_valued_as_the_model_values_it(request: SolveRequest) -> None:
    """Every tier at the model's value (the model proves its answer optimal on these few nodes),
    the plan verified, its footprint (tier, leaves, rules held) the model's where the values count
    it (the gang kept close); a gang the model
    cannot place now is left to the model path, which says why."""
    assume(not validate(request))
    assert enumerable(rewrite(request))
    model = by_model(request)
    answer = pipeline.solve(request)
    job = request.jobs[0]
    event(
        f"placed {model.jobs[0].placed}, kept close {job.locality.mode.name}, {request.policy.packing.name}"
    )
    if not model.jobs[0].placed:
        assert answer.plan_source != "gang" and not answer.jobs[0].placed
        return
    assert model.status.name == "OPTIMAL" and answer.plan_source == "gang"
    assert tier_values(answer) == tier_values(model)
    placed = answer.jobs[0]
    assert len({m.node for m in placed.members}) == job.roles[0].replicas
    if job.locality.mode == Requirement.PREFERRED:  # then the values count the footprint
        footprint = (placed.leaves_spanned, placed.locality_tier, placed.rules_held)
        assert footprint == (
            model.jobs[0].leaves_spanned,
            model.jobs[0].locality_tier,
            model.jobs[0].rules_held,
        )
    assert verify(request, answer) == ()


def test_the_hooks_gang_goes_to_the_enumerator_and_elsewhere_to_the_model() -> None:
    """Only a gang kept apart by its own label, all or nothing, with no rule of place beyond a
    PREFERRED job locality, under tiers the enumerator values, placed work first."""
    nodes = [kit.node(f"n{i}", leaf=f"leaf{i % 2}") for i in range(4)]
    hook = kit.job("g", 2, 2, labels=PLAN, away=PLAN, locality=Locality(mode=Requirement.PREFERRED))
    assert enumerable(rewrite(kit.request(nodes, [hook], kit.fat_tree(2))))
    others = [
        kit.job("g", 2, 2, labels=PLAN),  # members may share a node
        kit.job("g", 2, 2, labels=PLAN, away={"other": "x"}),  # kept from other work only
        kit.job("g", 2, 2, labels=PLAN, away=PLAN, scope=Scope.PCIE_SWITCH),
        kit.job("g", 2, 2, labels=PLAN, away=PLAN, minimum=1),  # elastic
        kit.job(
            "g", 2, 2, labels=PLAN, away=PLAN, locality=Locality(mode=Requirement.REQUIRED, highest_tier=1)
        ),
        kit.job("g", 2, 2, labels=PLAN, away=PLAN, nvlink_domain=Requirement.PREFERRED),
        kit.job("g", 2, 2, labels=PLAN, away=PLAN, exclusive=True),
    ]
    for job in others:
        assert not enumerable(rewrite(kit.request(nodes, [job], kit.fat_tree(2)))), job
    stability = (*DEFAULT_TIERS, ObjectiveTier.STABILITY)
    assert not enumerable(rewrite(kit.request(nodes, [hook], kit.fat_tree(2), objective=stability)))
    topology_first = (ObjectiveTier.TOPOLOGY, ObjectiveTier.PLACED_WORK)
    assert not enumerable(rewrite(kit.request(nodes, [hook], kit.fat_tree(2), objective=topology_first)))
