"""The floor (issue 18): greedy placers in the model's own variables, the best of them the search's
start, and an answer never worse than any of them — tier by tier, on any request. And pools: pods
nothing tells apart solved as one job of many members, handed back pod by pod."""

from __future__ import annotations

import time
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import solver.search.floor
import solver.search.tiers
import solver.solve
from solver.cli import render_table
from solver.compile import compile_model
from solver.domain import cancel as cancellation
from solver.domain.cancel import Cancel, OutOfBudget, cancelling
from solver.domain.model import Locality, ObjectiveTier, Policy, ReasonCode, Requirement
from solver.domain.validate import validate
from solver.reduce.chain import problem_of, rewrite
from solver.reduce.pools import pool
from solver.search.floor import (
    Floor,
    NodeStates,
    Portfolio,
    best_move,
    complete,
    greedy_hint,
    hint_of,
    orders,
    pass_of,
    portfolio,
    undo,
)
from solver.solve import solve
from tests import kit


def floor_of(req):
    problem = problem_of(rewrite(req))
    compiled = compile_model(problem, req.policy)
    return compiled, portfolio(problem, compiled, time.perf_counter() + 60, passes=4, seed=0)


def every_placer(req, passes: int = 4):
    """Each order of the portfolio placed, completed and valued on every tier, none skipped: what
    the portfolio's pruning is checked against."""
    problem = problem_of(rewrite(req))
    compiled = compile_model(problem, req.policy)
    floor = Floor(problem, compiled)
    out = {}
    for name, order in orders(problem, floor, passes, 0):
        plan = complete(problem, compiled, greedy_hint(problem, compiled, jobs=order, floor=floor))
        out[name] = tuple(t.value_of(plan) for t in compiled.tiers)
    return problem, compiled, out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.fabric_problems(max_nodes=5, max_jobs=6, spines=2))
def test_the_answer_is_never_worse_than_any_placer_of_the_floor(req) -> None:
    assume(not validate(req))
    _, compiled, placers = every_placer(req)
    result = solve(req)  # verified inside
    answer = tuple(v.value for v in result.objectives)
    assert [v.name for v in result.objectives] == [t.name for t in compiled.tiers]
    for placer, values in placers.items():
        assert answer >= values, placer


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.fabric_problems(max_nodes=10, max_jobs=10, spines=2))
def test_the_portfolio_keeps_the_best_placer_though_it_values_only_some(req) -> None:
    """The portfolio completes and values a plan only when its placement alone does not rank it
    below one in hand; its best is still the best of every placer valued in full (the orders of
    :func:`orders`: lifting is off here, and tested below)."""
    assume(not validate(req))
    problem, compiled, placers = every_placer(req, passes=8)
    drawing = Portfolio(Floor(problem, compiled), 8, 0, lift=False)
    drawing.draw(time.perf_counter() + 60)
    best = drawing.candidates()[0]
    assert best.values == max(placers.values())
    assert best.values == placers[best.placer]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.fabric_problems(max_nodes=10, max_jobs=10, spines=2))
def test_a_pass_stopped_behind_on_its_leading_levels_changes_no_plan_kept(req) -> None:
    """A pass stops as soon as the priority levels it has placed rank below the best plan in hand
    (lower levels never add to a higher level's tier); the plans kept are those of passes run to
    the end, placer for placer."""
    assume(not validate(req))

    def kept(drawing: Portfolio) -> list[tuple[str, tuple[int, ...]]]:
        drawing.draw(time.perf_counter() + 60)
        return [(c.placer, c.values) for c in drawing.candidates()]

    with_cut = kept(drawing_of(req, passes=8))
    with patch("solver.search.floor.settled_by_priority", lambda _: {}):
        run_out = kept(drawing_of(req, passes=8))
    assert with_cut == run_out


