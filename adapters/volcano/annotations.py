"""The annotation formats the adapter reads and writes, each with its parser and printer.

Read from nodes
  ``topoplace.io/topology``        a node's PCIe/NUMA/NVLink/NIC topology, written by ``topoplace
                                   node-report`` (JSON: a ``topoplace.v1.Node`` in proto3 JSON form)
  ``hami.io/node-nvidia-register`` HAMi's device plugin: JSON array of ``{id, index, count, devmem,
                                   devcore, type, numa, mode, health}`` (older HAMi: the colon form
                                   ``UUID,count,devmem,devcore,type,numa,health:`` also read)
  ``volcano.sh/node-vgpu-register`` Volcano's vGPU device plugin: ``UUID,count,devmem,type,health,mode:``

Read from running pods (what they hold)
  ``topoplace.io/devices``         written by this adapter (below)
  ``volcano.sh/vgpu-ids-new``      ``UUID,Type,usedmem,usedcores:`` per device, ``;`` between containers
  ``hami.io/vgpu-devices-allocated`` the same encoding, written by HAMi

Written on pods during ``allocateFunc``
  ``topoplace.io/devices``         JSON, see :class:`DeviceAnnotation`
  ``volcano.sh/vgpu-ids-new``, ``volcano.sh/vgpu-node``, ``volcano.sh/bind-phase``,
  ``volcano.sh/bind-time``        what Volcano's deviceshare plugin writes, so its device plugin
                                   hands the pod exactly the planned GPUs
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from solver.domain.model import Node, SwitchKind
from solver.service import wire as solver_wire

TOPOLOGY = "topoplace.io/topology"
DEVICES = "topoplace.io/devices"
HAMI_REGISTER = "hami.io/node-nvidia-register"
VGPU_REGISTER = "volcano.sh/node-vgpu-register"
VGPU_IDS = "volcano.sh/vgpu-ids-new"
VGPU_NODE = "volcano.sh/vgpu-node"
VGPU_BIND_PHASE = "volcano.sh/bind-phase"
VGPU_BIND_TIME = "volcano.sh/bind-time"
HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
JOB_HYPERNODE = "volcano.sh/job-allocated-hypernode"

# Everything allocateFunc writes on a pod, and deallocateFunc removes again.
POD_KEYS = (DEVICES, VGPU_IDS, VGPU_NODE, VGPU_BIND_PHASE, VGPU_BIND_TIME)


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


@lru_cache(maxsize=16384)
def _parse_topology(value: str) -> Node:
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
    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1)
    index: int = 0
    count: int = 0
    devmem: int = 0
    devcore: int = 100
    type: str = ""
    numa: int | None = None
    mode: str = ""
    health: bool = True


def parse_hami_register(value: str, node_name: str) -> list[RegisteredGpu]:
    """``hami.io/node-nvidia-register``: the JSON array HAMi ≥ 2.4 writes, or the older colon form."""
    text = value.strip()
    if not text.startswith("["):
        return _parse_colon_register(text, node_name, HAMI_REGISTER, hami=True)
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
                index=dev.index if "index" in item else i,
                memory_mib=dev.devmem,
                model=dev.type,
                numa=dev.numa,
                healthy=dev.health,
            )
        )
    return gpus


def parse_vgpu_register(value: str, node_name: str) -> list[RegisteredGpu]:
    """``volcano.sh/node-vgpu-register``: ``UUID,count,devmem,type,health,mode:`` per device."""
    return _parse_colon_register(value.strip(), node_name, VGPU_REGISTER, hami=False)


def _parse_colon_register(text: str, node_name: str, key: str, *, hami: bool) -> list[RegisteredGpu]:
    fields = 7 if hami else 6
    gpus = []
    for i, entry in enumerate(e for e in text.split(":") if e.strip()):
        items = entry.split(",")
        if len(items) < fields - (1 if hami else 0):
            raise AnnotationError(f"{key} on {node_name}: device {i} {entry!r} has {len(items)} fields")
        try:
            if hami:  # UUID,count,devmem,devcore,type,numa,health
                memory, model = int(items[2]), items[4]
                numa = int(items[5]) if len(items) > 6 else None
                healthy = items[-1].strip().lower() == "true"
            else:  # UUID,count,devmem,type,health,mode
                memory, model, numa = int(items[2]), items[3], None
                healthy = items[4].strip().lower() == "true"
        except ValueError as err:
            raise AnnotationError(f"{key} on {node_name}: device {i} {entry!r}: {err}") from None
        gpus.append(
            RegisteredGpu(uuid=items[0], index=i, memory_mib=memory, model=model, numa=numa, healthy=healthy)
        )
    return gpus


# --------------------------------------------------------------------------- pods: device lists


@dataclass(frozen=True)
class ContainerDevice:
    """One entry of ``UUID,Type,usedmem,usedcores``."""

    uuid: str
    type: str
    used_mem_mib: int
    used_cores: int  # percent of the GPU's compute


def encode_pod_devices(containers: Sequence[Sequence[ContainerDevice]]) -> str:
    """Volcano/HAMi's pod device list: per container ``UUID,Type,mem,cores:`` repeated, ``;`` between."""
    return ";".join(
        "".join(f"{d.uuid},{d.type},{d.used_mem_mib},{d.used_cores}:" for d in devices)
        for devices in containers
    )


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

    def value(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)


def parse_device_annotation(value: str, where: str) -> DeviceAnnotation:
    try:
        return DeviceAnnotation.model_validate_json(value)
    except ValidationError as err:
        first = err.errors()[0]
        raise AnnotationError(f"{where}: {DEVICES}: {first['msg']}") from None


def pod_annotations(device: DeviceAnnotation, vgpu: str, now: float | None = None) -> dict[str, str]:
    """Every annotation allocateFunc writes for one placed task."""
    stamp = str(int(time.time() if now is None else now))
    return {
        DEVICES: device.value(),
        VGPU_IDS: vgpu,
        VGPU_NODE: device.node,
        VGPU_BIND_PHASE: "allocating",
        VGPU_BIND_TIME: stamp,
    }


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
