"""What Volcano's ``extender`` plugin sends and expects, read defensively.

Volcano marshals its scheduler-internal Go structs with ``encoding/json``. ``api.TaskInfo``,
``api.NodeInfo``, ``api.JobInfo`` and ``api.Resource`` carry no JSON tags, so their keys are Go field
names (``UID``, ``Resreq``, ``ScalarResources`` ...); embedded structs are flattened (``TaskInfo``'s
``TransactionContext`` puts ``NodeName`` and ``Status`` at the top level); nil maps and pointers
arrive as ``null``. The Kubernetes objects inside (``TaskInfo.Pod``, ``NodeInfo.Node``) are ordinary
``v1.Pod``/``v1.Node`` JSON. ``JobInfo.PodGroup`` is Volcano's ``api.PodGroup``, which embeds the
*internal* ``scheduling.PodGroup`` (no JSON tags): metadata is flattened to the top level and the
spec arrives as ``"Spec": {"MinMember": ..., "NetworkTopology": {"Mode": ..., "HighestTierAllowed":
...}}``. :func:`podgroup_parts` also accepts the CRD's own ``metadata``/``spec`` form, which is what
an operator copies from ``kubectl get podgroup -o json``.

Scalar resources (``nvidia.com/gpu`` ...) are **milli-values**: ``nvidia.com/gpu: 8`` arrives as
``8000``. Memory is in bytes, CPU in milli-cores, all as JSON numbers (Go ``float64``).

Every accessor raises :class:`BadPayload` with a reason naming the path, which the HTTP layer turns
into a 400: a malformed body is the caller's error, never a 500.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# api.TaskStatus (pkg/scheduler/api/types.go): a bit per state, Pending = 1 << 0.
PENDING, ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING, RELEASING, SUCCEEDED, FAILED, UNKNOWN = (
    1 << i for i in range(10)
)
# States whose devices are held on the node (Releasing still holds them until the pod is gone).
HOLDING = frozenset({ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING, RELEASING})
# api.NodePhase
NODE_READY = 1

# api.Status codes a predicate reply may carry.
CODE_SUCCESS, CODE_ERROR, CODE_UNSCHEDULABLE, CODE_UNRESOLVABLE, CODE_WAIT, CODE_SKIP = range(6)

MILLI = 1000.0
MIB = 1024 * 1024


class BadPayload(ValueError):
    """The body is not what Volcano sends: answered with HTTP 400 and this reason."""


# --------------------------------------------------------------------------- generic access


def as_object(value: Any, path: str) -> dict[str, Any]:
    """``value`` as a JSON object; ``null`` is an empty one (Go's nil map)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadPayload(f"{path}: expected an object, got {_kind(value)}")
    return value


def as_list(value: Any, path: str) -> list[Any]:
    """``value`` as a JSON array; ``null`` is an empty one (Go's nil slice)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadPayload(f"{path}: expected an array, got {_kind(value)}")
    return value


def as_str(value: Any, path: str, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise BadPayload(f"{path}: expected a non-empty string, got {_kind(value)}")
    return value


def as_number(value: Any, path: str) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadPayload(f"{path}: expected a number, got {_kind(value)}")
    return float(value)


def as_int(value: Any, path: str) -> int:
    number = as_number(value, path)
    if number != int(number):
        raise BadPayload(f"{path}: expected an integer, got {number}")
    return int(number)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), f"a {type(value).__name__}"
    )


def str_map(value: Any, path: str) -> dict[str, str]:
    """Labels or annotations: an object of strings."""
    data = as_object(value, path)
    for key, item in data.items():
        if not isinstance(item, str):
            raise BadPayload(f"{path}.{key}: expected a string, got {_kind(item)}")
    return data


# --------------------------------------------------------------------------- api.Resource


@dataclass(frozen=True)
class Resource:
    """``api.Resource``: CPU in milli-cores, memory in bytes, scalars in milli-units."""

    milli_cpu: float = 0.0
    memory: float = 0.0
    scalars: Mapping[str, float] = field(default_factory=dict)

    def scalar(self, name: str) -> float:
        """The scalar in whole units (``8000`` milli-GPUs → ``8.0``)."""
        return self.scalars.get(name, 0.0) / MILLI

    @property
    def memory_mib(self) -> int:
        return int(self.memory // MIB)


def resource(value: Any, path: str) -> Resource:
    data = as_object(value, path)
    scalars = as_object(data.get("ScalarResources"), f"{path}.ScalarResources")
    return Resource(
        milli_cpu=as_number(data.get("MilliCPU"), f"{path}.MilliCPU"),
        memory=as_number(data.get("Memory"), f"{path}.Memory"),
        scalars={k: as_number(v, f"{path}.ScalarResources.{k}") for k, v in scalars.items()},
    )


# --------------------------------------------------------------------------- api.TaskInfo


@dataclass(frozen=True)
class Task:
    """The parts of ``api.TaskInfo`` the adapter uses; ``pod`` is the full ``v1.Pod``."""

    uid: str
    job: str
    name: str
    namespace: str
    role: str
    node_name: str
    status: int
    resreq: Resource
    pod: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def annotations(self) -> dict[str, str]:
        return str_map(as_object(self.pod.get("metadata"), "Pod.metadata").get("annotations"), "annotations")

    @property
    def labels(self) -> dict[str, str]:
        return str_map(as_object(self.pod.get("metadata"), "Pod.metadata").get("labels"), "labels")

    @property
    def containers(self) -> list[dict[str, Any]]:
        spec = as_object(self.pod.get("spec"), f"{self.key}.Pod.spec")
        return [
            as_object(c, f"{self.key}.Pod.spec.containers[]") for c in as_list(spec.get("containers"), "")
        ]

    @property
    def pending(self) -> bool:
        """Not yet on a node: what a session may place."""
        return not self.node_name and self.status in (PENDING, 0)

    @property
    def holding(self) -> bool:
        """On a node and holding what it asked for."""
        return bool(self.node_name) and (self.status in HOLDING or self.status == 0)


def task(value: Any, path: str) -> Task:
    data = as_object(value, path)
    if not data:
        raise BadPayload(f"{path}: expected a TaskInfo, got an empty object")
    pod = as_object(data.get("Pod"), f"{path}.Pod")
    meta = as_object(pod.get("metadata"), f"{path}.Pod.metadata")
    name = as_str(data.get("Name"), f"{path}.Name") or as_str(meta.get("name"), f"{path}.Pod.metadata.name")
    namespace = as_str(data.get("Namespace"), f"{path}.Namespace") or as_str(
        meta.get("namespace"), f"{path}.Pod.metadata.namespace"
    )
    uid = as_str(data.get("UID"), f"{path}.UID") or as_str(meta.get("uid"), f"{path}.Pod.metadata.uid")
    if not uid or not name:
        raise BadPayload(f"{path}: a TaskInfo needs UID and Name")
    return Task(
        uid=uid,
        job=as_str(data.get("Job"), f"{path}.Job"),
        name=name,
        namespace=namespace,
        role=as_str(data.get("TaskRole"), f"{path}.TaskRole") or _task_role(pod),
        node_name=as_str(data.get("NodeName"), f"{path}.NodeName"),
        status=as_int(data.get("Status"), f"{path}.Status"),
        resreq=resource(data.get("Resreq"), f"{path}.Resreq"),
        pod=pod,
    )


def _task_role(pod: dict[str, Any]) -> str:
    """``volcano.sh/task-spec`` as Volcano reads it (annotation, then label) — older Volcano
    versions send no ``TaskRole`` field."""
    meta = pod.get("metadata") or {}
    for where in ("annotations", "labels"):
        value = (meta.get(where) or {}).get("volcano.sh/task-spec")
        if isinstance(value, str) and value:
            return value
    return ""


# --------------------------------------------------------------------------- api.NodeInfo


@dataclass(frozen=True)
class NodeInfo:
    name: str
    node: dict[str, Any]  # the full v1.Node
    ready: bool
    allocatable: Resource
    tasks: tuple[Task, ...]
    idle: Resource = field(default_factory=Resource)  # what Volcano counts free (Allocatable - Used)
    used: Resource = field(default_factory=Resource)
    version: str = ""  # equal in two sessions only if all read from this NodeInfo is (node_version)

    @property
    def metadata(self) -> dict[str, Any]:
        return as_object(self.node.get("metadata"), f"{self.name}.Node.metadata")

    @property
    def labels(self) -> dict[str, str]:
        return str_map(self.metadata.get("labels"), f"{self.name}.Node.metadata.labels")

    @property
    def annotations(self) -> dict[str, str]:
        return str_map(self.metadata.get("annotations"), f"{self.name}.Node.metadata.annotations")


def node_info(value: Any, path: str, *, with_tasks: bool = True) -> NodeInfo:
    data = as_object(value, path)
    node = as_object(data.get("Node"), f"{path}.Node")
    meta = as_object(node.get("metadata"), f"{path}.Node.metadata")
    name = as_str(data.get("Name"), f"{path}.Name") or as_str(meta.get("name"), f"{path}.Node.metadata.name")
    if not name:
        raise BadPayload(f"{path}: a NodeInfo needs Name")
    state = as_object(data.get("State"), f"{path}.State")
    phase = as_int(state.get("Phase"), f"{path}.State.Phase") if state else NODE_READY
    tasks: tuple[Task, ...] = ()
    if with_tasks:
        raw = as_object(data.get("Tasks"), f"{path}.Tasks")
        tasks = tuple(task(t, f"{path}.Tasks[{k!r}]") for k, t in sorted(raw.items()))
    return NodeInfo(
        name=name,
        node=node,
        ready=phase == NODE_READY and not _cordoned(node),
        allocatable=resource(data.get("Allocatable"), f"{path}.Allocatable"),
        tasks=tasks,
        # The snapshot's nodes only (with_tasks): a per-task verb needs none of this.
        idle=resource(data.get("Idle"), f"{path}.Idle") if with_tasks else Resource(),
        used=resource(data.get("Used"), f"{path}.Used") if with_tasks else Resource(),
        version=node_version(data, name, meta) if with_tasks else "",
    )


def node_version(data: dict[str, Any], name: str, meta: dict[str, Any]) -> str:
    """A key equal for two ``NodeInfo`` bodies only when everything the inventory reads from them
    is equal, so that an unchanged node is converted once, not every session.

    The Kubernetes objects are named by ``resourceVersion`` — the API server changes it on every
    write to the object, so equal versions mean equal objects (labels, annotations, taints, a
    pod's device annotations) — and what Volcano computes itself (``State``, ``Allocatable``,
    ``Idle``, ``Used``, which tasks are on the node and in which state) is spelt out. Objects
    without a ``resourceVersion`` (test fixtures, hand-made bodies) are keyed by their whole JSON
    instead: slower, never wrong."""
    parts: list[Any] = [name]
    version = meta.get("resourceVersion")
    exact = isinstance(version, str) and bool(version)
    parts += [version, meta.get("uid")]
    for key in ("State", "Allocatable", "Idle", "Used"):
        parts.append(data.get(key))
    tasks = data.get("Tasks")
    for key, value in sorted(tasks.items()) if isinstance(tasks, dict) else ():
        pod = value.get("Pod") if isinstance(value, dict) else None
        pod_meta = pod.get("metadata") if isinstance(pod, dict) else None
        pod_version = pod_meta.get("resourceVersion") if isinstance(pod_meta, dict) else None
        if not isinstance(pod_version, str) or not pod_version:
            exact = False
            break
        parts.append((key, value.get("UID"), value.get("Status"), value.get("NodeName"), pod_version))
    try:
        text = json.dumps(parts if exact else data, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):  # not JSON-like: never equal to another session's
        return ""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _cordoned(node: dict[str, Any]) -> bool:
    spec = node.get("spec") or {}
    return bool(isinstance(spec, dict) and spec.get("unschedulable"))


# --------------------------------------------------------------------------- api.JobInfo and its PodGroup


@dataclass(frozen=True)
class NetworkTopology:
    mode: str  # "hard" | "soft"
    highest_tier: int | None
    highest_tier_name: str


@dataclass(frozen=True)
class SubGroupPolicy:
    name: str
    topology: NetworkTopology | None
    match_labels: dict[str, str]
    match_label_keys: tuple[str, ...]
    sub_group_size: int | None
    min_sub_groups: int | None


@dataclass(frozen=True)
class PodGroup:
    name: str
    namespace: str
    annotations: dict[str, str]
    phase: str
    min_member: int
    min_task_member: dict[str, int]
    topology: NetworkTopology | None
    sub_groups: tuple[SubGroupPolicy, ...]


@dataclass(frozen=True)
class Job:
    uid: str
    name: str
    namespace: str
    queue: str
    priority: int
    min_available: int
    task_min_available: dict[str, int]
    tasks: tuple[Task, ...]
    podgroup: PodGroup | None


def job_info(value: Any, path: str) -> Job:
    data = as_object(value, path)
    uid = as_str(data.get("UID"), f"{path}.UID")
    if not uid:
        raise BadPayload(f"{path}: a JobInfo needs UID")
    raw_tasks = as_object(data.get("Tasks"), f"{path}.Tasks")
    pg_raw = data.get("PodGroup")
    podgroup = None if pg_raw is None else podgroup_parts(pg_raw, f"{path}.PodGroup")
    min_tasks = as_object(data.get("TaskMinAvailable"), f"{path}.TaskMinAvailable")
    return Job(
        uid=uid,
        name=as_str(data.get("Name"), f"{path}.Name"),
        namespace=as_str(data.get("Namespace"), f"{path}.Namespace"),
        queue=as_str(data.get("Queue"), f"{path}.Queue"),
        priority=as_int(data.get("Priority"), f"{path}.Priority"),
        min_available=as_int(data.get("MinAvailable"), f"{path}.MinAvailable"),
        task_min_available={k: as_int(v, f"{path}.TaskMinAvailable.{k}") for k, v in min_tasks.items()},
        tasks=tuple(task(t, f"{path}.Tasks[{k!r}]") for k, t in sorted(raw_tasks.items())),
        podgroup=podgroup,
    )


def _pick(data: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` present: Go field name (internal form) or JSON tag (CRD form)."""
    for name in names:
        if name in data:
            return data[name]
    return None


def podgroup_parts(value: Any, path: str) -> PodGroup:
    """Volcano's ``api.PodGroup`` (metadata flattened, ``Spec`` with Go names) or the CRD's JSON."""
    data = as_object(value, path)
    meta = as_object(data.get("metadata"), f"{path}.metadata") if "metadata" in data else data
    spec = as_object(_pick(data, "Spec", "spec"), f"{path}.Spec")
    status = as_object(_pick(data, "Status", "status"), f"{path}.Status")
    min_tasks = as_object(_pick(spec, "MinTaskMember", "minTaskMember"), f"{path}.Spec.MinTaskMember")
    topo = _pick(spec, "NetworkTopology", "networkTopology")
    groups = as_list(_pick(spec, "SubGroupPolicy", "subGroupPolicy"), f"{path}.Spec.SubGroupPolicy")
    return PodGroup(
        name=as_str(meta.get("name"), f"{path}.name"),
        namespace=as_str(meta.get("namespace"), f"{path}.namespace"),
        annotations=str_map(meta.get("annotations"), f"{path}.annotations"),
        phase=as_str(_pick(status, "Phase", "phase"), f"{path}.Status.Phase"),
        min_member=as_int(_pick(spec, "MinMember", "minMember"), f"{path}.Spec.MinMember"),
        min_task_member={k: as_int(v, f"{path}.Spec.MinTaskMember.{k}") for k, v in min_tasks.items()},
        topology=None if topo is None else network_topology(topo, f"{path}.Spec.NetworkTopology"),
        sub_groups=tuple(sub_group(g, f"{path}.Spec.SubGroupPolicy[{i}]") for i, g in enumerate(groups)),
    )


def network_topology(value: Any, path: str) -> NetworkTopology:
    data = as_object(value, path)
    mode = as_str(_pick(data, "Mode", "mode"), f"{path}.Mode") or "hard"  # the CRD's default
    if mode not in ("hard", "soft"):
        raise BadPayload(f"{path}.Mode: expected hard or soft, got {mode!r}")
    tier = _pick(data, "HighestTierAllowed", "highestTierAllowed")
    return NetworkTopology(
        mode=mode,
        highest_tier=None if tier is None else as_int(tier, f"{path}.HighestTierAllowed"),
        highest_tier_name=as_str(
            _pick(data, "HighestTierName", "highestTierName"), f"{path}.HighestTierName"
        ),
    )


def sub_group(value: Any, path: str) -> SubGroupPolicy:
    data = as_object(value, path)
    selector = as_object(_pick(data, "LabelSelector", "labelSelector"), f"{path}.LabelSelector")
    size = _pick(data, "SubGroupSize", "subGroupSize")
    minimum = _pick(data, "MinSubGroups", "minSubGroups")
    topo = _pick(data, "NetworkTopology", "networkTopology")
    return SubGroupPolicy(
        name=as_str(_pick(data, "Name", "name"), f"{path}.Name"),
        topology=None if topo is None else network_topology(topo, f"{path}.NetworkTopology"),
        match_labels=str_map(
            _pick(selector, "matchLabels", "MatchLabels"), f"{path}.LabelSelector.matchLabels"
        ),
        match_label_keys=tuple(
            as_str(k, f"{path}.MatchLabelKeys[]")
            for k in as_list(_pick(data, "MatchLabelKeys", "matchLabelKeys"), f"{path}.MatchLabelKeys")
        ),
        sub_group_size=None if size is None else as_int(size, f"{path}.SubGroupSize"),
        min_sub_groups=None if minimum is None else as_int(minimum, f"{path}.MinSubGroups"),
    )


# --------------------------------------------------------------------------- request bodies


@dataclass(frozen=True)
class Snapshot:
    """``OnSessionOpenRequest``: ``Jobs`` and ``Nodes`` (``Queues``, ``NamespaceInfo``,
    ``RevocableNodes`` are read by nothing here; ``NodeList`` is never filled by Volcano)."""

    jobs: tuple[Job, ...]
    nodes: tuple[NodeInfo, ...]


def snapshot(body: Any) -> Snapshot:
    data = as_object(body, "body")
    if "Jobs" not in data and "Nodes" not in data:
        raise BadPayload("body: an OnSessionOpenRequest has Jobs and Nodes")
    jobs = as_object(data.get("Jobs"), "Jobs")
    nodes = as_object(data.get("Nodes"), "Nodes")
    return Snapshot(
        jobs=tuple(job_info(j, f"Jobs[{k!r}]") for k, j in sorted(jobs.items())),
        nodes=tuple(node_info(n, f"Nodes[{k!r}]") for k, n in sorted(nodes.items())),
    )


def body_task(body: Any, key: str = "task") -> Task:
    data = as_object(body, "body")
    if key not in data:
        raise BadPayload(f"body: missing {key!r}")
    return task(data[key], key)


def body_node_name(body: Any) -> str:
    data = as_object(body, "body")
    if "node" not in data:
        raise BadPayload("body: missing 'node'")
    return node_info(data["node"], "node", with_tasks=False).name


def body_node_task_uids(body: Any) -> frozenset[str]:
    """The UIDs of the tasks on the predicate's node: ``NodeInfo.Tasks`` is keyed by them, and it
    includes the tasks Volcano has allocated there earlier in this session."""
    data = as_object(body, "body")
    node = as_object(data.get("node"), "node")
    return frozenset(as_object(node.get("Tasks"), "node.Tasks"))


class PredicateReader:
    """``predicate`` bodies read without parsing what was read before.

    Volcano calls predicate once per pending task and node, with the whole ``TaskInfo`` and
    ``NodeInfo`` each time (~17 KB, ~12 KB of it the node): in one session every task arrives with
    every node. Go writes ``PredicateRequest`` as ``{"task":<TaskInfo>,"node":<NodeInfo>}``, compact,
    ``NodeInfo`` starting with ``Name``; the two parts are split there and each is parsed once per
    distinct text (a node's text changes when a task is allocated on it). A body of any other form
    is read in full by the caller (``None``); a split that is not where the node starts leaves a
    part that is not JSON, and so is read in full too."""

    _HEAD = b'{"task":'
    _NODE = b',"node":{"Name":'
    # Texts kept, in bytes: every task and node text of a 1,000-node session (~1,500 node texts of
    # ~12 KB, a few hundred tasks) fits; past it the tables start again (memory stays bounded).
    _KEPT_BYTES = 48 * 1024 * 1024

    def __init__(self) -> None:
        self._tasks: dict[bytes, Task] = {}
        self._nodes: dict[bytes, tuple[str, frozenset[str]]] = {}
        self.full_reads = 0  # bodies left to a full parse (not in Go's form, or broken)
        self._bytes = 0

    def read(self, raw: bytes) -> tuple[Task, str, frozenset[str]] | None:
        """(task, node name, UIDs of the tasks on the node), or None: read the body in full."""
        split = raw.rfind(self._NODE)
        if split < 0 or not raw.startswith(self._HEAD) or not raw.endswith(b"}"):
            self.full_reads += 1
            return None
        task_text, node_text = raw[len(self._HEAD) : split], raw[split + 8 : -1]
        try:
            found = self._tasks.get(task_text)
            if found is None:
                found = task(json.loads(task_text), "task")
                self._keep(self._tasks, task_text, found)
            node = self._nodes.get(node_text)
            if node is None:
                data = as_object(json.loads(node_text), "node")
                node = (
                    node_info(data, "node", with_tasks=False).name,
                    frozenset(as_object(data.get("Tasks"), "node.Tasks")),
                )
                self._keep(self._nodes, node_text, node)
        except (ValueError, RecursionError):  # JSON errors, BadPayload: the full read says why
            self.full_reads += 1
            return None
        return found, node[0], node[1]

    def _keep(self, table: dict[bytes, Any], key: bytes, value: Any) -> None:
        if self._bytes + len(key) > self._KEPT_BYTES:
            self._tasks.clear()  # mostly older sessions' texts, which are not asked again
            self._nodes.clear()
            self._bytes = 0
        table[key] = value
        self._bytes += len(key)


class PrioritizeReader:
    """``prioritize`` bodies read for what the answer needs: the task and the candidate nodes' names.

    Volcano calls prioritize once per task with every candidate node's whole ``NodeInfo`` (~12 KB
    each, so ~12 MiB at 1,000 nodes); parsing that as JSON took longer than the rest of the call.
    Go writes ``PrioritizeRequest`` as ``{"task":<TaskInfo>,"nodes":[<NodeInfo>,...]}``, compact,
    each ``NodeInfo`` opening with ``{"Name":"<node>","Node":`` — no other object in it does
    (``TaskInfo`` opens with ``UID``, Kubernetes objects use lower-case keys, and a quote inside a
    string is escaped), so the names are found by one scan of the bytes. The task is parsed once
    per distinct text. A body of any other form is read in full by the caller (``None``)."""

    _HEAD = b'{"task":'
    _NODES = b',"nodes":['
    # Literal first: Python's re then skips ahead with a fast search (8x the speed of a pattern
    # opening with a class); the byte before each match is checked to be ``[`` or ``,``.
    _NAME = re.compile(rb'\{"Name":"([^"\\]*)","Node":')
    _OPENERS = frozenset(b"[,")
    _KEPT_TASKS = 4096  # a session's pending tasks; past it the table starts again

    def __init__(self) -> None:
        self._tasks: dict[bytes, Task] = {}
        self.full_reads = 0

    def read(self, raw: bytes) -> tuple[Task, list[str]] | None:
        split = raw.find(self._NODES)
        if split < 0 or not raw.startswith(self._HEAD) or not raw.endswith(b"]}"):
            self.full_reads += 1
            return None
        task_text = raw[len(self._HEAD) : split]
        names = [
            m.group(1).decode()
            for m in self._NAME.finditer(raw, split + len(self._NODES))
            if raw[m.start() - 1] in self._OPENERS
        ]
        if not names and raw[split + len(self._NODES) :] != b"]}":
            self.full_reads += 1  # nodes there, none in Go's form
            return None
        found = self._tasks.get(task_text)
        if found is None:
            try:
                found = task(json.loads(task_text), "task")
            except (ValueError, RecursionError):  # JSON errors, BadPayload: the full read says why
                self.full_reads += 1
                return None
            if len(self._tasks) >= self._KEPT_TASKS:
                self._tasks.clear()
            self._tasks[task_text] = found
        return found, names


def body_node_names(body: Any) -> list[str]:
    data = as_object(body, "body")
    if "nodes" not in data:
        raise BadPayload("body: missing 'nodes'")
    return [
        node_info(n, f"nodes[{i}]", with_tasks=False).name
        for i, n in enumerate(as_list(data["nodes"], "nodes"))
    ]


def body_job(body: Any) -> Job:
    data = as_object(body, "body")
    if "job" not in data:
        raise BadPayload("body: missing 'job'")
    return job_info(data["job"], "job")


# --------------------------------------------------------------------------- replies


def predicate_reply(code: int = CODE_SUCCESS, reason: str = "") -> dict[str, Any]:
    """``PredicateResponse``: the message travels under ``status`` (its JSON tag)."""
    return {"status": reason, "code": code}


def prioritize_reply(scores: Mapping[str, float]) -> dict[str, Any]:
    """``PrioritizeResponse``. ``nodeScore`` must be an object, never null: Volcano treats a nil map
    with an empty error message as a failed call."""
    return {"nodeScore": dict(scores), "errorMessage": ""}


def event_reply(error: str = "") -> dict[str, Any]:
    return {"errorMessage": error}


def job_ready_reply(ready: bool) -> dict[str, Any]:
    return {"status": ready}
