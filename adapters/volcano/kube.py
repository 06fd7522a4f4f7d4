"""Kubernetes objects → solver domain values: one converter per kind.

* :func:`inventory_node` — a Volcano ``NodeInfo`` (its ``v1.Node`` and the tasks on it) → ``Node``
  with its GPUs, NICs, PCIe tree and what running pods hold;
* :func:`member_shape` — a pending task's ``v1.Pod`` (and Volcano's milli-valued ``Resreq``) →
  ``MemberShape``, or why it is not topoplace's to place.

Nothing here raises for a well-formed but surprising object: a node whose annotations cannot be
read loses only its topology (warned), a pod whose topoplace annotations are wrong is refused with
the reason (:class:`PodRefused`). Only :class:`adapters.volcano.wire.BadPayload` means HTTP 400.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from adapters.volcano import annotations as ann
from adapters.volcano.wire import NodeInfo, Task, as_object
from solver.domain.model import (
    Alignment,
    Allocation,
    AntiAffinity,
    Distance,
    Gpu,
    GpuShare,
    MemberShape,
    NicMode,
    NicRequest,
    Node,
    Requirement,
    Scope,
)
from solver.ingest.kube import nvlink_domain_of

GPU = "nvidia.com/gpu"
GPU_MEM = "nvidia.com/gpumem"
GPU_MEM_PCT = "nvidia.com/gpumem-percentage"
GPU_CORES = "nvidia.com/gpucores"
VGPU = "volcano.sh/vgpu-number"
VGPU_MEM = "volcano.sh/vgpu-memory"
VGPU_MEM_PCT = "volcano.sh/vgpu-memory-percentage"
VGPU_CORES = "volcano.sh/vgpu-cores"
COUNT_RESOURCES = (GPU, VGPU)
RDMA = "topoplace.io/rdma"  # NICs handed by topoplace's RDMA device plugin (adapters/volcano/rdma_plugin.py)

PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"

# Pod annotations that set topology rules (see README).
NICS = "topoplace.io/nics"
ALIGNMENT = "topoplace.io/alignment"
ALIGNMENT_DISTANCE = "topoplace.io/alignment-distance"
NUMA = "topoplace.io/numa"
NVLINK = "topoplace.io/nvlink"
MUTEX = "topoplace.io/mutex"
GPU_MODELS = "topoplace.io/gpu-models"
HAMI_GPU_POLICY = "hami.io/gpu-scheduler-policy"
USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"

_REQUIREMENTS = {
    "required": Requirement.REQUIRED,
    "preferred": Requirement.PREFERRED,
    "none": Requirement.NONE,
}


class PodRefused(ValueError):
    """A pod asks for something in a way topoplace cannot read: its predicate says so (code 3)."""


class NotOurs(ValueError):
    """A GPU pod topoplace does not model (e.g. a share of each of several GPUs): left to Volcano."""


# --------------------------------------------------------------------------- v1.Node (+ its tasks)


@dataclass
class NodeWarnings:
    items: list[str]

    def add(self, message: str) -> None:
        self.items.append(message)


def inventory_node(info: NodeInfo, leaf: str, warn: NodeWarnings) -> Node:
    """The solver's view of one node: devices from the topology annotation and the device plugin's
    register, CPU and memory from Volcano's ``Allocatable``, holdings from the running tasks."""
    base = _topology(info, warn)
    gpus = _within_advertised(info, _gpus(info, base, warn), warn)
    node = (base or Node(name=info.name)).model_copy(
        update={
            "name": info.name,
            "labels": info.labels,
            "cpu_milli": int(info.allocatable.milli_cpu),
            "memory_mib": info.allocatable.memory_mib,
            "gpus": gpus,
            "leaf": leaf,
            # GPU Feature Discovery's nvidia.com/gpu.clique (or topograph's label): the NVL72 rack
            "nvlink_domain": nvlink_domain_of(info.labels),
            "schedulable": info.ready,
            "allocations": (),
        }
    )
    allocations = _allocations(info, node, warn)
    return node.model_copy(update={"allocations": allocations + _unseen(info, node, allocations, warn)})


