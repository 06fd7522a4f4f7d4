"""The converters one Kubernetes kind at a time: registers, HyperNodes, pods, node-report, CLI."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from adapters.volcano import annotations as ann
from adapters.volcano import hypernodes as hn
from adapters.volcano import kube, wire
from adapters.volcano.extender import Config, Extender
from adapters.volcano.patcher import KubernetesPatcher, PatchError, RecordingPatcher
from fixtures.volcano import build
from solver.cli import main
from solver.domain.errors import InvalidRequest
from solver.domain.model import NicMode, Requirement

from .conftest import FIXTURES, CapturingSolve, Service

TOPO = Path(__file__).resolve().parents[2] / "fixtures" / "topo" / "dgx-a100-8gpu-10nic.txt"


def test_fixtures_are_current() -> None:
    assert build.main(["--check"]) == 0


def test_hami_register_json_and_colon_forms() -> None:
    gpus = ann.parse_hami_register(build.hami_register("n1"), "n1")
    assert [g.index for g in gpus] == list(range(8)) and gpus[0].memory_mib == 81920
    assert gpus[2].numa == 1 and gpus[0].model == build.GPU_TYPE
    old = ann.parse_hami_register(
        "GPU-a,10,40960,100,NVIDIA-A100,0,true:GPU-b,10,40960,100,NVIDIA-A100,1,false:", "n"
    )
    assert [(g.uuid, g.numa, g.healthy) for g in old] == [("GPU-a", 0, True), ("GPU-b", 1, False)]
    with pytest.raises(ann.AnnotationError, match=r"\[0\].id"):
        ann.parse_hami_register('[{"count": 10}]', "n")


def test_volcano_vgpu_register() -> None:
    gpus = ann.parse_vgpu_register(
        "GPU-a,10,81920,NVIDIA-A100,true,hami-core:GPU-b,10,81920,NVIDIA-A100,false,mig:", "n"
    )
    assert [(g.uuid, g.index, g.memory_mib, g.healthy) for g in gpus] == [
        ("GPU-a", 0, 81920, True),
        ("GPU-b", 1, 81920, False),
    ]
    with pytest.raises(ann.AnnotationError, match="fields"):
        ann.parse_vgpu_register("GPU-a,10:", "n")


def test_node_from_vgpu_register_without_topology() -> None:
    node = build.v1_node("v0", {}, topology=False)
    notes = node["metadata"]["annotations"]
    del notes[ann.HAMI_REGISTER]
    notes[ann.VGPU_REGISTER] = "".join(f"GPU-v{i},10,81920,NVIDIA-A100,true,hami-core:" for i in range(4))
    info = wire.node_info(build.node_info(node), "n")
    warn = kube.NodeWarnings([])
    converted = kube.inventory_node(info, "leaf-0", warn)
    assert [g.uuid for g in converted.gpus] == [f"GPU-v{i}" for i in range(4)]
    assert converted.pcie_switches == () and converted.leaf == "leaf-0" and warn.items == []


def test_a_gpu_clique_label_is_the_nodes_nvlink_domain() -> None:
    # The same label reader as `topoplace ingest cluster` (solver.ingest.kube): an NVL72 tray's
    # clique from GPU Feature Discovery, else topograph's accelerator label.
    clique = build.v1_node("c0", {"nvidia.com/gpu.clique": "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"})
    topograph = build.v1_node("t0", {"network.topology.nvidia.com/accelerator": "nvl1"})
    plain = build.v1_node("p0", {})
    infos = [wire.node_info(build.node_info(n), "n") for n in (clique, topograph, plain)]
    domains = [kube.inventory_node(info, "leaf-0", kube.NodeWarnings([])).nvlink_domain for info in infos]
    assert domains == ["6a130f54-faaa-4b8f-847f-be44ab70f917.32766", "nvl1", ""]


def test_hypernodes_resolve_exact_regex_and_label_members() -> None:
    objects = hn.load(FIXTURES / "hypernodes.yaml")
    labels = {build.node_name(i): {"topology.example.com/rack": f"r{i // 8}"} for i in range(32)}
    fabric = hn.resolve(objects, labels)
    assert {fabric.leaf_of[build.node_name(i)] for i in range(8)} == {"leaf-0"}  # exactMatch
    assert {fabric.leaf_of[build.node_name(i)] for i in range(8, 16)} == {"leaf-1"}  # regexMatch
    assert {fabric.leaf_of[build.node_name(i)] for i in range(16, 24)} == {"leaf-2"}  # labelMatch
    parents = {s.id: (s.tier, s.parent) for s in fabric.switches}
    assert parents["leaf-3"] == (1, "spine-1") and parents["spine-0"] == (2, "")
    assert fabric.lowest_common(["gpu-00", "gpu-09"]) == "spine-0"
    assert fabric.lowest_common(["gpu-00", "gpu-31"]) == ""
    assert fabric.tier_names == {"leaf": 1, "spine": 2}


def test_hypernode_errors_name_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "hn.yaml"
    bad.write_text(
        "apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {name: s0}\n"
        "spec:\n  tier: -1\n  members:\n  - type: Node\n"
        "    selector: {exactMatch: {name: a}, regexMatch: {pattern: b}}\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
    )
    with pytest.raises(InvalidRequest) as err:
        hn.load(tmp_path)
    text = str(err.value)
    assert "doc[0].spec.tier" in text and "doc[0].spec.members[0].selector: exactly one" in text
    assert "doc[1]: expected kind HyperNode" in text


def pending_task(**kw: Any) -> wire.Task:
    spec = build.PodSpec("ns", "p-0", "p", "worker", **kw)
    return wire.task(build.task_info(spec), "task")


def test_member_shape_from_pod() -> None:
    shape = kube.member_shape(pending_task(gpus=8, annotations=build.ALIGNED), ["NVIDIA-A100-SXM4-80GB"])
    assert shape.gpus == 8 and shape.nics.mode == NicMode.PER_GPU
    assert shape.alignment.mode == Requirement.REQUIRED and shape.cpu_milli == 8000
    share = kube.member_shape(pending_task(gpus=1, gpumem=20000, gpucores=30), [])
    assert share.gpus == 0 and share.gpu_share is not None
    assert (share.gpu_share.milli, share.gpu_share.memory_mib) == (300, 20000)
    hami = kube.member_shape(
        pending_task(
            gpus=1,
            annotations={
                "hami.io/gpu-scheduler-policy": "binpack,mutex,numa",
                "nvidia.com/use-gputype": "a100",
            },
        ),
        ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"],
    )
    assert hami.mutex and hami.numa == Requirement.PREFERRED and hami.gpu_models == ("NVIDIA-A100-SXM4-80GB",)
    with pytest.raises(kube.NotOurs):
        kube.member_shape(pending_task(gpus=2, gpumem=1000), [])
    with pytest.raises(kube.PodRefused, match=r"topoplace\.io/nics"):
        kube.member_shape(pending_task(gpus=1, annotations={"topoplace.io/nics": "lots"}), [])


def test_node_report_round_trips_through_the_annotation(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus.csv"
    gpus.write_text("".join(f"{i}, GPU-{i:04d}, NVIDIA A100-SXM4-80GB, 81920\n" for i in range(8)))
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["node-report", "--topo", str(TOPO), "--gpus", str(gpus), "--node", "dgx-1"]) == 0
    node = ann.parse_topology(out.getvalue().strip(), "dgx-1")
    assert [g.uuid for g in node.gpus] == [f"GPU-{i:04d}" for i in range(8)]
    assert len(node.nics) == 10 and node.pcie_switches and node.nvlinks
    assert main(["node-report", "--topo", str(tmp_path / "missing.txt"), "--node", "x"]) == 2


def test_volcano_serve_is_registered() -> None:
    with pytest.raises(SystemExit) as err, redirect_stdout(io.StringIO()) as out:
        main(["volcano", "serve", "--help"])
    assert err.value.code == 0 and "--hypernodes" in out.getvalue() and "--solver" in out.getvalue()


def test_kubernetes_patcher_sends_merge_patches() -> None:
    """Stand-ins for the API (no server runs here) answering with the client's real models: the pod
    is read first and patched with its uid and resourceVersion as preconditions."""
    from kubernetes.client import V1ObjectMeta, V1Pod, V1PodSpec, V1PodStatus

    calls: list[tuple[Any, ...]] = []

    class Core:
        def read_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> V1Pod:
            return V1Pod(
                metadata=V1ObjectMeta(name=name, namespace=namespace, uid="u-1", resource_version="7"),
                spec=V1PodSpec(containers=[], scheduler_name="volcano"),
                status=V1PodStatus(phase="Pending"),
            )

        def patch_namespaced_pod(self, name: str, namespace: str, body: Any, **kw: Any) -> None:
            calls.append(("pod", namespace, name, body, kw))

    class Custom:
        def get_namespaced_custom_object(self, *args: Any, **kw: Any) -> dict[str, Any]:
            return {"metadata": {"uid": "g-1", "resourceVersion": "3"}}

        def patch_namespaced_custom_object(self, *args: Any, **kw: Any) -> None:
            calls.append(("custom", *args, kw))
            raise RuntimeError("connection refused")

    patcher = KubernetesPatcher(core=Core(), custom=Custom(), timeout_s=0.2)
    patcher.patch_pod("ns", "p", {"a": "1", "b": None})
    assert calls[0] == (
        "pod",
        "ns",
        "p",
        {"metadata": {"uid": "u-1", "resourceVersion": "7", "annotations": {"a": "1", "b": None}}},
        {"_request_timeout": 0.2},
    )
    with pytest.raises(PatchError, match="podgroup ns/g"):
        patcher.patch_podgroup("ns", "g", {"x": "y"})
    assert calls[1][1:6] == ("scheduling.volcano.sh", "v1beta1", "ns", "podgroups", "g")
    assert calls[1][6] == {"metadata": {"uid": "g-1", "resourceVersion": "3", "annotations": {"x": "y"}}}


def test_patch_failures_are_reported_not_raised(service: Service, body: dict[str, Any]) -> None:
    service.client.ok("onSessionOpen", body)
    service.patcher.fail = True
    task = next(iter(body["Jobs"]["team-b/notebook"]["Tasks"].values()))
    node = service.extender.plan.assignments[task["UID"]].node
    sent = copy.deepcopy(task)
    sent["NodeName"], sent["Status"] = node, wire.ALLOCATED
    reply = service.client.ok("allocateFunc", {"task": sent})
    assert reply == {"errorMessage": ""}, "a failed patch must not roll Volcano's allocation back"
    status = service.client.get("status")
    assert any("recorder set to fail" in f for f in status["patchFailures"]), status
    assert service.extender.plan is not None and task["UID"] in service.extender.plan.allocated


@pytest.mark.needs_sharing
def test_shared_gpus_reach_the_pod(body: dict[str, Any], hypernodes: tuple[hn.HyperNode, ...]) -> None:
    """A HAMi share (gpumem + gpucores) is planned as a share and written as such; a running share
    is held as a share. Needs the solver's GPU sharing."""
    running = build.PodSpec(
        "team-x",
        "infer-0",
        "infer",
        "worker",
        gpus=1,
        gpumem=20000,
        gpucores=25,
        node="gpu-05",
        annotations={ann.VGPU_IDS: f"{build.gpu_uuid('gpu-05', 0)},NVIDIA,20000,25:"},
    )
    body["Nodes"]["gpu-05"]["Tasks"]["team-x/infer-0"] = build.task_info(running)
    pod = build.PodSpec(
        "team-s",
        "share-0",
        "share",
        "worker",
        gpus=1,
        gpumem=30000,
        gpucores=50,
        annotations={"hami.io/gpu-scheduler-policy": "mutex"},
    )
    group = build.GroupSpec("team-s", "share", 1)
    body["Jobs"]["team-s/share"] = build.job_info(group, [build.task_info(pod)])
    solve = CapturingSolve()
    patcher = RecordingPatcher()
    extender = Extender(
        solve=solve, patcher=patcher, hypernodes=lambda: hypernodes, config=Config(http_timeout_s=3.0)
    )
    extender.on_session_open(body)
    assert extender.status.error == ""
    task = next(iter(body["Jobs"]["team-s/share"]["Tasks"].values()))
    assignment = extender.plan.assignments[task["UID"]]
    task = {**task, "NodeName": assignment.node, "Status": wire.ALLOCATED}
    extender.allocate({"task": task})
    notes = patcher.current("Pod", "team-s", "share-0")
    devices = ann.decode_pod_devices(notes[ann.HAMI_TO_ALLOCATE], "share-0")
    assert [(d.used_mem_mib, d.used_cores) for c in devices for d in c] == [(30000, 50)]
    assert json.loads(notes[ann.DEVICES])["gpus"][0]["milli"] == 500


