"""The annotation formats the adapter reads and writes, each with its parser and printer.

Formats are those of the sources at named releases (read, not copied): HAMi v2.4.1-v2.10.0
(``pkg/device``, ``pkg/util``, ``pkg/device-plugin/nvidiadevice/nvinternal/plugin``),
volcano-vgpu-device-plugin v1.12.0 (``pkg/util``, ``pkg/plugin/server.go``) and Volcano v1.10.0 and
master of late 2026 (``pkg/scheduler/api/devices/nvidia/vgpu``). See docs/volcano.md.

Read from nodes
  ``topoplace.io/topology``        a node's PCIe/NUMA/NVLink/NIC topology, written by ``topoplace
                                   node-report`` (JSON: a ``topoplace.v1.Node`` in proto3 JSON form)
  ``hami.io/node-nvidia-register`` HAMi's device plugin. v2.8+: a JSON array of ``DeviceInfo``
                                   (``id, index, count, devmem, devcore, type, numa, mode, health``,
                                   every field ``omitempty``: a missing ``health`` is false, a missing
                                   ``index``/``numa`` is 0, as Go decodes them). v2.4-v2.7: the colon
                                   form, ``id,count,devmem,devcore,type,numa,health`` (7 fields) or
                                   ``...,health,index,mode`` (9 fields, v2.5+)
  ``volcano.sh/node-vgpu-register`` volcano-vgpu-device-plugin: ``UUID,count,devmem,type,health,mode:``
  ``volcano.sh/gpu-unhealthy-ids`` Volcano's gpushare: indices of unhealthy GPUs, comma-separated

Read from running pods (what they hold)
  ``topoplace.io/devices``         written by this adapter (below)
  ``volcano.sh/vgpu-ids-new``      ``UUID,Type,usedmem,usedcores:`` per device, ``;`` between containers
  ``hami.io/vgpu-devices-allocated`` the same encoding, written by HAMi

Written on pods during ``allocateFunc``: ``topoplace.io/devices`` (JSON, :class:`DeviceAnnotation`)
and, for the device plugin the node runs (:func:`device_plugin`), exactly what that plugin decodes
when the kubelet calls its ``Allocate`` (:func:`hand_off`):

  volcano-vgpu-device-plugin  ``volcano.sh/devices-to-allocate`` and ``volcano.sh/vgpu-ids-new`` (the
      same string: one ``;`` entry per container asking for ``volcano.sh/vgpu-number`` or
      ``-memory``), ``volcano.sh/vgpu-node``, ``volcano.sh/vgpu-time`` (its GetPendingPod takes the
      oldest), ``volcano.sh/bind-phase: allocating``, ``volcano.sh/bind-time``
  HAMi device plugin           ``hami.io/vgpu-devices-to-allocate`` and ``hami.io/vgpu-devices-allocated``
      (every container followed by ``;``, empty for containers without GPUs), ``hami.io/vgpu-node``,
      ``hami.io/vgpu-time``, ``hami.io/bind-phase: allocating``, ``hami.io/bind-time``. Its
      GetPendingPod takes the pod named by the node lock ``hami.io/mutex.lock`` (which HAMi's own
      scheduler sets while it binds, one pod per node at a time), else the first Pending pod bound to
      the node in bind-phase allocating. Volcano binds, not HAMi, so no lock is written: a lock
      naming one pod while the kubelet admits another would hand the first pod's GPUs to the second.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from solver.domain.model import Node, SwitchKind
from solver.service import wire as solver_wire

TOPOLOGY = "topoplace.io/topology"
DEVICES = "topoplace.io/devices"
HAMI_REGISTER = "hami.io/node-nvidia-register"
VGPU_REGISTER = "volcano.sh/node-vgpu-register"
VGPU_UNHEALTHY = "volcano.sh/gpu-unhealthy-ids"
# volcano-vgpu-device-plugin's hand-off (its pkg/util/types.go; Volcano's vgpu/type.go)
VGPU_IDS = "volcano.sh/vgpu-ids-new"
VGPU_TO_ALLOCATE = "volcano.sh/devices-to-allocate"
VGPU_NODE = "volcano.sh/vgpu-node"
VGPU_TIME = "volcano.sh/vgpu-time"
VGPU_BIND_PHASE = "volcano.sh/bind-phase"
VGPU_BIND_TIME = "volcano.sh/bind-time"
# HAMi's hand-off (its pkg/util/types.go, pkg/device/nvidia/device.go, pkg/util/nodelock)
HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
HAMI_NODE = "hami.io/vgpu-node"
HAMI_TIME = "hami.io/vgpu-time"
HAMI_BIND_PHASE = "hami.io/bind-phase"
HAMI_BIND_TIME = "hami.io/bind-time"
BIND_ALLOCATING = "allocating"
NVIDIA = "NVIDIA"  # the device type both plugins match (GetNextDeviceRequest compares it exactly)
JOB_HYPERNODE = "volcano.sh/job-allocated-hypernode"

VGPU_KEYS = (VGPU_IDS, VGPU_TO_ALLOCATE, VGPU_NODE, VGPU_TIME, VGPU_BIND_PHASE, VGPU_BIND_TIME)
HAMI_KEYS = (HAMI_TO_ALLOCATE, HAMI_ALLOCATED, HAMI_NODE, HAMI_TIME, HAMI_BIND_PHASE, HAMI_BIND_TIME)
# Everything allocateFunc may write on a pod, and deallocateFunc removes again.
POD_KEYS = (DEVICES, *VGPU_KEYS, *HAMI_KEYS)


class AnnotationError(ValueError):
    """An annotation that cannot be read; the message names the annotation and the reason."""


# --------------------------------------------------------------------------- node: topology


def topology_value(node: Node) -> str:
    """The ``topoplace.io/topology`` value for ``node``: its proto3 JSON, compact. The node's name
    and labels are left out — the Kubernetes Node object is the truth for those."""
    data = json.loads(solver_wire.node_to_json(node))
    for key in ("name", "labels", "allocations", "leaf"):
        data.pop(key, None)
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def parse_topology(value: str, node_name: str) -> Node:
    """The node a ``topoplace.io/topology`` value describes, named ``node_name``.

    Read straight into the domain model (the annotation uses the proto's field names, which are the
    domain's; only enum names and int64 strings need converting) and cached by value: a session
    repeats every second with the same annotations, and 1,000 nodes must convert in milliseconds.
    """
    return _parse_topology(value).model_copy(update={"name": node_name})


# A GPU's ``uuid`` is the one field in which the annotations of a hardware model's nodes differ (a
# DGX's topology is the same on every DGX): its value is any string, so it cannot make an annotation
# invalid. The annotation is validated once per model with each uuid swapped for a numbered
# placeholder, and each node's uuids put back into a copy of that: validating every node's own
# text took 0.56 s of a cold 1,024-node session's 0.68 s conversion (bench.volcano_cost, session 13).
_UUID = re.compile(r'"uuid"(\s*):(\s*)"((?:[^"\\]|\\.)*)"')
_PLACEHOLDER = r"\u0000"  # in the JSON text of the template; "\x00" in the value it decodes to


@lru_cache(maxsize=16384)
def _parse_topology(value: str) -> Node:
    uuids: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        uuids.append(match.group(3))
        return f'"uuid"{match.group(1)}:{match.group(2)}"{_PLACEHOLDER}{len(uuids) - 1}"'

    template_text = _UUID.sub(placeholder, value)
    if not uuids:
        return _validate_topology(value)
    template = _validate_topology(template_text)
    try:
        decoded = [u if "\\" not in u else json.loads(f'"{u}"') for u in uuids]
    except json.JSONDecodeError as err:
        raise AnnotationError(f"{TOPOLOGY}: not JSON ({err.msg})") from None
    gpus = tuple(
        g.model_copy(update={"uuid": decoded[int(g.uuid[1:])]}) if g.uuid.startswith("\x00") else g
        for g in template.gpus
    )
    return template.model_copy(update={"gpus": gpus})


@lru_cache(maxsize=256)
def _validate_topology(value: str) -> Node:
    try:
        data = json.loads(value)
    except json.JSONDecodeError as err:
        raise AnnotationError(f"{TOPOLOGY}: not JSON ({err.msg})") from None
    if not isinstance(data, dict):
        raise AnnotationError(f"{TOPOLOGY}: expected a JSON object")
    data = {**data, "name": "topology"}
    for switch in data.get("pcie_switches") or ():
        kind = switch.get("kind") if isinstance(switch, dict) else None
        if isinstance(kind, str):
            kind = kind.removeprefix("SWITCH_KIND_")  # the proto's enum value names
            if kind not in SwitchKind.__members__:
                raise AnnotationError(
                    f"{TOPOLOGY}: pcie_switches kind {kind!r} is not one of "
                    f"{', '.join(SwitchKind.__members__)}"
                )
            switch["kind"] = SwitchKind[kind]
    try:
        return Node.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise AnnotationError(f"{TOPOLOGY}: {where}: {first['msg']}") from None


# --------------------------------------------------------------------------- node: device registers


@dataclass(frozen=True)
class RegisteredGpu:
    """One GPU as a device plugin registered it."""

    uuid: str
    index: int
    memory_mib: int
    model: str
    numa: int | None
    healthy: bool


class _HamiDevice(BaseModel):
    """HAMi's ``DeviceInfo`` as ``encoding/json`` decodes it: every field is ``omitempty``, so a
    field left out is Go's zero value — ``health`` false (HAMi writes no ``health`` for an
    unhealthy GPU), ``index`` and ``numa`` 0."""

    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1)
    index: int = Field(default=0, ge=0)
    count: int = 0
    devmem: int = 0
    devcore: int = 0
    type: str = ""
    numa: int = 0
    mode: str = ""
    health: bool = False


def parse_hami_register(value: str, node_name: str) -> list[RegisteredGpu]:
    """``hami.io/node-nvidia-register``: the JSON array HAMi ≥ 2.8 writes, or the colon form of
    HAMi 2.4-2.7."""
    text = value.strip()
    if not text.startswith("["):
        return _parse_hami_colon(text, node_name)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise AnnotationError(f"{HAMI_REGISTER} on {node_name}: not JSON ({err.msg})") from None
    if not isinstance(raw, list):
        raise AnnotationError(f"{HAMI_REGISTER} on {node_name}: expected a JSON array")
    gpus = []
    for i, item in enumerate(raw):
        try:
            dev = _HamiDevice.model_validate(item)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise AnnotationError(f"{HAMI_REGISTER} on {node_name}: [{i}].{where}: {first['msg']}") from None
        gpus.append(
            RegisteredGpu(
                uuid=dev.id,
                index=dev.index,
                memory_mib=dev.devmem,
                model=dev.type,
                numa=dev.numa,
                healthy=dev.health,
            )
        )
    return gpus


def _parse_hami_colon(text: str, node_name: str) -> list[RegisteredGpu]:
    """``id,count,devmem,devcore,type,numa,health`` (HAMi 2.4) or ``...,health,index,mode`` (2.5-2.7)
    per device, ``:`` after each. HAMi's own decoder refuses any other field count for the whole
    node; so does this one (8 fields, ``...,health,index``, was written by no release's encoder
    but its meaning is plain, so it is read too)."""
    gpus = []
    for i, entry in enumerate(e for e in text.split(":") if "," in e):
        items = entry.split(",")
        if len(items) not in (7, 8, 9):
            raise AnnotationError(
                f"{HAMI_REGISTER} on {node_name}: device {i} {entry!r} has {len(items)} fields; "
                "expected 7 (id,count,devmem,devcore,type,numa,health) or 9 (...,health,index,mode)"
            )
        try:
            memory, numa = int(items[2]), int(items[5])
            index = int(items[7]) if len(items) > 7 else 0
        except ValueError as err:
            raise AnnotationError(f"{HAMI_REGISTER} on {node_name}: device {i} {entry!r}: {err}") from None
        gpus.append(
            RegisteredGpu(
                uuid=items[0],
                index=index if len(items) > 7 else i,
                memory_mib=memory,
                model=items[4],
                numa=numa,
                healthy=_go_bool(items[6]),
            )
        )
    if not gpus and text:
        raise AnnotationError(f"{HAMI_REGISTER} on {node_name}: no device in {text[:80]!r}")
    return gpus


def parse_vgpu_register(value: str, node_name: str) -> list[RegisteredGpu]:
    """``volcano.sh/node-vgpu-register``: ``UUID,count,devmem,type,health[,mode]:`` per device (the
    mode field is newer; Volcano v1.10 reads the first five), in index order."""
    gpus = []
    for i, entry in enumerate(e for e in value.strip().split(":") if "," in e):
        items = entry.split(",")
        if len(items) < 5:
            raise AnnotationError(
                f"{VGPU_REGISTER} on {node_name}: device {i} {entry!r} has {len(items)} fields; "
                "expected UUID,count,devmem,type,health,mode"
            )
        try:
            memory = int(items[2])
        except ValueError as err:
            raise AnnotationError(f"{VGPU_REGISTER} on {node_name}: device {i} {entry!r}: {err}") from None
        gpus.append(
            RegisteredGpu(
                uuid=items[0],
                index=i,
                memory_mib=memory,
                model=items[3],
                numa=None,
                healthy=_go_bool(items[4]),
            )
        )
    return gpus


def _go_bool(text: str) -> bool:
    """``strconv.ParseBool``: 1, t, T, TRUE, true, True are true; anything else (errors included,
    which the plugins ignore) is false."""
    return text.strip() in ("1", "t", "T", "TRUE", "true", "True")


def parse_unhealthy_ids(value: str, node_name: str) -> set[int]:
    """``volcano.sh/gpu-unhealthy-ids``: GPU indices, comma-separated."""
    try:
        return {int(v) for v in value.split(",") if v.strip()}
    except ValueError:
        raise AnnotationError(
            f"{VGPU_UNHEALTHY} on {node_name}: {value!r} is not a list of GPU indices"
        ) from None


# --------------------------------------------------------------------------- pods: device lists


@dataclass(frozen=True)
class ContainerDevice:
    """One entry of ``UUID,Type,usedmem,usedcores``."""

    uuid: str
    type: str
    used_mem_mib: int
    used_cores: int  # percent of the GPU's compute


def encode_pod_devices(containers: Sequence[Sequence[ContainerDevice]]) -> str:
    """Volcano's pod device list (``encodePodDevices``): per container ``UUID,Type,mem,cores:``
    repeated, ``;`` between containers."""
    return ";".join(_encode_container(devices) for devices in containers)


def _encode_container(devices: Sequence[ContainerDevice]) -> str:
    return "".join(f"{d.uuid},{d.type},{d.used_mem_mib},{d.used_cores}:" for d in devices)


def decode_pod_devices(value: str, where: str) -> list[list[ContainerDevice]]:
    containers: list[list[ContainerDevice]] = []
    for part in value.split(";"):
        devices = []
        for entry in (e for e in part.split(":") if e.strip()):
            items = entry.split(",")
            if len(items) < 4:
                raise AnnotationError(f"{where}: {entry!r} is not UUID,Type,usedmem,usedcores")
            try:
                devices.append(ContainerDevice(items[0], items[1], int(items[2]), int(items[3])))
            except ValueError as err:
                raise AnnotationError(f"{where}: {entry!r}: {err}") from None
        containers.append(devices)
    return containers


# --------------------------------------------------------------------------- pods: topoplace.io/devices


class DeviceGpu(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    id: str
    uuid: str = ""
    index: int = 0
    milli: int = 1000  # 1000 = the whole GPU
    memory_mib: int = Field(default=0, alias="memoryMib")


class DeviceAnnotation(BaseModel):
    """``topoplace.io/devices`` on a pod: what the node must hand it. Stable, versioned JSON::

        {"version": 1, "node": "gpu-007", "job": "team-a/train", "role": "worker", "member": 3,
         "gpus": [{"id": "GPU2", "uuid": "GPU-…", "index": 2, "milli": 1000, "memoryMib": 81920}],
         "nics": ["mlx5_2"], "numa": 1, "aligned": true, "planned": true, "hypernode": "leaf-1"}

    ``planned`` is false when Volcano put the task somewhere the plan did not and the adapter chose
    the devices itself (first free ones on that node); ``hypernode`` is the lowest HyperNode holding
    the whole job.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)
    version: int = 1
    node: str
    job: str
    role: str
    member: int
    gpus: tuple[DeviceGpu, ...] = ()
    nics: tuple[str, ...] = ()
    numa: int | None = None
    aligned: bool = True
    planned: bool = True
    hypernode: str = ""
    at: int = 0  # when allocateFunc wrote it, ms since the epoch: the RDMA plugin serves the earliest first

    def value(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)


