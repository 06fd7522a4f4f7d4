"""Devices to the container: the register formats read as the device plugins write them, and the
hand-off written as their ``Allocate`` decodes it.

Format sources (read at these tags, not copied): HAMi v2.4.1 / v2.5.0-v2.7.1 ``EncodeNodeDevices``
(colon form, 7 then 9 fields) and v2.8.0+ ``MarshalNodeDevices`` (JSON, every field ``omitempty``);
HAMi ``EncodePodSingleDevice`` (a ``;`` after every container) and ``nodelock``; volcano-vgpu-device-
plugin v1.12.0 ``EncodeNodeDevices``/``GetPendingPod``/``GetNextDeviceRequest``; Volcano's
``encodePodDevices``. The Go decode of the volcano-vgpu hand-off is ``tests/volcano/godecode``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from adapters.volcano import annotations as ann
from adapters.volcano import kube, wire
from adapters.volcano.extender import Config, Extender
from adapters.volcano.hypernodes import HyperNode
from adapters.volcano.patcher import RecordingPatcher
from fixtures.volcano import build

from . import device_cases
from .conftest import CapturingSolve

A100 = "NVIDIA-A100-SXM4-80GB"


# --------------------------------------------------------------------------- registers


def test_hami_json_register_missing_health_is_unhealthy() -> None:
    """HAMi ≥ 2.8 marshals ``DeviceInfo`` with every field ``omitempty``: an unhealthy GPU has no
    ``health`` key, index 0 and NUMA 0 have none either. Go decodes the missing keys as zero values."""
    value = json.dumps(
        [
            {"id": "GPU-0", "count": 10, "devmem": 81920, "devcore": 100, "type": A100, "mode": "hami-core",
             "health": True},
            {"id": "GPU-1", "index": 1, "count": 10, "devmem": 81920, "devcore": 100, "type": A100, "numa": 1,
             "mode": "hami-core"},
        ],
        separators=(",", ":"),
    )  # fmt: skip
    gpus = ann.parse_hami_register(value, "n")
    assert [(g.uuid, g.index, g.numa, g.healthy) for g in gpus] == [
        ("GPU-0", 0, 0, True),
        ("GPU-1", 1, 1, False),
    ]


def test_hami_colon_register_nine_fields() -> None:
    """HAMi 2.5-2.7 write ``id,count,devmem,devcore,type,numa,health,index,mode``: health is the
    7th field, not the last (read as the last, every GPU looked unhealthy and nothing placed)."""
    value = "".join(f"GPU-{i},10,81920,100,{A100},{i // 4},true,{i},hami-core:" for i in range(8))
    gpus = ann.parse_hami_register(value, "n")
    assert [g.index for g in gpus] == list(range(8)) and all(g.healthy for g in gpus)
    assert [g.numa for g in gpus] == [0] * 4 + [1] * 4 and gpus[0].model == A100
    seven = ann.parse_hami_register(f"GPU-a,10,40960,100,{A100},0,false:", "n")
    assert [(g.uuid, g.index, g.healthy) for g in seven] == [("GPU-a", 0, False)]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (f"GPU-a,10,81920,100,{A100},0:", "6 fields"),
        (f"GPU-a,10,lots,100,{A100},0,true:", "invalid literal"),
        ("no devices here", "no device"),
    ],
)
def test_hami_colon_register_errors_name_the_device(value: str, reason: str) -> None:
    with pytest.raises(ann.AnnotationError, match=reason) as err:
        ann.parse_hami_register(value, "gpu-07")
    assert "gpu-07" in str(err.value) and ann.HAMI_REGISTER in str(err.value)


def test_vgpu_register_five_and_six_fields() -> None:
    gpus = ann.parse_vgpu_register(f"GPU-a,10,81920,{A100},true:GPU-b,10,81920,{A100},False,hami-core:", "n")
    assert [(g.uuid, g.index, g.healthy) for g in gpus] == [("GPU-a", 0, True), ("GPU-b", 1, False)]
    with pytest.raises(ann.AnnotationError, match="4 fields"):
        ann.parse_vgpu_register(f"GPU-a,10,81920,{A100}:", "n")


def test_gpushare_unhealthy_ids_mark_gpus_unhealthy() -> None:
    node = build.v1_node("u0", {})
    node["metadata"]["annotations"][ann.VGPU_UNHEALTHY] = "2,5"
    converted = kube.inventory_node(wire.node_info(build.node_info(node), "n"), "", kube.NodeWarnings([]))
    assert [g.index for g in converted.gpus if not g.healthy] == [2, 5]
    node["metadata"]["annotations"][ann.VGPU_UNHEALTHY] = "two"
    warn = kube.NodeWarnings([])
    kube.inventory_node(wire.node_info(build.node_info(node), "n"), "", warn)
    assert any(ann.VGPU_UNHEALTHY in w for w in warn.items)


def _colon_register(value: str) -> str:
    """A JSON register rewritten the way HAMi 2.5-2.7 wrote it."""
    return "".join(
        f"{d['id']},{d['count']},{d['devmem']},{d['devcore']},{d['type']},{d.get('numa', 0)},"
        f"{str(d.get('health', False)).lower()},{d.get('index', 0)},{d['mode']}:"
        for d in json.loads(value)
    )


def test_session_on_colon_registers_places_what_json_registers_place(
    body: dict[str, Any], hypernodes: tuple[HyperNode, ...]
) -> None:
    """The regression of issue 19 item 2: the same cluster registered in HAMi 2.7's colon form
    places the same jobs as in 2.8's JSON form (it placed none)."""
    placed = []
    for form in ("json", "colon"):
        session = copy.deepcopy(body)
        if form == "colon":
            for info in session["Nodes"].values():
                notes = info["Node"]["metadata"]["annotations"]
                notes[ann.HAMI_REGISTER] = _colon_register(notes[ann.HAMI_REGISTER])
        extender = Extender(
            solve=CapturingSolve(), patcher=RecordingPatcher(), hypernodes=lambda: hypernodes,
            config=Config(http_timeout_s=20.0, margin_s=0.5),
        )  # fmt: skip
        extender.on_session_open(session)
        placed.append(sorted(extender.status.placed_jobs))
        extender.close()
    assert placed[0] and placed[1] == placed[0]


