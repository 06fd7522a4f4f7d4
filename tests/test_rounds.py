"""Neighbourhood rounds on the floor's best plan (solver/search/rounds.py): a round re-packs the spines
of a spread gang with the jobs the plan left out free, places more jobs where it can, holds every
tier above the jobs, and its plan decodes to one the verifier passes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from solver.answer.verify import verify
from solver.compile import compile_model
from solver.compile.objective import JOBS_TIER, holds_in
from solver.domain.model import Locality, Requirement, SolveRequest, TierValue
from solver.domain.validate import validate
from solver.reduce.chain import problem_of, rewrite
from solver.search import neighbourhood
from solver.search import rounds as rounds_module
from solver.search.floor import Candidate, Floor, Pass, Portfolio, complete, hint_of, place_job
from solver.search.rounds import ROUNDS, Rounds
from solver.search.tiers import TierOutcome
from solver.solve import rounds_next
from tests import kit

PREFERRED = Locality(mode=Requirement.PREFERRED)


@pytest.fixture(autouse=True)
def small_models_have_neighbourhoods(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The rounds' neighbourhoods exist only for big models; these small ones stand in for them."""
    monkeypatch.setattr(neighbourhood, "MIN_VARIABLES", 0)
    yield


def _floor(request: SolveRequest) -> tuple[Floor, SolveRequest]:
    request = rewrite(request)
    problem = problem_of(request)
    return Floor(problem, compile_model(problem, request.policy)), request


def _candidate(floor: Floor, placer: str, plan: dict[str, int]) -> Candidate:
    return Candidate(placer, plan, tuple(t.value_of(plan) for t in floor.compiled.tiers))


def _placed(floor: Floor, request: SolveRequest, plan: dict[str, int]) -> set[str]:
    answer = kit.plan_answer(floor.problem, floor.compiled, request, plan)
    assert not verify(request, answer)
    return {j.job_id for j in answer.jobs if j.placed}


def _spread_plan() -> tuple[Floor, SolveRequest, Candidate]:
    """Two spines of one leaf of two 8-GPU nodes. A greedy order put a 3-GPU job and a 4-GPU job on
    a node of each spine and the two-node gang on the other two nodes, across the spines: the
    whole-node job has no node."""
    nodes = [kit.node(f"n{i}", leaf=f"leaf{i // 2}") for i in range(4)]
    jobs = [
        kit.job("gang", 8, 2, locality=PREFERRED),
        kit.job("small-a", 3),
        kit.job("small-b", 4),  # unlike small-a, or the two would be pooled as one job's pods
        kit.job("whole", 8),
    ]
    floor, request = _floor(kit.request(nodes, jobs, kit.fat_tree(2, 2)))
    problem, compiled = floor.problem, floor.compiled
    leaf = {name: {c.index for c in problem.classes if c.leaf == name} for name in ("leaf0", "leaf1")}
    index = {job.id: j for j, job in enumerate(problem.request.jobs)}
    done = Pass.empty(problem)
    assert place_job(floor, done, index["small-a"], {}, [leaf["leaf0"]])
    assert place_job(floor, done, index["small-b"], {}, [leaf["leaf1"]])
    assert place_job(floor, done, index["gang"], {}, [None])
    assert not place_job(floor, done, index["whole"], {}, [None])
    plan = complete(problem, compiled, hint_of(compiled, done))
    assert _placed(floor, request, plan) == {"gang", "small-a", "small-b"}
    return floor, request, _candidate(floor, "by-hand", plan)


def test_a_round_re_packs_a_spread_gangs_spines_and_places_a_job_the_plan_left_out() -> None:
    """The spread plan (:func:`_spread_plan`) re-packed: the small jobs share one node and the whole-node job
    takes the node they freed; the gang stays placed, its work and every job's held."""
    floor, request, best = _spread_plan()
    problem, compiled = floor.problem, floor.compiled
    rounds = Rounds.of(problem, compiled, request.policy)
    assert rounds is not None
    found = rounds(best, time.perf_counter() + 30)

    assert found is not None and found.placer == "by-hand" + ROUNDS
    assert found.values == tuple(t.value_of(found.plan) for t in compiled.tiers)
    assert found.values > best.values
    jobs_at = [t.name for t in compiled.tiers].index(JOBS_TIER)
    assert found.values[jobs_at] == best.values[jobs_at] + 1
    assert all(a >= b for a, b in zip(found.values[:jobs_at], best.values[:jobs_at], strict=True))
    assert _placed(floor, request, found.plan) == {"gang", "small-a", "small-b", "whole"}
    # The rounds hold the tiers on their own copy: the model the search uses holds none.
    assert holds_in(compiled.model) == 0 and holds_in(rounds.model) > 0


def test_no_round_is_started_without_the_time_for_one() -> None:
    nodes = [kit.node(f"n{i}", leaf=f"leaf{i // 2}") for i in range(4)]
    jobs = [kit.job("gang", 8, 2, locality=PREFERRED), kit.job("small", 3)]
    floor, request = _floor(kit.request(nodes, jobs, kit.fat_tree(2, 2)))
    rounds = Rounds.of(floor.problem, floor.compiled, request.policy)
    assert rounds is not None
    drawing = Portfolio(floor, 0, 0)
    drawing.draw(time.perf_counter() + 60, least=1)
    started = time.perf_counter()
    assert rounds(drawing.candidates()[0], started + 0.1) is None
    assert holds_in(rounds.model) == 0  # returned before anything was set up


