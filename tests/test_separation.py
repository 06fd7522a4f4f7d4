"""Anti-affinity by labels at node, PCIe-switch and GPU scope, and exclusive nodes."""

from __future__ import annotations

from solver.answer.verify import verify
from solver.domain.model import (
    Allocation,
    AntiAffinity,
    GpuShare,
    JobResult,
    MemberPlacement,
    Scope,
    SolveResult,
    SolveStatus,
)
from solver.solve import solve
from tests import kit


def where(result, job_id: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(m.node, m.gpus) for j in result.jobs if j.job_id == job_id for m in j.members]


def test_node_anti_affinity_keeps_two_batch_jobs_on_different_nodes() -> None:
    nodes = [kit.node("n0", kit.SMALL), kit.node("n1", kit.SMALL)]
    result = solve(
        kit.request(
            nodes,
            [
                kit.job("a", 1, role="pod", away={"team": "b"}),
                kit.job("b", 1, role="pod", labels={"team": "b"}),
            ],
        )
    )
    assert where(result, "a")[0][0] != where(result, "b")[0][0]
    # Binpack alone would have put both on one node: the rule is what keeps them apart.
    together = solve(
        kit.request(nodes, [kit.job("a", 1, role="pod"), kit.job("b", 1, role="pod", labels={"team": "b"})])
    )
    assert where(together, "a")[0][0] == where(together, "b")[0][0]


def test_node_anti_affinity_keeps_away_from_running_work() -> None:
    busy = kit.node("n0", kit.SMALL).model_copy(
        update={"allocations": (Allocation(owner="noisy", gpus=("GPU0",), labels={"team": "b"}),)}
    )
    result = solve(
        kit.request([busy, kit.node("n1", kit.SMALL)], [kit.job("a", 1, role="pod", away={"team": "b"})])
    )
    assert where(result, "a")[0][0] == "n1"


def test_switch_anti_affinity_uses_another_pcie_switch_of_the_same_node() -> None:
    node = kit.node("n0", kit.SMALL, nics=0)
    rule = {"away": {"team": "b"}, "scope": Scope.PCIE_SWITCH}
    result = solve(
        kit.request(
            [node], [kit.job("a", 1, role="pod", **rule), kit.job("b", 1, role="pod", labels={"team": "b"})]
        )
    )
    switch = {g.id: g.pcie_switch for g in node.gpus}
    assert switch[where(result, "a")[0][1][0]] != switch[where(result, "b")[0][1][0]]
    one_switch = kit.node("n0", kit.SMALL, switches=1, gpus=2, nics=0)
    result = solve(
        kit.request(
            [one_switch],
            [kit.job("a", 1, role="pod", **rule), kit.job("b", 1, role="pod", labels={"team": "b"})],
        )
    )
    assert sum(j.placed for j in result.jobs) == 1


def test_gpu_anti_affinity_keeps_shares_on_different_gpus() -> None:
    node = kit.node("n0", kit.SMALL, switches=1, gpus=2, nics=0)
    jobs = [
        kit.job("a", share=GpuShare(milli=300), role="pod", away={"team": "b"}, scope=Scope.GPU),
        kit.job("b", share=GpuShare(milli=300), role="pod", labels={"team": "b"}),
    ]
    result = solve(kit.request([node], jobs))
    assert where(result, "a")[0][1] != where(result, "b")[0][1]


def test_exclusive_job_has_its_nodes_to_itself() -> None:
    nodes = [
        kit.node("n0", kit.SMALL),
        kit.node("n1", kit.SMALL),
        kit.node("busy", kit.SMALL, used_gpus=(0,)),
    ]
    result = solve(
        kit.request(
            nodes, [kit.job("x", 2, role="pod", exclusive=True), kit.job("y", 1, members=2, role="pod")]
        )
    )
    x_nodes = {n for n, _ in where(result, "x")}
    assert x_nodes and not x_nodes & {n for n, _ in where(result, "y")}
    assert "busy" not in x_nodes


def test_verifier_catches_a_broken_anti_affinity() -> None:
    req = kit.request(
        [kit.node("n0", kit.SMALL)],
        [kit.job("a", 1, role="pod", away={"team": "b"}), kit.job("b", 1, role="pod", labels={"team": "b"})],
    )
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

    bad = kit.job("a", 1, role="pod").model_copy(update={"anti_affinity": (AntiAffinity(labels={}),)})
    problems = validate(kit.request([kit.node("n0", kit.SMALL)], [bad]))
    assert [p.path for p in problems] == ["jobs[0].anti_affinity[0].labels"]
    assert "at least one label" in problems[0].message


def test_anti_affinity_to_its_own_labels_keeps_a_jobs_members_apart() -> None:
    # As in Kubernetes: a rule matching the job's own labels spreads its members, one per node.
    nodes = [kit.node("n0", kit.SMALL), kit.node("n1", kit.SMALL), kit.node("n2", kit.SMALL)]
    spread = solve(
        kit.request(nodes, [kit.job("g", 1, members=3, role="pod", labels={"app": "g"}, away={"app": "g"})])
    )
    assert sorted(n for n, _ in where(spread, "g")) == ["n0", "n1", "n2"]
    # Without the rule, binpack puts all three on one node.
    packed = solve(kit.request(nodes, [kit.job("g", 1, members=3, role="pod", labels={"app": "g"})]))
    assert len({n for n, _ in where(packed, "g")}) == 1
    # Four members, three nodes: the gang cannot be placed.
    too_many = solve(
        kit.request(nodes, [kit.job("g", 1, members=4, role="pod", labels={"app": "g"}, away={"app": "g"})])
    )
    assert not where(too_many, "g")


def test_self_anti_affinity_at_pcie_switch_scope() -> None:
    # server() has two PCIe switches: two members, one per switch, on one node.
    result = solve(
        kit.request(
            [kit.node("n0", kit.SMALL)],
            [
                kit.job(
                    "g",
                    1,
                    members=2,
                    role="pod",
                    labels={"app": "g"},
                    away={"app": "g"},
                    scope=Scope.PCIE_SWITCH,
                )
            ],
        )
    )
    gpus = [g for _, placed in where(result, "g") for g in placed]
    assert len(gpus) == 2
    node = kit.node("n0", kit.SMALL)
    switch = {g.id: g.pcie_switch for g in node.gpus}
    assert switch[gpus[0]] != switch[gpus[1]]


def test_verifier_catches_a_jobs_own_members_together() -> None:
    req = kit.request(
        [kit.node("n0", kit.SMALL), kit.node("n1", kit.SMALL)],
        [kit.job("g", 1, members=2, role="pod", labels={"app": "g"}, away={"app": "g"})],
    )
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
