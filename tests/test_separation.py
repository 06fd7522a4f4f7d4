"""Anti-affinity by labels at node, PCIe-switch and GPU scope, and exclusive nodes."""

from __future__ import annotations

from solver.answer.verify import verify
from solver.domain.model import (
    Allocation,
    AntiAffinity,
    GpuShare,
    Job,
    JobResult,
    MemberPlacement,
    MemberShape,
    Role,
    Scope,
    SolveResult,
    SolveStatus,
)
from solver.solve import solve
from tests.solver_cases import request, server


def job(
    job_id: str,
    gpus: int = 1,
    *,
    labels: dict | None = None,
    away: dict | None = None,
    scope: Scope = Scope.NODE,
    exclusive: bool = False,
    share: int = 0,
    members: int = 1,
) -> Job:
    member = MemberShape(gpu_share=GpuShare(milli=share)) if share else MemberShape(gpus=gpus)
    return Job(
        id=job_id,
        labels=labels or {},
        roles=(Role(name="pod", replicas=members, member=member),),
        anti_affinity=(AntiAffinity(labels=away, scope=scope),) if away else (),
        exclusive_nodes=exclusive,
    )


def where(result, job_id: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(m.node, m.gpus) for j in result.jobs if j.job_id == job_id for m in j.members]


def test_node_anti_affinity_keeps_two_batch_jobs_on_different_nodes() -> None:
    nodes = [server("n0"), server("n1")]
    result = solve(request(nodes, [job("a", away={"team": "b"}), job("b", labels={"team": "b"})]))
    assert where(result, "a")[0][0] != where(result, "b")[0][0]
    # Binpack alone would have put both on one node: the rule is what keeps them apart.
    together = solve(request(nodes, [job("a"), job("b", labels={"team": "b"})]))
    assert where(together, "a")[0][0] == where(together, "b")[0][0]


def test_node_anti_affinity_keeps_away_from_running_work() -> None:
    busy = server("n0").model_copy(
        update={"allocations": (Allocation(owner="noisy", gpus=("GPU0",), labels={"team": "b"}),)}
    )
    result = solve(request([busy, server("n1")], [job("a", away={"team": "b"})]))
    assert where(result, "a")[0][0] == "n1"


def test_switch_anti_affinity_uses_another_pcie_switch_of_the_same_node() -> None:
    node = server("n0", switches=2, gpus_per_switch=2, nics_per_switch=0)
    rule = {"away": {"team": "b"}, "scope": Scope.PCIE_SWITCH}
    result = solve(request([node], [job("a", **rule), job("b", labels={"team": "b"})]))
    switch = {g.id: g.pcie_switch for g in node.gpus}
    assert switch[where(result, "a")[0][1][0]] != switch[where(result, "b")[0][1][0]]
    one_switch = server("n0", switches=1, gpus_per_switch=2, nics_per_switch=0)
    result = solve(request([one_switch], [job("a", **rule), job("b", labels={"team": "b"})]))
    assert sum(j.placed for j in result.jobs) == 1


def test_gpu_anti_affinity_keeps_shares_on_different_gpus() -> None:
    node = server("n0", switches=1, gpus_per_switch=2, nics_per_switch=0)
    jobs = [
        job("a", share=300, away={"team": "b"}, scope=Scope.GPU),
        job("b", share=300, labels={"team": "b"}),
    ]
    result = solve(request([node], jobs))
    assert where(result, "a")[0][1] != where(result, "b")[0][1]


def test_exclusive_job_has_its_nodes_to_itself() -> None:
    nodes = [server("n0"), server("n1"), server("busy", used_gpus=(0,))]
    result = solve(request(nodes, [job("x", 2, exclusive=True), job("y", 1, members=2)]))
    x_nodes = {n for n, _ in where(result, "x")}
    assert x_nodes and not x_nodes & {n for n, _ in where(result, "y")}
    assert "busy" not in x_nodes


def test_verifier_catches_a_broken_anti_affinity() -> None:
    req = request([server("n0")], [job("a", away={"team": "b"}), job("b", labels={"team": "b"})])
    members = {
        "a": MemberPlacement(role="pod", index=0, node="n0", gpus=("GPU0",)),
        "b": MemberPlacement(role="pod", index=0, node="n0", gpus=("GPU1",)),
    }
    jobs = tuple(JobResult(job_id=k, placed=True, members=(m,)) for k, m in members.items())
    result = solve(req).model_copy(update={"jobs": jobs, "status": SolveStatus.FEASIBLE})
    assert any("anti-affinity" in v for v in verify(req, result))
    assert isinstance(result, SolveResult)


def test_an_anti_affinity_rule_without_labels_is_refused_with_its_path() -> None:
    from solver.domain.validate import validate

    bad = job("a").model_copy(update={"anti_affinity": (AntiAffinity(labels={}),)})
    problems = validate(request([server("n0")], [bad]))
    assert [p.path for p in problems] == ["jobs[0].anti_affinity[0].labels"]
    assert "at least one label" in problems[0].message


def test_anti_affinity_to_its_own_labels_keeps_a_jobs_members_apart() -> None:
    # As in Kubernetes: a rule matching the job's own labels spreads its members, one per node.
    nodes = [server("n0"), server("n1"), server("n2")]
    spread = solve(request(nodes, [job("g", labels={"app": "g"}, away={"app": "g"}, members=3)]))
    assert sorted(n for n, _ in where(spread, "g")) == ["n0", "n1", "n2"]
    # Without the rule, binpack puts all three on one node.
    packed = solve(request(nodes, [job("g", labels={"app": "g"}, members=3)]))
    assert len({n for n, _ in where(packed, "g")}) == 1
    # Four members, three nodes: the gang cannot be placed.
    too_many = solve(request(nodes, [job("g", labels={"app": "g"}, away={"app": "g"}, members=4)]))
    assert not where(too_many, "g")


def test_self_anti_affinity_at_pcie_switch_scope() -> None:
    # server() has two PCIe switches: two members, one per switch, on one node.
    result = solve(
        request(
            [server("n0")],
            [job("g", labels={"app": "g"}, away={"app": "g"}, scope=Scope.PCIE_SWITCH, members=2)],
        )
    )
    gpus = [g for _, placed in where(result, "g") for g in placed]
    assert len(gpus) == 2
    node = server("n0")
    switch = {g.id: g.pcie_switch for g in node.gpus}
    assert switch[gpus[0]] != switch[gpus[1]]


def test_verifier_catches_a_jobs_own_members_together() -> None:
    req = request([server("n0"), server("n1")], [job("g", labels={"app": "g"}, away={"app": "g"}, members=2)])
    members = (
        MemberPlacement(role="pod", index=0, node="n0", gpus=("GPU0",)),
        MemberPlacement(role="pod", index=1, node="n0", gpus=("GPU1",)),
    )
    result = solve(req).model_copy(
        update={
            "jobs": (JobResult(job_id="g", placed=True, members=members),),
            "status": SolveStatus.FEASIBLE,
        }
    )
    assert (
        "job g: anti-affinity to {'app': 'g'} broken by its own pod member 0 and pod member 1 together at n0"
        in (verify(req, result))
    )