def _unseen(
    info: NodeInfo, node: Node, allocations: tuple[Allocation, ...], warn: NodeWarnings
) -> tuple[Allocation, ...]:
    """GPUs Volcano counts used that no pod's annotation accounts for, held by nobody in particular.

    Volcano's resource check admits a task only where ``NodeInfo.Idle`` holds what it asks. Where
    the device plugin advertises one ``nvidia.com/gpu`` per GPU, ``Idle`` is the count of GPUs no
    pod holds, by Volcano's own ledger; when the pods' device annotations leave more GPUs free than
    that (an annotation naming another node's GPUs, or fewer GPUs than its pod asks for), a plan on
    the difference would pin a task where Volcano refuses it, every session. So many of the
    lowest-index free GPUs are taken as used (as for a GPU pod without annotation; which GPUs is not
    visible), and warned.

    Under a device split (HAMi, volcano-vgpu: ``nvidia.com/gpu`` = GPUs x split, one unit a vGPU) the
    count is of vGPUs: Volcano counts ``allocatable - idle`` of them used, the annotations account
    for one per whole GPU and one per share they name. Each vGPU left unaccounted sits on some GPU
    (which is not visible), and a GPU with any vGPU on it is no longer whole: so many of the
    lowest-index free GPUs are taken as used (at most one per unaccounted vGPU, which may
    over-reserve when several sit on one GPU, never under-reserve), and warned."""
    if GPU not in info.idle.scalars or GPU not in info.allocatable.scalars:
        return ()
    held = {g for a in allocations for g in a.gpus} | {s.gpu for a in allocations for s in a.gpu_shares}
    free = [g.id for g in sorted(node.gpus, key=lambda g: g.index) if g.healthy and g.id not in held]
    allocatable = int(info.allocatable.scalar(GPU) + 1e-9)
    idle = max(0, int(info.idle.scalar(GPU) + 1e-9))
    if allocatable > len(node.gpus):  # a device split: units are vGPUs
        accounted = sum(len(a.gpus) + len(a.gpu_shares) for a in allocations)
        unaccounted = allocatable - idle - accounted
        if unaccounted <= 0 or not free:
            return ()
        taken = free[:unaccounted]
        warn.add(
            f"{node.name}: Volcano counts {allocatable - idle} {GPU} (vGPUs) used but the pods' device "
            f"annotations account for {accounted}; {', '.join(taken)} taken as used"
        )
        return (Allocation(owner=f"{node.name}/used-by-volcano-count", gpus=tuple(taken)),)
    if len(free) <= idle:
        return ()
    taken = free[: len(free) - idle]
    warn.add(
        f"{node.name}: Volcano counts {idle} {GPU} idle but the pods' device annotations leave {len(free)} "
        f"GPUs free; {', '.join(taken)} taken as used"
    )
    return (Allocation(owner=f"{node.name}/used-by-volcano-count", gpus=tuple(taken)),)


def _within_advertised(info: NodeInfo, gpus: tuple[Gpu, ...], warn: NodeWarnings) -> tuple[Gpu, ...]:
    """The GPUs Volcano will let a pod use: when the device plugin advertises fewer
    ``nvidia.com/gpu`` than the annotations list healthy GPUs (a GPU failed or fell off the bus and
    the annotations are not yet refreshed), Volcano's resource check refuses what the missing GPUs
    would hold. Planning them would pin a task to a node Volcano refuses, every session. The
    highest-index healthy GPUs are taken as the missing ones (which GPU is gone is not visible here;
    only how many). Under HAMi's device split the count is GPUs x split and never runs short this
    way; then only the register's health tells."""
    if GPU not in info.allocatable.scalars:
        return gpus
    advertised = int(info.allocatable.scalar(GPU))
    healthy = [g for g in sorted(gpus, key=lambda g: g.index) if g.healthy]
    if advertised >= len(healthy):
        return gpus
    missing = {g.id for g in healthy[advertised:]}
    warn.add(
        f"{info.name}: the device plugin advertises {advertised} {GPU} but {len(healthy)} healthy GPUs "
        f"are annotated; {', '.join(sorted(missing))} taken as missing"
    )
    return tuple(g.model_copy(update={"healthy": False}) if g.id in missing else g for g in gpus)


