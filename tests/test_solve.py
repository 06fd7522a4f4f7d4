"""The solver, rule by rule on small cases whose optimum is known, then on random ones (hypothesis)
against a brute-force oracle. ``solve`` runs the independent verifier on every answer and raises if
it refuses one, so every test here also checks that the answer is a valid placement."""

from __future__ import annotations

import gc
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, assume, given, settings
from ortools.sat.python import cp_model

import solver.solve
from solver.compile import Model
from solver.domain.model import (
    Allocation,
    Distance,
    NicMode,
    ObjectiveTier,
    Packing,
    ReasonCode,
    Requirement,
    SolveStatus,
)
from solver.domain.validate import validate
from solver.solve import solve
from tests import kit


def placed_ids(result) -> set[str]:
    return {j.job_id for j in result.jobs if j.placed}


def members_of(result, job_id: str):
    return next(j for j in result.jobs if j.job_id == job_id).members


def tier_value(result, tier: ObjectiveTier) -> float:
    return next(v.value for v in result.objectives if v.tier == tier)


# --------------------------------------------------------------------------- one rule at a time


def test_required_alignment_picks_the_nics_on_the_gpus_switch_not_the_same_index() -> None:
    node = kit.node("n1", kit.SMALL, switches=4, gpus=8, nics=8, nic_shift=2)
    result = solve(kit.request([node], [kit.job("a", 2, nics=NicMode.PER_GPU, align=Requirement.REQUIRED)]))
    (member,) = members_of(result, "a")
    by_switch = {g.id: g.pcie_switch for g in node.gpus} | {n.name: n.pcie_switch for n in node.nics}
    assert {by_switch[d] for d in member.gpus} == {by_switch[d] for d in member.nics}
    assert member.aligned
    assert member.gpus != ("GPU0", "GPU1") or member.nics != ("mlx5_0", "mlx5_1")


def test_required_alignment_leaves_the_job_out_when_no_switch_has_a_free_nic() -> None:
    # The free GPUs' switch has its NIC taken: the only free NIC is a PHB away.
    node = kit.node("n1", kit.SMALL, nic_shift=0, used_gpus=(2, 3), used_nics=(0,))
    result = solve(kit.request([node], [kit.job("a", 1, nics=NicMode.PER_GPU, align=Requirement.REQUIRED)]))
    assert placed_ids(result) == set()
    reason = result.jobs[0].reason
    assert reason.code == ReasonCode.NO_NODE_FITS
    # Issue 21: the smallest relaxation is the next distance that fits, not "make it PREFERRED".
    assert reason.relaxation == "allow GPU↔NIC distance SYS instead of PIX"
    assert reason.message.endswith("at SYS one would fit on n1")


def test_required_alignment_at_a_looser_distance_accepts_a_farther_nic() -> None:
    node = kit.node("n1", kit.SMALL, nic_shift=0, used_nics=(0,))
    result = solve(
        kit.request(
            [node], [kit.job("a", 1, nics=NicMode.PER_GPU, align=Requirement.REQUIRED, distance=Distance.PHB)]
        )
    )
    assert placed_ids(result) == {"a"}


def test_preferred_alignment_is_met_when_possible_and_reported_truthfully_when_not() -> None:
    # Free: GPU1 on sw0; GPU2, GPU3 on sw1; both free NICs on sw0. One member can be aligned.
    node = kit.node("n1", kit.SMALL, nics=4, nic_shift=0, used_gpus=(0,), used_nics=(2, 3))
    jobs = [kit.job(x, 1, nics=NicMode.PER_GPU, align=Requirement.PREFERRED) for x in "ab"]
    result = solve(kit.request([node], jobs))
    assert placed_ids(result) == {"a", "b"}
    members = sorted((m for j in result.jobs for m in j.members), key=lambda m: m.aligned)
    assert [m.aligned for m in members] == [False, True]
    assert members[1].gpus == ("GPU1",)
    assert tier_value(result, ObjectiveTier.TOPOLOGY) == 1000  # one aligned GPU, in milli-GPU


def test_gang_is_all_or_nothing() -> None:
    nodes = [kit.node(f"n{i}", kit.SMALL) for i in range(2)]
    result = solve(kit.request(nodes, [kit.job("big", 4, members=3)]))
    assert placed_ids(result) == set()
    assert result.jobs[0].reason.code == ReasonCode.INSUFFICIENT_CAPACITY
    assert "lower min_replicas of worker to 2" in result.jobs[0].reason.relaxation