def _with_anti_affinity(task: wire.Task, *terms: dict[str, Any]) -> wire.Task:
    pod = copy.deepcopy(task.pod)
    pod["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}
    }
    return dataclasses.replace(task, pod=pod)


def test_pod_anti_affinity_at_hostname_becomes_a_node_rule() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "g"}}, "topologyKey": kube.HOSTNAME}
    (rule,) = kube.pod_anti_affinity(_with_anti_affinity(pending_task(gpus=1), term))
    assert rule.labels == {"app": "g"} and rule.scope == kube.Scope.NODE
    assert kube.pod_anti_affinity(pending_task(gpus=1)) == ()
    zone = {**term, "topologyKey": "topology.kubernetes.io/zone"}
    expressions = {
        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
        "topologyKey": kube.HOSTNAME,
    }
    for unheld in (zone, expressions):
        with pytest.raises(kube.NotOurs, match="podAntiAffinity"):
            kube.pod_anti_affinity(_with_anti_affinity(pending_task(gpus=1), unheld))


def test_a_gang_with_anti_affinity_to_itself_gets_one_node_per_pod() -> None:
    from adapters.volcano import batch as batches
    from adapters.volcano.hypernodes import HyperNodeTree
    from solver.domain.model import Policy
    from solver.solve import solve

    pods = build.workers("ns", "g", "worker", 2, 1, labels={"app": "g"})
    body = build.session([(build.GroupSpec("ns", "g", min_member=2), pods)], build.cluster_nodes(2))
    snapshot = wire.snapshot(body)
    term = {"labelSelector": {"matchLabels": {"app": "g"}}, "topologyKey": kube.HOSTNAME}
    jobs = tuple(
        dataclasses.replace(j, tasks=tuple(_with_anti_affinity(t, term) for t in j.tasks))
        for j in snapshot.jobs
    )
    snapshot = dataclasses.replace(snapshot, jobs=jobs)
    made = batches.build(snapshot, HyperNodeTree(), Policy())
    (gang,) = made.request.jobs
    assert gang.labels["app"] == "g" and [r.labels for r in gang.anti_affinity] == [{"app": "g"}]
    result = solve(made.request)
    assert len({m.node for m in result.jobs[0].members}) == 2  # binpack alone would share one node


