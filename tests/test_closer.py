"""Gangs brought closer (solver/search/closer.py): a gang moved under a lower switch by moving the
small jobs in its way, every job placed as before, the plan ranking higher and verified."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from solver.answer.verify import verify
from solver.compile import compile_model
from solver.domain.model import Job, Locality, Node, Requirement, SolveRequest
from solver.domain.validate import validate
from solver.reduce.chain import problem_of, rewrite
from solver.search.closer import CLOSER, brought_closer, closer
from solver.search.floor import (
    Candidate,
    Floor,
    Pass,
    Portfolio,
    complete,
    hint_of,
    place_job,
    placement_tiers,
)
from tests import kit

PREFERRED = Locality(mode=Requirement.PREFERRED)


def _floor(request: SolveRequest) -> tuple[Floor, SolveRequest]:
    request = rewrite(request)
    problem = problem_of(request)
    return Floor(problem, compile_model(problem, request.policy)), request


def _leaf(floor: Floor, leaf: str) -> set[int]:
    return {c.index for c in floor.problem.classes if c.leaf == leaf}


def _job(floor: Floor, job_id: str) -> int:
    return next(j for j, job in enumerate(floor.problem.request.jobs) if job.id == job_id)


def _tier(floor: Floor, name: str, plan: dict[str, int]) -> int:
    return next(t for t in floor.compiled.tiers if t.name == name).value_of(plan)


def test_a_gang_split_by_small_jobs_moves_under_one_leaf_and_they_move_aside() -> None:
    """Two leaves of two 8-GPU nodes; a 5-GPU job on a node of each leaf (put there by hand, as a
    greedy order can leave them), so the two-node gang that came after spans both leaves. Moving the
    5-GPU job of one leaf to the other leaf's free node makes room for the gang under one leaf."""
    nodes = [kit.node(f"n{i}", leaf=f"leaf{i // 2}") for i in range(4)]
    jobs = [
        kit.job("gang", 8, 2, locality=PREFERRED),
        kit.job("small-a", 5),
        kit.job("small-b", 6),  # unlike small-a, or the two would be pooled as one job's pods
    ]
    floor, request = _floor(kit.request(nodes, jobs, kit.fat_tree(2)))
    problem, compiled = floor.problem, floor.compiled
    done = Pass.empty(problem)
    assert place_job(floor, done, _job(floor, "small-a"), {}, [_leaf(floor, "leaf0")])
    assert place_job(floor, done, _job(floor, "small-b"), {}, [_leaf(floor, "leaf1")])
    assert place_job(floor, done, _job(floor, "gang"), {}, [None])
    plan = complete(problem, compiled, hint_of(compiled, done))
    before = kit.plan_answer(problem, compiled, request, plan)
    assert len(_gang_leaves(request, before)) == 2  # the plan the move starts from

    moved = closer(floor, plan, time.perf_counter() + 30)

    assert moved is not None
    answer = kit.plan_answer(problem, compiled, request, moved)
    assert not verify(request, answer)
    assert len(_gang_leaves(request, answer)) == 1
    assert {j.job_id for j in answer.jobs if j.placed} == {"gang", "small-a", "small-b"}
    assert _tier(floor, "topology.locality", moved) > _tier(floor, "topology.locality", plan)


def _gang_leaves(request: SolveRequest, answer) -> set[str]:
    return _job_leaves(request, answer, "gang")


def _job_leaves(request: SolveRequest, answer, job_id: str) -> set[str]:
    leaf = {n.name: n.leaf for n in request.inventory.nodes}
    return {leaf[m.node] for j in answer.jobs if j.job_id == job_id for m in j.members}


def test_a_gang_whose_way_is_held_by_jobs_that_can_go_nowhere_else_stays() -> None:
    """The same plan, but each 5- or 6-GPU job may only run on the one node it is on (a node
    selector): no leaf can be emptied for the gang, and the plan stays as it was (None: no move)."""
    nodes = [kit.node(f"n{i}", leaf=f"leaf{i // 2}", labels={"slot": f"s{i}"}) for i in range(4)]
    jobs = [
        kit.job("gang", 8, 2, locality=PREFERRED),
        kit.job("small-a", 5, selector={"slot": "s0"}),
        kit.job("small-b", 6, selector={"slot": "s2"}),
    ]
    floor, _ = _floor(kit.request(nodes, jobs, kit.fat_tree(2)))
    problem, compiled = floor.problem, floor.compiled
    done = Pass.empty(problem)
    assert place_job(floor, done, _job(floor, "small-a"), {})
    assert place_job(floor, done, _job(floor, "small-b"), {})
    assert place_job(floor, done, _job(floor, "gang"), {})
    plan = complete(problem, compiled, hint_of(compiled, done))
    assert _tier(floor, "topology.leaves_spanned", plan) == -2  # split, as the test means it

    assert closer(floor, plan, time.perf_counter() + 30) is None