def test_after_a_plan_kept_its_refused_jobs_go_first_in_the_next_order() -> None:
    """largest-first places the 8- and 7-GPU jobs and refuses the 4-GPU one; the next order drawn
    is largest-first's with the 4-GPU job first (here the batch's own order, so ``queue`` is not
    drawn again). Without lifting, ``queue`` is drawn second."""
    req = kit.request(kit.cluster(2), [kit.job("small", 4), kit.job("big-a", 8), kit.job("big-b", 7)])
    jobs = [j.id for j in req.jobs]

    def drawn(lift: bool) -> list[tuple[str, list[str]]]:
        out: list[tuple[str, list[str]]] = []
        real = Portfolio._draw_one

        def noting(self: Portfolio, name: str, order: list[int]) -> None:
            out.append((name, [jobs[j] for j in order]))
            real(self, name, order)

        drawing = drawing_of(req, passes=0)
        drawing.lift = lift
        with patch.object(Portfolio, "_draw_one", noting):
            drawing.draw(time.perf_counter() + 60)
        return out

    lifted = drawn(lift=True)
    assert lifted[:2] == [
        ("largest-first", ["big-a", "big-b", "small"]),
        ("largest-first+lifted", ["small", "big-a", "big-b"]),
    ]
    assert "queue" not in [name for name, _ in lifted]
    assert [name for name, _ in drawn(lift=False)][:2] == ["largest-first", "queue"]


def test_a_lifted_plan_that_places_no_more_work_is_not_lifted_again() -> None:
    """Two 8-GPU nodes, jobs of 8, 7, 4 and 3 GPUs: largest-first places 8 and 7 and refuses 4 and 3;
    its lifted order places 4, 3 and 8 and refuses 7: as much work, one job more, kept. It is not
    lifted again (nor is any other plan kept): lifted orders drawn in the place of shuffles
    started fewer jobs at 4,096 nodes, where every order places the same work (bench/RESULTS.md,
    session 21); a lift goes on only while it places more work (the test above)."""
    req = kit.request(kit.cluster(2), [kit.job(f"j{g}", g) for g in (8, 7, 4, 3)])
    names: list[str] = []
    real = Portfolio._draw_one

    def noting(self: Portfolio, name: str, order: list[int]) -> None:
        names.append(name)
        real(self, name, order)

    drawing = drawing_of(req, passes=0)
    with patch.object(Portfolio, "_draw_one", noting):
        drawing.draw(time.perf_counter() + 60)
    assert names[:2] == ["largest-first", "largest-first+lifted"]
    assert "largest-first+lifted" in [c.placer for c in drawing.candidates()]  # kept
    assert names.count("largest-first+lifted") == 1


def test_a_lifted_plan_that_places_more_work_is_lifted_again() -> None:
    """Two 8-GPU nodes, jobs of 7, 5, 4, 2 and 2 GPUs: largest-first places 7, 5 and a 2 (14 GPUs)
    and refuses the 4; its lifted order places the 4 first and then 7 and both 2s (15 GPUs), more
    work than any plan before it, so it is lifted in turn: the 5 it refused goes first. The squeaky
    wheel turns while it squeaks: at 16,384 nodes the second lift is what reached the greedy's best
    top-priority work within a 5 s call (bench/RESULTS.md, session 24)."""
    req = kit.request(kit.cluster(2), [kit.job(f"j{g}{i}", g) for i, g in enumerate((5, 2, 4, 7, 2))])
    problem = problem_of(rewrite(req))
    compiled = compile_model(problem, req.policy)
    jobs = [j.id for j in problem.request.jobs]
    drawn: list[tuple[str, list[str], tuple[int, ...] | None]] = []
    real = Portfolio._draw_one

    def noting(self: Portfolio, name: str, order: list[int]) -> None:
        before = len(self._out)
        real(self, name, order)
        kept = self._out[-1].values if len(self._out) > before else None
        drawn.append((name, [jobs[j] for j in order], kept))

    drawing = Portfolio(Floor(problem, compiled), 0, 0)
    with patch.object(Portfolio, "_draw_one", noting):
        drawing.draw(time.perf_counter() + 60)
    (first, _, a), (second, order, b), (third, again, c) = drawn[:3]
    assert (first, second, third) == ("largest-first", "largest-first+lifted", "largest-first+lifted")
    assert a is not None and b is not None and b[0] > a[0]  # the lifted plan placed more work
    assert order[0] == "j42" and again[0] == "j50"  # each time the jobs refused last go first
    assert c is None  # this one placed less, and is not lifted: the portfolio goes on to queue
    assert drawn[3][0] == "queue"