def test_gang_minimum_places_part_of_an_elastic_job() -> None:
    nodes = [kit.node(f"n{i}", kit.SMALL) for i in range(2)]
    result = solve(kit.request(nodes, [kit.job("elastic", 4, members=3, minimum=2)]))
    assert len(members_of(result, "elastic")) == 2
    assert {m.index for m in members_of(result, "elastic")} == {0, 1}


def test_priority_decides_who_gets_the_only_node() -> None:
    nodes = [kit.node("n1", kit.SMALL)]
    result = solve(kit.request(nodes, [kit.job("low", 4), kit.job("high", 4, priority=5)]))
    assert placed_ids(result) == {"high"}
    low = next(j for j in result.jobs if j.job_id == "low")
    assert low.reason.code == ReasonCode.OUTPRIORITISED


def test_more_gpus_beat_fewer_at_equal_priority() -> None:
    nodes = [kit.node("n1", kit.SMALL)]  # 4 GPUs
    result = solve(kit.request(nodes, [kit.job("three", 3), kit.job("two-pair", 2, members=2)]))
    assert placed_ids(result) == {"two-pair"}


def test_numa_required_keeps_a_member_on_one_numa_node() -> None:
    # Two free GPUs per NUMA node; a 3-GPU member cannot be NUMA-local, a 2-GPU one must be.
    node = kit.node("n1", kit.SMALL)
    result = solve(
        kit.request(
            [node],
            [kit.job("three", 3, numa=Requirement.REQUIRED), kit.job("two", 2, numa=Requirement.REQUIRED)],
        )
    )
    assert placed_ids(result) == {"two"}
    (member,) = members_of(result, "two")
    assert member.numa is not None
    gpu_numa = {g.id: g.numa for g in node.gpus}
    assert {gpu_numa[g] for g in member.gpus} == {member.numa}


def test_nvlink_required_takes_a_linked_pair() -> None:
    node = kit.node("n1", kit.SMALL, nvlink="pairs", used_gpus=(0, 3))
    # Free: GPU1 (linked to GPU0) and GPU2 (linked to GPU3): no free linked pair.
    result = solve(kit.request([node], [kit.job("nv", 2, nvlink=Requirement.REQUIRED)]))
    assert placed_ids(result) == set()
    node = kit.node("n1", kit.SMALL, nvlink="pairs", used_gpus=(0,))
    result = solve(kit.request([node], [kit.job("nv", 2, nvlink=Requirement.REQUIRED)]))
    assert set(members_of(result, "nv")[0].gpus) == {"GPU2", "GPU3"}


def test_binpack_fills_the_partly_used_node_and_spread_takes_the_empty_one() -> None:
    nodes = [kit.node("busy", kit.SMALL, used_gpus=(0, 1, 2)), kit.node("empty", kit.SMALL)]
    packed = solve(kit.request(nodes, [kit.job("one", 1)]))
    assert members_of(packed, "one")[0].node == "busy"
    spread = solve(kit.request(nodes, [kit.job("one", 1)], packing=Packing.SPREAD))
    assert members_of(spread, "one")[0].node == "empty"
    assert packed.metrics.nodes_fully_free_after == 1


def test_existing_allocations_and_unhealthy_devices_are_never_handed_out() -> None:
    node = kit.node("n1", kit.SMALL, used_gpus=(0, 1))
    unhealthy = node.model_copy(
        update={"gpus": tuple(g.model_copy(update={"healthy": g.id != "GPU2"}) for g in node.gpus)}
    )
    result = solve(kit.request([unhealthy], [kit.job("a", 1, members=2, minimum=1)]))
    assert [m.gpus for m in members_of(result, "a")] == [("GPU3",)]


def test_cpu_caps_how_many_members_share_a_node() -> None:
    node = kit.node("n1", kit.SMALL, cpu_milli=10_000)
    result = solve(kit.request([node], [kit.job("a", 1, members=4, minimum=1, cpu_milli=4_000)]))
    assert len(members_of(result, "a")) == 2


def test_node_selector_and_unschedulable_nodes() -> None:
    nodes = [
        kit.node("plain", kit.SMALL),
        kit.node("tagged", kit.SMALL, labels={"pool": "infer"}),
        kit.node("cordoned", kit.SMALL, labels={"pool": "infer"}).model_copy(update={"schedulable": False}),
    ]
    result = solve(kit.request(nodes, [kit.job("a", 1, selector={"pool": "infer"})]))
    assert members_of(result, "a")[0].node == "tagged"


