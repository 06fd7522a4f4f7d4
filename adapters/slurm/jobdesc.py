"""A Slurm job description (the fields ``job_submit.lua`` sees) as one topoplace job.

A Slurm GPU job of N nodes is a gang of N members, one per node, each asking for the job's per-node
GPUs (and NICs, one per GPU unless the job names a ``nic`` count). Only combinations whose meaning is
unambiguous are translated; anything else is :class:`Unsupported` with the reason, and the hook lets
Slurm place the job as submitted — guessing would put a wrong plan in force.

Unset numbers arrive as Slurm's NO_VAL sentinels (0xfffffffe, 0xfffe, …) or are absent; both mean
"not given".
"""

from __future__ import annotations

import math
import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from adapters.slurm.gres import GresItem, parse_gres_item, split_outside_parens
from adapters.slurm.hostlist import expand
from adapters.slurm.inventory import FEATURE_LABEL, PARTITION_LABEL
from solver.domain.model import (
    Alignment,
    AntiAffinity,
    Distance,
    Job,
    Locality,
    MemberShape,
    NicMode,
    NicRequest,
    Requirement,
    Role,
    Scope,
)

NO_VAL_LIMITS = (0xFFFE, 0xFFFF, 0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF)
PLAN_LABEL = "slurm/plan"
ROLE = "node"
_FEATURE_WORD = re.compile(r"[A-Za-z0-9_.\-]+")
SWITCH_TYPE = re.compile(r"^sw\d+$")  # the GRES types topoplace gives PCIe switch groups


class Unsupported(ValueError):
    """The job is valid Slurm but has no single topoplace meaning (yet); the message says why."""


@dataclass(frozen=True)
class JobSpec:
    """What the hook needs besides the solver job: how to write GRES back, and the node filter."""

    job: Job
    nodes: int
    gpus_per_node: int
    gpu_type: str
    gres_prefix: str  # "gres:" (22.05) or "gres/" (23.02+), echoed when writing tres_per_node
    excluded: tuple[str, ...] = ()
    time_limit_s: float | None = None  # --time; None: unset (the partition's, possibly INFINITE)
    other_tres_per_node: tuple[str, ...] = field(default=())  # non-GPU/NIC items kept as submitted


def unset(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, int) and value in NO_VAL_LIMITS)


def _int(desc: dict[str, Any], key: str) -> int | None:
    value = desc.get(key)
    if unset(value):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unsupported(f"{key}={value!r} is not a number")
    return int(value)


def _tres_items(text: str | None, field_name: str) -> list[GresItem]:
    """``gres:gpu:2,gres:nic:1`` / ``gres/gpu:h100:2`` → items; non-gres TRES (cpu=…) are refused."""
    if unset(text):
        return []
    items = []
    for part in split_outside_parens(str(text)):
        if not part.startswith(("gres:", "gres/")):
            raise Unsupported(f"{field_name} item {part!r} is not a GRES")
        try:
            items.append(parse_gres_item(part[5:]))
        except ValueError as err:
            raise Unsupported(f"{field_name}: {err}") from err
    return items


def _prefix(desc: dict[str, Any]) -> str:
    for key in ("tres_per_node", "tres_per_job", "tres_per_task"):
        text = desc.get(key)
        if isinstance(text, str) and "gres/" in text:
            return "gres/"
    return "gres:"


def _gpus(items: list[GresItem]) -> tuple[int, str]:
    gpus = [i for i in items if i.name == "gpu"]
    types = {i.type for i in gpus}
    if len(types) > 1:
        raise Unsupported("GPUs of several types in one request")
    return sum(i.count for i in gpus), (types.pop() if types else "")


def _node_count(desc: dict[str, Any]) -> int | None:
    low, high = _int(desc, "min_nodes"), _int(desc, "max_nodes")
    if low is not None and high is not None and high != low:
        raise Unsupported(f"a node range ({low}-{high}): ask for one node count (-N {low})")
    return low if low is not None else high