def test_a_refused_job_is_lifted_within_its_priority_only() -> None:
    """Refused jobs go first among their priority, never above a higher one; a job named once per
    pod keeps its places among its kind."""
    from solver.search.floor import refused_first

    priority = {0: 2, 1: 2, 2: 1, 3: 1, 4: 1}.__getitem__
    assert refused_first([0, 1, 2, 3, 3, 4], lambda j: j in {1, 3}, priority) == [1, 0, 3, 3, 2, 4]
    assert refused_first([0, 1, 2], lambda j: False, priority) == [0, 1, 2]


def test_a_pass_behind_on_the_top_level_places_no_lower_level() -> None:
    """One 4-GPU node; top priority: a 4-GPU pod and a 2-GPU pod (only one fits); four 1-GPU pods of
    low priority. Largest-first places 4 top-level GPUs; an order with the 2-GPU pod first places
    2 and is behind once its top level is placed: its low-priority pods are never tried."""
    jobs = [kit.job("small-top", 2, priority=2), kit.job("big-top", 4, priority=2)]
    jobs += [kit.job(f"low{i}", 1, priority=0) for i in range(4)]
    req = kit.request([kit.node("n0", kit.SMALL)], jobs, time_limit_s=5)
    drawing = drawing_of(req, passes=12)
    tried: list[list[int]] = []
    real = solver.search.floor.place_jobs

    def recorded(floor, done, order, counts) -> None:
        tried.append(list(order))
        real(floor, done, order, counts)

    with patch("solver.search.floor.place_jobs", recorded):
        drawing.draw(time.perf_counter() + 60)
    assert drawing.candidates()[0].values[0] == 4000  # the 4-GPU pod: all the top level can take
    small_first = [order for order in tried if order[:1] == [0]]
    assert small_first  # some shuffles put the 2-GPU pod first...
    low_tried = [order for order in tried if order and req.jobs[order[0]].priority == 0]
    # ... and each of those stopped after its top level: low pods were tried only after big-first.
    assert len(low_tried) == drawing.drawn - len(small_first)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.fabric_problems(max_nodes=8, max_jobs=7, spines=2))
def test_skipping_scopes_without_room_leaves_every_plan_as_it_was(req) -> None:
    """A scope whose classes cannot hold a role's members is skipped before any member is tried
    there (``may_fit``); the plans of every order are those of trying every scope."""
    assume(not validate(req))
    _, _, placers = every_placer(req)
    with patch("solver.search.floor.may_fit", lambda *_: True):
        _, _, tried_everywhere = every_placer(req)
    assert placers == tried_everywhere


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.fabric_problems())  # small enough for the brute force below
def test_a_floor_plan_alone_is_a_valid_answer(req) -> None:
    """With no time to search, the floor's plan is returned: verified (solve raises otherwise),
    honest about being unproven, and never above the optimum."""
    assume(not validate(req))
    tiny = req.model_copy(update={"policy": Policy(time_limit_s=0.001)})
    # A model this small is searched whatever the clock says; treat it as a big one here. One pod
    # goes the model's way too (the enumerator answers it otherwise: solver.search.single).
    with (
        patch.object(solver.search.tiers, "MERGE_MAX_VARIABLES", -1),
        patch.object(solver.solve, "enumerable", lambda _: False),
    ):
        result = solve(tiny)
    assert result.plan_source.startswith("floor:")
    assert all(v.ms == 0 for v in result.objectives)  # no tier was searched, and it says so
    table = render_table(tiny, result)
    assert "plan: the floor's" in table
    unproven = [v for v in result.objectives if not v.optimal]
    assert table.count(", not searched)") == len(unproven)
    best = kit.best_placed_work(req)
    assert kit.placed_work(result) <= best and best[0] <= result.objectives[0].bound


def test_bounds_never_exceed_what_a_tier_can_take() -> None:
    """A reported bound above the most the tier could ever be (all work of every job) is no bound."""
    nodes = [kit.node(f"n{i}", kit.SMALL, used_gpus=(i % 4,)) for i in range(4)]
    jobs = [kit.job(f"j{i}", 1 + i % 3, members=1 + i % 2, priority=i % 3) for i in range(8)]
    result = solve(kit.request(nodes, jobs))
    most = sum((j.priority + 1) * 1000 * r.member.gpus * r.replicas for j in jobs for r in j.roles)
    work = next(v for v in result.objectives if v.tier == ObjectiveTier.PLACED_WORK)
    assert work.value <= work.bound <= most
    assert (result.gap == 0) == all(v.optimal for v in result.objectives)