def test_gpus_volcano_counts_used_are_not_planned() -> None:
    """A pod asking 4 GPUs whose device annotation names only 2 (one of two containers' devices,
    say) leaves, by the annotations, 6 GPUs free; Volcano's Idle says 4. The difference is held (lowest-index
    free GPUs, warned), so no plan puts work there that Volcano's resource check refuses."""
    split_node = build.v1_node("n0", {})  # the fixture's HAMi nodes: 10 nvidia.com/gpu a GPU
    node = copy.deepcopy(split_node)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "8"  # one a GPU
    stale = build.PodSpec(
        "prod", "svc", "svc", "worker", gpus=4, node="n0",
        annotations={ann.VGPU_IDS: "".join(f"{build.gpu_uuid('n0', i)},NVIDIA,81920,100:" for i in range(2))},
    )  # fmt: skip
    info = wire.node_info(build.node_info(node, [build.task_info(stale)]), "n")
    assert info.idle.scalar("nvidia.com/gpu") == 4
    warn = kube.NodeWarnings([])
    converted = kube.inventory_node(info, "", warn)
    held = {g for a in converted.allocations for g in a.gpus}
    assert held == {"GPU0", "GPU1", "GPU2", "GPU3"}, converted.allocations
    assert warn.items == [
        "n0: Volcano counts 4 nvidia.com/gpu idle but the pods' device annotations leave 6 GPUs free; "
        "GPU2, GPU3 taken as used"
    ]

    # Volcano's count and the annotations agree: nothing added.
    agreeing = build.PodSpec(
        "prod", "svc", "svc", "worker", gpus=4, node="n0",
        annotations={ann.VGPU_IDS: "".join(f"{build.gpu_uuid('n0', i)},NVIDIA,81920,100:" for i in range(4))},
    )  # fmt: skip
    info = wire.node_info(build.node_info(node, [build.task_info(agreeing)]), "n")
    warn = kube.NodeWarnings([])
    converted = kube.inventory_node(info, "", warn)
    assert [a.owner for a in converted.allocations] == ["prod/svc"] and not warn.items

    # Under a device split (80 nvidia.com/gpu on 8 GPUs) the units are vGPUs: Volcano counts 4 used,
    # the annotation accounts for 2; the other 2 sit on GPUs not visible, so two free GPUs are held.
    split = build.node_info(split_node, [build.task_info(stale)])
    assert split["Idle"]["ScalarResources"]["nvidia.com/gpu"] == 76_000.0
    warn = kube.NodeWarnings([])
    converted = kube.inventory_node(wire.node_info(split, "n"), "", warn)
    assert {g for a in converted.allocations for g in a.gpus} == {"GPU0", "GPU1", "GPU2", "GPU3"}
    assert warn.items == [
        "n0: Volcano counts 4 nvidia.com/gpu (vGPUs) used but the pods' device annotations account for 2; "
        "GPU2, GPU3 taken as used"
    ]
    # ... and where they agree (a share counts one vGPU), nothing is added.
    share = build.PodSpec(
        "prod", "inf", "inf", "worker", gpus=1, node="n0",
        annotations={ann.VGPU_IDS: f"{build.gpu_uuid('n0', 5)},NVIDIA,20000,30:"},
    )  # fmt: skip
    split = build.node_info(split_node, [build.task_info(agreeing), build.task_info(share)])
    warn = kube.NodeWarnings([])
    converted = kube.inventory_node(wire.node_info(split, "n"), "", warn)
    assert {g for a in converted.allocations for g in a.gpus} == {"GPU0", "GPU1", "GPU2", "GPU3"}
    assert not warn.items


