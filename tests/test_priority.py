"""Priority in the placed-work tiers: STRICT by default (a lower-priority job never takes capacity a
higher-priority job could have had, as a scheduler's queue behaves), WEIGHTED on request."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, assume, given, settings
from ortools.sat.python import cp_model

from solver.compile import Compiled, Tier, compile_model
from solver.compile.objective import is_placed_work
from solver.domain.model import ObjectiveTier, Policy, PriorityMode, ReasonCode, SolveStatus, TierValue
from solver.domain.validate import validate
from solver.reduce.chain import problem_of, rewrite
from solver.search import tiers
from solver.search.floor import portfolio
from solver.search.tiers import TierOutcome
from solver.service.wire import request_from_dict
from solver.solve import solve
from tests import kit


def trade_off(**policy: object):
    # 3 free GPUs: the priority-1 pod (1 GPU, weight 2) and the priority-0 pod (3 GPUs, weight 3)
    # cannot both have them.
    node = kit.node("n0", kit.SMALL, used_gpus=(0,))
    return kit.request([node], [kit.job("high", 1, priority=1), kit.job("low", 3, priority=0)], **policy)


def placed(result) -> set[str]:
    return {jr.job_id for jr in result.jobs if jr.placed}


def test_strict_priority_is_the_default_and_never_trades_a_higher_priority_gpu_away() -> None:
    result = solve(trade_off())
    assert placed(result) == {"high"}
    names = [v.name for v in result.objectives][:2]
    assert names == ["placed_work.priority_1", "placed_work.priority_0"]
    assert kit.placed_work(result) == (1000, 0) and result.status == SolveStatus.OPTIMAL
    low = next(jr for jr in result.jobs if jr.job_id == "low")
    assert low.reason.code == ReasonCode.OUTPRIORITISED
    assert "jobs of higher priority (high) took the room" in low.reason.message


def test_weighted_priority_places_more_lower_priority_work_when_it_weighs_more() -> None:
    result = solve(trade_off(priority_mode=PriorityMode.WEIGHTED))
    assert placed(result) == {"low"}
    assert result.objectives[0].name == "placed_work" and kit.placed_work(result) == (3000,)
    high = next(jr for jr in result.jobs if jr.job_id == "high")
    assert "the batch's other jobs (low) are worth more under the objective" in high.reason.message


def test_one_priority_level_has_one_placed_work_tier_in_either_mode() -> None:
    for mode in PriorityMode:
        req = kit.request([kit.node("n0", kit.SMALL)], [kit.job("a", 1), kit.job("b", 2)], priority_mode=mode)
        assert [v.name for v in solve(req).objectives][:2] == ["placed_work", "placed_work.jobs"]


def test_the_mode_is_read_from_the_wire_by_its_short_name() -> None:
    data = {
        "inventory": {"nodes": [{"name": "n0", "gpus": [{"id": "GPU0"}]}]},
        "jobs": [{"id": "a", "roles": [{"name": "w", "replicas": 1, "member": {"gpus": 1}}]}],
        "policy": {"priority_mode": "WEIGHTED"},
    }
    assert request_from_dict(data, "req.json").policy.priority_mode == PriorityMode.WEIGHTED


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.small_problems())
def test_weighted_batches_are_optimal_against_brute_force(req) -> None:
    req = req.model_copy(
        update={"policy": req.policy.model_copy(update={"priority_mode": PriorityMode.WEIGHTED})}
    )
    assume(not validate(req))
    result = solve(req)
    assert result.status == SolveStatus.OPTIMAL
    assert kit.placed_work(result) == kit.best_placed_work(req)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.small_problems())
def test_priority_levels_searched_as_one_block_stay_optimal_level_by_level(req) -> None:
    # Big models search a STRICT batch's levels as one lexicographic sum (solver.search.tiers.steps);
    # small ones are merged whole. With the merge off, small batches take the big models' path.
    assume(not validate(req))
    saved = tiers.MERGE_MAX_VARIABLES
    tiers.MERGE_MAX_VARIABLES = -1
    try:
        result = solve(req)
    finally:
        tiers.MERGE_MAX_VARIABLES = saved
    assert kit.placed_work(result) == kit.best_placed_work(req)
    levels = [v for v in result.objectives if is_placed_work(v.name)]
    assert all(v.optimal and v.bound == v.value for v in levels)


def test_a_block_not_proven_bounds_its_first_level_by_what_the_merged_bound_leaves() -> None:
    model = cp_model.CpModel()
    a, b = model.new_int_var(0, 5, "a"), model.new_int_var(0, 7, "b")
    high = Tier.of(ObjectiveTier.PLACED_WORK, "placed_work.priority_1", [(1000, a)], 5000)
    low = Tier.of(ObjectiveTier.PLACED_WORK, "placed_work.priority_0", [(1000, b)], 7000)
    # Only the model and its tiers are read by the search's steps.
    compiled = Compiled(model, {}, {}, {}, {}, {}, {}, None, None, (high, low))  # type: ignore[arg-type]
    (step,) = tiers.steps(compiled)
    merged = step.merged
    assert merged is not None and step.tiers == (high, low)
    assert [c for c, _ in merged.terms] == [8, 1]  # in GPUs (gcd 1000), a unit of `a` outweighs all b
    found = TierOutcome(
        TierValue(tier=ObjectiveTier.PLACED_WORK, value=8 * 2 + 3, bound=8 * 4 + 7, optimal=False),
        {"a": 2, "b": 3},
    )
    first, second = tiers.block_outcomes(step, found)
    assert (first.value.value, first.value.bound) == (2000, 4000)  # 39 // 8 = 4 GPUs at most
    assert (second.value.value, second.value.bound) == (3000, 7000) and not second.value.optimal
    # The first level proven (21 // 8 = 2 GPUs at most, as found): the second is bounded by what
    # the merged bound leaves once the first takes its 2 x 8, 21 - 16 = 5 GPUs, not by its 7.
    found = TierOutcome(found.value.model_copy(update={"bound": 8 * 2 + 5}), found.solution)
    first, second = tiers.block_outcomes(step, found)
    assert (first.value.value, first.value.bound, first.value.optimal) == (2000, 2000, True)
    assert (second.value.value, second.value.bound, second.value.optimal) == (3000, 5000, False)
    # Both proven when the bound leaves the second nothing more than it has.
    found = TierOutcome(found.value.model_copy(update={"bound": 8 * 2 + 3}), found.solution)
    assert all(o.value.optimal for o in tiers.block_outcomes(step, found))


def test_levels_below_the_proven_ones_are_bounded_by_a_search_under_small_weights() -> None:
    model = cp_model.CpModel()
    a, b = model.new_int_var(0, 5, "a"), model.new_int_var(0, 7, "b")
    model.add(a + b <= 6)  # six GPUs between the two levels
    high = Tier.of(ObjectiveTier.PLACED_WORK, "placed_work.priority_1", [(1000, a)], 5000)
    low = Tier.of(ObjectiveTier.PLACED_WORK, "placed_work.priority_0", [(1000, b)], 7000)
    compiled = Compiled(model, {}, {}, {}, {}, {}, {}, None, None, (high, low))  # type: ignore[arg-type]
    (step,) = tiers.steps(compiled)
    plan = {"a": 5, "b": 1}

    def level(tier: Tier, bound: int) -> tiers.TierOutcome:
        value = float(tier.value_of(plan))
        return tiers.outcome_of(tier, value, float(bound), 1.0, plan if tier is high else None)

    # The first level proven, the second open (the block's bound left it all 7 GPUs): under
    # weights 2 and 1 every plan has 2a + b <= 11, so b <= 11 - 2 x 5 = 1 once a keeps its 5.
    parts = [level(high, 5000), level(low, 7000)]
    first, second = tiers.bounded_by_weighted_sum(model, step, parts, Policy(), 5.0, 5.0)
    assert first == parts[0]
    assert (second.value.value, second.value.bound, second.value.optimal) == (1000, 1000, True)
    # The first level open too: nothing is said below it, and it keeps the most it can take alone.
    parts = [level(high, 5000 + 1000), level(low, 7000)]
    first, second = tiers.bounded_by_weighted_sum(model, step, parts, Policy(), 5.0, 5.0)
    assert (first.value.bound, first.value.optimal) == (5000, True)  # 2a <= 11: a <= 5, as found
    assert (second.value.bound, second.value.optimal) == (1000, True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.small_problems())
def test_the_bounds_a_weighted_search_gives_never_fall_below_the_optimum(req) -> None:
    """From any plan (the floor's, or nothing placed) with every level open, the bounds the weighted
    search gives hold: a level's bound is at or above the optimum (brute force) wherever the plan
    matches the optimum on every level above it, and a level called proven is the optimum there."""
    assume(not validate(req))
    problem = problem_of(rewrite(req))
    compiled = compile_model(problem, req.policy)
    block = next((step for step in tiers.steps(compiled) if step.merged is not None), None)
    assume(block is not None)
    best = kit.best_placed_work(req)
    floor_plan = portfolio(problem, compiled, time.perf_counter() + 60)[0].plan
    for plan in (floor_plan, dict.fromkeys(floor_plan, 0)):
        parts = [
            tiers.outcome_of(t, float(t.value_of(plan)), float(t.upper), 0.0, plan if i == 0 else None)
            for i, t in enumerate(block.tiers)
        ]
        bounded = tiers.bounded_by_weighted_sum(compiled.model, block, parts, req.policy, 5.0, 5.0)
        values = [o.value.value for o in bounded]
        for k, outcome in enumerate(bounded):
            if values[:k] != list(best[:k]):
                break
            assert outcome.value.bound >= best[k]
            assert not outcome.value.optimal or outcome.value.value == best[k]