def test_pods_of_one_shape_are_pooled_and_handed_back_pod_by_pod() -> None:
    nodes = [kit.node("n0", kit.SMALL, used_gpus=(0,)), kit.node("n1", kit.SMALL, used_gpus=(1, 2))]
    pods = [kit.job(f"pod{i}", 1) for i in range(6)]  # 5 free GPUs: one pod is left out
    gang = kit.job("gang", 2, members=1, locality=Locality(mode=Requirement.PREFERRED, highest_tier=1))
    req = kit.request(nodes, [*pods[:3], gang, *pods[3:]])
    pooled, pools = pool(req)
    assert len(pooled.jobs) == 2 and pools.members_of[0] == (0, 1, 2, 4, 5, 6)
    result = solve(req)
    assert [j.job_id for j in result.jobs] == [j.id for j in req.jobs]
    placed = [j for j in result.jobs if j.placed]
    assert all(len(j.members) == 1 and j.members[0].index == 0 for j in placed if j.job_id != "gang")
    jobs_tier = next(v for v in result.objectives if v.name == "placed_work.jobs")
    assert jobs_tier.value == len(placed)
    left = [j for j in result.jobs if not j.placed]
    assert left and all(j.reason is not None for j in left)
    assert {j.reason.code for j in left} <= {ReasonCode.INSUFFICIENT_CAPACITY, ReasonCode.OUTPRIORITISED}


def test_pods_with_anti_affinity_in_the_batch_are_not_pooled() -> None:
    from solver.domain.model import AntiAffinity

    pods = [kit.job(f"pod{i}", 1) for i in range(3)]
    pods[0] = pods[0].model_copy(update={"anti_affinity": (AntiAffinity(labels={"team": "a"}),)})
    pooled, pools = pool(kit.request([kit.node("n0", kit.SMALL)], pods))
    assert pooled.jobs == tuple(pods) and all(len(m) == 1 for m in pools.members_of)


def test_an_order_already_tried_is_not_run_again() -> None:
    # One job: every named order and every shuffle is the same order, so one pass is the whole floor
    # (a replay window's one-pod steps ran 36 identical passes, half of their time).
    _, candidates = floor_of(kit.request([kit.node("n0")], [kit.job("a", 1)]))
    assert [c.placer for c in candidates] == ["largest-first"]
    # Two jobs of different sizes have two orders: largest first, and the queue's (smallest first).
    _, candidates = floor_of(kit.request([kit.node("n0")], [kit.job("a", 1), kit.job("b", 2)]))
    assert sorted(c.placer for c in candidates) == ["largest-first", "queue"]


def test_the_searchs_repack_runs_only_when_its_passes_fit_the_time_left() -> None:
    req = kit.request([kit.node("n0"), kit.node("n1")], [kit.job("a", 1), kit.job("b", 2)])
    problem = problem_of(rewrite(req))
    compiled = compile_model(problem, req.policy)
    floor = Floor(problem, compiled)
    plan = portfolio(problem, compiled, time.perf_counter() + 60, floor=floor)[0].plan
    assert solver.solve.repack_in_time(problem, compiled, plan, floor, time.perf_counter()) is None
    repacked = solver.solve.repack_in_time(problem, compiled, plan, floor, time.perf_counter() + 60)
    assert repacked is not None and all(t.value_of(repacked) >= t.value_of(plan) for t in compiled.tiers[:2])


def scanned_move(floor: Floor, state, allowed, shape: int, r: int):
    """best_move's rule by a plain scan of every host class's configurations, nothing remembered:
    a node holding work before an empty one, the fullest, then the lowest class and configuration."""
    moves = [
        ((k == 0, -floor.size[c][k], c, k), (c, k, grown))
        for c in floor.hosts.get(r, ())
        if allowed is None or c in allowed
        for k in state[c]
        if (grown := floor.grown(c, k, shape)) is not None
    ]
    return min(moves)[1] if moves else None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.fabric_problems(max_nodes=8, max_jobs=5, spines=2), st.randoms(use_true_random=False))