def _topology(info: NodeInfo, warn: NodeWarnings) -> Node | None:
    value = info.annotations.get(ann.TOPOLOGY)
    if not value:
        return None
    try:
        return ann.parse_topology(value, info.name)
    except ann.AnnotationError as err:
        warn.add(f"{info.name}: {err}; the node is used without PCIe/NIC topology")
        return None


def _registered(info: NodeInfo, warn: NodeWarnings) -> list[ann.RegisteredGpu]:
    for key, parse in (
        (ann.HAMI_REGISTER, ann.parse_hami_register),
        (ann.VGPU_REGISTER, ann.parse_vgpu_register),
    ):
        value = info.annotations.get(key)
        if value:
            try:
                return parse(value, info.name)
            except ann.AnnotationError as err:
                warn.add(str(err))
    return []


def _gpus(info: NodeInfo, base: Node | None, warn: NodeWarnings) -> tuple[Gpu, ...]:
    """The topology's GPUs completed by the register (UUID, model, memory, health), joined by UUID
    when the topology knows it and by index otherwise; without a topology, the register's GPUs;
    without either, ``nvidia.com/gpu`` anonymous GPUs described by the GPU feature labels."""
    registered = _registered(info, warn)
    unhealthy = _unhealthy_indices(info, warn)
    if unhealthy:
        registered = [
            dataclasses.replace(r, healthy=False) if r.index in unhealthy else r for r in registered
        ]
    labels = info.labels
    label_model = labels.get(PRODUCT_LABEL, "")
    label_memory = int(labels.get(MEMORY_LABEL, "0") or 0) if labels.get(MEMORY_LABEL, "0").isdigit() else 0
    if base is not None and base.gpus:
        by_uuid = {r.uuid: r for r in registered}
        by_index = {r.index: r for r in registered}
        merged = []
        for gpu in base.gpus:
            reg = by_uuid.get(gpu.uuid) if gpu.uuid else by_index.get(gpu.index)
            merged.append(
                gpu.model_copy(
                    update={
                        "uuid": gpu.uuid or (reg.uuid if reg else ""),
                        "model": (reg.model if reg and reg.model else gpu.model) or label_model,
                        "memory_mib": (reg.memory_mib if reg and reg.memory_mib else gpu.memory_mib)
                        or label_memory,
                        "healthy": gpu.healthy
                        and (reg.healthy if reg else True)
                        and gpu.index not in unhealthy,
                        "numa": gpu.numa if gpu.numa is not None else (reg.numa if reg else None),
                    }
                )
            )
        return tuple(merged)
    if registered:
        return tuple(
            Gpu(
                id=f"GPU{r.index}",
                index=r.index,
                uuid=r.uuid,
                model=r.model or label_model,
                memory_mib=r.memory_mib or label_memory,
                numa=r.numa,
                healthy=r.healthy,
            )
            for r in sorted(registered, key=lambda r: r.index)
        )
    count = int(info.allocatable.scalar(GPU))
    return tuple(
        Gpu(id=f"GPU{i}", index=i, model=label_model, memory_mib=label_memory, healthy=i not in unhealthy)
        for i in range(count)
    )


def _unhealthy_indices(info: NodeInfo, warn: NodeWarnings) -> set[int]:
    """GPU indices Volcano's gpushare marks unhealthy on the node (``volcano.sh/gpu-unhealthy-ids``)."""
    value = info.annotations.get(ann.VGPU_UNHEALTHY, "")
    if not value.strip():
        return set()
    try:
        return ann.parse_unhealthy_ids(value, info.name)
    except ann.AnnotationError as err:
        warn.add(str(err))
        return set()