def _placed_by_hand(
    nodes: list[Node], placed: list[tuple[Job, str | None]]
) -> tuple[Floor, SolveRequest, dict[str, int]]:
    """The floor of the jobs on ``nodes`` under one spine of leaves, and a plan with the jobs
    placed in turn, each inside its leaf (None: where the floor would), as a greedy order can leave
    them."""
    leaves = len({n.leaf for n in nodes})
    floor, request = _floor(kit.request(nodes, [job for job, _ in placed], kit.fat_tree(leaves)))
    done = Pass.empty(floor.problem)
    for job, leaf in placed:
        assert place_job(floor, done, _job(floor, job.id), {}, None if leaf is None else [_leaf(floor, leaf)])
    return floor, request, complete(floor.problem, floor.compiled, hint_of(floor.compiled, done))


def test_a_gang_moves_into_the_one_leaf_whose_jobs_can_move_after_every_other_leaf_fails() -> None:
    """Four leaves of two nodes under one spine. In leaves 0-2 a job pinned to its node (a node
    selector) holds one node, the gang took two of the free nodes left there; leaf 3 holds two
    small jobs that may run anywhere. Leaves 0-2 come first (one member of the batch each, against
    two) and each fails (its pinned job cannot go back); leaf 3, the fourth tried, takes the gang
    and its jobs move to the nodes the gang left. (With three domains tried per gang, session 33's
    closer stopped before it.)"""
    nodes = [kit.node(f"n{i}", leaf=f"leaf{i // 2}", labels={"slot": f"s{i}"}) for i in range(8)]
    floor, request, plan = _placed_by_hand(
        nodes,
        [
            (kit.job("pinned-0", 5, selector={"slot": "s0"}), None),
            (kit.job("pinned-2", 6, selector={"slot": "s2"}), None),
            (kit.job("pinned-4", 7, selector={"slot": "s4"}), None),
            (kit.job("free-a", 5), "leaf3"),
            (kit.job("free-b", 6), "leaf3"),
            (kit.job("gang", 8, 2, locality=PREFERRED), None),
        ],
    )
    problem, compiled = floor.problem, floor.compiled
    before = kit.plan_answer(problem, compiled, request, plan)
    assert len(_gang_leaves(request, before)) == 2 and "leaf3" not in _gang_leaves(request, before)
    assert _job_leaves(request, before, "free-a") == _job_leaves(request, before, "free-b") == {"leaf3"}

    moved = closer(floor, plan, time.perf_counter() + 30)

    assert moved is not None
    answer = kit.plan_answer(problem, compiled, request, moved)
    assert not verify(request, answer)
    assert _gang_leaves(request, answer) == {"leaf3"}
    assert all(j.placed for j in answer.jobs)


def test_a_gang_in_the_way_that_must_stay_in_one_leaf_goes_where_small_jobs_move_aside() -> None:
    """Four leaves of two nodes. Gang A (PREFERRED leaf, only on leaves 0-2 by its selector) spans
    leaves 0 and 1, whose other nodes hold pinned jobs; gang B (REQUIRED: one leaf) fills leaf 2;
    two small jobs fill leaf 3. A can go closer only into leaf 2, and B then fits in no leaf as
    the plan stands: only once the small jobs of leaf 3 move to the nodes A left does B find room
    there (:func:`solver.search.closer.make_room`). Without that step the plan stays as it was."""
    nodes = [
        kit.node(f"n{i}", leaf=f"leaf{i // 2}", labels={"slot": f"s{i}", "pool": "a" if i < 6 else "b"})
        for i in range(8)
    ]
    bound = Locality(mode=Requirement.REQUIRED, highest_tier=1)
    floor, request, plan = _placed_by_hand(
        nodes,
        [
            (kit.job("pinned-1", 5, selector={"slot": "s1"}), None),
            (kit.job("pinned-3", 6, selector={"slot": "s3"}), None),
            (kit.job("leafbound", 8, 2, locality=bound), "leaf2"),
            (kit.job("small-a", 5), "leaf3"),
            (kit.job("small-b", 6), "leaf3"),
            (kit.job("gang", 8, 2, locality=PREFERRED, selector={"pool": "a"}), None),
        ],
    )
    problem, compiled = floor.problem, floor.compiled
    assert _gang_leaves(request, kit.plan_answer(problem, compiled, request, plan)) == {"leaf0", "leaf1"}

    moved = closer(floor, plan, time.perf_counter() + 30)

    assert moved is not None
    answer = kit.plan_answer(problem, compiled, request, moved)
    assert not verify(request, answer)
    assert _gang_leaves(request, answer) == {"leaf2"}
    assert _job_leaves(request, answer, "leafbound") == {"leaf3"}
    assert all(j.placed for j in answer.jobs)


