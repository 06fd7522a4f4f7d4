"""Large neighbourhood search on the locality tiers (solver.search.neighbourhood): a round frees one
spread gang and the jobs around it, fixes the rest, and keeps what scores better; the tiers above
stay as they were, the model stays the same model, and the answer is verified like any other."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from ortools.sat.python import cp_model

from solver.answer.verify import verify
from solver.compile import compile_model
from solver.compile.objective import hold
from solver.domain.model import Locality, Policy, Requirement, SolveRequest
from solver.reduce.chain import problem_of, rewrite
from solver.search import neighbourhood, tiers
from solver.search.neighbourhood import Neighbourhoods, improve
from solver.solve import solve
from tests import kit
from tests.kit.oracle import fabric_problems

SOFT = Locality(mode=Requirement.PREFERRED)


@pytest.fixture
def every_model_searched_by_neighbourhoods(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Small models searched as a big one's are: tier by tier, the locality tiers a neighbourhood
    at a time. Yields the names of the tiers :func:`improve` was run on."""
    ran: list[str] = []
    real = neighbourhood.improve

    def spy(hoods, tier, *args, **kwargs):  # type: ignore[no-untyped-def]
        ran.append(tier.name)
        return real(hoods, tier, *args, **kwargs)

    monkeypatch.setattr(neighbourhood, "MIN_VARIABLES", 0)
    monkeypatch.setattr(neighbourhood, "improve", spy)
    monkeypatch.setattr(tiers, "MERGE_MAX_VARIABLES", 0)
    yield ran


def spread_start() -> tuple[SolveRequest, object, object, dict[str, int]]:
    """Two leaves under two spines, two free four-GPU nodes under each; a gang of two four-GPU
    members that prefers one leaf, and a plan that puts one member under each leaf."""
    nodes = [kit.node(f"a{i}", kit.SMALL, leaf="leaf0") for i in range(2)]
    nodes += [kit.node(f"b{i}", kit.SMALL, leaf="leaf1") for i in range(2)]
    request = rewrite(kit.request(nodes, [kit.job("g", 4, members=2, locality=SOFT)], kit.fat_tree(2, 2)))
    problem = problem_of(request)
    compiled = compile_model(problem, request.policy)
    # A plan with the gang split (each leaf's class holds one member), found on a copy of the model.
    split = compiled.model.clone()
    for var in compiled.y.values():
        split.add(split.get_int_var_from_proto_index(var.index) == 1)
    solver = cp_model.CpSolver()
    assert solver.solve(split) == cp_model.OPTIMAL
    start = dict(zip(tiers.variable_names(compiled.model), solver.response_proto.solution, strict=True))
    return request, problem, compiled, start


def test_a_round_brings_a_spread_gang_under_one_leaf(monkeypatch: pytest.MonkeyPatch) -> None:
    request, problem, compiled, start = spread_start()
    monkeypatch.setattr(neighbourhood, "MIN_VARIABLES", 0)
    hoods = Neighbourhoods.of(problem, compiled)
    assert hoods is not None and hoods.spread([start[n] for n in tiers.variable_names(compiled.model)]) == [0]
    locality = next(t for t in compiled.tiers if t.name == "topology.locality")
    for tier in compiled.tiers[: compiled.tiers.index(locality)]:
        hold(compiled.model, tier, tier.value_of(start))
    tiers.maximize(compiled.model, locality)

    def search(plan: dict[str, int], seconds: float, units: float) -> dict[str, int] | None:
        tiers.apply_hint(compiled.model, plan)
        return tiers.run_tier(compiled.model, locality, request.policy, seconds, units).solution

    names = tiers.variable_names(compiled.model)
    before = [list(v.domain) for v in compiled.model.proto.variables]
    value, plan = improve(hoods, locality, start, names, Policy(), 2.0, 2.0, search)
    # The rounds narrowed member variables' domains and restored them: the model is the same one.
    assert [list(v.domain) for v in compiled.model.proto.variables] == before
    assert value.value > locality.value_of(start)
    members = {c: plan[var.name] for (_, c), var in compiled.y.items() if plan[var.name]}
    assert sorted(members.values()) == [2]  # both members in one leaf's class
    assert hoods.spread([plan[n] for n in names]) == []


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(request=fabric_problems(max_nodes=6, max_jobs=4))
def test_neighbourhoods_keep_the_tiers_above_and_answer_verified(
    request: SolveRequest, every_model_searched_by_neighbourhoods: list[str]
) -> None:
    """Searched a neighbourhood at a time, the answer places exactly what the whole-model search
    places (the tiers above the locality tiers are held before a round starts), and verifies."""
    plain = solve(request)
    every_model_searched_by_neighbourhoods.clear()
    ours = solve(request)
    assert verify(request, ours) == ()
    placed = [v.value for v in plain.objectives if v.name.startswith("placed_work")]
    assert [v.value for v in ours.objectives if v.name.startswith("placed_work")] == placed