@dataclass
class _Held:
    owner: str
    gpus: list[str]
    nics: list[str]
    shares: list[GpuShare]
    unknown: int  # GPUs held whose identity no annotation tells


def _allocations(info: NodeInfo, node: Node, warn: NodeWarnings) -> tuple[Allocation, ...]:
    """What the tasks on the node hold. Devices named in an annotation are held exactly; a GPU pod
    with no device annotation holds that many GPUs, taken as the lowest-index ones still free (the
    device plugin's choice is invisible here) and warned. A device claimed twice is held once."""
    by_uuid = {g.uuid: g for g in node.gpus if g.uuid}
    ids = {g.id for g in node.gpus}
    nic_names = {n.name for n in node.nics}
    whole: set[str] = set()
    held: list[tuple[Task, _Held]] = []
    for task in info.tasks:
        if not task.holding:
            continue
        h = _held_by(task, by_uuid, ids, nic_names, warn)
        h.gpus = _claim(h.gpus, whole, task.key, warn)
        held.append((task, h))
    free = [g.id for g in sorted(node.gpus, key=lambda g: g.index) if g.id not in whole]
    cpu_left, mem_left = node.cpu_milli, node.memory_mib
    allocations = []
    for task, h in held:
        if h.unknown:
            taken, free = free[: h.unknown], free[h.unknown :]
            warn.add(
                f"{task.key} on {node.name} holds {h.unknown} GPU(s) no annotation names; assumed {taken}"
            )
            h.gpus += taken
        cpu = min(int(task.resreq.milli_cpu), cpu_left) if node.cpu_milli else 0
        mem = min(task.resreq.memory_mib, mem_left) if node.memory_mib else 0
        cpu_left, mem_left = cpu_left - cpu, mem_left - mem
        if not (h.gpus or h.nics or h.shares or cpu or mem):
            continue
        allocations.append(
            Allocation(
                owner=h.owner,
                gpus=tuple(h.gpus),
                nics=tuple(h.nics),
                gpu_shares=tuple(h.shares),
                cpu_milli=cpu,
                memory_mib=mem,
                mutex=_mutex(task.annotations),
                labels=task.labels,
            )
        )
    return tuple(allocations)


def _claim(gpus: list[str], whole: set[str], owner: str, warn: NodeWarnings) -> list[str]:
    """The GPUs of ``gpus`` nobody has claimed yet, now claimed; a second claim is dropped."""
    kept = []
    for gpu in gpus:
        if gpu in whole:
            warn.add(f"{owner}: {gpu} is already held by another pod; counted once")
        else:
            whole.add(gpu)
            kept.append(gpu)
    return kept


def _held_by(
    task: Task, by_uuid: Mapping[str, Gpu], ids: set[str], nics: set[str], warn: NodeWarnings
) -> _Held:
    notes = task.annotations
    h = _Held(owner=task.key, gpus=[], nics=[], shares=[], unknown=0)
    asked = round(max(task.resreq.scalar(r) for r in COUNT_RESOURCES))
    if ann.DEVICES in notes:
        try:
            device = ann.parse_device_annotation(notes[ann.DEVICES], task.key)
        except ann.AnnotationError as err:
            warn.add(str(err))
        else:
            for g in device.gpus:
                gid = g.id if g.id in ids else (by_uuid[g.uuid].id if g.uuid in by_uuid else "")
                if not gid:
                    warn.add(f"{task.key}: {ann.DEVICES} names {g.id}/{g.uuid}, not a GPU of its node")
                elif g.milli >= 1000:
                    h.gpus.append(gid)
                else:
                    h.shares.append(GpuShare(gpu=gid, milli=g.milli, memory_mib=g.memory_mib))
            h.nics = [n for n in device.nics if n in nics]
            return h
    for key in (ann.VGPU_IDS, ann.HAMI_ALLOCATED):
        if notes.get(key, "").strip(";"):
            try:
                containers = ann.decode_pod_devices(notes[key], f"{task.key}: {key}")
            except ann.AnnotationError as err:
                warn.add(str(err))
                break
            for dev in (d for c in containers for d in c):
                gpu = by_uuid.get(dev.uuid)
                if gpu is None:
                    warn.add(f"{task.key}: {key} names {dev.uuid}, not a GPU of its node")
                    h.unknown += 1
                elif dev.used_cores >= 100 or (gpu.memory_mib and dev.used_mem_mib >= gpu.memory_mib):
                    h.gpus.append(gpu.id)
                else:
                    h.shares.append(
                        GpuShare(gpu=gpu.id, milli=dev.used_cores * 10, memory_mib=dev.used_mem_mib)
                    )
            return h
    h.unknown = asked
    return h