@st.composite
def split_gangs(draw: st.DrawFn) -> SolveRequest:
    """Gangs of two to four nodes, one with a PREFERRED leaf and maybe one bound to a leaf, and
    single-node jobs of 1-8 GPUs, on two to four leaves of two or three nodes with GPUs in use:
    batches whose plans leave gangs split."""
    leaves = draw(st.integers(2, 4))
    per_leaf = draw(st.integers(2, 3))
    nodes = [
        kit.node(
            f"n{i}",
            leaf=f"leaf{i // per_leaf}",
            used_gpus=sorted(draw(st.sets(st.integers(0, 7), max_size=3))),
        )
        for i in range(leaves * per_leaf)
    ]
    # The first gang is the one to bring closer; a second may be bound to one leaf (REQUIRED), a
    # gang in the way that finds room again only where small jobs move aside (make_room).
    bound = Locality(mode=Requirement.REQUIRED, highest_tier=1)
    jobs = [
        kit.job(
            f"gang{k}",
            draw(st.sampled_from([4, 8])),
            draw(st.integers(2, 4)),
            locality=PREFERRED if k == 0 else draw(st.sampled_from([PREFERRED, bound])),
        )
        for k in range(draw(st.integers(1, 2)))
    ]
    sizes = [draw(st.sampled_from([1, 2, 4, 5, 8])) for _ in range(draw(st.integers(1, 6)))]
    jobs += [kit.job(f"pod{k}", gpus) for k, gpus in enumerate(sizes)]
    return kit.request(nodes, jobs, kit.fat_tree(leaves, draw(st.integers(1, 2))))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(split_gangs(), kit.fabric_problems(max_nodes=6, max_jobs=6, spines=2)))
def test_a_plan_brought_closer_places_the_same_work_ranks_higher_and_verifies(request: SolveRequest) -> None:
    """Over every plan of the floor's portfolio: brought closer, a plan places the same work level by
    level and starts the same jobs, ranks strictly higher on the tiers (a higher locality tier, or
    the same with fewer leaves spanned), and decodes to a plan the verifier passes."""
    assume(not validate(request))
    floor, request = _floor(request)
    problem, compiled = floor.problem, floor.compiled
    drawing = Portfolio(floor, 2, 0)
    drawing.draw(time.perf_counter() + 60)
    placing = placement_tiers(compiled)
    topology = [i for i, t in enumerate(compiled.tiers) if t.name.startswith("topology.")]
    for candidate in drawing.candidates():
        moved = closer(floor, candidate.plan, time.perf_counter() + 30)
        if moved is None:
            continue
        values = tuple(t.value_of(moved) for t in compiled.tiers)
        assert values[:placing] == candidate.values[:placing]
        first = topology[0]
        assert values[first : first + 2] > candidate.values[first : first + 2]
        assert not verify(request, kit.plan_answer(problem, compiled, request, moved)), candidate.placer
        found = brought_closer(floor, candidate, time.perf_counter() + 30)
        if values > candidate.values:
            assert found is not None and found.placer == candidate.placer + CLOSER
            assert found.values == values
        else:  # a tier above locality (a custom order) ranks it lower: not kept
            assert found is None


def test_the_portfolio_brings_its_best_plan_closer_once_while_the_search_runs() -> None:
    """With a closer, the portfolio's best plan is brought closer on the spare core (after the
    outside placer when that goes first, and once more at the end for a new best), each plan once;
    what it returns is kept beside the plans drawn."""
    nodes = [kit.node(f"n{i}", leaf=f"leaf{i // 2}") for i in range(4)]
    floor, _ = _floor(kit.request(nodes, [kit.job("gang", 8, 2, locality=PREFERRED)], kit.fat_tree(2)))
    seen: list[str] = []

    def closer_(candidate: Candidate, ends: float) -> Candidate | None:
        seen.append(candidate.placer)
        return Candidate(candidate.placer + CLOSER, candidate.plan, (*candidate.values[:-1], 10**9))

    drawing = Portfolio(floor, 0, 0, closer=closer_)
    drawing.draw(time.perf_counter() + 60, least=1)
    with drawing.meanwhile(time.perf_counter() + 30, spare_core=True):
        pass
    best = drawing.candidates()[0]
    assert best.placer.endswith(CLOSER)
    assert len(seen) == 1  # once: the plan brought closer is not brought closer again