def parse_device_annotation(value: str, where: str) -> DeviceAnnotation:
    try:
        return DeviceAnnotation.model_validate_json(value)
    except ValidationError as err:
        first = err.errors()[0]
        raise AnnotationError(f"{where}: {DEVICES}: {first['msg']}") from None


class DevicePlugin(StrEnum):
    """Which device plugin hands a node's GPUs to containers, and so which hand-off it decodes."""

    NONE = "none"  # no register topoplace knows: NVIDIA's plugin picks the GPUs itself
    VOLCANO_VGPU = "volcano-vgpu"  # volcano-vgpu-device-plugin: volcano.sh/vgpu-number, -memory
    HAMI = "hami"  # HAMi's device plugin: nvidia.com/gpu, nvidia.com/gpumem


def device_plugin(node_annotations: Mapping[str, str], *, vgpu_resources: bool) -> DevicePlugin:
    """The plugin that serves a pod's GPU resources on a node: the one whose register is on the node
    and whose resource names the pod asks for (``vgpu_resources``: ``volcano.sh/vgpu-*``)."""
    if vgpu_resources:
        return DevicePlugin.VOLCANO_VGPU if node_annotations.get(VGPU_REGISTER) else DevicePlugin.NONE
    return DevicePlugin.HAMI if node_annotations.get(HAMI_REGISTER) else DevicePlugin.NONE


