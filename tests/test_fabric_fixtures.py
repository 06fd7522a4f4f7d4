"""The fabric fixtures of issue 3 mean what fixtures/requests/README.md says, and the solver meets
every hard fabric rule on them.

Each fixture is solved once (policy time limit cut to 5 s so the module stays well under 30 s); the
rules are then checked here from the members' nodes and the inventory — the lowest common switch of
a gang's leaves, the NVLink domains of its nodes — not from what the result reports, which is
checked against the same computation.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

import pytest

from bench.fabric import Tree, multi_member, violations
from solver.baselines import volcano
from solver.domain.model import (
    Distance,
    JobResult,
    MemberPlacement,
    NicMode,
    Requirement,
    SolveRequest,
    SolveResult,
)
from solver.domain.validate import validate
from solver.ingest.files import load_request
from solver.solve import solve

REQUESTS = Path(__file__).resolve().parents[1] / "fixtures" / "requests"
NAMES = ("fattree-256.json", "rail-64.json", "nvl72-4racks.json")
TEST_TIME_LIMIT_S = 5.0

pytestmark = pytest.mark.needs_pipeline


@pytest.fixture(scope="module")
def requests() -> dict[str, SolveRequest]:
    return {name: load_request(REQUESTS / name) for name in NAMES}


@pytest.fixture(scope="module")
def results(requests: dict[str, SolveRequest]) -> dict[str, SolveResult]:
    out = {}
    for name, request in requests.items():
        policy = request.policy.model_copy(update={"time_limit_s": TEST_TIME_LIMIT_S})
        out[name] = solve(request.model_copy(update={"policy": policy}))
    return out


def lowest_common_tier(request: SolveRequest, nodes: list[str]) -> int | None:
    """nodes → leaves → the tier of the lowest switch above all of them (0 for one node)."""
    if len(set(nodes)) <= 1:
        return 0
    switches = {s.id: s for s in request.inventory.switches}
    leaf = {n.name: n.leaf for n in request.inventory.nodes}

    def up(switch: str) -> list[str]:
        chain = []
        while switch:
            chain.append(switch)
            switch = switches[switch].parent
        return chain

    chains = [set(up(leaf[n])) for n in set(nodes)]
    common = set.intersection(*chains)
    return min((switches[s].tier for s in common), default=None)


def nodes_of(members: tuple[MemberPlacement, ...], roles: set[str] | None = None) -> list[str]:
    return [m.node for m in members if roles is None or m.role in roles]


# --------------------------------------------------------------------------- the fixtures themselves


@pytest.mark.parametrize("name", NAMES)
def test_fixture_is_valid_with_a_10s_limit(requests: dict[str, SolveRequest], name: str) -> None:
    request = requests[name]
    assert validate(request) == ()
    assert request.policy.time_limit_s == 10.0
    assert request.request_id == name.removesuffix(".json")
    assert all(j.rail_aligned == Requirement.NONE for j in request.jobs)  # not implemented yet


@pytest.mark.parametrize("name", NAMES)
def test_fixture_is_partly_loaded(requests: dict[str, SolveRequest], name: str) -> None:
    nodes = requests[name].inventory.nodes
    used = sum(len(a.gpus) for n in nodes for a in n.allocations)
    total = sum(len(n.gpus) for n in nodes)
    assert 0.4 <= used / total <= 0.7


def test_fattree_shape_and_batch(requests: dict[str, SolveRequest]) -> None:
    request = requests["fattree-256.json"]
    tiers = Counter(s.tier for s in request.inventory.switches)
    assert tiers == {1: 8, 2: 2, 3: 1}
    assert Counter(n.leaf for n in request.inventory.nodes) == {f"leaf-{k}": 32 for k in range(1, 9)}
    gangs = [j for j in request.jobs if j.id.startswith("gang-")]
    assert len(gangs) == 30
    sizes = [j.roles[0].replicas for j in gangs]
    assert min(sizes) == 2 and max(sizes) == 32
    for job in gangs:
        (role,) = job.roles
        shape = role.member
        assert shape.gpus == 8 and shape.nics.mode == NicMode.PER_GPU
        assert shape.alignment.mode == Requirement.REQUIRED and shape.alignment.distance == Distance.PIX
    modes = Counter((j.locality.mode, j.locality.highest_tier) for j in gangs)
    assert modes[Requirement.REQUIRED, 1] and modes[Requirement.REQUIRED, 2]
    assert sum(n for (mode, _), n in modes.items() if mode == Requirement.PREFERRED) >= 10
    assert sum(1 for j in request.jobs if j.role_affinity) == 3
    assert sum(1 for j in request.jobs if not multi_member(j)) >= 5


def test_rail_64_has_8_rails(requests: dict[str, SolveRequest]) -> None:
    request = requests["rail-64.json"]
    assert len(request.inventory.nodes) == 64
    for node in request.inventory.nodes:
        assert [(n.name, n.rail) for n in node.nics] == [(f"mlx5_{k}", k) for k in range(8)]
    modes = {j.locality.mode for j in request.jobs}
    assert {Requirement.REQUIRED, Requirement.PREFERRED} <= modes


def test_nvl72_racks_are_domains_and_leaves(requests: dict[str, SolveRequest]) -> None:
    request = requests["nvl72-4racks.json"]
    racks = Counter((n.nvlink_domain, n.leaf) for n in request.inventory.nodes)
    assert racks == {(f"nvl72-{r}", f"leaf-rack-{r}"): 18 for r in range(1, 5)}
    assert {len(n.gpus) for n in request.inventory.nodes} == {4}
    modes = Counter(j.nvlink_domain for j in request.jobs)
    assert modes[Requirement.REQUIRED] and modes[Requirement.PREFERRED]
    big = next(j for j in request.jobs if j.id == "nvl-16n-64g")
    assert big.roles[0].replicas * big.roles[0].member.gpus == 64


# --------------------------------------------------------------------------- the solver's answers


@pytest.mark.parametrize("name", NAMES)
def test_every_required_locality_rule_holds(
    requests: dict[str, SolveRequest], results: dict[str, SolveResult], name: str
) -> None:
    request, result = requests[name], results[name]
    jobs = {j.id: j for j in request.jobs}
    checked = 0
    for jr in result.jobs:
        if not jr.placed:
            continue
        job = jobs[jr.job_id]
        # (highest tier, roles) of every hard rule: job locality, role locality, role affinity
        # (whose unset mode means REQUIRED and unset tier means 1).
        hard: list[tuple[int, set[str] | None]] = []
        if job.locality.mode == Requirement.REQUIRED and job.locality.highest_tier:
            hard.append((job.locality.highest_tier, None))
        hard += [
            (r.locality.highest_tier, {r.name})
            for r in job.roles
            if r.locality.mode == Requirement.REQUIRED and r.locality.highest_tier
        ]
        hard += [
            (1 if p.highest_tier is None else p.highest_tier, {p.role_a, p.role_b})
            for p in job.role_affinity
            if p.mode in (Requirement.REQUIRED, Requirement.UNSPECIFIED)
        ]
        for limit, roles in hard:
            tier = lowest_common_tier(request, nodes_of(jr.members, roles))
            assert tier is not None and tier <= limit, f"{jr.job_id} {roles}: tier {tier} > {limit}"
            checked += 1
    assert checked >= 2  # each fixture has hard rules and the solver places some of those jobs


@pytest.mark.parametrize("name", NAMES)
def test_required_nvlink_domain_jobs_are_in_one_domain(
    requests: dict[str, SolveRequest], results: dict[str, SolveResult], name: str
) -> None:
    request, result = requests[name], results[name]
    domain = {n.name: n.nvlink_domain for n in request.inventory.nodes}
    jobs = {j.id: j for j in request.jobs}
    for jr in result.jobs:
        if jr.placed and jobs[jr.job_id].nvlink_domain == Requirement.REQUIRED:
            domains = {domain[n] for n in nodes_of(jr.members)}
            assert len(domains) == 1 and "" not in domains, (jr.job_id, domains)
            assert jr.nvlink_domains_spanned == 1


def test_the_64_gpu_gang_is_inside_one_rack(results: dict[str, SolveResult]) -> None:
    """Only rack 3 has 16 idle trays: the highest-priority job fits exactly there."""
    big = next(jr for jr in results["nvl72-4racks.json"].jobs if jr.job_id == "nvl-16n-64g")
    assert big.placed
    assert {m.node.split("-")[1] for m in big.members} == {"r3"}


@pytest.mark.parametrize("name", NAMES)
def test_reported_tier_and_leaves_match_the_nodes(
    requests: dict[str, SolveRequest], results: dict[str, SolveResult], name: str
) -> None:
    request, result = requests[name], results[name]
    leaf = {n.name: n.leaf for n in request.inventory.nodes}
    rail = {(n.name, nic.name): nic.rail for n in request.inventory.nodes for nic in n.nics}
    for jr in result.jobs:
        if not jr.placed:
            continue
        nodes = nodes_of(jr.members)
        assert jr.locality_tier == lowest_common_tier(request, nodes), jr.job_id
        assert jr.leaves_spanned == len({leaf[n] for n in nodes}), jr.job_id
        assert jr.rails == tuple(sorted({rail[m.node, x] for m in jr.members for x in m.nics})), jr.job_id


@pytest.mark.parametrize("name", NAMES)
def test_no_hard_rule_broken_and_some_work_placed(
    requests: dict[str, SolveRequest], results: dict[str, SolveResult], name: str
) -> None:
    request, result = requests[name], results[name]
    assert violations(request, result) == []
    assert sum(jr.placed for jr in result.jobs) >= len(request.jobs) // 3


def test_the_rule_checker_catches_a_gang_split_across_leaves(
    requests: dict[str, SolveRequest], results: dict[str, SolveResult]
) -> None:
    """``bench.fabric.violations`` counts the benchmark's hard-rule violations; a checker that never
    fires would make "0 violations" meaningless, so break a placed tier-1 gang and see it fire."""
    request, result = requests["fattree-256.json"], results["fattree-256.json"]
    jobs = {j.id: j for j in request.jobs}
    gang = next(
        jr
        for jr in result.jobs
        if jr.placed
        and jobs[jr.job_id].locality.mode == Requirement.REQUIRED
        and jobs[jr.job_id].locality.highest_tier == 1
        and len(jr.members) > 1
    )
    leaf = {n.name: n.leaf for n in request.inventory.nodes}
    # Any node of another leaf will do: the move may also double-book devices, which is reported too.
    elsewhere = next(n.name for n in request.inventory.nodes if leaf[n.name] != leaf[gang.members[0].node])
    moved = gang.members[1].model_copy(update={"node": elsewhere})
    broken_gang = gang.model_copy(update={"members": (gang.members[0], moved, *gang.members[2:])})
    broken = result.model_copy(
        update={"jobs": tuple(broken_gang if jr.job_id == gang.job_id else jr for jr in result.jobs)}
    )
    found = violations(request, broken)
    assert any(gang.job_id in v and "hard limit 1" in v for v in found), found


def test_on_the_jobs_the_greedy_places_topoplace_gangs_sit_no_higher(
    requests: dict[str, SolveRequest],
) -> None:
    """fattree-256 given only the jobs the Volcano-like greedy places: topoplace places them all,
    proves its locality tier, and its gangs' lowest common switch sits no higher than the greedy's,
    on average by gang and by GPU (1.08 / 1.17 and 1.30 / 1.33, session 20).

    On the whole request the two place different jobs: topoplace 902 GPUs against 890, and one
    gang (pd-mixtral, REQUIRED within tier 2) one tier higher than the greedy puts it, with the
    locality tier proven for the work it places (sessions 4-19 kept that comparison as an xfail).
    Placed work comes first, so the fair comparison of closeness is on the same jobs."""
    full = requests["fattree-256.json"]
    theirs = volcano.place(full)
    kept = {jr.job_id for jr in theirs.jobs if jr.placed}
    policy = full.policy.model_copy(update={"time_limit_s": TEST_TIME_LIMIT_S})
    request = full.model_copy(update={"jobs": tuple(j for j in full.jobs if j.id in kept), "policy": policy})
    ours = solve(request)
    assert all(jr.placed for jr in ours.jobs)
    locality = next(o for o in ours.objectives if o.name == "topology.locality")
    assert locality.optimal, locality
    tree = Tree(full.inventory)
    jobs = {j.id: j for j in full.jobs}
    a = {jr.job_id: jr for jr in ours.jobs if multi_member(jobs[jr.job_id])}
    b = {jr.job_id: jr for jr in theirs.jobs if jr.placed and multi_member(jobs[jr.job_id])}
    assert sorted(a) == sorted(b) and len(a) >= 5

    def tier(placed: dict[str, JobResult], j: str) -> int:
        return tree.meet(nodes_of(placed[j].members)) or 0

    def gpus(j: str) -> int:
        return sum(len(m.gpus) for m in b[j].members)

    assert statistics.mean(tier(a, j) for j in a) <= statistics.mean(tier(b, j) for j in a)
    assert sum(tier(a, j) * gpus(j) for j in a) <= sum(tier(b, j) * gpus(j) for j in a)