def test_topologies_differing_only_in_gpu_uuids_read_as_each_alone() -> None:
    """Each node's topology annotation is read from its model's template with its own GPU uuids put
    back (a cold 1,024-node session validated every node's text: 0.56 s): the node must be exactly
    what validating its own text gives, escapes, spacing and a GPU without uuid included."""
    body = build.session([], build.cluster_nodes(3, 8, 4), [])
    texts = [info["Node"]["metadata"]["annotations"][ann.TOPOLOGY] for info in body["Nodes"].values()]
    assert len(set(texts)) == 3  # the fixture's nodes differ (their uuids), so the template is shared
    spaced = json.loads(texts[0])
    spaced["gpus"][0]["uuid"] = 'GPU-"quoted"\\é'
    del spaced["gpus"][1]["uuid"]
    texts.append(json.dumps(spaced, indent=1))
    for text in texts:
        node = ann.parse_topology(text, "n")
        assert node == ann._validate_topology(text).model_copy(update={"name": "n"})
        assert all(not g.uuid.startswith("\x00") for g in node.gpus)
    assert [g.uuid for g in ann.parse_topology(texts[-1], "n").gpus][:2] == ['GPU-"quoted"\\é', ""]
    bad = texts[0].replace('"uuid":"', '"uuid":"\\q', 1)
    with pytest.raises(ann.AnnotationError, match="topology: not JSON"):
        ann.parse_topology(bad, "n")
    with pytest.raises(ann.AnnotationError, match=r"gpus\.0\.bogus"):
        ann.parse_topology(texts[0].replace('"uuid":', '"bogus":1,"uuid":', 1), "n")