Containers = Sequence[Sequence[ContainerDevice] | None]
"""A pod's devices per container, in ``spec.containers`` order; None for a container asking for no
device of the plugin (Volcano's encoding leaves such containers out, HAMi's keeps an empty entry)."""


def hand_off(
    plugin: DevicePlugin, node: str, containers: Containers, now: float | None = None
) -> dict[str, str]:
    """The pod annotations ``plugin`` decodes in ``Allocate`` to hand over exactly these devices."""
    stamp = str(int(time.time() if now is None else now))
    if plugin is DevicePlugin.VOLCANO_VGPU:
        ids = encode_pod_devices([c for c in containers if c is not None])
        return {
            VGPU_IDS: ids,
            VGPU_TO_ALLOCATE: ids,
            VGPU_NODE: node,
            VGPU_TIME: stamp,
            VGPU_BIND_PHASE: BIND_ALLOCATING,
            VGPU_BIND_TIME: stamp,
        }
    if plugin is DevicePlugin.HAMI:
        ids = "".join(_encode_container(c or ()) + ";" for c in containers)
        return {
            HAMI_TO_ALLOCATE: ids,
            HAMI_ALLOCATED: ids,
            HAMI_NODE: node,
            HAMI_TIME: stamp,
            HAMI_BIND_PHASE: BIND_ALLOCATING,
            HAMI_BIND_TIME: stamp,
        }
    return {}


