"""The exchange (solver/baselines/exchange.py): one placed job given up for several unplaced jobs of
its priority, kept only when the whole plan ranks higher, on the placer's own plans and, through
``FloorExchange``, on the plans of the model's floor (solver/search/floor.py ``Portfolio``); and the
fallback's orders as a placer of that floor (``FloorOrders``)."""

from __future__ import annotations

import time
from random import Random

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import solver.solve as pipeline
from solver.answer.measures import cluster_metrics
from solver.answer.verify import verify
from solver.baselines.exchange import FloorExchange, exchange
from solver.baselines.topology import Start
from solver.compile import compile_model
from solver.domain.model import ReasonCode, Requirement, SolveRequest, SolveResult
from solver.domain.validate import validate
from solver.fallback import FIRST_FIT, FloorOrders, best_of_orders, ranking
from solver.reduce.chain import problem_of, rewrite
from solver.reduce.policy import apply_policy_chains
from solver.search.floor import NAMED_ORDERS, OUTSIDE_SHARE, Candidate, Floor, Portfolio
from tests import kit


def _exchanged(request: SolveRequest, order: list[int] | None = None) -> tuple:
    start = Start.of(request.inventory)
    plan = FIRST_FIT.place(request, start=start, order=order)
    jobs = exchange(
        request, start, plan.jobs, FIRST_FIT, lambda jobs: ranking(request, jobs), time.perf_counter() + 30
    )
    # Measured as an answer is, for the verifier.
    return plan, plan.model_copy(update={"jobs": jobs, "metrics": cluster_metrics(request, jobs)})


def test_a_job_whose_room_holds_two_of_its_priority_gives_it_up() -> None:
    """One 8-GPU node; the 8-GPU job comes first and takes it. Given up, its room holds both 4-GPU
    jobs of its priority: as many GPUs at that priority, one job more."""
    request = kit.request(
        kit.cluster(1),
        [kit.job("big", 8, priority=5), kit.job("a", 4, priority=5), kit.job("b", 4, priority=5)],
    )
    plan, out = _exchanged(request)
    assert [j.job_id for j in plan.jobs if j.placed] == ["big"]
    assert [j.job_id for j in out.jobs if j.placed] == ["a", "b"]
    big = out.jobs[0]
    assert big.reason is not None and big.reason.code == ReasonCode.OUTPRIORITISED
    assert "gave its room to 2 jobs of its priority" in big.reason.message
    assert not verify(request, out)


def test_a_gang_with_two_members_on_one_node_gives_back_both() -> None:
    """The 2 x 4-GPU gang's members share the one node: given up, its whole room (8 GPUs) is free
    for the two 4-GPU jobs, not one member's."""
    jobs = [
        kit.job("gang", 4, members=2, priority=5),
        kit.job("a", 4, priority=5),
        kit.job("b", 4, priority=5),
    ]
    plan, out = _exchanged(kit.request(kit.cluster(1), jobs))
    assert [m.node for m in plan.jobs[0].members] == ["n0", "n0"]
    assert [j.job_id for j in out.jobs if j.placed] == ["a", "b"]


def test_no_exchange_across_priorities_or_for_fewer_gpus() -> None:
    """The 4-GPU jobs are of a lower priority: giving the 8-GPU job up would lose top-priority GPUs,
    so nothing moves. Nor for one 4-GPU job of its priority, nor for what of two 6-GPU jobs its
    room holds (fewer GPUs at that level either way)."""
    lower = kit.request(
        kit.cluster(1),
        [kit.job("big", 8, priority=5), kit.job("a", 4, priority=1), kit.job("b", 4, priority=1)],
    )
    plan, out = _exchanged(lower)
    assert out == plan
    fewer = kit.request(kit.cluster(1), [kit.job("big", 8, priority=5), kit.job("a", 4, priority=5)])
    plan, out = _exchanged(fewer)
    assert out == plan
    # Two 6-GPU jobs could take its room, but only one fits in it: 6 GPUs for 8, refused.
    jobs = [kit.job("big", 8, priority=5), kit.job("a", 6, priority=5), kit.job("b", 6, priority=5)]
    plan, out = _exchanged(kit.request(kit.cluster(1), jobs))
    assert [j.job_id for j in plan.jobs if j.placed] == ["big"] and out == plan