def _per_node_gpus(desc: dict[str, Any], nodes: int | None, max_per_node: int) -> tuple[int, int, str]:
    """(nodes, GPUs per node, GPU type) from whichever of --gpus-per-node/--gres, --gpus and
    --gpus-per-task the job used."""
    per_node, type_node = _gpus(_tres_items(desc.get("tres_per_node"), "tres_per_node"))
    per_job, type_job = _gpus(_tres_items(desc.get("tres_per_job"), "tres_per_job"))
    per_task, type_task = _gpus(_tres_items(desc.get("tres_per_task"), "tres_per_task"))
    given = [n for n in (per_node, per_job, per_task) if n]
    if len(given) > 1:
        raise Unsupported("GPUs asked in more than one way (per node, per job, per task)")
    gpu_type = type_node or type_job or type_task
    if per_node:
        return nodes or 1, per_node, gpu_type
    if per_job:
        if nodes:
            if per_job % nodes:
                raise Unsupported(f"--gpus={per_job} does not divide evenly over {nodes} nodes")
            return nodes, per_job // nodes, gpu_type
        if per_job <= max_per_node:
            return 1, per_job, gpu_type
        raise Unsupported(f"--gpus={per_job} is more than one node holds: give -N or --gpus-per-node")
    if per_task:
        tasks_per_node = _int(desc, "ntasks_per_node")
        tasks = _int(desc, "num_tasks")
        if tasks_per_node:
            return (
                nodes or (math.ceil(tasks / tasks_per_node) if tasks else 1),
                per_task * tasks_per_node,
                gpu_type,
            )
        if tasks and nodes and tasks % nodes == 0:
            return nodes, per_task * tasks // nodes, gpu_type
        if tasks and not nodes and per_task * tasks <= max_per_node:
            return 1, per_task * tasks, gpu_type
        raise Unsupported("--gpus-per-task without --ntasks-per-node (or tasks that divide over -N)")
    return 0, 0, ""


def _features(text: Any) -> dict[str, str]:
    """``a&b`` / ``a,b`` (all of them) → labels; OR, counts and brackets have no node-selector form."""
    if unset(text):
        return {}
    words = re.split(r"[&,]", str(text))
    if any(not _FEATURE_WORD.fullmatch(w) for w in words):
        raise Unsupported(f"feature expression {text!r}: only AND lists (a&b) are translated")
    return {FEATURE_LABEL + w: "1" for w in words}


def _partition(text: Any) -> dict[str, str]:
    if unset(text):
        return {}
    if "," in str(text):
        raise Unsupported(f"several partitions ({text}): submit to one")
    return {PARTITION_LABEL + str(text): "1"}


def _locality(desc: dict[str, Any], nodes: int) -> Locality:
    """``--switches=1`` → all nodes under one leaf (required). ``--switches=k>1`` has no exact tier
    form: as low as possible (preferred). Gangs without it still prefer the lowest switch."""
    switches = _int(desc, "req_switch")
    if switches == 1 and nodes > 1:
        return Locality(mode=Requirement.REQUIRED, highest_tier=1)
    if nodes > 1:
        return Locality(mode=Requirement.PREFERRED)
    return Locality()


def _nics(items: list[GresItem], gpus_per_node: int) -> NicRequest:
    """The NICs the job asked for (``--gres=nic:k``); a GPU-only job gets none added: its
    ``tres_per_node`` must stay what the user asked, and NICs it does not hold are no use to it.
    As many NICs as GPUs is one NIC per GPU (each GPU matched to its own NIC)."""
    nics = sum(i.count for i in items if i.name == "nic")
    if not nics:
        return NicRequest()
    if nics == gpus_per_node:
        return NicRequest(mode=NicMode.PER_GPU)
    return NicRequest(mode=NicMode.PER_MEMBER, count=nics)


