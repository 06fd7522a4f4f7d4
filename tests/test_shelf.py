"""The model kept for the next request (solver.compile.shelf): a request that would build the same
model reuses it, and gets the answer a freshly built model gives; anything that shapes the model
builds anew; the search's holds never outlive the search that made them."""

from __future__ import annotations

import threading
import time
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, assume, given, settings
from ortools.sat.python import cp_model

import solver.solve
from bench import quality
from solver.compile import shelf
from solver.compile.objective import holds_in
from solver.domain import cancel as cancellation
from solver.domain.cancel import Cancel, Cancelled, cancelling
from solver.domain.model import (
    Allocation,
    ObjectiveTier,
    Packing,
    Policy,
    SolveRequest,
    SolveResult,
    SolveStatus,
)
from solver.domain.validate import validate
from solver.reduce.chain import problem_of, rewrite
from solver.reduce.normalise import Normalised
from solver.solve import solve
from tests import kit


def stages(result: SolveResult) -> list[str]:
    return [t.stage for t in result.timings]


def tier_values(result: SolveResult) -> list[tuple[str, float]]:
    return [(v.name, v.value) for v in result.objectives]


def gangs_on_two_leaves(**policy: object) -> SolveRequest:
    """Two leaves of two 4-GPU nodes; a 2 x 4-GPU gang that must stay in one leaf, two pods."""
    nodes = [kit.node(f"n{i}", kit.SMALL) for i in range(4)]
    inventory = kit.inventory(*nodes, switches=kit.fat_tree(2))
    jobs = [
        kit.job("gang", 4, members=2, priority=2),
        kit.job("pod-a", 2, priority=1),
        kit.job("pod-b", 1),
    ]
    return kit.request(inventory, jobs, **policy)


def test_a_repeated_request_reuses_the_model_and_gets_the_same_answer() -> None:
    request = gangs_on_two_leaves(time_limit_s=5)
    first = solve(request)
    again = solve(request)
    assert "compile" in stages(first)
    assert "compile" not in stages(again)  # the model came off the shelf
    assert again.status == first.status == SolveStatus.OPTIMAL
    assert tier_values(again) == tier_values(first)
    assert [j.placed for j in again.jobs] == [j.placed for j in first.jobs]


def test_a_request_differing_only_in_its_time_limit_and_seed_reuses_the_model() -> None:
    solve(gangs_on_two_leaves(time_limit_s=5))
    assert "compile" not in stages(solve(gangs_on_two_leaves(time_limit_s=3, seed=7)))


def test_anything_that_shapes_the_model_builds_it_anew() -> None:
    request = gangs_on_two_leaves(time_limit_s=5)
    solve(request)
    busy = request.inventory.nodes[0].model_copy(
        update={"allocations": (Allocation(owner="old", gpus=("GPU0",)),)}
    )
    nodes = (busy, *request.inventory.nodes[1:])
    changed_node = request.model_copy(
        update={"inventory": request.inventory.model_copy(update={"nodes": nodes})}
    )
    one_job_more = request.model_copy(update={"jobs": (*request.jobs, kit.job("pod-c", 1))})
    other_objective = gangs_on_two_leaves(
        time_limit_s=5, objective=(ObjectiveTier.PLACED_WORK, ObjectiveTier.PACKING)
    )
    for changed in (changed_node, one_job_more, other_objective):
        result = solve(changed)
        assert "compile" in stages(result)
        assert result.status == SolveStatus.OPTIMAL