# --------------------------------------------------------------------------- v1.Pod (pending task)


def gpu_request(task: Task) -> tuple[int, int, int, int]:
    """(GPUs, memory MiB, cores %, memory %) the task asks for, from Volcano's milli-valued Resreq."""
    r = task.resreq
    count = max(r.scalar(GPU), r.scalar(VGPU))
    memory = max(r.scalar(GPU_MEM), r.scalar(VGPU_MEM))
    cores = max(r.scalar(GPU_CORES), r.scalar(VGPU_CORES))
    percent = max(r.scalar(GPU_MEM_PCT), r.scalar(VGPU_MEM_PCT))
    return round(count), round(memory), round(cores), round(percent)


def is_gpu_task(task: Task) -> bool:
    count, memory, _, _ = gpu_request(task)
    return count > 0 or memory > 0


def member_shape(task: Task, models: Iterable[str], eligible: Mapping[str, str] | None = None) -> MemberShape:
    """The member a pending GPU task is. HAMi/Volcano vGPU requests map to a share of one GPU
    (``gpucores`` % → milli, ``gpumem`` MiB → memory); a whole GPU otherwise.

    Raises :class:`NotOurs` for requests the solver cannot express and :class:`PodRefused` for
    topoplace annotations it cannot read.
    """
    count, memory, cores, percent = gpu_request(task)
    if count == 0 and memory:
        count = 1  # HAMi: a memory request alone is one device
    if percent and not memory and percent < 100:
        raise NotOurs(
            f"{percent}% of a GPU's memory depends on the GPU chosen; left to Volcano's deviceshare"
        )
    shared = memory > 0 or 0 < cores < 100
    if shared and count > 1:
        raise NotOurs(f"a share of each of {count} GPUs is not modelled; left to Volcano's deviceshare")
    notes = task.annotations
    policy = {p.strip() for p in notes.get(HAMI_GPU_POLICY, "").split(",") if p.strip()}
    gpu_models, avoid = _models(notes, models)
    return MemberShape(
        gpus=0 if shared else count,
        gpu_share=GpuShare(milli=min(1000, cores * 10), memory_mib=memory) if shared else None,
        gpu_models=gpu_models,
        avoid_gpu_models=avoid,
        mutex=_mutex(notes),
        nics=_nics(notes, count, round(task.resreq.scalar(RDMA))),
        alignment=_alignment(notes),
        numa=_requirement(notes, NUMA, Requirement.PREFERRED if "numa" in policy else Requirement.NONE),
        nvlink=_requirement(
            notes, NVLINK, Requirement.PREFERRED if "topology-aware" in policy else Requirement.NONE
        ),
        cpu_milli=int(task.resreq.milli_cpu),
        memory_mib=task.resreq.memory_mib,
        node_selector={**_node_selector(task), **(eligible or {})},
    )


def _mutex(notes: Mapping[str, str]) -> bool:
    """``topoplace.io/mutex: "true"`` or ``mutex`` in HAMi's GPU policy chain."""
    if notes.get(MUTEX, "").strip().lower() == "true":
        return True
    return "mutex" in {p.strip() for p in notes.get(HAMI_GPU_POLICY, "").split(",")}