def test_the_remembered_best_move_is_the_move_a_full_scan_picks(req, rng) -> None:
    """The floor remembers each class's best move until a node of the class moves (NodeStates).
    Through random moves, every role's best move equals the one a scan of the whole state picks."""
    assume(not validate(req))
    problem = problem_of(rewrite(req))
    compiled = compile_model(problem, req.policy)
    floor = Floor(problem, compiled)
    state = NodeStates(problem)
    shapes = {r: ref.shape for r, ref in enumerate(problem.roles)}
    assume(shapes and state)
    journal = []
    for _ in range(16):
        for r, shape in shapes.items():  # asked (and remembered, and queued) between moves
            assert best_move(floor, state, None, shape, r) == scanned_move(floor, state, None, shape, r)
            some = set(rng.sample(sorted(state), k=rng.randint(1, len(state))))
            assert best_move(floor, state, some, shape, r) == scanned_move(floor, state, some, shape, r)
        if journal and rng.random() < 0.3:
            undo(state, [journal.pop()])  # a failed try's moves are taken back
            continue
        c = rng.choice(sorted(state))
        k = rng.choice(sorted(state[c]))
        grown = floor.grown(c, k, rng.choice(list(shapes.values())))
        if grown is not None:
            state.move(c, k, grown)
            journal.append((c, k, grown))


def drawing_of(req, passes: int = 6) -> Portfolio:
    problem = problem_of(rewrite(req))
    return Portfolio(Floor(problem, compile_model(problem, req.policy)), passes, 0)


def test_the_placers_left_are_drawn_while_the_search_runs() -> None:
    """What the floor's stage had no time for is drawn on a spare core during the search, and
    waited for (up to the search's end) so that the floor does not depend on the search's speed."""
    nodes = [kit.node(f"n{i}", kit.SMALL, used_gpus=(i % 3,)) for i in range(40)]
    req = kit.request(nodes, [kit.job(f"j{i}", 1 + i % 3, members=1 + i % 2) for i in range(60)])
    everything = drawing_of(req, passes=40)
    everything.draw(time.perf_counter() + 60)
    assert everything.exhausted and everything.drawn > 1

    named = drawing_of(req, passes=40)
    named.draw(time.perf_counter(), least=3, latest=time.perf_counter() + 60)
    assert named.drawn == 3  # past the deadline until three have run, before the latest time
    named.draw(time.perf_counter(), least=8, latest=time.perf_counter())
    assert named.drawn == 3  # the latest time passed, and a plan in hand: none more (a late call)

    drawing = drawing_of(req, passes=40)
    drawing.draw(time.perf_counter())  # no time: the first placer only
    assert drawing.drawn == 1
    with drawing.meanwhile(time.perf_counter() + 60, spare_core=False):
        pass
    assert drawing.drawn == 1  # on one core it would only slow the search
    with drawing.meanwhile(time.perf_counter() + 60, spare_core=True):
        pass
    assert drawing.drawn == everything.drawn
    assert drawing.candidates()[0].values == everything.candidates()[0].values


def test_a_placer_cut_short_while_completed_drops_no_later_placer() -> None:
    """A placer cut by the floor's time while its plan is completed is dropped; the placers after
    it, drawn later on the spare core, are kept as if it had never run (it did not raise the bar
    they are ranked against), so the floor's best is the best of every placer but the one cut."""
    nodes = [kit.node(f"n{i}", kit.SMALL, used_gpus=(i % 3,)) for i in range(40)]
    req = kit.request(
        nodes, [kit.job(f"j{i}", 1 + i % 3, members=1 + i % 2, priority=i % 2) for i in range(60)]
    )
    real, calls = solver.search.floor.complete, []

    def cut_second(problem, compiled, solution):
        calls.append(1)
        if len(calls) == 2:
            raise OutOfBudget("the floor's time")
        return real(problem, compiled, solution)

    drawing = drawing_of(req, passes=40)
    with patch("solver.search.floor.complete", cut_second):
        drawing.draw(time.perf_counter() + 60, latest=time.perf_counter() + 60)
    assert len(calls) == 2  # stopped at the cut
    cut = drawing.drawn  # the placer cut was the last one drawn
    drawing.draw(time.perf_counter() + 60)  # the rest, as the spare core draws them
    _, _, placers = every_placer(req, passes=40)
    names = list(placers)
    assert drawing.candidates()[0].values == max(v for k, v in placers.items() if k != names[cut - 1])


def drawn_once() -> Portfolio:
    """Three jobs on two nodes, one placer drawn: the portfolio the drawing-thread tests start from."""
    req = kit.request([kit.node("n0"), kit.node("n1")], [kit.job("a", 1), kit.job("b", 2), kit.job("c", 3)])
    drawing = drawing_of(req)
    drawing.draw(time.perf_counter())
    return drawing


