"""``topoplace rdma-device-plugin``: the node-side piece that hands a pod the RDMA NICs its plan named.

Volcano's extender cannot bind or hand devices over; ``allocateFunc`` writes the plan on the pod
(``topoplace.io/devices``, its ``nics``). This plugin, one per RDMA node (a DaemonSet), speaks the
kubelet's device-plugin API v1beta1 (``proto/topoplace/kubelet/deviceplugin/v1beta1/api.proto``,
vendored from k8s.io/kubelet v0.37.2) over gRPC on unix sockets:

1. it serves ``DevicePlugin`` on ``<plugin dir>/topoplace-rdma.sock`` and registers with the kubelet's
   ``Registration`` service (``<plugin dir>/kubelet.sock``): version v1beta1, that endpoint, the
   resource (default ``topoplace.io/rdma``) pods ask for, one unit per NIC;
2. ``ListAndWatch`` advertises one device per RDMA HCA under ``/sys/class/infiniband`` (ID = the HCA
   name, e.g. ``mlx5_2``, as ``nvidia-smi topo -m`` and the topology annotation name it; Healthy
   while a port is ACTIVE; its NUMA node), and sends the list again whenever it changes;
3. ``Allocate`` carries no pod: the plugin resolves the pod being bound on this node — Pending,
   ``spec.nodeName`` this node, ``topoplace.io/devices`` planned here with as many NICs as the kubelet
   asks for, not yet handed its NICs; the one whose planned NICs are exactly the kubelet's IDs,
   else the earliest allocated — and answers with the *planned* NICs: ``/dev/infiniband/uverbsN`` of
   each HCA and ``rdma_cm`` as device specs, ``NCCL_IB_HCA==mlx5_2,mlx5_3`` (NCCL's exact-match
   form) and ``TOPOPLACE_RDMA_NICS``; then it marks the pod ``topoplace.io/rdma-allocated``. A pod
   with no plan gets the kubelet's choice;
4. ``GetPreferredAllocation`` names the planned NICs of that same pod, so the kubelet's own count of
   which NIC is taken matches what the container got.

The kubelet restarts wipe the plugin directory: the plugin notices its socket is gone, serves again
and registers again.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import structlog

from adapters.volcano import annotations as ann
from adapters.volcano import kube
from topoplace.kubelet.deviceplugin.v1beta1 import api_pb2 as api
from topoplace.kubelet.deviceplugin.v1beta1 import api_pb2_grpc as api_grpc

API_VERSION = "v1beta1"
PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"
ENDPOINT = "topoplace-rdma.sock"
RESOURCE = kube.RDMA
RDMA_ALLOCATED = "topoplace.io/rdma-allocated"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"

_log = structlog.get_logger("topoplace.rdma")


# --------------------------------------------------------------------------- the node's NICs


@dataclass(frozen=True)
class Hca:
    """One RDMA HCA as sysfs shows it."""

    name: str  # mlx5_2
    uverbs: str  # uverbs2: the character device /dev/infiniband/uverbs2
    healthy: bool
    numa: int | None


def discover(sysfs: Path) -> list[Hca]:
    """The HCAs under ``<sysfs>/class/infiniband``: each with its verbs device
    (``device/infiniband_verbs/uverbsN``), health (a port whose ``state`` is ACTIVE) and NUMA node."""
    root = sysfs / "class" / "infiniband"
    hcas = []
    for entry in sorted(root.iterdir()) if root.is_dir() else ():
        verbs = sorted(p.name for p in (entry / "device" / "infiniband_verbs").glob("uverbs*"))
        if not verbs:
            continue  # not an RDMA verbs device (nothing a container could open)
        states = [_read(p / "state") for p in (entry / "ports").glob("*")]
        numa_text = _read(entry / "device" / "numa_node")
        numa = int(numa_text) if numa_text.lstrip("-").isdigit() and int(numa_text) >= 0 else None
        hcas.append(Hca(entry.name, verbs[0], any("ACTIVE" in s for s in states), numa))
    return hcas


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


# --------------------------------------------------------------------------- the pods on the node


class PodSource(Protocol):
    """Where the plugin reads the pods bound to its node and marks the one it served."""

    def pods_on_node(self, node: str) -> list[dict[str, Any]]: ...

    def annotate(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None: ...


class KubernetesPods:
    """Pods through the official client, with the DaemonSet's service account (get/list pods on its
    node by field selector; patch pods for the mark)."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        from kubernetes import client, config  # imported here: only a deployment needs it

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        self._core = client.CoreV1Api()
        self._api = client.ApiClient()
        self._timeout = timeout_s

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        found = self._core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _request_timeout=self._timeout
        )
        return [self._api.sanitize_for_serialization(p) for p in found.items]

    def annotate(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        body = {"metadata": {"annotations": dict(annotations)}}
        self._core.patch_namespaced_pod(name, namespace, body, _request_timeout=self._timeout)


@dataclass(frozen=True)
class Planned:
    namespace: str
    name: str
    nics: tuple[str, ...]
    at: int  # when allocateFunc wrote the plan (ms): the earliest is bound first


def planned_pods(pods: Sequence[Mapping[str, Any]], node: str) -> list[Planned]:
    """Pods bound to ``node``, still Pending, planned here with NICs and not yet handed them."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        notes = meta.get("annotations") or {}
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName") != node or status.get("phase", "Pending") != "Pending":
            continue
        if RDMA_ALLOCATED in notes or ann.DEVICES not in notes:
            continue
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        try:
            device = ann.parse_device_annotation(notes[ann.DEVICES], key)
        except ann.AnnotationError as err:
            _log.warning("unreadable plan", pod=key, error=str(err))
            continue
        if device.node == node and device.nics:
            out.append(Planned(meta.get("namespace", ""), meta.get("name", ""), device.nics, device.at))
    return sorted(out, key=lambda p: (p.at, p.namespace, p.name))


def resolve(candidates: Sequence[Planned], kubelet_ids: Sequence[str]) -> Planned | None:
    """The pod a kubelet request for ``kubelet_ids`` is for: same NIC count; the one whose plan is
    exactly those IDs (the kubelet took our preferred allocation), else the earliest allocated."""
    fitting = [p for p in candidates if len(p.nics) == len(kubelet_ids)]
    exact = [p for p in fitting if set(p.nics) == set(kubelet_ids)]
    chosen = (exact or fitting or [None])[0]
    if chosen is not None and len(exact or fitting) > 1:
        _log.warning(
            "several pods wait for NICs on this node; earliest allocated first",
            pods=[f"{p.namespace}/{p.name}" for p in exact or fitting],
        )
    return chosen


# --------------------------------------------------------------------------- the gRPC service


class RdmaDevicePlugin(api_grpc.DevicePluginServicer):
    def __init__(
        self,
        *,
        node: str,
        pods: PodSource,
        sysfs: Path = Path("/sys"),
        dev_dir: Path = Path("/dev/infiniband"),
        poll_s: float = 10.0,
    ) -> None:
        self.node, self._pods, self._sysfs, self._dev = node, pods, sysfs, dev_dir
        self._poll = poll_s
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one Allocate at a time: resolve and mark must not interleave

    def stop(self) -> None:
        self._stop.set()

    def hcas(self) -> dict[str, Hca]:
        return {h.name: h for h in discover(self._sysfs)}

    def devices(self) -> list[api.Device]:
        return [
            api.Device(
                ID=h.name,
                health=HEALTHY if h.healthy else UNHEALTHY,
                topology=api.TopologyInfo(nodes=[api.NUMANode(ID=h.numa)]) if h.numa is not None else None,
            )
            for h in self.hcas().values()
        ]

    # ---- DevicePlugin

    def GetDevicePluginOptions(
        self, request: api.Empty, context: grpc.ServicerContext
    ) -> api.DevicePluginOptions:
        return api.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(
        self, request: api.Empty, context: grpc.ServicerContext
    ) -> Iterator[api.ListAndWatchResponse]:
        last: list[api.Device] | None = None
        while not self._stop.is_set() and context.is_active():
            current = self.devices()
            if current != last:
                last = current
                yield api.ListAndWatchResponse(devices=current)
            self._stop.wait(self._poll)

    def GetPreferredAllocation(
        self, request: api.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api.PreferredAllocationResponse:
        candidates = planned_pods(self._pods.pods_on_node(self.node), self.node)
        responses = []
        for want in request.container_requests:
            available = list(want.available_deviceIDs)
            chosen = resolve(candidates, ["?"] * want.allocation_size)
            planned = list(chosen.nics) if chosen else []
            if (
                planned
                and set(planned) <= set(available)
                and set(want.must_include_deviceIDs) <= set(planned)
            ):
                ids = planned
            else:  # no plan fits: the kubelet's own order
                ids = list(want.must_include_deviceIDs)
                ids += [d for d in available if d not in ids][: want.allocation_size - len(ids)]
            responses.append(api.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return api.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: api.AllocateRequest, context: grpc.ServicerContext) -> api.AllocateResponse:
        with self._lock:
            return self._allocate(request, context)

    def _allocate(self, request: api.AllocateRequest, context: grpc.ServicerContext) -> api.AllocateResponse:
        requested = [list(c.devices_ids) for c in request.container_requests]
        kubelet_ids = [d for ids in requested for d in ids]
        try:
            candidates = planned_pods(self._pods.pods_on_node(self.node), self.node)
        except Exception as err:  # the API server unreachable: the kubelet's choice, said so
            _log.error("cannot list pods; handing the kubelet's choice", error=str(err))
            candidates = []
        pod = resolve(candidates, kubelet_ids)
        hcas = self.hcas()
        nics = list(pod.nics) if pod else kubelet_ids
        missing = [n for n in nics if n not in hcas]
        if missing:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"NIC(s) {', '.join(missing)} planned for "
                f"{pod.namespace + '/' + pod.name if pod else 'the pod'} are not RDMA devices of {self.node}",
            )
        responses, start = [], 0
        for ids in requested:  # the planned NICs in container order, as many as each container asked
            mine = nics[start : start + len(ids)]
            start += len(ids)
            responses.append(self._container_response(mine, hcas))
        if pod is not None:
            try:
                self._pods.annotate(pod.namespace, pod.name, {RDMA_ALLOCATED: ",".join(nics)})
            except Exception as err:  # handed anyway; a later Allocate may pick the pod again
                _log.error("cannot mark the pod", pod=f"{pod.namespace}/{pod.name}", error=str(err))
            _log.info(
                "allocated planned NICs", pod=f"{pod.namespace}/{pod.name}", nics=nics, kubelet=kubelet_ids
            )
        else:
            _log.info("no planned pod for this request; the kubelet's choice", nics=nics)
        return api.AllocateResponse(container_responses=responses)

    def _container_response(
        self, nics: Sequence[str], hcas: Mapping[str, Hca]
    ) -> api.ContainerAllocateResponse:
        devices = [
            api.DeviceSpec(
                container_path=str(self._dev / hcas[n].uverbs),
                host_path=str(self._dev / hcas[n].uverbs),
                permissions="rw",
            )
            for n in nics
        ]
        if nics and (self._dev / "rdma_cm").exists():  # connection manager: shared by every RDMA user
            devices.append(
                api.DeviceSpec(
                    container_path=str(self._dev / "rdma_cm"),
                    host_path=str(self._dev / "rdma_cm"),
                    permissions="rw",
                )
            )
        envs = {"NCCL_IB_HCA": "=" + ",".join(nics), "TOPOPLACE_RDMA_NICS": ",".join(nics)} if nics else {}
        return api.ContainerAllocateResponse(envs=envs, devices=devices)

    def PreStartContainer(
        self, request: api.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api.PreStartContainerResponse:
        return api.PreStartContainerResponse()


# --------------------------------------------------------------------------- serving and registering


@dataclass
class Running:
    server: grpc.Server
    socket: Path

    def stop(self, grace_s: float = 1.0) -> None:
        self.server.stop(grace_s).wait(grace_s + 1)
        self.socket.unlink(missing_ok=True)


def serve(plugin: RdmaDevicePlugin, plugin_dir: Path, endpoint: str = ENDPOINT) -> Running:
    """Serve ``plugin`` on ``<plugin_dir>/<endpoint>`` (a stale socket file is removed first)."""
    socket = plugin_dir / endpoint
    socket.unlink(missing_ok=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="rdma-plugin"))
    api_grpc.add_DevicePluginServicer_to_server(plugin, server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    os.chmod(socket, 0o600)  # the kubelet runs as root; nobody else talks to the plugin
    return Running(server, socket)


def register(
    plugin_dir: Path, endpoint: str = ENDPOINT, resource: str = RESOURCE, timeout_s: float = 5.0
) -> None:
    """Register with the kubelet; raises ``grpc.RpcError`` if it refuses or is not there."""
    with grpc.insecure_channel(f"unix://{plugin_dir / KUBELET_SOCKET}") as channel:
        api_grpc.RegistrationStub(channel).Register(
            api.RegisterRequest(
                version=API_VERSION,
                endpoint=endpoint,
                resource_name=resource,
                options=api.DevicePluginOptions(get_preferred_allocation_available=True),
            ),
            timeout=timeout_s,
        )


def run(
    plugin: RdmaDevicePlugin,
    plugin_dir: Path = PLUGIN_DIR,
    *,
    resource: str = RESOURCE,
    endpoint: str = ENDPOINT,
    stop: threading.Event,
    check_s: float = 5.0,
) -> None:
    """Serve and register until ``stop``; serve and register again when the kubelet restarts (it
    deletes every socket in the plugin directory) or refused us."""
    running: Running | None = None
    registered = False
    while not stop.is_set():
        if running is None or not running.socket.exists():
            if running is not None:
                _log.info("plugin socket gone (kubelet restarted?); serving again")
                running.stop(0)
            running, registered = serve(plugin, plugin_dir, endpoint), False
        if not registered:
            try:
                register(plugin_dir, endpoint, resource)
                registered = True
                _log.info("registered with the kubelet", resource=resource, endpoint=endpoint)
            except grpc.RpcError as err:
                _log.warning("kubelet registration failed; retrying", error=str(err))
        stop.wait(check_s)
    plugin.stop()
    if running is not None:
        running.stop()


def wait_for(path: Path, timeout_s: float) -> bool:
    """True once ``path`` exists (a socket being bound), False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.01)
    return path.exists()