def _requirement(notes: Mapping[str, str], key: str, default: Requirement) -> Requirement:
    value = notes.get(key)
    if value is None:
        return default
    try:
        return _REQUIREMENTS[value.strip().lower()]
    except KeyError:
        raise PodRefused(f"annotation {key}: {value!r} is not one of required, preferred, none") from None


def _alignment(notes: Mapping[str, str]) -> Alignment:
    mode = _requirement(notes, ALIGNMENT, Requirement.NONE)
    word = notes.get(ALIGNMENT_DISTANCE, "PXB").strip().upper()
    if word not in Distance.__members__ or word == "UNSPECIFIED":
        raise PodRefused(f"annotation {ALIGNMENT_DISTANCE}: {word!r} is not one of PIX, PXB, PHB, NODE, SYS")
    return Alignment(mode=mode, distance=Distance[word])


def _nics(notes: Mapping[str, str], gpus: int, rdma: int = 0) -> NicRequest:
    """``topoplace.io/nics`` and the ``topoplace.io/rdma`` units the pod asks the RDMA device plugin
    for: the plugin hands exactly that many, so the plan must name as many. Without the annotation,
    ``rdma`` NICs, one per GPU when they are as many as the GPUs (aligned pairs)."""
    value = notes.get(NICS, "").strip().lower()
    if not value:
        if not rdma:
            return NicRequest()
        return (
            NicRequest(mode=NicMode.PER_GPU)
            if rdma == gpus
            else NicRequest(mode=NicMode.PER_MEMBER, count=rdma)
        )
    if value == "none":
        request, planned = NicRequest(), 0
    elif value == "per-gpu":
        request = NicRequest(mode=NicMode.PER_GPU) if gpus else NicRequest(mode=NicMode.PER_MEMBER, count=1)
        planned = gpus or 1
    elif value.isdigit() and int(value) > 0:
        request, planned = NicRequest(mode=NicMode.PER_MEMBER, count=int(value)), int(value)
    else:
        raise PodRefused(f"annotation {NICS}: {value!r} is not per-gpu, none or a positive count")
    if rdma and planned != rdma:
        raise PodRefused(
            f"the pod asks for {rdma} {RDMA} but annotation {NICS}: {value} plans {planned} NIC(s); "
            f"the RDMA device plugin hands exactly {rdma}"
        )
    return request


