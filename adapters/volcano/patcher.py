"""Writing annotations on pods and PodGroups: an interface, the Kubernetes implementation, and a
recorder that tests (and dry runs) use instead of an API server.

The extender cannot return annotations to Volcano (no bind verb), so the plan's devices reach the
node this way: ``allocateFunc`` patches the pod, the node's device plugin reads the annotation.
Patches are JSON merge patches of ``metadata.annotations``; a ``None`` value deletes the key.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from adapters.volcano import annotations as ann

PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL = "scheduling.volcano.sh", "v1beta1", "podgroups"

# API answers worth another try: a conflict (the object changed since it was read: read and check it
# again), throttling, a momentarily unavailable API server. Anything else fails at once.
RETRIED_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


class PatchError(RuntimeError):
    """A patch the API server refused or never answered."""


class PodPatcher(Protocol):
    """Where allocateFunc writes the devices of a task and the HyperNode of its job."""

    def patch_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None: ...

    def patch_podgroup(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None: ...


@dataclass(frozen=True)
class Patch:
    kind: str  # "Pod" | "PodGroup"
    namespace: str
    name: str
    annotations: dict[str, str | None]


@dataclass
class RecordingPatcher:
    """Keeps every patch, in order, and the annotations each object would have after them."""

    patches: list[Patch] = field(default_factory=list)
    fail: bool = False  # make every patch fail, to test the error path
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def patch_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self._record("Pod", namespace, name, annotations)

    def patch_podgroup(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self._record("PodGroup", namespace, name, annotations)

    def _record(self, kind: str, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        if self.fail:
            raise PatchError(f"recorder set to fail: {kind} {namespace}/{name}")
        with self._lock:
            self.patches.append(Patch(kind, namespace, name, dict(annotations)))

    def current(self, kind: str, namespace: str, name: str) -> dict[str, str]:
        """The annotations the object would carry after every patch so far (starting from none)."""
        state: dict[str, str] = {}
        with self._lock:
            for p in self.patches:
                if (p.kind, p.namespace, p.name) != (kind, namespace, name):
                    continue
                for key, value in p.annotations.items():
                    if value is None:
                        state.pop(key, None)
                    else:
                        state[key] = value
        return state


SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})


@dataclass(frozen=True)
class NamespacePolicy:
    """Whose pods and PodGroups the extender may patch: the ``allowed`` ones if any are named, else
    every namespace but the ``denied`` (the cluster's own)."""

    allowed: frozenset[str] = frozenset()
    denied: frozenset[str] = SYSTEM_NAMESPACES

    @staticmethod
    def parse(text: str) -> NamespacePolicy:
        """``--namespaces a,b``; empty for the default."""
        return NamespacePolicy(allowed=frozenset(n.strip() for n in text.split(",") if n.strip()))

    def allows(self, namespace: str) -> bool:
        if self.allowed:
            return namespace in self.allowed
        return namespace not in self.denied


class KubernetesPatcher:
    """Patches through the official ``kubernetes`` client (``pip install 'topoplace[volcano]'``).

    In a pod it uses the service account (``load_incluster_config``), elsewhere ``~/.kube/config``.
    ``timeout_s`` bounds each call: allocateFunc answers within Volcano's HTTP timeout.

    A request cannot prove it comes from Volcano, so nothing is patched on its word alone: the pod
    must be in a namespace the policy allows, exist, be scheduled by Volcano (``schedulerName``), be
    Pending and not being deleted, and be unbound or bound to the node the plan names (a removal only
    while unbound: a bound pod's devices are its ledger). The patch carries the pod's ``uid`` and
    ``resourceVersion`` as preconditions, so it applies to exactly the object checked; a conflict
    (the pod changed in between), throttling or an unavailable API server is read, checked and tried
    again, up to ``attempts`` in all.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 0.3,
        core: Any = None,
        custom: Any = None,
        namespaces: NamespacePolicy = NamespacePolicy(),
        scheduler_names: frozenset[str] = frozenset({"volcano"}),
        attempts: int = 2,
    ) -> None:
        if core is None or custom is None:
            from kubernetes import client, config  # imported here: only a deployment needs it

            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            core = core or client.CoreV1Api()
            custom = custom or client.CustomObjectsApi()
        self._core, self._custom, self._timeout = core, custom, timeout_s
        self._namespaces, self._schedulers = namespaces, scheduler_names
        self._attempts = max(1, attempts)

    def patch_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        where = f"pod {namespace}/{name}"
        if not self._namespaces.allows(namespace):
            raise PatchError(
                f"refused to patch {where}: namespace {namespace!r} is not one topoplace may patch"
            )
        for attempt in range(1, self._attempts + 1):
            try:
                pod = self._core.read_namespaced_pod(name, namespace, _request_timeout=self._timeout)
            except Exception as err:
                if attempt < self._attempts and getattr(err, "status", None) in RETRIED_STATUSES:
                    continue
                raise PatchError(f"reading {where}: {_short(err)}") from err
            self._check_pod(pod, where, annotations)
            meta = {
                "uid": pod.metadata.uid,
                "resourceVersion": pod.metadata.resource_version,
                "annotations": dict(annotations),
            }
            try:
                self._core.patch_namespaced_pod(
                    name, namespace, {"metadata": meta}, _request_timeout=self._timeout
                )
                return
            except Exception as err:  # ApiException, urllib3 errors: all mean "not written"
                if attempt < self._attempts and getattr(err, "status", None) in RETRIED_STATUSES:
                    continue  # read and check it again
                raise PatchError(f"patching {where}: {_short(err)}") from err

    def _check_pod(self, pod: Any, where: str, annotations: Mapping[str, str | None]) -> None:
        spec, status, meta = pod.spec, pod.status, pod.metadata
        problem = ""
        if spec.scheduler_name not in self._schedulers:
            problem = (
                f"it is scheduled by {spec.scheduler_name!r}, not by {'/'.join(sorted(self._schedulers))}"
            )
        elif meta.deletion_timestamp is not None:
            problem = "it is being deleted"
        elif ((status.phase if status else None) or "Pending") != "Pending":
            problem = f"it is {status.phase}, not Pending"
        elif all(v is None for v in annotations.values()):
            if spec.node_name:
                problem = f"it is already bound to {spec.node_name}; its devices are no longer the plan's"
        else:
            planned = _planned_node(annotations)
            if spec.node_name and spec.node_name != planned:
                problem = f"it is bound to {spec.node_name}, the plan names {planned or 'no node'}"
        if problem:
            raise PatchError(f"refused to patch {where}: {problem}")

    def patch_podgroup(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        where = f"podgroup {namespace}/{name}"
        if not self._namespaces.allows(namespace):
            raise PatchError(
                f"refused to patch {where}: namespace {namespace!r} is not one topoplace may patch"
            )
        group = (PODGROUP_GROUP, PODGROUP_VERSION, namespace, PODGROUP_PLURAL, name)
        for attempt in range(1, self._attempts + 1):
            try:
                current = self._custom.get_namespaced_custom_object(*group, _request_timeout=self._timeout)
                meta = dict(current.get("metadata") or {})
                body = {
                    "metadata": {
                        "uid": meta.get("uid"),
                        "resourceVersion": meta.get("resourceVersion"),
                        "annotations": dict(annotations),
                    }
                }
                self._custom.patch_namespaced_custom_object(*group, body, _request_timeout=self._timeout)
                return
            except Exception as err:
                if attempt < self._attempts and getattr(err, "status", None) in RETRIED_STATUSES:
                    continue
                raise PatchError(f"patching {where}: {_short(err)}") from err


def _planned_node(annotations: Mapping[str, str | None]) -> str:
    """The node the written ``topoplace.io/devices`` names ("" if none)."""
    value = annotations.get(ann.DEVICES)
    if not value:
        return ""
    try:
        return ann.parse_device_annotation(value, "patch").node
    except ann.AnnotationError:
        return ""


def _short(err: Exception) -> str:
    status = getattr(err, "status", None)
    reason = getattr(err, "reason", None)
    return f"{status} {reason}" if status else f"{type(err).__name__}: {err}"