def test_a_model_built_beside_a_larger_node_is_not_reused_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packing tier measures a node's free capacity against the inventory's largest node, which
    a node no class holds (here one with too few free GPUs for the job) still sets. Reused without
    it, the model answered with the larger node's packing value: -2934 where a fresh model says
    -3875 (found by tests/test_single_step.py's differential test of the hook's requests)."""
    monkeypatch.setattr(solver.solve, "enumerable", lambda _: False)  # one pod: the model's way
    pod = kit.job("pod", 3)
    node = kit.node("n0", kit.DISTANCE_TREE, leaf="", used_gpus=[1])
    larger = kit.node("n1", kit.HGX, leaf="", used_gpus=range(7))  # 1 GPU free: no class of its own
    beside = kit.request([node, larger], [pod], packing=Packing.BINPACK, workers=1)
    alone = kit.request([node], [pod], packing=Packing.BINPACK, workers=1)
    shelf.clear()
    fresh = tier_values(solve(alone))
    shelf.clear()
    assert tier_values(solve(beside)) != fresh  # the larger node does change the packing values
    after = solve(alone)
    assert "compile" in stages(after)
    assert tier_values(after) == fresh


def test_a_kept_model_holds_no_tier_at_a_value() -> None:
    # The search holds each settled tier at its value before the next; kept with a hold, the next
    # request could not place less of that tier even where it must.
    request = gangs_on_two_leaves(time_limit_s=5)
    solve(request)
    compiled = shelf.take(*_problem_and_policy(request))
    assert compiled is not None
    held = holds_in(compiled.model)
    assert held >= 1  # the search did hold tiers in this model
    assert len(compiled.model.proto.constraints) == compiled.constraints + held
    # With every hold let go, the first tier can be driven to its least value again.
    first = compiled.tiers[0]
    model = compiled.model
    model.minimize(first.expr)
    solver = cp_model.CpSolver()
    assert solver.solve(model) == cp_model.OPTIMAL
    assert solver.objective_value == 0
    assert not compiled.model.proto.has_solution_hint()


def test_requests_in_turn_do_not_grow_the_model() -> None:
    request = gangs_on_two_leaves(time_limit_s=5)
    for _ in range(4):
        solve(request)
    compiled = shelf.take(*_problem_and_policy(request))
    assert compiled is not None
    assert len(compiled.model.proto.constraints) <= compiled.constraints + len(compiled.tiers)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.small_problems())
def test_a_reused_model_answers_as_a_fresh_one(req: SolveRequest) -> None:
    assume(not validate(req))
    shelf.clear()
    fresh = solve(req)
    reused = solve(req)  # raises VerificationFailed if the verifier refuses the answer
    if "compile" in stages(fresh):
        assert "compile" not in stages(reused)
    assert reused.status == fresh.status
    assert tier_values(reused) == tier_values(fresh)
    assert kit.placed_work(reused) == kit.best_placed_work(req)


def _problem_and_policy(request: SolveRequest) -> tuple[Normalised, Policy]:
    """The normalised problem ``solve`` builds for ``request``, to look the shelf up with."""
    request = rewrite(request)
    problem = problem_of(request)
    return problem, request.policy


# --------------------------------------------------------------------------- a build left behind


def slow_compile(delay_s: float):
    """compile_model after ``delay_s`` of waiting that asks the cancellation token as compile does."""
    real = solver.solve.compile_model

    def build(problem, policy):
        for _ in cancellation.checked(range(int(delay_s * 100))):
            time.sleep(0.01)
        return real(problem, policy)

    return build


def test_a_build_cut_for_time_goes_on_and_the_next_request_reuses_it() -> None:
    """Loaded, a 16,384-node compile was cut on every call and each was answered by the greedy:
    the model was never built. Now the cut call is answered in time as before, the build goes on
    behind it, and the next equal request searches that model."""
    req = quality.request(1024, 0.5, 200, seed=1, time_limit_s=2.0)
    solve(req)  # the per-node caches filled
    shelf.clear()
    with patch("solver.solve.compile_model", slow_compile(2.5)):
        started = time.perf_counter()
        cut = solve(req)
        assert time.perf_counter() - started <= 2.0 + 0.5
        assert shelf.wait_behind(30.0)
    assert cut.plan_source == "unsearched:first-fit"
    again = solve(req)
    assert "compile" not in stages(again)  # the model built behind the cut call
    assert not again.plan_source.startswith("unsearched")


def test_a_cancelled_call_stops_its_build() -> None:
    req = quality.request(1024, 0.5, 200, seed=1, time_limit_s=2.0)
    solve(req)
    shelf.clear()
    token = Cancel()
    threading.Timer(0.5, token.trip, args=("the caller went away",)).start()
    with patch("solver.solve.compile_model", slow_compile(2.5)), cancelling(token):
        with pytest.raises(Cancelled):
            solve(req)
        assert shelf.wait_behind(5.0)
    assert shelf.take(*_problem_and_policy(req)) is None  # nothing was built for a caller gone


def test_a_kept_model_whose_first_plan_cannot_answer_in_time_stays_on_the_shelf() -> None:
    """A warm 2 s call at 16,384 nodes took the kept model, and its floor and answer ran 2 ms past
    the deadline: with too little time even for a built model's first plan, the greedy answers and
    the model waits on the shelf for a longer call."""
    req = quality.request(1024, 0.5, 200, seed=1, time_limit_s=5.0)
    solve(req)  # built, and kept
    short = req.model_copy(update={"policy": req.policy.model_copy(update={"time_limit_s": 2.0})})
    with patch("solver.compile.cost.Estimate.fits_built", lambda self, left_s: False):
        answered = solve(short)
    assert answered.plan_source.startswith("unsearched")
    assert "was built already" in next(j.reason.message for j in answered.jobs if not j.placed)
    assert "compile" not in stages(solve(req))  # still on the shelf
