"""The topoplace inventory of a Slurm cluster: nodes from ``scontrol``, devices and their GRES index
order from gres.conf, PCIe trees from ``nvidia-smi topo -m`` captures, the fabric from topology.conf.

What Slurm already allocated stays allocated: ``GresUsed=gpu:sw2:1(IDX:4)`` is mapped through the
node's gres.conf order back to the GPU it names, and becomes an :class:`~solver.domain.model.Allocation`
together with the node's allocated CPUs and memory. Plans handed out for jobs that are still pending
(``extra``) are added the same way, so two quick submits are not planned onto the same devices.

NVLink counts are gres.conf's ``Links=`` where it gives them (what Slurm's cons_tres picks GPUs by
inside one GRES type), else the capture's ``NV#``.

Labels carry what job filters need: ``slurm/partition.<p>`` and ``slurm/feature.<f>`` set to "1".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from adapters.slurm.gres import GresConf, NodeDevices, gpu_order_faults, node_devices
from adapters.slurm.nodetypes import NodeType, TopoDir, load_node_type
from adapters.slurm.problems import Problems
from adapters.slurm.scontrol import SlurmNode
from adapters.slurm.topology_conf import SlurmTopology
from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Allocation, Inventory, Node, NvLink

PARTITION_LABEL = "slurm/partition."
FEATURE_LABEL = "slurm/feature."


@dataclass(frozen=True)
class DeviceMap:
    """For one node: GRES IDX ↔ device (GPU id, NIC name), and each device's GRES type."""

    gpu_by_idx: tuple[str, ...]
    nic_by_idx: tuple[str, ...]
    type_of: dict[str, str]

    def gpu_idx(self, gpu: str) -> int:
        return self.gpu_by_idx.index(gpu)

    def nic_idx(self, nic: str) -> int:
        return self.nic_by_idx.index(nic)


@dataclass
class SlurmInventory:
    """The solver's inventory plus what is needed to turn a plan back into Slurm terms."""

    inventory: Inventory
    device_maps: dict[str, DeviceMap] = field(default_factory=dict)
    node_types: dict[str, NodeType] = field(default_factory=dict)


def _device_map(node_type: NodeType, devices: NodeDevices | None) -> DeviceMap:
    """IDX order: gres.conf's when given (device file number = GPU index / NIC column), else the
    generated order of :mod:`adapters.slurm.gresconf`."""
    gpus = {g.index: g.id for g in node_type.node.gpus}
    nics = [n.name for n in node_type.node.nics]
    if devices is not None and devices.get("gpu"):
        gpu_order = tuple(gpus.get(d.number, f"?{d.number}") for d in devices.get("gpu"))
        nic_order = tuple(
            nics[d.number] if d.number is not None and d.number < len(nics) else f"?{d.number}"
            for d in devices.get("nic")
        )
        type_of = {gpus.get(d.number, ""): d.type for d in devices.get("gpu")}
        type_of.update(
            {
                nics[d.number]: d.type
                for d in devices.get("nic")
                if d.number is not None and d.number < len(nics)
            }
        )
    else:
        gpu_order, nic_order, type_of = node_type.gpu_order(), node_type.nic_order(), node_type.group_of()
    return DeviceMap(gpu_by_idx=gpu_order, nic_by_idx=nic_order, type_of=type_of)


def _check_order(slurm: SlurmNode, conf: GresConf, problems: Problems) -> None:
    for record, reason in gpu_order_faults(conf, slurm.name):
        problems.add(
            slurm.line,
            f"node {slurm.name}: {conf.source} line {record.line}: {reason} (Slurm numbers GPUs by "
            "device file and gives each type one run of them; topoplace slurm gres-conf writes them so)",
        )


def _check_devices(
    slurm: SlurmNode, node_type: NodeType, devices: NodeDevices | None, problems: Problems
) -> None:
    """Slurm's GRES counts and gres.conf devices must exist in the capture, or plans would name
    devices Slurm does not have."""
    gpu_count = sum(item.count for item in slurm.gres if item.name == "gpu")
    if gpu_count and gpu_count != len(node_type.node.gpus):
        problems.add(
            slurm.line,
            f"node {slurm.name}: Slurm reports {gpu_count} GPUs but {node_type.source} "
            f"has {len(node_type.node.gpus)}",
        )
    if devices is None:
        return
    known = {g.index for g in node_type.node.gpus}
    for device in devices.get("gpu"):
        if device.number is None or device.number not in known:
            problems.add(
                slurm.line,
                f"node {slurm.name}: gres.conf line {device.conf_line} names "
                f"{device.file or 'a count-only GPU'}, "
                f"which is no GPU of {node_type.source}",
            )
    for device in devices.get("nic"):
        if device.number is None or device.number >= len(node_type.node.nics):
            problems.add(
                slurm.line,
                f"node {slurm.name}: gres.conf line {device.conf_line} names "
                f"{device.file or 'a count-only NIC'}, "
                f"which is no NIC column of {node_type.source}",
            )