@st.composite
def tight_batches(draw: st.DrawFn) -> SolveRequest:
    """A few 8-GPU nodes and more work than they hold, of one or two priorities, 1-8 GPUs a member:
    where a first fit in a random order leaves room an exchange can use (the general generators
    below almost never do: 0 exchanges in 300 of their requests)."""
    jobs = [
        kit.job(
            f"j{k}",
            draw(st.sampled_from([1, 2, 4, 8])),
            members=draw(st.integers(1, 2)),
            priority=draw(st.sampled_from([5, 5, 5, 1])),
        )
        for k in range(draw(st.integers(4, 10)))
    ]
    return kit.request(kit.cluster(draw(st.integers(1, 3))), jobs)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(tight_batches(), st.randoms(use_true_random=False))
def test_an_exchanged_plan_ranks_at_least_as_high_and_verifies(request: SolveRequest, draw: Random) -> None:
    """Over tight batches in random orders (about one in fifteen gets an exchange): the exchanged
    plan ranks at least as high as the plan it started from (placed work level by level, then
    jobs), and the verifier passes it."""
    _holds(request, draw)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.one_of(kit.fabric_problems(max_nodes=6, max_jobs=6, spines=2), kit.small_problems()),
    st.randoms(use_true_random=False),
)
def test_the_exchange_keeps_every_rule_on_general_requests(request: SolveRequest, draw: Random) -> None:
    """The same over the general generators (every member rule, locality, NVLink domains)."""
    _holds(request, draw)


def _holds(request: SolveRequest, draw: Random) -> None:
    assume(not validate(request))
    request = apply_policy_chains(request)
    order = list(range(len(request.jobs)))
    draw.shuffle(order)
    plan, out = _exchanged(request, order)
    assert ranking(request, out.jobs) >= ranking(request, plan.jobs)
    assert not verify(request, out)


def _portfolio(
    request: SolveRequest, *, repair: bool, passes: int = 4, early: bool = True, seen: list[int] | None = None
) -> tuple[Portfolio, SolveRequest]:
    """The floor's portfolio of ``request`` (policy chains applied), drawn to its end, with the
    exchange as its repair (right after the named placers if ``early``) or without. ``seen``: how
    many placers had run at each repair."""
    request = rewrite(request)
    problem = problem_of(request)
    compiled = compile_model(problem, request.policy)
    floor = Floor(problem, compiled)
    fix = FloorExchange(problem, compiled, floor, request, FIRST_FIT, lambda jobs: ranking(request, jobs))

    def counted(candidate: Candidate, ends: float) -> Candidate | None:
        if seen is not None:
            seen.append(drawing.drawn)
        return fix(candidate, ends)

    drawing = Portfolio(floor, passes, 0, repair=counted if repair else None, repair_early=early)
    drawing.draw(time.perf_counter() + 60)
    return drawing, request


def _answer(drawing: Portfolio, request: SolveRequest, candidate: Candidate) -> SolveResult:
    return kit.plan_answer(drawing.floor.problem, drawing.floor.compiled, request, candidate.plan)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(tight_batches(), kit.fabric_problems(max_nodes=6, max_jobs=6, spines=2)))