def test_the_rounds_ran_and_answer_alike_on_every_run(
    every_model_searched_by_neighbourhoods: list[str],
) -> None:
    """A batch with a spread gang to bring close: the rounds run, and a deterministic search gives
    the same answer twice (its rounds come from the time limit, not the clock)."""
    nodes = [kit.node(f"a{i}", kit.SMALL, leaf="leaf0", used_gpus=(0,) if i else ()) for i in range(3)]
    nodes += [kit.node(f"b{i}", kit.SMALL, leaf="leaf1") for i in range(2)]
    jobs = [kit.job("g", 4, members=2, locality=SOFT), kit.job("p", 2), kit.job("q", 1)]
    request = kit.request(nodes, jobs, kit.fat_tree(2, 2))
    first, second = solve(request), solve(request)
    assert "topology.locality" in every_model_searched_by_neighbourhoods
    assert [j.members for j in first.jobs] == [j.members for j in second.jobs]
    assert first.jobs[0].leaves_spanned == 1


def test_a_round_narrows_member_domains_and_restores_them_even_when_its_search_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``narrowed`` fixes the member variables it is given for the round and gives every one its
    domain back afterwards, also when the search in the round raises (a cancelled call)."""
    _, problem, compiled, start = spread_start()
    monkeypatch.setattr(neighbourhood, "MIN_VARIABLES", 0)
    hoods = Neighbourhoods.of(problem, compiled)
    assert hoods is not None
    names = tiers.variable_names(compiled.model)
    values = [start[n] for n in names]
    indexes = [var.index for var in compiled.y.values()]
    variables = compiled.model.proto.variables
    before = [list(v.domain) for v in variables]
    with pytest.raises(RuntimeError), neighbourhood.narrowed(hoods, indexes, values):
        assert all(list(variables[i].domain) == [values[i], values[i]] for i in indexes)
        raise RuntimeError("the search failed")
    assert [list(v.domain) for v in variables] == before


def test_a_neighbourhood_frees_the_jobs_of_every_region_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fixed`` frees the gang, every job in a region the gang uses and every job in each region
    it is told to open (``bench.locality_proof`` opens the regions where the greedy put the gang);
    a job elsewhere stays fixed."""
    nodes = [kit.node(f"n{i}", kit.SMALL, leaf=f"leaf{i}") for i in range(4)]  # leaf i under spine i
    jobs = [
        kit.job("g", 4, members=2, locality=SOFT),
        kit.job("p0", 4, locality=SOFT),
        kit.job("p1", 3, locality=SOFT),
    ]
    request = rewrite(kit.request(nodes, jobs, kit.fat_tree(4, 4)))
    problem = problem_of(request)
    compiled = compile_model(problem, request.policy)
    monkeypatch.setattr(neighbourhood, "MIN_VARIABLES", 0)
    hoods = Neighbourhoods.of(problem, compiled)
    assert hoods is not None
    # The gang on n0 and n1, p0 on n2, p1 on n3 (ruled jobs: not pooled, each its own variables).
    where = {"g": ("n0", "n1"), "p0": ("n2",), "p1": ("n3",)}
    values = [0] * len(compiled.model.proto.variables)
    for (r, c), var in compiled.y.items():
        job = request.jobs[problem.roles[r].job_index].id
        on = {node.name for node in problem.classes[c].nodes}
        values[var.index] = sum(1 for name in where[job] if name in on)
    p0, p1 = hoods.job_vars[1], hoods.job_vars[2]
    fixed = set(hoods.fixed(0, (), values))
    assert not fixed & set(hoods.job_vars[0]) and set(p0) <= fixed and set(p1) <= fixed
    spine_of_n2 = hoods.region[next(c for c, k in hoods.job_members[1] if values[k])]
    fixed = set(hoods.fixed(0, {spine_of_n2}, values))
    assert not fixed & set(p0) and set(p1) <= fixed
    both = {hoods.region[c] for j in (1, 2) for c, k in hoods.job_members[j] if values[k]}
    assert not set(hoods.fixed(0, both, values)) & (set(p0) | set(p1))