def _used(slurm: SlurmNode, device_map: DeviceMap, problems: Problems) -> tuple[list[str], list[str]]:
    gpus: list[str] = []
    nics: list[str] = []
    for item in slurm.gres_used:
        table, out = (device_map.gpu_by_idx, gpus) if item.name == "gpu" else (device_map.nic_by_idx, nics)
        if item.name not in ("gpu", "nic"):
            continue
        for idx in item.indices:
            if idx >= len(table):
                problems.add(
                    slurm.line,
                    f"node {slurm.name}: GresUsed {item.name} IDX {idx} is past its {len(table)} devices",
                )
                continue
            out.append(table[idx])
        if item.count and not item.indices:
            problems.add(
                slurm.line,
                f"node {slurm.name}: GresUsed {item.name}:{item.count} without (IDX:…): use scontrol -d",
            )
    return gpus, nics


def _gres_links(
    devices: NodeDevices | None, device_map: DeviceMap, problems: Problems, slurm: SlurmNode
) -> tuple[NvLink, ...] | None:
    """NVLink counts as Slurm sees them (gres.conf ``Links=``, what cons_tres picks GPUs by inside a
    type); None when gres.conf gives none, and the capture's ``NV#`` stand."""
    gpus = devices.get("gpu") if devices is not None else ()
    if not gpus or not any(d.links for d in gpus):
        return None
    links: dict[tuple[str, str], int] = {}
    for device in gpus:
        if len(device.links) != len(gpus):
            problems.add(
                slurm.line,
                f"node {slurm.name}: gres.conf line {device.conf_line}: Links= has {len(device.links)} "
                f"values for {len(gpus)} GPUs",
            )
            return None
        for other, count in enumerate(device.links):
            if count > 0 and other != device.idx:
                a, b = sorted((device_map.gpu_by_idx[device.idx], device_map.gpu_by_idx[other]))
                links[(a, b)] = max(links.get((a, b), 0), count)
    return tuple(NvLink(gpu_a=a, gpu_b=b, links=n) for (a, b), n in sorted(links.items()))


def _not_yet_held(held: list[Allocation], extra: list[Allocation]) -> list[Allocation]:
    """Reservations minus devices Slurm already reports as used (a planned job that started since)."""
    gpus = {g for a in held for g in a.gpus}
    nics = {n for a in held for n in a.nics}
    result = []
    for allocation in extra:
        kept_gpus = tuple(g for g in allocation.gpus if g not in gpus)
        kept_nics = tuple(n for n in allocation.nics if n not in nics)
        gpus.update(kept_gpus)
        nics.update(kept_nics)
        if kept_gpus or kept_nics:
            result.append(allocation.model_copy(update={"gpus": kept_gpus, "nics": kept_nics}))
    return result


@dataclass
class NodeCache:
    """Nodes built from the same inputs are reused: between two reads of ``scontrol`` most nodes'
    lines do not change, and rebuilding all of them (gres.conf order checks, IDX mapping, a model
    copy) cost ~1 ms a node — most of the hook's budget at a few hundred nodes. Keyed by the node's
    parsed line, its node type and its reservations; emptied when the site files change."""

    entries: dict[tuple[object, ...], tuple[Node, DeviceMap, NodeType]] = field(default_factory=dict)
    files: tuple[object, ...] = ()

    def begin(self, files: tuple[object, ...]) -> None:
        if files != self.files:
            self.entries.clear()
            self.files = files


def _reservation_key(extra: list[Allocation]) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    return tuple((a.owner, a.gpus, a.nics) for a in extra)