def job_from_description(
    desc: dict[str, Any],
    *,
    plan_id: str,
    max_gpus_per_node: int,
    known_models: tuple[str, ...] = (),
    known_features: frozenset[str] = frozenset(),
    alignment: Requirement = Requirement.PREFERRED,
    nics: bool = True,
) -> JobSpec | None:
    """The job, or None when it asks for no GPU (the hook leaves it alone). Raises Unsupported."""
    if not unset(desc.get("req_nodes")):
        raise Unsupported("the job names its nodes (-w): left as submitted")
    nodes_given = _node_count(desc)
    nodes, per_node, gpu_type = _per_node_gpus(desc, nodes_given, max_gpus_per_node)
    if not per_node:
        return None
    node_items = _tres_items(desc.get("tres_per_node"), "tres_per_node")
    others = tuple(
        f"{i.name}:{i.type + ':' if i.type else ''}{i.count}"
        for i in node_items
        if i.name not in ("gpu", "nic")
    )
    tasks_per_node = _int(desc, "ntasks_per_node") or max(
        1, math.ceil((_int(desc, "num_tasks") or 1) / nodes)
    )
    cpus = (_int(desc, "cpus_per_task") or 1) * tasks_per_node
    selector = {**_features(desc.get("features")), **_partition(desc.get("partition"))}
    models: tuple[str, ...] = ()
    if gpu_type and not SWITCH_TYPE.match(gpu_type):
        # A model name (gpu:h100:2): a node feature of that name where nodes have one (what Slurm
        # itself will check once the request is rewritten), else the GPU models that contain it.
        feature = {f.lower(): f for f in known_features}.get(gpu_type.lower())
        models = tuple(m for m in known_models if gpu_type.lower() in m.lower())
        if feature is not None:
            selector[FEATURE_LABEL + feature] = "1"
            models = ()
        elif not models:
            raise Unsupported(f"gpu:{gpu_type} names no GPU model topoplace knows and no node feature")
    elif gpu_type:
        raise Unsupported(f"gpu:{gpu_type} names a switch group, not a GPU model: left as submitted")
    nic_request = _nics(node_items, per_node) if nics else NicRequest()
    aligned = nic_request.mode in (NicMode.PER_GPU, NicMode.PER_MEMBER)
    member = MemberShape(
        gpus=per_node,
        gpu_models=models,
        nics=nic_request,
        alignment=Alignment(mode=alignment, distance=Distance.PXB) if aligned else Alignment(),
        # Several GPUs of one node talk over NVLink: prefer the node's best-linked set (NV18 pairs,
        # one NVLink half), which the solver weighs by link count.
        nvlink=Requirement.PREFERRED if per_node > 1 else Requirement.NONE,
        cpu_milli=1000 * cpus,
        node_selector=selector,
    )
    labels = {PLAN_LABEL: plan_id}
    job = Job(
        id=plan_id,
        labels=labels,
        roles=(Role(name=ROLE, replicas=nodes, member=member),),
        locality=_locality(desc, nodes),
        # One member per node, as Slurm's -N means: anti-affinity to the job's own label.
        anti_affinity=(AntiAffinity(labels=labels, scope=Scope.NODE),) if nodes > 1 else (),
    )
    excluded = tuple(expand(desc["exc_nodes"])) if not unset(desc.get("exc_nodes")) else ()
    return JobSpec(
        job=job,
        nodes=nodes,
        gpus_per_node=per_node,
        gpu_type=gpu_type,
        gres_prefix=_prefix(desc),
        excluded=excluded,
        time_limit_s=60.0 * minutes if (minutes := _int(desc, "time_limit")) else None,  # 0: no limit
        other_tres_per_node=others,
    )


# --------------------------------------------------------------------------- users' model-typed GRES

_TRES_FIELDS = ("tres_per_node", "tres_per_job", "tres_per_task")


def untyped_model_request(
    desc: dict[str, Any], features: AbstractSet[str], models: tuple[str, ...]
) -> tuple[dict[str, str], str]:
    """Fields that keep a ``--gres=gpu:<model>:N`` (or ``--gpus=<model>:N``) script working once GRES
    are typed per PCIe switch, for a job topoplace does not plan: the GPUs untyped (``gpu:N``, which
    any type satisfies) and the model as a node feature (``&h100``) when nodes carry one; untyped alone
    when every GPU of the cluster is that model. A device has one GRES type (one Type= per gres.conf
    record; Slurm 22.05), so this rewrite (job_submit) plus node features is the mechanism. Returns
    ({}, reason) when the job needs no rewrite or none is safe."""
    found: set[str] = set()
    fields: dict[str, str] = {}
    for key in _TRES_FIELDS:
        text = desc.get(key)
        if unset(text):
            continue
        parts = []
        for part in split_outside_parens(str(text)):
            prefix, body = part[:5], part[5:]
            pieces = body.split(":")
            typed_gpu = prefix in ("gres:", "gres/") and len(pieces) == 3 and pieces[0] == "gpu"
            if typed_gpu and not SWITCH_TYPE.match(pieces[1]):
                found.add(pieces[1])
                part = f"{prefix}gpu:{pieces[2]}"
            parts.append(part)
        if found:
            fields[key] = ",".join(parts)
    if not found:
        return {}, ""
    if len(found) > 1:
        return {}, f"GPUs of several models ({', '.join(sorted(found))}) in one job: left as submitted"
    (model,) = found
    by_lower = {f.lower(): f for f in features}
    if model.lower() in by_lower:
        current = "" if unset(desc.get("features")) else str(desc["features"])
        if any(c in current for c in "|[]*"):
            return {}, f"gpu:{model} with the feature expression {current!r}: left as submitted"
        feature = by_lower[model.lower()]
        fields["features"] = f"{current}&{feature}" if current else feature
        return fields, f"gpu:{model} asked as untyped GPUs on nodes with feature {feature}"
    if models and all(model.lower() in m.lower() for m in models):
        return fields, f"gpu:{model} asked as untyped GPUs (every GPU of the cluster is a {model})"
    return {}, (
        f"gpu:{model} matches no GRES type now that GRES are typed per switch, and no node has a "
        f"feature {model!r}: Slurm will refuse it (give the nodes Features={model})"
    )