# --------------------------------------------------------------------------- hand-off


def _dev(uuid: str, mem: int = 81920, cores: int = 100) -> ann.ContainerDevice:
    return ann.ContainerDevice(uuid, ann.NVIDIA, mem, cores)


def test_hand_off_encodings_per_plugin() -> None:
    containers = [None, [_dev("GPU-a"), _dev("GPU-b")], [_dev("GPU-c", 20000, 30)]]
    hami = ann.hand_off(ann.DevicePlugin.HAMI, "gpu-01", containers, now=1_800_000_000)
    # EncodePodSingleDevice: every container followed by ";", empty for the sidecar
    ids = ";GPU-a,NVIDIA,81920,100:GPU-b,NVIDIA,81920,100:;GPU-c,NVIDIA,20000,30:;"
    assert hami == {
        ann.HAMI_TO_ALLOCATE: ids,
        ann.HAMI_ALLOCATED: ids,
        ann.HAMI_NODE: "gpu-01",
        ann.HAMI_TIME: "1800000000",
        ann.HAMI_BIND_PHASE: "allocating",
        ann.HAMI_BIND_TIME: "1800000000",
    }
    volcano = ann.hand_off(ann.DevicePlugin.VOLCANO_VGPU, "gpu-01", containers, now=1_800_000_000)
    # encodePodDevices over resourcereqs: only containers asking for vGPUs, ";" between them
    ids = "GPU-a,NVIDIA,81920,100:GPU-b,NVIDIA,81920,100:;GPU-c,NVIDIA,20000,30:"
    assert volcano[ann.VGPU_IDS] == volcano[ann.VGPU_TO_ALLOCATE] == ids
    assert volcano[ann.VGPU_NODE] == "gpu-01" and volcano[ann.VGPU_BIND_PHASE] == "allocating"
    assert volcano[ann.VGPU_TIME] == volcano[ann.VGPU_BIND_TIME] == "1800000000"
    assert ann.hand_off(ann.DevicePlugin.NONE, "gpu-01", containers) == {}
    assert set(hami) | set(volcano) <= set(ann.POD_KEYS)  # deallocateFunc removes all of them