def pod_annotations(
    device: DeviceAnnotation,
    plugin: DevicePlugin = DevicePlugin.NONE,
    containers: Containers = (),
    now: float | None = None,
) -> dict[str, str]:
    """Every annotation allocateFunc writes for one placed task."""
    moment = time.time() if now is None else now
    stamped = device.model_copy(update={"at": int(moment * 1000)})
    return {DEVICES: stamped.value(), **hand_off(plugin, device.node, containers, moment)}


def removal(keys: Iterable[str] = POD_KEYS) -> dict[str, str | None]:
    """A merge patch that deletes ``keys``."""
    return dict.fromkeys(keys)


def parse_gpu_csv(text: str) -> dict[int, tuple[str, str, int]]:
    """``nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`` →
    index → (uuid, model, memory MiB). A header line, if present, is skipped."""
    rows: dict[int, tuple[str, str, int]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        cells = [c.strip() for c in line.split(",")]
        if not line.strip() or cells[0].lower() == "index":
            continue
        if len(cells) < 4:
            raise AnnotationError(f"gpu list line {number}: expected index,uuid,name,memory.total")
        try:
            rows[int(cells[0])] = (cells[1], cells[2], int(float(cells[3].split()[0])))
        except ValueError as err:
            raise AnnotationError(f"gpu list line {number}: {err}") from None
    return rows


def json_or_none(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return None
