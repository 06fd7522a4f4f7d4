"""LARGEST_FIRST batches: one job at a time, highest priority then most GPU work first."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings

import solver.solve
from solver.domain.errors import VerificationFailed
from solver.domain.model import (
    AntiAffinity,
    BatchOrder,
    GpuShare,
    Inventory,
    Job,
    Node,
    ObjectiveTier,
    Scope,
    SolveRequest,
    SolveResult,
    SolveStatus,
)
from solver.domain.validate import validate
from solver.search.sequence import (
    StepPlan,
    arrival_steps,
    candidate_orders,
    held_allocations,
    solve_in_order,
    steps,
)
from solver.solve import solve
from tests import kit

IN_ORDER = {"batch_order": BatchOrder.LARGEST_FIRST}


def one_by_one(req: SolveRequest, order: list[int]) -> dict[str, tuple]:
    """The oracle: each job solved alone, in ``order``, on what the ones before it left."""
    nodes = {n.name: n for n in req.inventory.nodes}
    out: dict[str, tuple] = {}
    for j in order:
        one = req.model_copy(
            update={
                "inventory": Inventory(nodes=tuple(nodes.values()), switches=req.inventory.switches),
                "jobs": (req.jobs[j],),
                "policy": req.policy.model_copy(update={"batch_order": BatchOrder.JOINT}),
            }
        )
        jr = solve(one).jobs[0]
        out[jr.job_id] = tuple((m.node, m.gpus, m.nics, m.gpu_shares) for m in jr.members)
        for name, allocations in held_allocations(req.jobs[j], jr).items():
            node = nodes[name]
            nodes[name] = node.model_copy(update={"allocations": (*node.allocations, *allocations)})
    return out


def placements(result) -> dict[str, tuple]:
    return {
        jr.job_id: tuple((m.node, m.gpus, m.nics, m.gpu_shares) for m in jr.members) for jr in result.jobs
    }


def test_steps_go_by_priority_then_gpu_work_then_batch_order() -> None:
    jobs = [
        kit.job("small", 1),
        kit.job("big", 4),
        kit.job("pair", 2),
        kit.job("urgent", 1, priority=2),
        kit.job("big2", 2, 2),
    ]
    req = kit.request([kit.node("n0", kit.SMALL)], jobs, **IN_ORDER)
    assert steps(req) == [(3,), (1,), (4,), (2,), (0,)]


def test_jobs_bound_by_anti_affinity_are_one_step() -> None:
    # "b" keeps away from jobs labelled team=x; "c" is one. Placed apart, the rule held by the job
    # placed first would be invisible to the one placed later.
    a = kit.job("a", 4)
    rule = AntiAffinity(labels={"team": "x"}, scope=Scope.NODE)
    b = kit.job("b", 1).model_copy(update={"anti_affinity": (rule,)})
    c = kit.job("c", 2).model_copy(update={"labels": {"team": "x"}})
    assert steps(kit.request([kit.node("n0", kit.SMALL)], [a, b, c], **IN_ORDER)) == [(0,), (1, 2)]


def half_busy() -> list[Node]:
    """Two half-busy servers and a free one: 2 + 1 + 4 GPUs free."""
    return [
        kit.node("n0", kit.SMALL, used_gpus=(0, 1)),
        kit.node("n1", kit.SMALL, used_gpus=(0, 1, 2)),
        kit.node("n2", kit.SMALL),
    ]


def two_two_four_one() -> list[Job]:
    """2 + 2 + 4 + 1 GPUs asked, in that order: on :func:`half_busy`, arrival order leaves the 4-GPU
    job out; largest first, one 2-GPU job."""
    return [kit.job("two", 2), kit.job("two-b", 2), kit.job("four", 4), kit.job("one", 1)]


def test_a_batch_in_order_is_the_chain_of_single_solves() -> None:
    # Two half-busy servers and a free one; a 1-GPU job arriving first would, alone, take a slot
    # the 2-GPU job needs on a busy node. Largest first, each job sees the ones before it.
    nodes = half_busy()
    jobs = [kit.job("one", 1), kit.job("two", 2), kit.job("four", 4)]
    req = kit.request(nodes, jobs, **IN_ORDER)
    result = solve(req)
    assert all(jr.placed for jr in result.jobs)
    assert placements(result) == one_by_one(req, [2, 1, 0])
    assert {jr.job_id: jr.members[0].node for jr in result.jobs} == {"four": "n2", "two": "n0", "one": "n1"}


def test_the_result_says_what_it_can_prove() -> None:
    nodes = [kit.node("n0", kit.SMALL)]
    jobs = [kit.job("a", 2), kit.job("b", 2), kit.job("c", 2, priority=1)]  # 6 GPUs asked of 4
    result = solve(kit.request(nodes, jobs, **IN_ORDER))
    high, low = (v for v in result.objectives if v.tier == ObjectiveTier.PLACED_WORK)
    # One tier a priority level (STRICT); bound: the work the batch asks of it, which no plan exceeds.
    assert (high.name, high.value, high.bound, high.optimal) == ("placed_work.priority_1", 2000, 2000, True)
    assert (low.name, low.value, low.bound) == ("placed_work.priority_0", 2000, 4000)
    assert not low.optimal and result.gap == low.gap > 0
    assert result.status == SolveStatus.FEASIBLE
    left = next(jr for jr in result.jobs if not jr.placed)
    assert left.job_id == "b" and "LARGEST_FIRST" in left.reason.message
    assert result.metrics.gpus_used_after == 4 and [jr.job_id for jr in result.jobs] == ["a", "b", "c"]
    stages = [t.stage for t in result.timings]
    # Each step is one pod under the default tiers: the enumerator's (solver.search.single).
    assert stages[:4] == ["validate", "steps", "explain", "verify"] and "step.enumerate" in stages


def test_an_exclusive_job_placed_first_keeps_its_node() -> None:
    nodes = [kit.node("n0", kit.SMALL), kit.node("n1", kit.SMALL)]
    alone = kit.job("alone", 2).model_copy(update={"exclusive_nodes": True})
    result = solve(kit.request(nodes, [kit.job("x", 1), alone, kit.job("y", 1)], **IN_ORDER))
    where = {jr.job_id: jr.members[0].node for jr in result.jobs}
    assert where["x"] != where["alone"] and where["y"] != where["alone"]


def test_shares_placed_in_different_steps_stay_within_one_gpu() -> None:
    # Four 400-milli shares on one GPU: two fit, steps must see the earlier ones' shares.
    node = kit.node("n0", kit.SMALL, switches=1, gpus=1, nics=0)
    result = solve(
        kit.request(
            [node], [kit.job(f"s{k}", role="pod", share=GpuShare(milli=400)) for k in range(4)], **IN_ORDER
        )
    )
    assert sum(jr.placed for jr in result.jobs) == 2  # and the verifier summed the shares


def test_a_lone_job_is_solved_jointly() -> None:
    result = solve(kit.request([kit.node("n0", kit.SMALL)], [kit.job("a", 2)], **IN_ORDER))
    assert result.status == SolveStatus.OPTIMAL  # no steps: the joint answer, proven


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.small_problems())
def test_random_batches_in_order_are_verified_and_never_beat_the_optimum(req) -> None:
    assume(not validate(req))
    req = req.model_copy(update={"policy": req.policy.model_copy(update=IN_ORDER)})
    result = solve(req)  # verified, step by step and whole
    assert kit.placed_work(result) <= kit.best_placed_work(req)
    assert placements(result) == one_by_one(req, [j for step in steps(req) for j in step])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.share_problems())
def test_random_share_batches_in_order_are_verified(req) -> None:
    assume(not validate(req))
    result = solve(req.model_copy(update={"policy": req.policy.model_copy(update=IN_ORDER)}))
    assert all(jr.placed == bool(jr.members) for jr in result.jobs)


def test_a_share_is_held_as_a_share_not_as_its_gpu() -> None:
    # A share member's placement names its GPU in ``gpus`` as well; holding that GPU whole made the
    # next step's inventory invalid ("shared but also held whole"), in what-if replays too.
    node = kit.node("n0", kit.SMALL, switches=1, gpus=1, nics=0)
    req = kit.request([node], [kit.job("s", role="pod", share=GpuShare(milli=300))])
    jr = solve(req).jobs[0]
    (held,) = held_allocations(req.jobs[0], jr)["n0"]
    assert held.gpus == () and [(s.gpu, s.milli) for s in held.gpu_shares] == [("GPU0", 300)]


# --------------------------------------------------------------------------- BEST_OF_ORDERS

BEST_OF = {"batch_order": BatchOrder.BEST_OF_ORDERS}


def test_candidate_orders_are_largest_first_left_out_first_and_seeded_shuffles() -> None:
    sizes = [(0, 1000), (0, 4000), (0, 2000), (0, 4000)]
    orders = candidate_orders(sizes, left_out=[2, 3], seed="7/w", shuffles=3)
    assert orders[0] == [1, 3, 2, 0]  # largest first, ties as given
    assert orders[1] == [3, 2, 0, 1]  # the given order's left-out steps first, largest first
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders) and [0, 1, 2, 3] not in orders
    assert len({tuple(o) for o in orders}) == len(orders)  # no order twice
    assert orders == candidate_orders(sizes, [2, 3], "7/w", 3)  # seeded: the same every time
    assert candidate_orders(sizes, [], "7/w", 0) == [[1, 3, 2, 0]]


def in_arrival_order(req: SolveRequest) -> SolveResult:
    return solve_in_order(req, solver.solve.solve_step, 10.0, arrival_steps(req)).result


def test_the_best_order_places_what_arrival_order_cannot() -> None:
    # 2 + 1 + 4 GPUs free, 2 + 2 + 4 + 1 asked. As given, the 2-GPU jobs split n0 and n2 and the
    # 4-GPU job finds no node; largest first, it takes n2 whole and only one 2-GPU job is left out.
    nodes = half_busy()
    jobs = two_two_four_one()
    req = kit.request(nodes, jobs, **BEST_OF)
    arrival = in_arrival_order(req)
    best = solve(req)
    assert [jr.placed for jr in arrival.jobs] == [True, True, False, True]
    assert kit.placed_work(best) == (7000,) > kit.placed_work(arrival) == (5000,)
    assert {jr.job_id for jr in best.jobs if jr.placed} >= {"four", "one"}
    left = next(jr for jr in best.jobs if not jr.placed)
    assert "in the order that placed the most work" in left.reason.message
    assert best.status == SolveStatus.FEASIBLE and [t.stage for t in best.timings][:4] == [
        "validate",
        "orders",
        "explain",
        "verify",
    ]


def test_the_policy_says_how_many_shuffled_orders_to_try(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = half_busy()
    jobs = two_two_four_one()
    tried: list[tuple[str, ...]] = []

    def counted(request: SolveRequest, *args, **kwargs):
        tried.append(tuple(request.jobs[j].id for group in args[2] for j in group))
        return solve_in_order(request, *args, **kwargs)

    monkeypatch.setattr(solver.solve, "solve_in_order", counted)
    counts = []
    for shuffles in (0, 5):
        tried.clear()
        solve(kit.request(nodes, jobs, **BEST_OF, order_shuffles=shuffles))
        assert len(set(tried)) == len(tried)  # no order twice
        counts.append(len(tried))
    # Given and largest first (left-out first, "four" then the rest as given, is largest first
    # here, so it is not tried twice); then up to five shuffles more.
    assert counts[0] == 2 and 2 < counts[1] <= 7


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.small_problems())
def test_best_of_orders_is_verified_and_never_below_arrival_or_largest_first(req) -> None:
    assume(not validate(req))
    best = solve(req.model_copy(update={"policy": req.policy.model_copy(update=BEST_OF)}))  # verified whole
    largest = solve(req.model_copy(update={"policy": req.policy.model_copy(update=IN_ORDER)}))
    assert kit.placed_work(largest) <= kit.placed_work(best) <= kit.best_placed_work(req)
    assert kit.placed_work(in_arrival_order(req)) <= kit.placed_work(best)


def test_only_the_kept_plan_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    # Arrival order leaves "four" out, the kept order one 2-GPU job: only that one is explained (an
    # explanation searches relaxed copies of its job), though every order's steps left jobs out.
    nodes = half_busy()
    jobs = two_two_four_one()
    explained: list[str] = []
    real = solver.solve.explain

    def counted(problem, compiled, results, **kwargs):
        explained.extend(r.job_id for r in results if not r.placed)
        return real(problem, compiled, results, **kwargs)

    monkeypatch.setattr(solver.solve, "explain", counted)
    result = solve(kit.request(nodes, jobs, **BEST_OF))
    left = [jr for jr in result.jobs if not jr.placed]
    assert [jr.job_id for jr in left] == explained and len(left) == 1
    assert left[0].reason is not None and "in the order that placed the most work" in left[0].reason.message


def test_the_kept_plan_is_verified_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # Steps are no longer verified one by one: a step plan that takes a GPU an earlier step holds
    # must still be refused, by the one check of the whole plan.
    nodes = [kit.node("n0", kit.SMALL, used_gpus=(0, 1))]
    jobs = [kit.job("a", 1), kit.job("b", 1)]
    first: list = []
    real = solver.solve.solve_step

    def on_the_first_gpu(step: SolveRequest, seconds: float) -> StepPlan:
        plan = real(step, seconds)
        (jr,) = plan.result.jobs
        if not first:
            first.append(jr.members[0])
            return plan
        moved = jr.model_copy(update={"members": (first[0].model_copy(update={"role": jr.members[0].role}),)})
        return replace(plan, result=plan.result.model_copy(update={"jobs": (moved,)}))

    monkeypatch.setattr(solver.solve, "solve_step", on_the_first_gpu)
    for order in (BEST_OF, IN_ORDER):
        first.clear()
        with pytest.raises(VerificationFailed, match="GPU"):
            solve(kit.request(nodes, jobs, **order))


def test_a_step_normalises_anew_only_the_node_the_step_before_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each step normalises the batch's whole inventory; only the nodes that changed since the last
    # normalise are looked up again (solver.reduce.normalise.node_shapes), and their classes are
    # those of a fresh look at them.
    from solver.reduce import normalise as norm

    nodes = [kit.node(f"n{i}", kit.SMALL, used_gpus=tuple(range(i % 3))) for i in range(6)]
    req = kit.request(nodes, [kit.job("a", 1)])
    norm.normalise(req)
    looked_up: list[str] = []
    real = norm.cached_node_shape

    def counted(node, *args):
        looked_up.append(node.name)
        return real(node, *args)

    monkeypatch.setattr(norm, "cached_node_shape", counted)
    bound = kit.node("n2", kit.SMALL, used_gpus=(0, 1, 2))
    step = req.model_copy(
        update={"inventory": req.inventory.model_copy(update={"nodes": (*nodes[:2], bound, *nodes[3:])})}
    )
    problem = norm.normalise(step)
    assert looked_up == ["n2"]
    (n2,) = (c for c in problem.classes if "n2" in (n.name for n in c.nodes))
    assert n2.shape == norm.node_shape(bound, frozenset(), rails=False)[0]
    assert len(n2.shape.gpus) == 1  # GPU3, the one the step left free
