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

PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL = "scheduling.volcano.sh", "v1beta1", "podgroups"


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


class KubernetesPatcher:
    """Patches through the official ``kubernetes`` client (``pip install 'topoplace[volcano]'``).

    In a pod it uses the service account (``load_incluster_config``), elsewhere ``~/.kube/config``.
    ``timeout_s`` bounds each call: allocateFunc answers within Volcano's HTTP timeout.
    """

    def __init__(self, *, timeout_s: float = 0.3, core: Any = None, custom: Any = None) -> None:
        if core is None or custom is None:
            from kubernetes import client, config  # imported here: only a deployment needs it

            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            core = core or client.CoreV1Api()
            custom = custom or client.CustomObjectsApi()
        self._core, self._custom, self._timeout = core, custom, timeout_s

    def patch_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        try:
            self._core.patch_namespaced_pod(name, namespace, body, _request_timeout=self._timeout)
        except Exception as err:  # ApiException, urllib3 errors: all mean "not written"
            raise PatchError(f"patching pod {namespace}/{name}: {_short(err)}") from err

    def patch_podgroup(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        try:
            self._custom.patch_namespaced_custom_object(
                PODGROUP_GROUP,
                PODGROUP_VERSION,
                namespace,
                PODGROUP_PLURAL,
                name,
                body,
                _request_timeout=self._timeout,
            )
        except Exception as err:
            raise PatchError(f"patching podgroup {namespace}/{name}: {_short(err)}") from err


def _short(err: Exception) -> str:
    status = getattr(err, "status", None)
    reason = getattr(err, "reason", None)
    return f"{status} {reason}" if status else f"{type(err).__name__}: {err}"