def test_device_plugin_follows_register_and_resource() -> None:
    hami = {ann.HAMI_REGISTER: "[]"}
    vgpu = {ann.VGPU_REGISTER: "x"}
    assert ann.device_plugin(hami, vgpu_resources=False) is ann.DevicePlugin.HAMI
    assert ann.device_plugin(vgpu, vgpu_resources=True) is ann.DevicePlugin.VOLCANO_VGPU
    # a plugin serves its own resource names only: nothing can steer another plugin's choice
    assert ann.device_plugin(hami, vgpu_resources=True) is ann.DevicePlugin.NONE
    assert ann.device_plugin(vgpu, vgpu_resources=False) is ann.DevicePlugin.NONE
    assert ann.device_plugin({}, vgpu_resources=False) is ann.DevicePlugin.NONE


def test_hami_nodes_get_hamis_hand_off_per_container(
    body: dict[str, Any], hypernodes: tuple[HyperNode, ...]
) -> None:
    """A pod with a sidecar before its GPU container, on the fixture's HAMi nodes: one ``;`` entry per
    container in ``spec.containers`` order, the sidecar's empty, the planned GPUs' UUIDs in the GPU
    container's entry, and deallocateFunc removes every key again."""
    spec = build.PodSpec("team-s", "side-0", "side", "worker", gpus=2)
    task = build.task_info(spec)
    side = {"name": "sidecar", "image": "busybox", "resources": {"limits": {"cpu": "1"}}}
    task["Pod"]["spec"]["containers"].insert(0, side)
    body["Jobs"]["team-s/side"] = build.job_info(build.GroupSpec("team-s", "side", 1), [task])
    patcher = RecordingPatcher()
    extender = Extender(
        solve=CapturingSolve(), patcher=patcher, hypernodes=lambda: hypernodes,
        config=Config(http_timeout_s=20.0, margin_s=0.5),
    )  # fmt: skip
    extender.on_session_open(body)
    plan = extender.plan
    assert plan is not None
    assignment = plan.assignments[task["UID"]]
    allocated = {**task, "NodeName": assignment.node, "Status": wire.ALLOCATED}
    extender.allocate({"task": allocated})
    notes = patcher.current("Pod", "team-s", "side-0")
    uuids = {g.id: g.uuid for g in plan.batch.nodes[assignment.node].gpus}
    want = "".join(f"{uuids[g]},NVIDIA,{build.GPU_MEM},100:" for g in assignment.gpus)
    assert notes[ann.HAMI_TO_ALLOCATE] == notes[ann.HAMI_ALLOCATED] == f";{want};"
    assert notes[ann.HAMI_NODE] == assignment.node and notes[ann.HAMI_BIND_PHASE] == "allocating"
    assert int(notes[ann.HAMI_BIND_TIME]) > 0 and ann.VGPU_TO_ALLOCATE not in notes
    extender.deallocate({"task": allocated})
    assert patcher.current("Pod", "team-s", "side-0") == {}
    extender.close()


def test_vgpu_nodes_get_the_volcano_hand_off() -> None:
    """Nodes registered by volcano-vgpu-device-plugin: its keys, one entry per vGPU container (the
    sidecar left out, as Volcano's resourcereqs leaves it out), the planned devices in each."""
    done = device_cases.allocate()
    assert set(done.pods) == {"team-v/train-0", "team-v/train-1", "team-v/infer-0", "team-v/multi-0"}
    for key, pod in done.pods.items():
        notes = pod["metadata"]["annotations"]
        assert notes[ann.VGPU_TO_ALLOCATE] == notes[ann.VGPU_IDS], key
        assert notes[ann.VGPU_NODE] == done.node_of[key] and notes[ann.VGPU_BIND_PHASE] == "allocating"
        assert ann.HAMI_TO_ALLOCATE not in notes
        containers = ann.decode_pod_devices(notes[ann.VGPU_TO_ALLOCATE], key)
        got = [{"uuid": d.uuid, "type": d.type, "usedmem": d.used_mem_mib, "usedcores": d.used_cores}
               for c in containers for d in c]  # fmt: skip
        assert got == done.expect[key], key
    multi = ann.decode_pod_devices(done.pods["team-v/multi-0"]["metadata"]["annotations"][ann.VGPU_IDS], "m")
    assert [len(c) for c in multi] == [2, 1]
    infer = ann.decode_pod_devices(done.pods["team-v/infer-0"]["metadata"]["annotations"][ann.VGPU_IDS], "i")
    assert [[(d.used_mem_mib, d.used_cores) for d in c] for c in infer] == [[(30000, 40)]]
    # the held share and the planned share are on one GPU only if both fit it (one ledger)
    cases = device_cases.cases(done)
    assert {c["name"] for c in cases} == set(done.node_of.values())
