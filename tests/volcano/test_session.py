"""A whole Volcano session replayed through the extender's real HTTP service on loopback.

The payloads are ``fixtures/volcano/session-open.json``: 32 DGX A100 nodes under 4 leaves and 2
spines (HyperNodes in ``hypernodes.yaml``), running pods holding devices four different ways, and
nine PodGroups — gangs with hard and soft network topology, a two-role job with a CPU-only task, an
unplaceable hard-tier-1 gang, a CPU-only job, an elastic job, a pod with a misspelt annotation and
a PodGroup not yet enqueued. The recorder stands in for the API server (no cluster runs here).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from adapters.volcano import annotations as ann
from adapters.volcano.extender import Config, Extender, local_solve
from adapters.volcano.patcher import RecordingPatcher
from adapters.volcano.wire import ALLOCATED, CODE_SUCCESS, CODE_UNRESOLVABLE, CODE_UNSCHEDULABLE
from solver.answer.verify import verify
from solver.domain.model import BatchOrder, JobResult, Reason, ReasonCode, SolveRequest, SolveResult

from .conftest import Service


def tasks_of(body: dict[str, Any], job: str) -> list[dict[str, Any]]:
    return sorted(body["Jobs"][job]["Tasks"].values(), key=lambda t: t["Name"])


def all_pending(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for j in sorted(body["Jobs"]) for t in tasks_of(body, j) if not t["NodeName"]]


def node_stub(body: dict[str, Any], name: str) -> dict[str, Any]:
    """A NodeInfo as predicate sends it (the same object the snapshot had)."""
    return body["Nodes"][name]


def allocated(task: dict[str, Any], node: str) -> dict[str, Any]:
    """The TaskInfo Volcano sends to allocateFunc: NodeName set, status Allocated."""
    t = copy.deepcopy(task)
    t["NodeName"] = node
    t["Status"] = ALLOCATED
    return t


def admitted(
    service: Service, body: dict[str, Any], task: dict[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """Nodes whose predicate admits ``task``, and one refusal (if any) to read."""
    nodes, refusal = [], {}
    for name in sorted(body["Nodes"]):
        reply = service.client.ok("predicate", {"task": task, "node": node_stub(body, name)})
        if reply["code"] == CODE_SUCCESS and not reply["status"]:
            nodes.append(name)
        else:
            refusal = reply
    return nodes, refusal


def plan_members(service: Service) -> dict[tuple[str, str, int], Any]:
    _, result = service.solve.calls[-1]
    return {(j.job_id, m.role, m.index): m for j in result.jobs if j.placed for m in j.members}


def test_pending_podgroups_are_planned_by_default(service: Service, body: dict[str, Any]) -> None:
    """Volcano's enqueue action admits a newly submitted (Pending) PodGroup and allocate places it
    in the same session: left out of the plan, every new job would be placed by Volcano alone."""
    service.client.ok("onSessionOpen", body)
    assert service.extender.wait_for_solver(120), "the solve (in time or in the background) ends"
    request, result = service.solve.calls[0]
    assert "team-g/not-enqueued" in {j.id for j in request.jobs}
    assert any(j.job_id == "team-g/not-enqueued" and j.placed for j in result.jobs)


INQUEUE_ONLY = Config(http_timeout_s=3.0, margin_s=0.5, plan_pending=False)


@pytest.mark.parametrize("config", [INQUEUE_ONLY], indirect=True)
def test_whole_session_follows_the_solvers_verified_plan(service: Service, body: dict[str, Any]) -> None:
    assert service.client.ok("onSessionOpen", body) == {}
    assert len(service.solve.calls) == 1, "one solve per session"
    request, result = service.solve.calls[0]
    assert verify(request, result) == ()
    placed = {j.job_id for j in result.jobs if j.placed}
    assert {"team-a/train-16", "team-a/train-32", "team-b/pd-serve", "team-b/notebook"} <= placed
    assert "team-c/giant" not in placed
    assert "team-g/not-enqueued" not in {j.id for j in request.jobs}, "--no-plan-pending: Pending not planned"

    plan = service.extender.plan
    assert plan is not None
    members = plan_members(service)
    planned_node = {uid: a.node for uid, a in plan.assignments.items()}

    # predicate: every pending task against every node
    for task in all_pending(body):
        nodes, refusal = admitted(service, body, task)
        uid = task["UID"]
        if uid in planned_node:
            # by role: every node the plan has a member of the task's role on (Volcano caches a
            # refusal for the whole role, so one member's refusal must hold for all of them)
            ref = plan.batch.members[uid]
            role_nodes = sorted(set(plan.role_nodes[(ref.job, ref.role)]))
            assert planned_node[uid] in nodes and nodes == role_nodes, task["Name"]
            assert refusal["code"] == CODE_UNSCHEDULABLE and "is planned on" in refusal["status"]
            ref = plan.batch.members[uid]
            assert members[(ref.job, ref.role, ref.index)].node == planned_node[uid], (
                "the plan is the solver's"
            )
        elif task["Job"] in ("team-d/cpu-etl", "team-g/not-enqueued") or task["TaskRole"] == "router":
            assert len(nodes) == 32, f"{task['Name']} is not topoplace's: neutral"
        else:
            assert nodes == [], task["Name"]

    # prioritize ranks the planned node highest and answers an object for every node
    for uid, node in planned_node.items():
        task = plan.batch.tasks[uid]
        raw = next(t for t in all_pending(body) if t["UID"] == uid)
        reply = service.client.ok(
            "prioritize", {"task": raw, "nodes": [node_stub(body, n) for n in sorted(body["Nodes"])]}
        )
        assert reply["errorMessage"] == ""
        scores = reply["nodeScore"]
        assert len(scores) == 32 and scores[node] == max(scores.values()) > 0, task.name
        assert sum(1 for s in scores.values() if s > 0) == 1

    # gangs are all-or-nothing: a placed job has every GPU task planned, an unplaced one none
    for job in ("team-a/train-16", "team-a/train-32", "team-c/giant", "team-b/pd-serve"):
        gpu_tasks = [t for t in tasks_of(body, job) if t["Resreq"]["ScalarResources"]]
        planned = [t for t in gpu_tasks if t["UID"] in planned_node]
        assert len(planned) in (0, len(gpu_tasks)), job
        assert (len(planned) > 0) == (job in placed)

    # hard tier 1: train-16's nodes share one leaf
    fabric = plan.fabric
    train16 = {planned_node[t["UID"]] for t in tasks_of(body, "team-a/train-16")}
    assert len({fabric.leaf_of[n] for n in train16}) == 1

    # jobReady before allocation: not ready; allocate every planned task on its node
    assert service.client.ok("jobReady", {"job": body["Jobs"]["team-a/train-16"]}) == {"status": False}

    # Volcano v1.10.0 sends no allocateFunc: jobReady counts the tasks its own JobInfo body shows
    # Allocated on a node (its allocate action asks right after stmt.Allocate). A gang the plan
    # leaves unplaced stays "not ready" however Volcano allocated it: the large configuration's veto.
    def as_allocated(job: str, node_of: dict[str, str]) -> dict[str, Any]:
        info = copy.deepcopy(body["Jobs"][job])
        info["Tasks"] = {
            k: allocated(t, node_of[t["UID"]]) if t["UID"] in node_of else t for k, t in info["Tasks"].items()
        }
        return info

    train16_allocated = as_allocated("team-a/train-16", planned_node)
    assert service.client.ok("jobReady", {"job": train16_allocated}) == {"status": True}
    giant_tasks = [t for t in tasks_of(body, "team-c/giant") if not t["NodeName"]]
    anywhere = {t["UID"]: sorted(body["Nodes"])[i % len(body["Nodes"])] for i, t in enumerate(giant_tasks)}
    assert service.client.ok("jobReady", {"job": as_allocated("team-c/giant", anywhere)}) == {"status": False}
    for job in sorted(body["Jobs"]):
        for task in tasks_of(body, job):
            if task["UID"] in planned_node:
                reply = service.client.ok(
                    "allocateFunc", {"task": allocated(task, planned_node[task["UID"]])}
                )
                assert reply == {"errorMessage": ""}
    for job in ("team-a/train-16", "team-a/train-32", "team-b/pd-serve", "team-b/notebook", "team-e/elastic"):
        assert service.client.ok("jobReady", {"job": body["Jobs"][job]}) == {"status": True}, job
    assert service.client.ok("jobReady", {"job": body["Jobs"]["team-c/giant"]}) == {"status": False}
    assert service.client.ok("jobReady", {"job": body["Jobs"]["team-d/cpu-etl"]}) == {"status": True}

    # the patches carry the verified devices, in both forms
    nodes = {n.name: n for n in request.inventory.nodes}
    for uid, node in planned_node.items():
        task = plan.batch.tasks[uid]
        ref = plan.batch.members[uid]
        member = members[(ref.job, ref.role, ref.index)]
        notes = service.patcher.current("Pod", task.namespace, task.name)
        device = ann.parse_device_annotation(notes[ann.DEVICES], task.key)
        assert device.node == node and device.planned
        assert tuple(g.id for g in device.gpus) == member.gpus
        assert device.nics == member.nics
        uuids = [next(g.uuid for g in nodes[node].gpus if g.id == gid) for gid in member.gpus]
        assert [g.uuid for g in device.gpus] == uuids
        # the fixture's nodes run HAMi's device plugin (hami.io/node-nvidia-register): its hand-off
        assert notes[ann.HAMI_TO_ALLOCATE] == notes[ann.HAMI_ALLOCATED]
        handed = ann.decode_pod_devices(notes[ann.HAMI_TO_ALLOCATE], task.key)
        assert [d.uuid for c in handed for d in c] == uuids
        assert all(d.used_cores == 100 and d.type == "NVIDIA" for c in handed for d in c)
        assert notes[ann.HAMI_NODE] == node and notes[ann.HAMI_BIND_PHASE] == "allocating"
        assert ann.VGPU_IDS not in notes  # volcano-vgpu-device-plugin's keys only where it runs
    # aligned gangs got one NIC per GPU
    for task in tasks_of(body, "team-a/train-16"):
        device = json.loads(service.patcher.current("Pod", "team-a", task["Name"])[ann.DEVICES])
        assert len(device["nics"]) == 8 and device["aligned"] is True

    # the job's HyperNode goes on its PodGroup, once
    groups = [p for p in service.patcher.patches if p.kind == "PodGroup"]
    assert len(groups) == len({(p.namespace, p.name) for p in groups})
    hn = service.patcher.current("PodGroup", "team-a", "train-16")[ann.JOB_HYPERNODE]
    assert hn == fabric.leaf_of[next(iter(train16))]

    # per-task verbs never solved; close drops the plan and answers turn neutral
    assert len(service.solve.calls) == 1
    assert service.client.ok("onSessionClose", {}) == {}
    task = tasks_of(body, "team-c/giant")[0]
    assert service.client.ok("predicate", {"task": task, "node": node_stub(body, "gpu-05")}) == {
        "status": "",
        "code": 0,
    }


@pytest.mark.parametrize(
    "config",
    [
        Config(http_timeout_s=3.0, margin_s=0.5, batch_order=BatchOrder.LARGEST_FIRST),
        Config(http_timeout_s=6.0, margin_s=0.5, batch_order=BatchOrder.BEST_OF_ORDERS, order_shuffles=1),
    ],
    indirect=True,
    ids=["largest-first", "best-of-orders"],
)
def test_a_session_can_be_planned_one_podgroup_at_a_time(service: Service, body: dict[str, Any]) -> None:
    assert service.client.ok("onSessionOpen", body) == {}
    request, result = service.solve.calls[0]
    config = service.extender.config
    assert (request.policy.batch_order, request.policy.order_shuffles) == (
        config.batch_order,
        config.order_shuffles,
    )
    assert verify(request, result) == ()
    placed = {j.job_id for j in result.jobs if j.placed}
    assert {"team-a/train-16", "team-a/train-32", "team-b/pd-serve", "team-b/notebook"} <= placed
    assert "team-c/giant" not in placed and service.extender.plan is not None


def test_predicate_reasons_name_the_rule(service: Service, body: dict[str, Any]) -> None:
    service.client.ok("onSessionOpen", body)
    giant = tasks_of(body, "team-c/giant")[0]
    reply = service.client.ok("predicate", {"task": giant, "node": node_stub(body, "gpu-20")})
    assert reply["code"] == CODE_UNSCHEDULABLE
    assert "LOCALITY" in reply["status"] and "networkTopology hard, highestTierAllowed 1" in reply["status"]
    assert "allow tier 2" in reply["status"], "the relaxation that would place it"

    typo = tasks_of(body, "team-f/typo")[0]
    reply = service.client.ok("predicate", {"task": typo, "node": node_stub(body, "gpu-20")})
    assert reply["code"] == CODE_UNRESOLVABLE and "topoplace.io/alignment" in reply["status"]
    assert "'requird'" in reply["status"]

    train = tasks_of(body, "team-a/train-16")[0]
    planned = service.extender.plan.assignments[train["UID"]].node
    other = next(n for n in sorted(body["Nodes"]) if n != planned)
    reply = service.client.ok("predicate", {"task": train, "node": node_stub(body, other)})
    assert f"planned on {planned}, not {other}" in reply["status"]
    assert "networkTopology hard, highestTierAllowed 1" in reply["status"]


def test_task_placed_elsewhere_is_handled(service: Service, body: dict[str, Any]) -> None:
    service.client.ok("onSessionOpen", body)
    plan = service.extender.plan
    task = tasks_of(body, "team-b/notebook")[0]
    planned = plan.assignments[task["UID"]].node
    # gpu-09 is full (a running 8-GPU pod); gpu-00 has GPU4-7 free (GPU0-3 held via vgpu-ids-new)
    elsewhere = "gpu-00" if planned != "gpu-00" else "gpu-02"
    reply = service.client.ok("allocateFunc", {"task": allocated(task, elsewhere)})
    # Volcano's choice stands: any errorMessage would make Volcano roll the task back.
    assert reply == {"errorMessage": ""}
    assert any(f"planned on {planned}" in note for note in service.client.get("status")["offPlan"])
    device = ann.parse_device_annotation(
        service.patcher.current("Pod", "team-b", task["Name"])[ann.DEVICES], "notebook"
    )
    assert device.node == elsewhere and device.planned is False
    held = {g for a in plan.batch.nodes[elsewhere].allocations for g in a.gpus}
    reserved = {
        g for uid, a in plan.assignments.items() if a.node == elsewhere and uid != task["UID"] for g in a.gpus
    }
    assert device.gpus and not ({g.id for g in device.gpus} & (held | reserved)), "only free devices"

    # deallocate (Volcano discarded the statement) removes what allocate wrote
    assert service.client.ok("deallocateFunc", {"task": allocated(task, elsewhere)}) == {"errorMessage": ""}
    assert service.patcher.current("Pod", "team-b", task["Name"]) == {}

    # a full node: no devices known, said so, nothing written
    if planned != "gpu-09":
        reply = service.client.ok("allocateFunc", {"task": allocated(task, "gpu-09")})
        assert reply == {"errorMessage": ""}
        assert any("no free devices" in note for note in service.client.get("status")["offPlan"])
        assert service.patcher.current("Pod", "team-b", task["Name"]) == {}


def test_a_gang_jobready_holds_gets_no_devices_written(service: Service, body: dict[str, Any]) -> None:
    """Volcano v1.14.1's allocate action posts allocateFunc for each member it allocates, then asks
    jobReady; when topoplace answers "not ready" (the plan leaves the gang out) the statement is
    neither committed nor discarded, so no deallocateFunc follows (tests/volcano/gosched,
    TestLargeConfHoldsAGangThePlanLeavesUnplaced). Devices written then would stay on a pod that is
    not bound, for a later session bound without topoplace to hand over stale."""
    service.client.ok("onSessionOpen", body)
    task = next(t for t in tasks_of(body, "team-c/giant") if not t["NodeName"])
    # the node with the most GPUs free of running pods and of the plan: devices would be found there
    plan = service.extender.plan
    assert plan is not None
    reserved = {(a.node, g) for a in plan.assignments.values() for g in a.gpus}

    def free(name: str) -> int:
        node = plan.batch.nodes[name]
        held = {g for a in node.allocations for g in a.gpus}
        return sum(1 for g in node.gpus if g.id not in held and (name, g.id) not in reserved)

    node = max(sorted(body["Nodes"]), key=free)
    assert free(node) > 0
    assert service.client.ok("allocateFunc", {"task": allocated(task, node)}) == {"errorMessage": ""}
    assert service.patcher.current("Pod", "team-c", task["Name"]) == {}, "nothing written for a held gang"
    assert any("held by jobReady" in note for note in service.client.get("status")["offPlan"])
    assert service.client.ok("jobReady", {"job": body["Jobs"]["team-c/giant"]}) == {"status": False}
    assert not plan.allocated[task["UID"]].gpus, "a held member reserves no devices"


def test_unknown_tasks_and_jobs_get_neutral_answers(service: Service, body: dict[str, Any]) -> None:
    service.client.ok("onSessionOpen", body)
    etl = tasks_of(body, "team-d/cpu-etl")[0]
    stranger = copy.deepcopy(tasks_of(body, "team-a/train-16")[0])
    stranger["UID"], stranger["Name"], stranger["Job"] = "0000-unknown", "stranger-0", "team-z/stranger"
    for task in (etl, stranger):
        assert service.client.ok("predicate", {"task": task, "node": node_stub(body, "gpu-03")}) == {
            "status": "",
            "code": 0,
        }
        reply = service.client.ok("prioritize", {"task": task, "nodes": [node_stub(body, "gpu-03")]})
        assert reply == {"nodeScore": {"gpu-03": 0.0}, "errorMessage": ""}
        assert service.client.ok("allocateFunc", {"task": allocated(task, "gpu-03")}) == {"errorMessage": ""}
    job = copy.deepcopy(body["Jobs"]["team-a/train-16"])
    job["UID"] = "team-z/stranger"
    assert service.client.ok("jobReady", {"job": job}) == {"status": True}
    assert not [p for p in service.patcher.patches if p.namespace in ("team-d", "team-z")]


def test_a_session_without_gpu_work_costs_no_solve(service: Service, body: dict[str, Any]) -> None:
    body["Jobs"] = {k: v for k, v in body["Jobs"].items() if k == "team-d/cpu-etl"}
    assert service.client.ok("onSessionOpen", body) == {}
    assert service.solve.calls == []
    task = tasks_of(body, "team-d/cpu-etl")[0]
    assert service.client.ok("predicate", {"task": task, "node": node_stub(body, "gpu-03")})["code"] == 0
    assert service.client.get("status")["solved"] is False


def test_no_session_and_solver_refusal_answer_neutrally(service: Service, body: dict[str, Any]) -> None:
    task = tasks_of(body, "team-a/train-16")[0]
    assert service.client.ok("predicate", {"task": task, "node": node_stub(body, "gpu-03")}) == {
        "status": "",
        "code": 0,
    }
    assert service.client.ok("jobReady", {"job": body["Jobs"]["team-a/train-16"]}) == {"status": True}
    # a batch the solver refuses (here: a node whose running pods claim a GPU it does not have)
    from solver.domain.errors import InvalidRequest, Problem

    def refuse(request: Any, deadline: float) -> Any:
        raise InvalidRequest([Problem(path="inventory.nodes[0]", message="made up")])

    service.extender._solve = refuse  # the seam the constructor fills
    assert service.client.ok("onSessionOpen", body) == {}
    assert service.client.ok("predicate", {"task": task, "node": node_stub(body, "gpu-03")}) == {
        "status": "",
        "code": 0,
    }
    status = service.client.get("status")
    assert "refused the batch" in status["error"] and "made up" in status["error"]


def test_malformed_bodies_get_400_with_a_reason(service: Service, body: dict[str, Any]) -> None:
    task = tasks_of(body, "team-a/train-16")[0]
    bad_resreq = copy.deepcopy(task)
    bad_resreq["Resreq"]["ScalarResources"] = {"nvidia.com/gpu": "8"}
    jobs_as_list = {"Jobs": [1, 2], "Nodes": {}}
    cases = [
        ("onSessionOpen", b"{not json", "not JSON"),
        ("onSessionOpen", b"[]", "expected an object"),
        ("onSessionOpen", json.dumps(jobs_as_list).encode(), "Jobs: expected an object"),
        ("onSessionOpen", b"{}", "Jobs and Nodes"),
        ("predicate", json.dumps({"node": node_stub(body, "gpu-01")}).encode(), "missing 'task'"),
        (
            "predicate",
            json.dumps({"task": bad_resreq, "node": node_stub(body, "gpu-01")}).encode(),
            "task.Resreq.ScalarResources.nvidia.com/gpu: expected a number",
        ),
        ("jobReady", json.dumps({"job": {"Tasks": {}}}).encode(), "needs UID"),
        ("allocateFunc", b"", "empty body"),
        ("allocateFunc", json.dumps({"task": {"UID": 7}}).encode(), "task.UID"),
    ]
    for verb, raw, reason in cases:
        code, reply = service.client.post(verb, None, raw=raw)
        assert code == 400 and reason in reply["error"], (verb, raw[:40], reply)
    # prioritize never fails (Volcano v1.10.0 would crash on it): neutral, the reason logged
    code, reply = service.client.post(
        "prioritize", None, raw=json.dumps({"task": task, "nodes": {"a": 1}}).encode()
    )
    assert code == 200 and reply == {"nodeScore": {}, "errorMessage": ""}
    code, reply = service.client.post("bind", {}, raw=b"{}")
    assert code == 404 and "unknown verb" in reply["error"]
    # a malformed open leaves the previous plan alone
    service.client.ok("onSessionOpen", body)
    service.client.post("onSessionOpen", None, raw=b"[]")
    assert service.extender.plan is not None


def test_members_of_a_role_share_its_planned_nodes(service: Service, body: dict[str, Any]) -> None:
    """Volcano's allocate action caches a predicate refusal for a whole role and skips those nodes
    for the role's next members: a member placed on another member's planned node takes that
    member's devices (planned: true), and the nodes' planned counts — read from the tasks Volcano
    has put on the node this session — decide who else fits there."""
    service.client.ok("onSessionOpen", body)
    if service.extender.plan is None:  # a loaded machine: the solve ends in the background
        assert service.extender.wait_for_solver(120)
        service.client.ok("onSessionOpen", body)
    plan = service.extender.plan
    assert plan is not None
    workers = [t for t in tasks_of(body, "team-a/train-16") if t["UID"] in plan.assignments]
    first, second = next(
        (a, b)
        for a in workers
        for b in workers
        if plan.assignments[a["UID"]].node != plan.assignments[b["UID"]].node
        and plan.batch.members[a["UID"]].role == plan.batch.members[b["UID"]].role
    )
    home, theirs = plan.assignments[first["UID"]].node, plan.assignments[second["UID"]].node
    their_gpus = plan.assignments[second["UID"]].gpus
    slots = plan.role_nodes[(plan.batch.members[first["UID"]].job, plan.batch.members[first["UID"]].role)]

    def predicate(task: dict[str, Any], node: str, on_node: list[dict[str, Any]]) -> dict[str, Any]:
        stub = copy.deepcopy(node_stub(body, node))
        stub["Tasks"] = {**(stub.get("Tasks") or {}), **{t["UID"]: allocated(t, node) for t in on_node}}
        return service.client.ok("predicate", {"task": task, "node": stub})

    assert predicate(first, theirs, []) == {"status": "", "code": CODE_SUCCESS}
    assert service.client.ok("allocateFunc", {"task": allocated(first, theirs)}) == {"errorMessage": ""}
    device = ann.parse_device_annotation(
        service.patcher.current("Pod", "team-a", first["Name"])[ann.DEVICES], "first"
    )
    assert device.node == theirs and device.planned is True
    assert tuple(g.id for g in device.gpus) == their_gpus, "the devices planned for that node's member"
    assert service.client.get("status")["offPlan"] == []

    # `theirs` now holds `first` (and any other members allocated there): when its planned members
    # are all there, `second` is refused there and admitted at `first`'s old node
    others_there = [
        w for w in workers if w["UID"] != second["UID"] and plan.assignments[w["UID"]].node == theirs
    ]
    reply = predicate(second, theirs, others_there)
    assert len(others_there) == slots[theirs]
    assert reply["code"] == CODE_UNSCHEDULABLE and "are allocated" in reply["status"]
    assert predicate(second, home, [])["code"] == CODE_SUCCESS


def test_a_new_snapshot_is_solved_from_the_last_plan(service: Service, body: dict[str, Any]) -> None:
    """When the cluster changed since the last solve, the new solve starts from the last plan
    (``SolveRequest.previous``): where it still holds the answer is never worse and moves fewer
    pods (solver.search.previous)."""
    service.client.ok("onSessionOpen", body)
    assert service.extender.wait_for_solver(120)
    first_request, first = service.solve.calls[0]
    assert first_request.previous == (), "nothing to start from in the first session"
    service.client.ok("onSessionClose", {})
    changed = copy.deepcopy(body)
    meta = changed["Nodes"][sorted(changed["Nodes"])[-1]]["Node"]["metadata"]
    meta["resourceVersion"] += "1"  # a GPU of a node went unhealthy: a new snapshot
    meta.setdefault("annotations", {})["volcano.sh/gpu-unhealthy-ids"] = "0"
    service.client.ok("onSessionOpen", changed)
    assert service.extender.wait_for_solver(120)
    assert len(service.solve.calls) == 2, "the changed snapshot is solved again"
    again_request, again = service.solve.calls[1]
    assert again_request.previous == first.jobs
    assert verify(again_request, again) == ()


def test_an_unsearched_plan_is_not_reused(hypernodes: Any, body: dict[str, Any]) -> None:
    """A solve left no time to build its model answers with a greedy placer's plan
    (``plan_source`` "unsearched:…"), which may place nothing. Reused, an unchanged cluster would be
    served it every session and never solved again: the next session with the same snapshot must
    solve anew (it did not, and bench.volcano_cost at 256 nodes planned nothing in 60 sessions)."""
    calls: list[SolveRequest] = []

    def unsearched_first(request: SolveRequest, deadline_s: float) -> SolveResult:
        result = local_solve(request, deadline_s)
        calls.append(request)
        return (
            result.model_copy(update={"plan_source": "unsearched:first-fit"}) if len(calls) == 1 else result
        )

    extender = Extender(solve=unsearched_first, patcher=RecordingPatcher(), hypernodes=lambda: hypernodes,
                        config=Config(http_timeout_s=3.0, margin_s=0.5))  # fmt: skip
    try:
        extender.on_session_open(copy.deepcopy(body))
        assert extender.wait_for_solver(120)
        extender.on_session_close({})
        extender.on_session_open(copy.deepcopy(body))
        assert extender.wait_for_solver(120)
        assert len(calls) == 2, "the same snapshot after an unsearched plan is solved again"
        assert not extender.status.reused
        extender.on_session_close({})
        extender.on_session_open(copy.deepcopy(body))
        assert len(calls) == 2 and extender.status.reused, "a searched plan is reused"
    finally:
        extender.close()


def test_a_greedy_plan_that_leaves_jobs_out_answers_neutrally(service: Service, body: dict[str, Any]) -> None:
    """The core's greedy answer when the model could not be built in time (``unsearched:…``) leaves
    out jobs it never searched for, and a plan holds every job it leaves out (jobReady "not ready"):
    served, it held all 100 jobs of bench.volcano_cost's 1,024-node session when it placed none.
    Such a session is answered neutrally (Volcano places them by its own rules); a greedy plan that
    places every job is served."""
    real = service.solve
    leave_out = [True]

    def greedy(request: SolveRequest, deadline_s: float) -> SolveResult:
        result = real(request, deadline_s)
        jobs = list(result.jobs)
        if leave_out[0]:
            first = next(i for i, j in enumerate(jobs) if j.placed)
            jobs[first] = JobResult(
                job_id=jobs[first].job_id,
                placed=False,
                reason=Reason(code=ReasonCode.TIME_LIMIT, message="the model could not be built in time"),
            )
        return result.model_copy(update={"jobs": tuple(jobs), "plan_source": "unsearched:first-fit"})

    service.extender._solve = greedy
    service.client.ok("onSessionOpen", body)
    assert service.extender.wait_for_solver(120)
    status = service.client.get("status")
    assert not status["sessionOpen"] and not status["placedJobs"], status
    assert "ran out of time to build its model" in status["error"]
    job = body["Jobs"]["team-a/train-16"]
    assert service.client.ok("jobReady", {"job": job}) == {"status": True}, "no job is held"


def test_a_greedy_plan_that_places_every_job_is_served(service: Service, body: dict[str, Any]) -> None:
    """The other side of the rule above: an unsearched plan that places every job holds none back,
    and is served (it is never reused for a later session: ``test_session_cost``)."""
    real = service.solve
    service.client.ok("onSessionOpen", body)
    assert service.extender.wait_for_solver(120)
    service.client.ok("onSessionClose", {})
    fits = {j.job_id.split("#")[0] for j in real.calls[0][1].jobs if j.placed}  # what the solver placed
    body["Jobs"] = {k: v for k, v in body["Jobs"].items() if v["UID"] in fits}  # a batch that fits whole

    def greedy(request: SolveRequest, deadline_s: float) -> SolveResult:
        return real(request, deadline_s).model_copy(update={"plan_source": "unsearched:first-fit"})

    service.extender._solve = greedy
    service.client.ok("onSessionOpen", body)
    status = service.client.get("status")
    assert all(j.placed for j in real.calls[-1][1].jobs), "the batch fits whole"
    assert status["sessionOpen"] and status["planSource"] == "unsearched:first-fit", status["error"]
    assert len(status["placedJobs"]) == len(fits)


ALL_NODES_SCORED = Config(http_timeout_s=3.0, margin_s=0.5, all_nodes_scored=True)


@pytest.mark.parametrize("config", [ALL_NODES_SCORED], indirect=True)
def test_a_planned_node_volcano_refuses_holds_the_job_and_is_planned_around(
    service: Service, body: dict[str, Any]
) -> None:
    """With vc-scheduler --percentage-nodes-to-find=100 each prioritize call lists every node
    Volcano's predicates pass. A planned node missing from it was refused by a rule the plan does not
    model: the job is held this session (its gang is not split between plan and Volcano's choices)
    and planned without that node next session. Volcano's real scheduler: gosched,
    TestLargeConfPlannedNodeVolcanoRefusesIsPlannedAround."""
    service.client.ok("onSessionOpen", body)
    assert service.extender.wait_for_solver(120)
    service.client.ok("onSessionClose", {})
    service.client.ok("onSessionOpen", body)
    plan = service.extender.plan
    assert plan is not None and plan.assignments, service.client.get("status")
    name = "team-a/train-16"
    job_uid = body["Jobs"][name]["UID"]
    pending = [t for t in tasks_of(body, name) if t["UID"] in plan.assignments]
    planned = {t["UID"]: plan.assignments[t["UID"]].node for t in pending}
    task = pending[0]
    refused = planned[task["UID"]]
    offered = [node_stub(body, n) for n in sorted(body["Nodes"]) if n != refused]
    reply = service.client.ok("prioritize", {"task": task, "nodes": offered})
    assert set(reply["nodeScore"].values()) == {0.0}  # the task is Volcano's to place
    # Every member allocated (the refused one wherever Volcano put it): still held this session.
    info = copy.deepcopy(body["Jobs"][name])
    elsewhere = next(n for n in sorted(body["Nodes"]) if n not in planned.values())
    info["Tasks"] = {
        k: allocated(t, elsewhere if t["UID"] == task["UID"] else planned[t["UID"]])
        if t["UID"] in planned
        else t
        for k, t in info["Tasks"].items()
    }
    assert service.client.ok("jobReady", {"job": info}) == {"status": False}
    assert service.client.get("status")["avoiding"] == {job_uid: [refused]}
    # Other jobs are not held.
    assert service.client.ok("jobReady", {"job": body["Jobs"]["team-d/cpu-etl"]}) == {"status": True}

    # The next session, with the very same body: planned again, the job kept off the refused node.
    solves = len(service.solve.calls)
    service.client.ok("onSessionClose", {})
    service.client.ok("onSessionOpen", body)
    assert service.extender.wait_for_solver(120)
    service.client.ok("onSessionClose", {})
    service.client.ok("onSessionOpen", body)
    assert len(service.solve.calls) > solves, "a refusal must make the next session solve again"
    plan = service.extender.plan
    assert plan is not None
    again = {plan.assignments[t["UID"]].node for t in pending if t["UID"] in plan.assignments}
    assert again and refused not in again, (refused, again)
    assert plan.gang_placed(job_uid)