def test_per_member_nics_within_distance() -> None:
    node = kit.node("n1", kit.SMALL, nics=4, nic_shift=0)
    result = solve(
        kit.request(
            [node],
            [
                kit.job(
                    "a",
                    2,
                    nics=NicMode.PER_MEMBER,
                    nic_count=1,
                    align=Requirement.REQUIRED,
                    numa=Requirement.REQUIRED,
                )
            ],
        )
    )
    (member,) = members_of(result, "a")
    assert len(member.nics) == 1 and member.aligned


def test_empty_batch_and_empty_cluster() -> None:
    assert solve(kit.request([kit.node("n1", kit.SMALL)], [])).status == SolveStatus.OPTIMAL
    result = solve(kit.request([], [kit.job("a", 1)]))
    assert result.jobs[0].reason.code == ReasonCode.NO_NODE_FITS


def test_same_request_same_seed_same_placement() -> None:
    nodes = [kit.node(f"n{i}", kit.SMALL, nics=4, used_gpus=(i % 4,)) for i in range(6)]
    jobs = [
        kit.job(f"j{i}", 1 + i % 3, members=1 + i % 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)
        for i in range(6)
    ]
    first = solve(kit.request(nodes, jobs, seed=7))
    second = solve(kit.request(nodes, jobs, seed=7))
    assert first.jobs == second.jobs


def test_result_reports_stages_size_and_status() -> None:
    result = solve(
        kit.request([kit.node("n1", kit.SMALL), kit.node("n2", kit.SMALL)], [kit.job("a", 2, members=2)])
    )
    assert result.status == SolveStatus.OPTIMAL and result.gap == 0
    assert [t.stage for t in result.timings] == [
        "validate",
        "normalise",
        "compile",
        "floor",
        "solve",
        "decode",
        "explain",
        "measures",
        "verify",
    ]
    assert result.model_size.node_classes == 1  # two identical nodes: one class
    assert result.model_size.candidate_nodes == 2


# --------------------------------------------------------------------------- random cases


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.small_problems())
def test_random_batches_are_verified_and_optimal_against_brute_force(req) -> None:
    assume(not validate(req))  # e.g. a member asking more NICs than any node has
    result = solve(req)  # raises VerificationFailed if the verifier refuses the answer
    assert result.status == SolveStatus.OPTIMAL
    assert kit.placed_work(result) == kit.best_placed_work(req)
    for j in result.jobs:
        assert j.placed == bool(j.members)
        if not j.placed:
            assert j.reason is not None and j.reason.message


# --------------------------------------------------------------------------- nodes no member fits


def test_nodes_no_member_fits_stay_out_of_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # n1 has 2 GPUs left of 4, n2 all 4: a 4-GPU member fits only n2, so only n2 is a candidate.
    monkeypatch.setattr(solver.solve, "enumerable", lambda _: False)  # one pod: the model's way
    busy = kit.node("n1", kit.SMALL, nics=0)
    busy = busy.model_copy(update={"allocations": (Allocation(owner="old", gpus=("GPU0", "GPU1")),)})
    free = kit.node("n2", kit.SMALL, nics=0)
    result = solve(kit.request([busy, free], [kit.job("big", 4)]))
    assert result.jobs[0].members[0].node == "n2"
    assert result.model_size.candidate_nodes == 1 and result.model_size.node_classes == 1


def test_a_relaxation_is_found_on_nodes_no_member_fits_as_asked() -> None:
    # The only A100 node is busy and the rest are H100: no node is a candidate for a member asking
    # for an A100, but the reason still names the single rule that would let it in.
    h100 = kit.node("n1", kit.SMALL, switches=1, gpus=2, nics=0)
    a100 = kit.node("n2", kit.SMALL, switches=1, gpus=2, nics=0, model="A100")
    a100 = a100.model_copy(update={"allocations": (Allocation(owner="old", gpus=("GPU0", "GPU1")),)})
    plain = kit.job("a100", 1)
    member = plain.roles[0].member.model_copy(update={"gpu_models": ("A100",)})
    pinned = plain.model_copy(update={"roles": (plain.roles[0].model_copy(update={"member": member}),)})
    result = solve(kit.request([h100, a100], [pinned]))
    assert not result.jobs[0].placed and result.model_size.candidate_nodes == 0
    assert result.jobs[0].reason.relaxation == "accept any GPU model"