def test_the_rounds_wait_for_a_plan_and_go_on_from_one_that_ranks_above_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beside the orders (``newer``): nothing is offered at first, and the rounds wait; then the
    gang alone, which one round (CP-SAT stood in for, finding nothing) does not better; then the
    spread plan of three jobs, which ranks above it (more work): the rounds go on from that one and
    place the whole-node job. Offered nothing new, they keep going from their own."""
    floor, request, best = _spread_plan()
    problem, compiled = floor.problem, floor.compiled
    done = Pass.empty(problem)
    assert place_job(floor, done, 0, {}, [None])  # the gang alone
    weak = _candidate(floor, "gang-alone", complete(problem, compiled, hint_of(compiled, done)))
    assert weak.values < best.values
    offers = iter([None, None, weak, best])
    real, searched = rounds_module.run_tier, []

    def run_tier(*args: object) -> TierOutcome:
        searched.append(time.perf_counter())
        if len(searched) == 1:  # the first round, on the gang alone, finds nothing
            return TierOutcome(TierValue(tier=0, name="", value=0, bound=0, optimal=False), None)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(rounds_module, "run_tier", run_tier)
    rounds = Rounds.of(problem, compiled, request.policy)
    assert rounds is not None
    asked: list[float] = []

    def newer() -> Candidate | None:
        asked.append(time.perf_counter())
        return next(offers, None)

    found = rounds(None, time.perf_counter() + 10, newer)
    assert found is not None and found.placer == "by-hand" + ROUNDS
    assert _placed(floor, request, found.plan) == {"gang", "small-a", "small-b", "whole"}
    assert len(asked) > 4 and len(searched) >= 2
    assert asked[3] < searched[1]  # the spread plan was taken before the second round


def test_the_rounds_beside_the_orders_are_offered_the_closers_plan_then_each_better_one_once() -> None:
    """``solver.solve.rounds_next``: nothing while the orders' plan is not yet brought closer; then
    the portfolio's best plan, once; then nothing until a better one is kept."""
    floor = _spread_plan()[0]

    def outside(ends: float) -> Candidate:
        best = drawing.candidates()[0]
        return Candidate("orders", best.plan, (best.values[0] + 1, *best.values[1:]))

    def closer_(candidate: Candidate, ends: float) -> Candidate:
        return Candidate("orders+closer", candidate.plan, (*candidate.values[:-1], candidate.values[-1] + 1))

    drawing = Portfolio(floor, 0, 0, outside=outside, outside_first=True, closer=closer_)
    drawing.draw(time.perf_counter())
    offered: set[str] = set()
    assert rounds_next(drawing, offered) is None  # the orders have not answered
    with drawing.meanwhile(time.perf_counter() + 5, spare_core=True):
        pass
    first = rounds_next(drawing, offered)
    assert first is not None and first.placer == "orders+closer"
    assert rounds_next(drawing, offered) is None


@st.composite
def crowded_spines(draw: st.DrawFn) -> SolveRequest:
    """Leaves of 8-GPU nodes under two spines, partly held; a gang or two that prefer one leaf and
    small jobs of sizes that pack unevenly: plans that leave a gang split and a job out."""
    leaves = draw(st.integers(2, 4))
    per_leaf = draw(st.integers(1, 3))
    held = st.sets(st.integers(0, 7), max_size=3)
    nodes = [
        kit.node(
            f"n{i}",
            leaf=f"leaf{i // per_leaf}",
            used_gpus=sorted(draw(held)),
        )
        for i in range(leaves * per_leaf)
    ]
    jobs = [
        kit.job(f"gang{k}", draw(st.sampled_from([4, 8])), draw(st.integers(2, 3)), locality=PREFERRED)
        for k in range(draw(st.integers(1, 2)))
    ]
    sizes = [draw(st.sampled_from([1, 2, 3, 4, 5, 8])) for _ in range(draw(st.integers(1, 6)))]
    jobs += [kit.job(f"pod{k}", gpus) for k, gpus in enumerate(sizes)]
    return kit.request(nodes, jobs, kit.fat_tree(leaves, 2))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(crowded_spines())
def test_rounds_never_lower_a_tier_above_the_jobs_and_their_plans_verify(request: SolveRequest) -> None:
    """Over every plan of the floor's portfolio: a plan the rounds return ranks strictly higher,
    places no less work at any priority level and no fewer jobs, is valued as it is, and decodes to
    a plan the verifier passes."""
    assume(not validate(request))
    floor, request = _floor(request)
    problem, compiled = floor.problem, floor.compiled
    rounds = Rounds.of(problem, compiled, request.policy)
    assert rounds is not None
    jobs_at = [t.name for t in compiled.tiers].index(JOBS_TIER)
    drawing = Portfolio(floor, 2, 0)
    drawing.draw(time.perf_counter() + 60)
    for candidate in drawing.candidates():
        found = rounds(candidate, time.perf_counter() + 10)
        if found is None:
            continue
        assert found.values > candidate.values
        assert found.values == tuple(t.value_of(found.plan) for t in compiled.tiers)
        above = zip(found.values[: jobs_at + 1], candidate.values[: jobs_at + 1], strict=True)
        assert all(a >= b for a, b in above)
        assert not verify(request, kit.plan_answer(problem, compiled, request, found.plan)), candidate.placer