def _models(notes: Mapping[str, str], models: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``topoplace.io/gpu-models`` (exact names), or HAMi's ``nvidia.com/use-gputype`` /
    ``nouse-gputype`` (case-insensitive substrings, as HAMi matches them) expanded against the
    models the cluster has."""
    known = sorted(set(models))
    exact = tuple(m.strip() for m in notes.get(GPU_MODELS, "").split(",") if m.strip())

    def matching(key: str) -> tuple[str, ...]:
        words = [w.strip().upper() for w in notes.get(key, "").split(",") if w.strip()]
        return tuple(m for m in known if any(w in m.upper() for w in words))

    use = matching(USE_GPUTYPE) if notes.get(USE_GPUTYPE) else ()
    if notes.get(USE_GPUTYPE) and not use:
        raise PodRefused(f"annotation {USE_GPUTYPE}: no GPU in the cluster matches {notes[USE_GPUTYPE]!r}")
    return exact or use, matching(NOUSE_GPUTYPE)


HOSTNAME = "kubernetes.io/hostname"


def pod_anti_affinity(task: Task) -> tuple[AntiAffinity, ...]:
    """The pod's required ``podAntiAffinity`` terms as node-scope anti-affinity: ``matchLabels`` at the
    hostname topology key. A pod matching its own term keeps the job's members one per node, as in
    Kubernetes. The solver matches labels cluster-wide, not per namespace, which can only keep pods
    further apart than asked. Raises :class:`NotOurs` for a required term it cannot hold (another
    topology key, ``matchExpressions``, a namespace selector): Volcano places that pod itself rather
    than topoplace ignoring a hard rule."""
    spec = task.pod.get("spec") or {}
    affinity = (spec.get("affinity") or {}) if isinstance(spec, dict) else {}
    anti = (affinity.get("podAntiAffinity") or {}) if isinstance(affinity, dict) else {}
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(anti, dict) else None
    rules = []
    for term in terms if isinstance(terms, list) else ():
        term = term if isinstance(term, dict) else {}
        selector = term.get("labelSelector") or {}
        labels = selector.get("matchLabels") if isinstance(selector, dict) else None
        if (
            term.get("topologyKey") != HOSTNAME
            or not isinstance(labels, dict)
            or not labels
            or (isinstance(selector, dict) and selector.get("matchExpressions"))
            or term.get("namespaceSelector")
        ):
            raise NotOurs(
                "a required podAntiAffinity term other than matchLabels at kubernetes.io/hostname "
                "is not modelled; left to Volcano"
            )
        rules.append(AntiAffinity(labels={str(k): str(v) for k, v in labels.items()}, scope=Scope.NODE))
    return tuple(rules)


def _node_selector(task: Task) -> dict[str, str]:
    spec = task.pod.get("spec") or {}
    selector = spec.get("nodeSelector") if isinstance(spec, dict) else None
    return {str(k): str(v) for k, v in selector.items()} if isinstance(selector, dict) else {}


def device_hand_off(
    task: Task, node_notes: Mapping[str, str], devices: Sequence[ann.ContainerDevice]
) -> tuple[ann.DevicePlugin, ann.Containers]:
    """Which device plugin serves ``task`` on a node with annotations ``node_notes``, and the task's
    ``devices`` split over its containers as that plugin expects them: each container asking for
    GPUs takes as many as it asks for, in ``spec.containers`` order (the last one the rest)."""
    vgpu = _asks_vgpu(task)
    plugin = ann.device_plugin(node_notes, vgpu_resources=vgpu)
    requests = _container_requests(task, vgpu=vgpu)
    asking = [i for i, count in enumerate(requests) if count is not None]
    if not asking:  # no container names the resource (Volcano's Resreq only): the first takes all
        requests, asking = [0, *requests[1:]] if requests else [0], [0]
    containers: list[list[ann.ContainerDevice] | None] = [None] * len(requests)
    start = 0
    for i in asking:
        end = len(devices) if i == asking[-1] else start + (requests[i] or 0)
        containers[i] = list(devices[start:end])
        start = end
    return plugin, containers


def _asks_vgpu(task: Task) -> bool:
    """The pod asks for ``volcano.sh/vgpu-*`` (served by volcano-vgpu-device-plugin)."""
    return task.resreq.scalar(VGPU) > 0 or task.resreq.scalar(VGPU_MEM) > 0


def _container_requests(task: Task, *, vgpu: bool) -> list[int | None]:
    """Per container, in order: the devices it asks for of the plugin's resources, None for none.
    Volcano's vGPU code reads ``limits`` only; HAMi reads limits, then requests. A memory (or core)
    request without a count is one device, as both plugins count it."""
    count_name, others = (VGPU, (VGPU_MEM,)) if vgpu else (GPU, (GPU_MEM, GPU_MEM_PCT, GPU_CORES))
    counts: list[int | None] = []
    for i, container in enumerate(task.containers):
        where = f"{task.key}.Pod.spec.containers[{i}].resources"
        resources = as_object(container.get("resources"), where)
        limits = dict(as_object(resources.get("limits"), f"{where}.limits"))
        if not vgpu:
            limits = {**as_object(resources.get("requests"), f"{where}.requests"), **limits}
        if count_name in limits:
            try:
                counts.append(max(0, int(str(limits[count_name]))))
            except ValueError:
                counts.append(1)
        elif any(name in limits for name in others):
            counts.append(1)
        else:
            counts.append(None)
    return counts