def test_a_lone_member_opens_one_configuration_per_node_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(solver.solve, "enumerable", lambda _: False)  # one pod: the model's way
    # A small CPU-only pod fits an 8-GPU, 96-core node dozens of times over; the batch has one, so
    # configurations holding more are never used and are not built (the empty one and one member).
    node = kit.node("n1", kit.SMALL, switches=4, gpus=8, nics=0).model_copy(update={"cpu_milli": 96_000})
    result = solve(kit.request([node], [kit.job("cpu", 0, cpu_milli=1000)]))
    assert result.jobs[0].placed
    assert result.model_size.configurations == 2
    two = solve(kit.request([node], [kit.job("cpu", 0, members=2, cpu_milli=1000)]))
    assert two.model_size.configurations == 3  # none, one, two


def test_models_are_built_without_the_pre_pep8_aliases() -> None:
    # The override of OR-Tools' private hook is live (if a release renames the hook, this says the
    # 0.7 ms a model it saved is back), and the model still solves.
    model = Model()
    assert not hasattr(model, "NewIntVar")
    x = model.new_int_var(0, 3, "x")
    model.maximize(x)
    solver = cp_model.CpSolver()
    assert solver.solve(model) == cp_model.OPTIMAL and solver.value(x) == 3


def test_full_collections_are_rare_while_solves_run_and_as_before_once_none_does() -> None:
    """A full garbage collection walks the whole heap (at 16,384 nodes one took 1.1 s of a 9 s
    solve): solves raise the full-collection threshold and the last one out restores it, nested
    (a sequence's steps are solves too) or not."""
    before = gc.get_threshold()
    seen = []
    real = solver.solve._solve

    def spying(request, deadline_s=None):
        seen.append(gc.get_threshold())
        if request.request_id == "outer":  # a solve inside a solve, as a sequence step is
            solve(request.model_copy(update={"request_id": "inner"}))
            seen.append(gc.get_threshold())
        return real(request, deadline_s=deadline_s)

    req = kit.request([kit.node("n1", kit.SMALL)], [kit.job("a", 1)], request_id="outer")
    with patch.object(solver.solve, "_solve", spying):
        solve(req)
    assert gc.get_threshold() == before
    assert len(seen) == 3
    assert all(t[2] == max(before[2], solver.solve.FULL_COLLECTION_EVERY) for t in seen)


def test_what_is_alive_when_solves_start_is_frozen_while_they_run_unless_the_process_froze_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full collection during a solve walks only what solves made: the heap alive when the first
    solve starts is frozen (a warm 5 s call at 16,384 nodes lost 1.2 s of its floor's time to a full
    collection over earlier calls' caches) and unfrozen by the last one out. A process that freezes
    objects itself (this suite's conftest) turns that off and keeps them as it froze them."""
    frozen_inside: list[int] = []
    real = solver.solve._solve

    def spying(request, deadline_s=None):
        frozen_inside.append(gc.get_freeze_count())
        return real(request, deadline_s=deadline_s)

    req = kit.request([kit.node("n1", kit.SMALL)], [kit.job("a", 1)])
    monkeypatch.setattr(solver.solve, "_solve", spying)
    gc.unfreeze()  # what the suite froze before this module
    try:
        monkeypatch.setattr(solver.solve, "FREEZE_HEAP", True)
        solve(req)
        assert frozen_inside[0] > 0 and gc.get_freeze_count() == 0
        monkeypatch.setattr(solver.solve, "FREEZE_HEAP", False)
        gc.freeze()  # the process's own
        mine = gc.get_freeze_count()
        solve(req)
        # Nothing more frozen, nothing unfrozen (the count drops only as frozen objects are freed).
        assert mine - 100 < frozen_inside[1] <= mine and mine - 100 < gc.get_freeze_count() <= mine
    finally:
        gc.freeze()


def test_entering_a_solve_does_not_walk_the_frozen_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether to freeze is the process's setting, never a count of the frozen objects: asking
    ``gc.get_freeze_count()`` walks every one of them, and with the suite's 2.5 million frozen the
    replay tests' hundreds of solves crawled (session 23)."""

    def walked() -> int:
        raise AssertionError("gc.get_freeze_count walks every frozen object")

    monkeypatch.setattr(solver.solve.gc, "get_freeze_count", walked)
    req = kit.request([kit.node("n1", kit.SMALL)], [kit.job("a", 1)])
    for freeze in (False, True):
        monkeypatch.setattr(solver.solve, "FREEZE_HEAP", freeze)
        try:
            assert solve(req).jobs[0].placed
        finally:
            gc.freeze()  # as the suite's conftest left it