def test_the_floor_repaired_ranks_at_least_as_high_and_each_plan_verifies(request: SolveRequest) -> None:
    """Over tight batches and general requests: the floor's best plan with the exchange as its
    repair ranks no lower than without (tier by tier), and every plan it keeps, exchanged or not,
    decodes to a plan the verifier passes."""
    assume(not validate(request))
    repaired, rewritten = _portfolio(request, repair=True)
    plain, _ = _portfolio(request, repair=False)
    assert repaired.candidates()[0].values >= plain.candidates()[0].values
    for candidate in repaired.candidates():
        assert not verify(rewritten, _answer(repaired, rewritten, candidate)), candidate.placer


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(tight_batches(), kit.fabric_problems(max_nodes=6, max_jobs=6, spines=2)))
def test_the_fallbacks_orders_read_into_the_floor_start_its_jobs_and_verify(request: SolveRequest) -> None:
    """The fallback's orders as a placer of the model's floor (``FloorOrders``): its plan, read back
    into the model's variables, starts every job the fallback's own plan starts (more only where
    the floor's greedy adds some after it) and decodes to a plan the verifier passes."""
    assume(not validate(request))
    request = rewrite(request)
    problem = problem_of(request)
    compiled = compile_model(problem, request.policy)
    floor = Floor(problem, compiled)
    own = best_of_orders(request, time.perf_counter() + 30)
    found = FloorOrders(problem, compiled, floor, request)(time.perf_counter() + 30)
    if not any(j.placed for j in own):
        return  # nothing to read back: the floor's own placers place at least as much
    assert found is not None and found.placer == "first-fit-orders"
    drawing = Portfolio(floor, 0, 0)
    answer = _answer(drawing, request, found)
    assert not verify(request, answer)
    placed = {j.job_id for j in answer.jobs if j.placed}
    # A job kept inside one NVLink domain (REQUIRED) is not read back from a node plan
    # (solver.search.previous.holding finds no scope of the floor for it): it is left out, and the
    # plan then ranks below the floor's own, which keeps it out of the answer. Named, not hidden.
    # Pods nothing tells apart are pooled, and handed back pod by pod: which pod of a pool is
    # started may differ, not how many.
    expressible = {j.id for j in request.jobs if j.nvlink_domain != Requirement.REQUIRED}
    assert len(placed) >= len({j.job_id for j in own if j.placed} & expressible)


def test_the_fallbacks_orders_are_drawn_once_while_the_search_runs() -> None:
    """Drawn on the spare core while the search runs (before the search the named placers have used
    the floor's part, and it would be cut short), never on one core, once: first, with its share of
    the search's time, on large inventories; else after the class orders. Its plan is kept when it
    ranks first."""
    request = rewrite(
        kit.request(kit.cluster(2), [kit.job(f"j{k}", 1 + k % 4, priority=5) for k in range(8)])
    )
    problem = problem_of(request)
    compiled = compile_model(problem, request.policy)
    asked: list[tuple[float, int]] = []

    def outside(ends: float) -> Candidate:
        asked.append((ends - time.perf_counter(), drawing.drawn))
        best = drawing.candidates()[0]
        return Candidate("outside", best.plan, (best.values[0] + 1000, *best.values[1:]))

    drawing = Portfolio(Floor(problem, compiled), 6, 0, outside=outside, outside_first=True)
    drawing.draw(time.perf_counter())  # before the search: the first class order only
    assert not asked and drawing.drawn == 1
    with drawing.meanwhile(time.perf_counter() + 60, spare_core=False):
        pass
    assert not asked  # on one core it would only slow the search
    with drawing.meanwhile(time.perf_counter() + 10, spare_core=True):
        pass
    (first,) = asked
    assert first[1] == 1  # before the class orders left
    assert 0.9 * OUTSIDE_SHARE * 10 <= first[0] <= OUTSIDE_SHARE * 10
    assert drawing.exhausted and drawing.drawn > 2  # then the class orders
    assert drawing.candidates()[0].placer == "outside"
    with drawing.meanwhile(time.perf_counter() + 10, spare_core=True):
        pass
    assert len(asked) == 1  # once

    # Not first (below OUTSIDE_FIRST_NODES): after the class orders, with the time they leave.
    asked.clear()
    drawing = Portfolio(Floor(problem, compiled), 6, 0, outside=outside)
    drawing.draw(time.perf_counter())
    with drawing.meanwhile(time.perf_counter() + 10, spare_core=True):
        pass
    (after,) = asked
    assert after[1] == drawing.drawn - 1 > 2 and 9 <= after[0] <= 10