def test_a_placer_failing_on_the_spare_core_fails_the_call() -> None:
    drawing = drawn_once()

    def broken(*_):
        raise ValueError("a bug in a placer")

    with (
        patch("solver.search.floor.place_jobs", broken),
        pytest.raises(ValueError, match="a bug"),
        drawing.meanwhile(time.perf_counter() + 60, spare_core=True),
    ):
        pass


def test_a_cancelled_call_stops_the_placers_drawn_meanwhile() -> None:
    """The thread runs in the caller's context: its cancel token stops it between placers."""
    drawing = drawn_once()
    token = Cancel()
    token.trip("the caller went away")
    with cancelling(token), drawing.meanwhile(time.perf_counter() + 60, spare_core=True):
        pass
    assert drawing.drawn == 1 and not drawing.exhausted


def endless_pass(floor, done, order, counts) -> None:
    """A placer that would take 20 s, checking the token between jobs as place_jobs does."""
    for _ in cancellation.checked(range(2000)):
        time.sleep(0.01)


def test_the_placers_drawn_meanwhile_stop_mid_pass_when_the_searchs_time_is_over() -> None:
    drawing = drawn_once()
    started = time.perf_counter()
    with (
        patch("solver.search.floor.place_jobs", endless_pass),
        drawing.meanwhile(time.perf_counter() + 0.3, spare_core=True),
    ):
        pass
    assert 0.25 <= time.perf_counter() - started < 2  # waited for the time left, not for the pass
    assert drawing.drawn == 1  # the pass cut short is dropped

    started = time.perf_counter()
    with (
        patch("solver.search.floor.place_jobs", endless_pass),
        pytest.raises(RuntimeError, match="search"),
        drawing.meanwhile(time.perf_counter() + 60, spare_core=True),
    ):
        raise RuntimeError("the search failed")
    assert time.perf_counter() - started < 2  # a failed search does not wait for the placers


def test_the_placers_drawn_meanwhile_stop_once_the_search_says_enough() -> None:
    """A search that proved its answer optimal does not wait for placers that cannot better it."""
    drawing = drawn_once()
    started = time.perf_counter()
    with (
        patch("solver.search.floor.place_jobs", endless_pass),
        drawing.meanwhile(time.perf_counter() + 60, spare_core=True) as enough,
    ):
        enough()
    assert time.perf_counter() - started < 2 and drawing.drawn == 1


def test_a_one_job_batch_draws_no_shuffles_and_a_larger_one_does() -> None:
    """Every shuffle of one job is the queue's order, skipped by the portfolio as tried: the orders
    stop before seeding them (128 generators a one-pod step of a replay window)."""
    inventory = kit.inventory(kit.node("n0"), kit.node("n1", leaf="leaf1"))

    def names(jobs):
        req = kit.request(inventory, jobs)
        problem = problem_of(rewrite(req))
        compiled = compile_model(problem, req.policy)
        return [(name, order) for name, order in orders(problem, Floor(problem, compiled), 8, 0)]

    one = names([kit.job("pod", 1, 1)])
    assert [name for name, _ in one] == ["largest-first", "queue", "smallest-first", "locality-first"]
    assert {tuple(order) for _, order in one} == {(0,)}
    two = names([kit.job("a", 1, 1), kit.job("b", 2, 1)])
    assert [name for name, _ in two][4:] == [f"shuffle-{k}" for k in range(8)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.fabric_problems(max_nodes=8, max_jobs=8, spines=2))
def test_a_plan_read_back_as_a_pass_gives_the_same_plan(req) -> None:
    """``pass_of`` is the inverse of ``hint_of``: every plan of the portfolio read back as a greedy
    pass's state gives the same placement variables again (what the closer moves gangs in)."""
    assume(not validate(req))
    problem = problem_of(rewrite(req))
    compiled = compile_model(problem, req.policy)
    drawing = Portfolio(Floor(problem, compiled), 2, 0)
    drawing.draw(time.perf_counter() + 60)
    for candidate in drawing.candidates():
        again = hint_of(compiled, pass_of(compiled, problem, candidate.plan))
        assert again == {name: candidate.plan[name] for name in again}, candidate.placer
