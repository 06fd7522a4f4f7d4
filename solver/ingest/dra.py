"""DRA ``ResourceSlice``\\ s (``resource.k8s.io`` v1, v1beta2, v1beta1) as each node's GPUs and NICs.

What is read, per node-local slice (``spec.nodeName``), newest pool generation only (a driver that
republishes leaves older generations behind until they are garbage collected):

* GPUs of NVIDIA's DRA driver (``spec.driver: gpu.nvidia.com``, attribute ``type: gpu``):
  ``index`` (else ``minor``) → ``GPU<k>``, ``uuid``, ``productName``, capacity ``memory``;
* RDMA NICs of dranet (``spec.driver: dra.net``, attribute ``dra.net/rdma: true``): named by
  ``dra.net/rdmaDevice`` (``mlx5_0``), else ``dra.net/ifName``;
* for both, the PCIe placement: the standard ``resource.kubernetes.io/pcieRoot`` (``pci<domain>:<bus>``)
  and ``resource.kubernetes.io/pciBusID`` (else the driver's ``pcieBusID`` / ``dra.net/pciAddress``),
  and the NUMA node (``resource.kubernetes.io/numaNode`` or ``dra.net/numaNode``).

Attribute names without a domain belong to the driver (``uuid`` is ``gpu.nvidia.com/uuid``), as the
DRA API defines. A PCIe root is what Kubernetes promises about devices sharing it: one PCIe switch
hierarchy, so they are at most ``PXB`` apart — never claimed ``PIX`` (a capture says that). Devices
without a root sit on no switch and are ``NODE``/``SYS`` apart by their NUMA nodes. DRA says nothing of
NVLink: that comes from a capture or ``nvidia-smi -q``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Gpu, Nic, Node, NumaNode, PcieSwitch, SwitchKind
from solver.ingest.kube import load_objects, quantity
from solver.ingest.parts import NodeFacts, Parts

API_VERSIONS = {"resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"}
GPU_DRIVER = "gpu.nvidia.com"
NIC_DRIVER = "dra.net"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
NUMA_NODE = "resource.kubernetes.io/numaNode"


def read_slices(path: Path) -> Parts:
    problems: list[Problem] = []
    notes: list[str] = []
    newest: dict[tuple[str, str], int] = {}  # (driver, pool) → newest generation
    slices: list[tuple[str, dict[str, Any], str, str, int]] = []
    for where, obj in load_objects(path):
        if obj.get("kind") != "ResourceSlice":
            continue
        if obj.get("apiVersion") not in API_VERSIONS:
            message = (
                f"unknown apiVersion {obj.get('apiVersion')!r}; known: {', '.join(sorted(API_VERSIONS))}"
            )
            problems.append(Problem(path=f"{where}.apiVersion", message=message))
            continue
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        driver = spec.get("driver")
        if not isinstance(driver, str) or not driver:
            problems.append(Problem(path=f"{where}.spec.driver", message="required: the DRA driver's name"))
            continue
        pool = spec.get("pool") if isinstance(spec.get("pool"), dict) else {}
        generation = pool.get("generation", 0)
        if not isinstance(generation, int):
            problems.append(Problem(path=f"{where}.spec.pool.generation", message="must be a whole number"))
            continue
        key = (driver, str(pool.get("name", "")))
        newest[key] = max(newest.get(key, generation), generation)
        slices.append((where, spec, driver, key[1], generation))
    gpus: dict[str, list[tuple[str, Gpu, str, int | None]]] = defaultdict(list)
    nics: dict[str, list[tuple[str, Nic, str, int | None]]] = defaultdict(list)
    first_where: dict[str, str] = {}
    ignored: set[str] = set()
    for where, spec, driver, pool, generation in slices:
        if generation < newest[(driver, pool)]:
            continue
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node:
            notes.append(f"{where}: not node-local (no spec.nodeName): skipped")
            continue
        first_where.setdefault(node, where)
        if driver not in (GPU_DRIVER, NIC_DRIVER):
            ignored.add(driver)
            continue
        devices = spec.get("devices") if isinstance(spec.get("devices"), list) else []
        for i, device in enumerate(devices):
            at = f"{where}.spec.devices[{i}]"
            if not isinstance(device, dict) or not isinstance(device.get("name"), str):
                problems.append(Problem(path=f"{at}.name", message="required: the device's name"))
                continue
            attrs, capacity = _attributes(device, driver), _capacity(device)
            root, numa = _text(attrs.get(PCIE_ROOT)), _numa(attrs)
            if driver == GPU_DRIVER and attrs.get(f"{driver}/type") == "gpu":
                index = attrs.get(f"{driver}/index", attrs.get(f"{driver}/minor"))
                if not isinstance(index, int):
                    index = len(gpus[node])
                memory = quantity(capacity.get("memory"))
                gpu = Gpu(
                    id=f"GPU{index}",
                    index=index,
                    uuid=_text(attrs.get(f"{driver}/uuid")),
                    # as nvidia-smi -q and topo -m captures name it: "GB200", not "NVIDIA GB200"
                    model=_text(attrs.get(f"{driver}/productName")).removeprefix("NVIDIA "),
                    memory_mib=int(memory // 2**20) if memory else 0,
                    numa=numa,
                )
                bus = (
                    _text(attrs.get(PCI_BUS_ID)) or _text(attrs.get(f"{driver}/pcieBusID")) or device["name"]
                )
                gpus[node].append((at, gpu, root and f"{root}/{bus}", numa))
            elif driver == NIC_DRIVER and attrs.get(f"{driver}/rdma") is True:
                name = _text(attrs.get(f"{driver}/rdmaDevice")) or _text(attrs.get(f"{driver}/ifName"))
                nic = Nic(name=name or device["name"], numa=numa, rdma=True)
                bus = (
                    _text(attrs.get(PCI_BUS_ID)) or _text(attrs.get(f"{driver}/pciAddress")) or device["name"]
                )
                nics[node].append((at, nic, root and f"{root}/{bus}", numa))
    facts = {node: _node(node, gpus[node], nics[node], first_where[node], problems) for node in first_where}
    if ignored:
        notes.append(f"devices of drivers {', '.join(sorted(ignored))} are not read")
    if problems:
        raise InvalidRequest(problems)
    found = {n: f for n, f in facts.items() if f.devices is not None}
    return Parts(source=str(path), kind="DRA ResourceSlices", nodes=found, notes=tuple(notes))


def _node(
    node: str,
    gpus: list[tuple[str, Gpu, str, int | None]],
    nics: list[tuple[str, Nic, str, int | None]],
    where: str,
    problems: list[Problem],
) -> NodeFacts:
    if not gpus and not nics:
        return NodeFacts(where=where)
    seen: dict[str, str] = {}
    for at, device, _, _ in [*gpus, *nics]:
        name = device.id if isinstance(device, Gpu) else device.name
        if name in seen:
            problems.append(
                Problem(path=at, message=f"node {node}: {name} is also published at {seen[name]}")
            )
        seen.setdefault(name, at)
    roots: dict[str, set[int | None]] = defaultdict(set)
    for _, _, leaf, numa in [*gpus, *nics]:
        if leaf:
            roots[leaf.split("/", 1)[0]].add(numa)
    switches = [
        PcieSwitch(id=root, kind=SwitchKind.SWITCH, numa=next(iter(numas)) if len(numas) == 1 else None)
        for root, numas in sorted(roots.items())
    ] + [PcieSwitch(id=leaf, parent=leaf.split("/", 1)[0]) for _, _, leaf, _ in [*gpus, *nics] if leaf]
    numas = sorted({numa for _, _, _, numa in [*gpus, *nics] if numa is not None})
    devices = Node(
        name=node,
        gpus=tuple(
            sorted(
                (g.model_copy(update={"pcie_switch": leaf}) for _, g, leaf, _ in gpus), key=lambda g: g.index
            )
        ),
        nics=tuple(n.model_copy(update={"pcie_switch": leaf}) for _, n, leaf, _ in nics),
        pcie_switches=tuple(switches),
        numa_nodes=tuple(NumaNode(id=n) for n in numas),
    )
    models = {g.model for _, g, _, _ in gpus if g.model}
    return NodeFacts(
        where=where, devices=devices, gpu_count=len(gpus), gpu_model=min(models) if models else None
    )


def _attributes(device: dict[str, Any], driver: str) -> dict[str, Any]:
    """Qualified name → plain value; v1beta1 keeps them under ``basic``."""
    body = device.get("basic") if isinstance(device.get("basic"), dict) else device
    raw = body.get("attributes") if isinstance(body.get("attributes"), dict) else {}
    attrs: dict[str, Any] = {}
    for name, value in raw.items():
        qualified = name if "/" in name else f"{driver}/{name}"
        if isinstance(value, dict) and len(value) == 1:
            attrs[qualified] = next(iter(value.values()))
    return attrs


def _capacity(device: dict[str, Any]) -> dict[str, Any]:
    body = device.get("basic") if isinstance(device.get("basic"), dict) else device
    raw = body.get("capacity") if isinstance(body.get("capacity"), dict) else {}
    return {name: value.get("value") if isinstance(value, dict) else value for name, value in raw.items()}


def _numa(attrs: dict[str, Any]) -> int | None:
    value = attrs.get(NUMA_NODE, attrs.get(f"{NIC_DRIVER}/numaNode"))
    if isinstance(value, list):  # the list form: the device's own node first
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
