"""A plan the caller holds (``SolveRequest.previous``, solver.search.previous): where it still holds
the floor starts from it, the answer is never worse than it completed greedily, equal plans keep
it, and a stale one (nodes gone, work started, a batch that changed) is never an error."""

from __future__ import annotations

import time
from unittest.mock import patch

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import solver.search.tiers
import solver.solve
from solver.compile import compile_model
from solver.domain.model import Locality, Policy, Requirement, SolveRequest, SolveStatus
from solver.domain.validate import validate
from solver.reduce.chain import problem_of, rewrite
from solver.search.floor import Floor
from solver.search.previous import from_previous, holding, previous_members
from solver.service.wire import request_from_proto, request_to_proto
from solver.solve import solve
from tests import kit


def previous_candidate(req: SolveRequest):
    return previous_floor(req)[2]


def previous_floor(req: SolveRequest):
    """The problem, its model and the floor's candidate made from ``req.previous``."""
    problem = problem_of(rewrite(req))
    compiled = compile_model(problem, req.policy)
    floor = Floor(problem, compiled)
    return (
        problem,
        compiled,
        from_previous(problem, compiled, floor, req.previous, [job.id for job in req.jobs]),
    )


def nodes_of(result) -> dict[str, list[str]]:
    return {jr.job_id: sorted(m.node for m in jr.members) for jr in result.jobs if jr.placed}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kit.fabric_problems(max_nodes=5, max_jobs=4, spines=2))
def test_with_no_time_to_search_the_previous_optimal_plan_is_the_answer(req) -> None:
    """The same request again, with its optimal answer as the previous plan and no time to search:
    the floor starts from that plan, so the answer is as good, tier by tier (the plan is read back
    exactly: every job, pool and member where it was)."""
    assume(not validate(req))
    first = solve(req)
    assume(first.status == SolveStatus.OPTIMAL)
    tiny = req.model_copy(update={"policy": Policy(time_limit_s=0.001), "previous": first.jobs})
    with (
        patch.object(solver.search.tiers, "MERGE_MAX_VARIABLES", -1),  # a small model is searched otherwise
        patch.object(solver.solve, "enumerable", lambda _: False),  # one pod: enumerated otherwise
    ):
        again = solve(tiny)
    assert again.plan_source.startswith("floor:")
    assert [v.value for v in again.objectives] == [v.value for v in first.objectives]


def test_a_stale_plan_is_taken_where_it_holds_and_the_rest_placed_again() -> None:
    nodes = [kit.node(f"n{i}", kit.SMALL) for i in range(3)]
    jobs = [kit.job("a", 4), kit.job("b", 3), kit.job("c", 2)]  # no two alike: nothing pooled
    first = solve(kit.request(nodes, jobs))
    assert all(jr.placed for jr in first.jobs)
    gone = next(m.node for jr in first.jobs if jr.job_id == "a" for m in jr.members)
    # a's node has gone, c has started running and left the batch, d is new.
    later = kit.request([n for n in nodes if n.name != gone], [jobs[0], jobs[1], kit.job("d", 1)]).model_copy(
        update={"previous": first.jobs}
    )
    problem, compiled, held = previous_floor(later)
    b = [job.id for job in later.jobs].index("b")
    (node,) = nodes_of(first)["b"]
    (cls,) = [c.index for c in problem.classes if node in {n.name for n in c.nodes}]
    assert held.plan[compiled.placed[b].name] == 1  # b where it was: its node still takes it
    assert held.plan[
        compiled.y[next(r for r, ref in enumerate(problem.roles) if ref.job_index == b), cls].name
    ]
    d = [job.id for job in later.jobs].index("d")
    assert held.plan[compiled.placed[d].name] == 1  # the new job placed after it
    result = solve(later)  # verified inside: a's placement, on a node gone, is not taken
    assert tuple(v.value for v in result.objectives) >= held.values
    assert {jr.job_id for jr in result.jobs if jr.placed} >= {"b", "d"}


def test_the_previous_plan_crosses_the_wire() -> None:
    req = kit.request([kit.node("n0", kit.SMALL)], [kit.job("a", 1)])
    req = req.model_copy(update={"previous": solve(req).jobs})
    assert request_from_proto(request_to_proto(req)).previous == req.previous


@st.composite
def replans(draw: st.DrawFn) -> SolveRequest:
    """A batch solved, then asked again after the cluster and the batch changed: a node gone, a node
    busier, a job gone or new, a rule tightened; the first answer as the previous plan."""
    req = draw(kit.fabric_problems(max_nodes=5, max_jobs=4, spines=2))
    assume(not validate(req))
    first = solve(req.model_copy(update={"policy": req.policy.model_copy(update={"time_limit_s": 2.0})}))
    nodes = list(req.inventory.nodes)
    if len(nodes) > 2 and draw(st.booleans()):
        nodes.pop(draw(st.integers(0, len(nodes) - 1)))
    if draw(st.booleans()):
        k = draw(st.integers(0, len(nodes) - 1))
        nodes[k] = kit.node(
            nodes[k].name, kit.SMALL, leaf=nodes[k].leaf, used_gpus=sorted(draw(st.sets(st.integers(0, 3))))
        )
    jobs = list(req.jobs)
    if len(jobs) > 1 and draw(st.booleans()):
        jobs.pop(draw(st.integers(0, len(jobs) - 1)))
    if draw(st.booleans()):
        k = draw(st.integers(0, len(jobs) - 1))
        jobs[k] = jobs[k].model_copy(update={"locality": Locality(mode=Requirement.REQUIRED, highest_tier=1)})
    if draw(st.booleans()):
        jobs.append(kit.job("new", draw(st.integers(1, 4)), members=draw(st.integers(1, 2))))
    return req.model_copy(
        update={
            "inventory": req.inventory.model_copy(update={"nodes": tuple(nodes)}),
            "jobs": tuple(jobs),
            "previous": first.jobs,
        }
    )


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(replans())
def test_an_answer_is_never_worse_than_the_previous_plan_where_it_holds(req) -> None:
    assume(not validate(req))
    held = previous_candidate(req)
    started = time.perf_counter()
    result = solve(req)  # verified inside: a stale placement never reaches the answer
    assert time.perf_counter() - started < 60
    event("a previous plan" if held is not None else "nothing of it in the batch")
    if held is not None:
        assert tuple(v.value for v in result.objectives) >= held.values


def test_members_a_node_can_no_longer_hold_together_are_not_taken() -> None:
    """a and b (2 GPUs each) shared n0; one of its 4 GPUs is busy now: either fits alone, not both,
    so neither previous placement is taken (each node's members must still make a configuration)."""
    jobs = [kit.job("a", 2, priority=1), kit.job("b", 2)]  # priorities apart: not pooled
    first = solve(kit.request([kit.node("n0", kit.SMALL)], jobs))
    assert nodes_of(first) == {"a": ["n0"], "b": ["n0"]}
    later = kit.request([kit.node("n0", kit.SMALL, used_gpus=(3,)), kit.node("n1", kit.SMALL)], jobs)
    problem, compiled, held = previous_floor(later.model_copy(update={"previous": first.jobs}))
    floor = Floor(problem, compiled)
    members = previous_members(problem, first.jobs, [job.id for job in later.jobs])
    assert set(members) == {(0, "a"), (1, "b")} and not holding(problem, floor, members)
    assert held is not None  # both placed again, by the greedy
    result = solve(later.model_copy(update={"previous": first.jobs}))  # verified inside
    assert set(nodes_of(result)) == {"a", "b"}
