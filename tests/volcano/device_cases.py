"""A session on nodes running volcano-vgpu-device-plugin, allocated through the real extender, and the
decode cases it yields for Volcano's own Go package (``tests/volcano/godecode``).

``python -m tests.volcano.device_cases DIR`` writes one JSON file per node that got planned pods:
the ``v1.Node`` (its ``volcano.sh/node-vgpu-register``), every pod on it after the extender's patches
(running pods as deviceshare left them, planned pods with what ``allocateFunc`` wrote) and, per
planned pod, the devices the *solver's placement* gives it — taken from the plan, never from the
annotation, so an encoding mistake cannot agree with itself.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.volcano import annotations as ann
from adapters.volcano import wire
from adapters.volcano.extender import Config, Extender, local_solve
from adapters.volcano.patcher import RecordingPatcher
from fixtures.volcano import build

VGPU_NUMBER, VGPU_MEMORY, VGPU_CORES = (
    "volcano.sh/vgpu-number",
    "volcano.sh/vgpu-memory",
    "volcano.sh/vgpu-cores",
)
NODES = ("vg-0", "vg-1")


def vgpu_node(name: str) -> dict[str, Any]:
    """A fixture node whose GPUs are registered by volcano-vgpu-device-plugin (no HAMi register):
    ``UUID,count,devmem,type,health,mode:`` in index order, as its EncodeNodeDevices writes it."""
    node = build.v1_node(name, {"topology.example.com/rack": "r0"})
    notes = node["metadata"]["annotations"]
    del notes[ann.HAMI_REGISTER]
    notes[ann.VGPU_REGISTER] = "".join(
        f"{build.gpu_uuid(name, i)},10,{build.GPU_MEM},{build.GPU_TYPE},true,hami-core:" for i in range(8)
    )
    allocatable = node["status"]["allocatable"]
    allocatable.update({VGPU_NUMBER: "80", VGPU_MEMORY: str(8 * build.GPU_MEM), VGPU_CORES: "800"})
    return node


def vgpu_task(
    spec: build.PodSpec, containers: list[dict[str, int]], *, sidecar: bool = False, holds: str = ""
) -> dict[str, Any]:
    """A TaskInfo whose containers ask for ``volcano.sh/vgpu-*`` (``containers``: per GPU container
    ``{"number": n, "memory": MiB, "cores": %}``); ``sidecar`` puts a container without GPUs first;
    ``holds`` is the ``volcano.sh/vgpu-ids-new`` of a pod deviceshare already placed."""
    task = build.task_info(spec)
    pod = task["Pod"]
    template = pod["spec"]["containers"][0]
    gpu_containers = []
    totals = {VGPU_NUMBER: 0, VGPU_MEMORY: 0, VGPU_CORES: 0}
    for i, want in enumerate(containers):
        c = copy.deepcopy(template)
        c["name"] = f"{spec.role}-{i}"
        limits = {"cpu": str(spec.cpu), "memory": f"{spec.memory_gib}Gi", VGPU_NUMBER: str(want["number"])}
        totals[VGPU_NUMBER] += want["number"]
        for key, name in (("memory", VGPU_MEMORY), ("cores", VGPU_CORES)):
            if want.get(key):
                limits[name] = str(want[key])
                totals[name] += want[key]
        c["resources"] = {"limits": limits, "requests": dict(limits)}
        gpu_containers.append(c)
    side = {**copy.deepcopy(template), "name": "sidecar", "resources": {"limits": {"cpu": "1"}}}
    pod["spec"]["containers"] = ([side] if sidecar else []) + gpu_containers
    if holds:
        pod["metadata"]["annotations"][ann.VGPU_IDS] = holds
    scalars = {k: float(v) for k, v in totals.items() if v}
    task["Resreq"] = task["InitResreq"] = build.scalar_resource(
        spec.cpu * 1000, spec.memory_gib * build.GIB, scalars
    )
    return task


def session() -> dict[str, Any]:
    """Two vGPU nodes; one share already held on vg-0 by a deviceshare pod; a 2-pod whole-GPU gang,
    a share behind a sidecar, and a pod whose two containers ask for 2 and 1 GPUs."""
    nodes = [vgpu_node(n) for n in NODES]
    running = vgpu_task(
        build.PodSpec("team-r", "held-0", "held", "worker", node="vg-0"),
        [{"number": 1, "memory": 20000, "cores": 30}],
        holds=f"{build.gpu_uuid('vg-0', 0)},NVIDIA,20000,30:",
    )
    train = [
        vgpu_task(build.PodSpec("team-v", f"train-{i}", "train", "worker"), [{"number": 4}]) for i in range(2)
    ]
    infer = [
        vgpu_task(
            build.PodSpec("team-v", "infer-0", "infer", "worker"),
            [{"number": 1, "memory": 30000, "cores": 40}],
            sidecar=True,
        )
    ]
    multi = [vgpu_task(build.PodSpec("team-v", "multi-0", "multi", "worker"), [{"number": 2}, {"number": 1}])]
    jobs = {}
    for group, tasks in (("train", train), ("infer", infer), ("multi", multi)):
        g = build.GroupSpec("team-v", group, len(tasks))
        jobs[f"team-v/{group}"] = build.job_info(g, tasks)
    return {
        "Jobs": jobs,
        "Nodes": {
            n["metadata"]["name"]: build.node_info(n, [running] if n["metadata"]["name"] == "vg-0" else [])
            for n in nodes
        },
        "Queues": {},
        "NamespaceInfo": {},
        "RevocableNodes": {},
        "NodeList": None,
    }


@dataclass
class Allocated:
    body: dict[str, Any]
    extender: Extender
    patcher: RecordingPatcher
    pods: dict[str, dict[str, Any]]  # "ns/name" → the v1.Pod after the patches
    expect: dict[str, list[dict[str, Any]]]  # "ns/name" → planned devices from the solver's placement
    node_of: dict[str, str]  # "ns/name" → planned node


def allocate(body: dict[str, Any] | None = None) -> Allocated:
    """Open a session on the real extender (real solver), allocate every planned task on its planned
    node, and apply the recorded patches to the pods."""
    body = body if body is not None else session()
    patcher = RecordingPatcher()
    extender = Extender(solve=local_solve, patcher=patcher, config=Config(http_timeout_s=20.0, margin_s=0.5))
    extender.on_session_open(body)
    plan = extender.plan
    if plan is None:
        raise RuntimeError(f"no plan: {extender.status.error}")
    nodes = plan.batch.nodes
    pods: dict[str, dict[str, Any]] = {}
    expect: dict[str, list[dict[str, Any]]] = {}
    node_of: dict[str, str] = {}
    for job in body["Jobs"].values():
        for task in job["Tasks"].values():
            assignment = plan.assignments.get(task["UID"])
            if assignment is None:
                continue
            extender.allocate({"task": {**task, "NodeName": assignment.node, "Status": wire.ALLOCATED}})
            key = f"{task['Namespace']}/{task['Name']}"
            pod = copy.deepcopy(task["Pod"])
            pod["metadata"]["annotations"].update(patcher.current("Pod", task["Namespace"], task["Name"]))
            pod["spec"]["nodeName"] = assignment.node
            pods[key], node_of[key] = pod, assignment.node
            by_id = {g.id: g for g in nodes[assignment.node].gpus}
            expect[key] = [
                {"uuid": by_id[g].uuid, "type": "NVIDIA", "usedmem": by_id[g].memory_mib, "usedcores": 100}
                for g in assignment.gpus
                if g not in assignment.shares
            ] + [
                {"uuid": by_id[g].uuid, "type": "NVIDIA", "usedmem": memory, "usedcores": milli // 10}
                for g, (milli, memory) in assignment.shares.items()
            ]
    extender.close()
    return Allocated(body, extender, patcher, pods, expect, node_of)


def cases(done: Allocated) -> list[dict[str, Any]]:
    """One decode case per node that got planned pods."""
    out = []
    for name, info in sorted(done.body["Nodes"].items()):
        planned = sorted(k for k, n in done.node_of.items() if n == name)
        if not planned:
            continue
        running = [t["Pod"] for t in info["Tasks"].values()]
        out.append(
            {
                "name": name,
                "node": info["Node"],
                "pods": running + [done.pods[k] for k in planned],
                "expect": [
                    {"namespace": k.split("/")[0], "name": k.split("/")[1], "containers": [done.expect[k]]}
                    for k in planned
                ],
            }
        )
    return out


def write(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    paths = []
    for case in cases(allocate()):
        path = out / f"{case['name']}.json"
        path.write_text(json.dumps(case, indent=1, sort_keys=True))
        paths.append(path)
    return paths


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.volcano.device_cases OUT_DIR", file=sys.stderr)
        return 2
    paths = write(Path(argv[0]))
    print(f"{len(paths)} decode case(s) in {argv[0]}", file=sys.stderr)
    return 0 if paths else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
