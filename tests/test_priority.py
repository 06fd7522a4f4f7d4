"""Priority in the placed-work tiers: STRICT by default (a lower-priority job never takes capacity a
higher-priority job could have had, as a scheduler's queue behaves), WEIGHTED on request."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings

from solver.domain.model import PriorityMode, SolveStatus
from solver.domain.validate import validate
from solver.service.wire import request_from_dict
from solver.solve import solve
from tests.solver_cases import best_placed_work, job, placed_work, request, server
from tests.test_solve import small_problems


def trade_off(**policy: object):
    # 3 free GPUs: the priority-1 pod (1 GPU, weight 2) and the priority-0 pod (3 GPUs, weight 3)
    # cannot both have them.
    node = server("n0", used_gpus=(0,))
    return request([node], [job("high", 1, priority=1), job("low", 3, priority=0)], **policy)


def placed(result) -> set[str]:
    return {jr.job_id for jr in result.jobs if jr.placed}


def test_strict_priority_is_the_default_and_never_trades_a_higher_priority_gpu_away() -> None:
    result = solve(trade_off())
    assert placed(result) == {"high"}
    names = [v.name for v in result.objectives][:2]
    assert names == ["placed_work.priority_1", "placed_work.priority_0"]
    assert placed_work(result) == (1000, 0) and result.status == SolveStatus.OPTIMAL


def test_weighted_priority_places_more_lower_priority_work_when_it_weighs_more() -> None:
    result = solve(trade_off(priority_mode=PriorityMode.WEIGHTED))
    assert placed(result) == {"low"}
    assert result.objectives[0].name == "placed_work" and placed_work(result) == (3000,)


def test_one_priority_level_has_one_placed_work_tier_in_either_mode() -> None:
    for mode in PriorityMode:
        req = request([server("n0")], [job("a", 1), job("b", 2)], priority_mode=mode)
        assert [v.name for v in solve(req).objectives][:2] == ["placed_work", "placed_work.jobs"]


def test_the_mode_is_read_from_the_wire_by_its_short_name() -> None:
    data = {
        "inventory": {"nodes": [{"name": "n0", "gpus": [{"id": "GPU0"}]}]},
        "jobs": [{"id": "a", "roles": [{"name": "w", "replicas": 1, "member": {"gpus": 1}}]}],
        "policy": {"priority_mode": "WEIGHTED"},
    }
    assert request_from_dict(data, "req.json").policy.priority_mode == PriorityMode.WEIGHTED


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_weighted_batches_are_optimal_against_brute_force(req) -> None:
    req = req.model_copy(
        update={"policy": req.policy.model_copy(update={"priority_mode": PriorityMode.WEIGHTED})}
    )
    assume(not validate(req))
    result = solve(req)
    assert result.status == SolveStatus.OPTIMAL
    assert placed_work(result) == best_placed_work(req)