def build_inventory(
    slurm_nodes: list[SlurmNode],
    *,
    topo_dir: TopoDir,
    gres_conf: GresConf | None = None,
    fabric: SlurmTopology | None = None,
    extra: dict[str, list[Allocation]] | None = None,
    source: str = "scontrol",
    cache: NodeCache | None = None,
) -> SlurmInventory:
    """Every node with GPUs; nodes without a capture are left out only when Slurm shows no GPUs on
    them (a CPU-only node), else refused: placing on a GPU node whose PCIe tree is unknown would be
    a guess. With ``cache``, nodes whose inputs did not change since the last call are reused."""
    problems = Problems(source)
    result = SlurmInventory(inventory=Inventory())
    nodes: list[Node] = []
    types: dict[Path, NodeType] = {}  # each capture's mtime checked once per call, not once per node
    if cache is not None:
        cache.begin((topo_dir, gres_conf, fabric))
    for slurm in slurm_nodes:
        path = topo_dir.path_for(slurm.name)
        node_type = None
        if path is not None:
            node_type = types.get(path) or types.setdefault(path, load_node_type(path))
        reserved = (extra or {}).get(slurm.name, [])
        key = (slurm.name, slurm, id(node_type), _reservation_key(reserved))
        hit = cache.entries.get(key) if cache is not None else None
        if hit is not None and hit[2] is node_type:
            nodes.append(hit[0])
            result.device_maps[slurm.name] = hit[1]
            result.node_types[slurm.name] = hit[2]
            continue
        before = len(problems.found)
        has_gpus = any(item.name == "gpu" and item.count for item in slurm.gres)
        if node_type is None:
            if has_gpus:
                problems.add(
                    slurm.line,
                    f"node {slurm.name} has GPUs but no nvidia-smi capture in {topo_dir.directory}",
                )
            continue
        devices = node_devices(gres_conf, slurm.name) if gres_conf is not None else None
        if devices is not None and not devices.get("gpu"):
            devices = None  # gres.conf says nothing of this node's GPUs (e.g. AutoDetect=nvml)
        _check_devices(slurm, node_type, devices, problems)
        if devices is not None and gres_conf is not None:
            _check_order(slurm, gres_conf, problems)
        device_map = _device_map(node_type, devices)
        gpus, nics = _used(slurm, device_map, problems)
        allocations = (
            [
                Allocation(
                    owner="slurm",
                    gpus=tuple(gpus),
                    nics=tuple(nics),
                    cpu_milli=1000 * slurm.alloc_cpus,
                    memory_mib=slurm.alloc_memory_mib,
                )
            ]
            if (gpus or nics or slurm.alloc_cpus or slurm.alloc_memory_mib)
            else []
        )
        allocations += _not_yet_held(allocations, reserved)
        nvlinks = _gres_links(devices, device_map, problems, slurm)
        labels = {PARTITION_LABEL + p: "1" for p in slurm.partitions}
        labels.update({FEATURE_LABEL + f: "1" for f in slurm.features})
        leaf = fabric.leaf_of.get(slurm.name, "") if fabric else ""
        nodes.append(
            node_type.node.model_copy(
                update={
                    "name": slurm.name,
                    "labels": labels,
                    "cpu_milli": 1000 * slurm.cpus,
                    "memory_mib": slurm.real_memory_mib,
                    "numa_nodes": (),
                    "leaf": leaf,
                    "allocations": tuple(allocations),
                    "schedulable": slurm.schedulable,
                    **({"nvlinks": nvlinks} if nvlinks is not None else {}),
                }
            )
        )
        result.device_maps[slurm.name] = device_map
        result.node_types[slurm.name] = node_type
        if cache is not None and len(problems.found) == before:
            cache.entries[key] = (nodes[-1], device_map, node_type)
    problems.raise_if_any()
    result.inventory = Inventory(nodes=tuple(nodes), switches=tuple(fabric.switches) if fabric else ())
    return result


def with_reservations(base: SlurmInventory, extra: dict[str, list[Allocation]]) -> SlurmInventory:
    """``base`` plus reservations on a few nodes (plans issued since ``base`` was read): only those
    nodes are copied."""
    if not any(extra.values()):
        return base
    nodes = tuple(
        n.model_copy(
            update={"allocations": n.allocations + tuple(_not_yet_held(list(n.allocations), extra[n.name]))}
        )
        if extra.get(n.name)
        else n
        for n in base.inventory.nodes
    )
    return SlurmInventory(
        inventory=base.inventory.model_copy(update={"nodes": nodes}),
        device_maps=base.device_maps,
        node_types=base.node_types,
    )


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise InvalidRequest([Problem(path=str(path), message=f"cannot read: {err.strerror}")]) from err