def test_drawn_first_the_orders_plan_brought_closer_is_exchanged_while_each_exchange_betters_it() -> None:
    """Outside first: the orders' plan, then the closer's, then the repair of the closer's plan and
    of that repair's plan, until a repair betters nothing; every plan kept beside the others. The
    class orders follow, and the best plan, now the exchanges', is brought closer again."""
    request = rewrite(
        kit.request(kit.cluster(2), [kit.job(f"j{k}", 1 + k % 4, priority=5) for k in range(8)])
    )
    problem = problem_of(request)
    compiled = compile_model(problem, request.policy)
    seen: list[str] = []

    def lifted(candidate: Candidate, name: str, by: int) -> Candidate:
        return Candidate(name, candidate.plan, (candidate.values[0] + by, *candidate.values[1:]))

    def outside(ends: float) -> Candidate:
        seen.append("outside")
        return lifted(drawing.candidates()[0], "orders", 1000)

    def closer_(candidate: Candidate, ends: float) -> Candidate:
        seen.append(f"closer:{candidate.placer}")
        return lifted(candidate, candidate.placer + "+closer", 1)

    def repair(candidate: Candidate, ends: float) -> Candidate | None:
        seen.append(f"repair:{candidate.placer}")
        if candidate.placer.count("+exchange") == 2:
            return None  # the third exchange betters nothing
        return lifted(candidate, candidate.placer + "+exchange", 1)

    drawing = Portfolio(
        Floor(problem, compiled), 0, 0, outside=outside, outside_first=True, closer=closer_, repair=repair
    )
    drawing.draw(time.perf_counter())
    with drawing.meanwhile(time.perf_counter() + 10, spare_core=True):
        pass
    assert seen[:5] == [
        "outside",
        "closer:orders",
        "repair:orders+closer",
        "repair:orders+closer+exchange",
        "repair:orders+closer+exchange+exchange",
    ]
    # The class orders left, then the best plan, the exchanges', brought closer in its turn.
    assert seen[5:] == ["closer:orders+closer+exchange+exchange"]
    assert drawing.candidates()[0].placer == "orders+closer+exchange+exchange+closer"


def test_drawn_first_the_fallbacks_orders_leave_the_floors_stage_one_named_placer(monkeypatch) -> None:
    """Where the fallback's orders go first (``solver.solve.OUTSIDE_FIRST_NODES``), the floor's stage
    before the search draws one named placer, the search's hint, and leaves the time to the orders
    beside it (at 16,384 nodes their jobs grow with it: 352-354 in 3 s, 356 in 6 s); elsewhere it
    draws the named placers at least, and more while the floor's part of the time lasts."""
    request = kit.request(kit.cluster(4), [kit.job(f"j{k}", 1 + k % 4, priority=k % 2) for k in range(8)])
    drawn: list[int] = []
    real = Portfolio.draw

    def draw(self: Portfolio, deadline: float, *, least: int = 1, latest: float | None = None) -> None:
        real(self, deadline, least=least, latest=latest)
        drawn.append(self.drawn)

    monkeypatch.setattr(Portfolio, "draw", draw)
    monkeypatch.setattr(pipeline, "OUTSIDE_FIRST_NODES", 1)
    assert pipeline.solve(request).status
    assert drawn[0] == 1
    drawn.clear()
    monkeypatch.setattr(pipeline, "OUTSIDE_FIRST_NODES", 10**9)
    assert pipeline.solve(request).status
    assert drawn[0] >= NAMED_ORDERS
