"""The RDMA device plugin driven over the kubelet's real device-plugin API (v1beta1 gRPC on unix
sockets), as the kubelet drives it.

No kubelet runs here, so the test plays the kubelet: a Registration server on ``kubelet.sock`` (the
real service from the vendored api.proto) that records the plugin's Register, then dials the
plugin's socket and calls GetDevicePluginOptions, ListAndWatch, GetPreferredAllocation and Allocate.
No API server runs either: the pods the plugin reads are an in-memory list (``MemoryPods``), the
pods themselves are what the real extender wrote during ``allocateFunc``. The HCAs are a sysfs tree in
a temporary directory with the layout of ``/sys/class/infiniband``.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from adapters.volcano import annotations as ann
from adapters.volcano import kube, wire
from adapters.volcano import rdma_plugin as rp
from adapters.volcano.extender import Config, Extender
from adapters.volcano.hypernodes import HyperNode
from adapters.volcano.patcher import RecordingPatcher
from fixtures.volcano import build
from solver.domain.model import NicMode
from topoplace.kubelet.deviceplugin.v1beta1 import api_pb2 as api
from topoplace.kubelet.deviceplugin.v1beta1 import api_pb2_grpc as api_grpc

from .conftest import CapturingSolve

NICS = tuple(f"mlx5_{i}" for i in range(10))  # the fixture's DGX A100: NIC0..NIC9 in nvidia-smi topo -m


@dataclass
class MemoryPods:
    """The pods bound to the node, as the API server would list them (none runs here)."""

    pods: list[dict[str, Any]]
    marks: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["spec"].get("nodeName") == node]

    def annotate(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        self.marks.append((namespace, name, dict(annotations)))
        for pod in self.pods:
            if (pod["metadata"]["namespace"], pod["metadata"]["name"]) == (namespace, name):
                pod["metadata"]["annotations"].update(annotations)


class FakeKubelet(api_grpc.RegistrationServicer):
    """The kubelet's Registration service (the real gRPC service, this test's implementation)."""

    def __init__(self) -> None:
        self.requests: list[api.RegisterRequest] = []
        self.registered = threading.Event()

    def Register(self, request: api.RegisterRequest, context: grpc.ServicerContext) -> api.Empty:
        self.requests.append(request)
        self.registered.set()
        return api.Empty()


def sysfs_tree(root: Path, down: set[str]) -> Path:
    """``class/infiniband/<hca>/{device/infiniband_verbs/uverbsN, device/numa_node, ports/1/state}``."""
    for i, name in enumerate(NICS):
        hca = root / "class" / "infiniband" / name
        (hca / "device" / "infiniband_verbs" / f"uverbs{i}").mkdir(parents=True)
        (hca / "device" / "numa_node").write_text(f"{i // 5}\n")
        (hca / "ports" / "1").mkdir(parents=True)
        (hca / "ports" / "1" / "state").write_text("1: DOWN\n" if name in down else "4: ACTIVE\n")
    return root


@pytest.fixture
def planned(body: dict[str, Any], hypernodes: tuple[HyperNode, ...]) -> tuple[list[dict[str, Any]], str]:
    """The pods of the fixture's 16-pod NIC gang (8 GPUs and 8 aligned NICs each), as the real extender
    patched them in allocateFunc, bound to their planned nodes and Pending (what the kubelet then
    admits), and the node of the first."""
    patcher = RecordingPatcher()
    extender = Extender(
        solve=CapturingSolve(), patcher=patcher, hypernodes=lambda: hypernodes,
        config=Config(http_timeout_s=20.0, margin_s=0.5),
    )  # fmt: skip
    extender.on_session_open(body)
    plan = extender.plan
    assert plan is not None, extender.status.error
    tasks = [t for t in body["Jobs"]["team-a/train-16"]["Tasks"].values() if t["UID"] in plan.assignments]
    node = plan.assignments[tasks[0]["UID"]].node
    pods = []
    for task in tasks:
        assignment = plan.assignments[task["UID"]]
        extender.allocate({"task": {**task, "NodeName": assignment.node, "Status": wire.ALLOCATED}})
        pod = copy.deepcopy(task["Pod"])
        pod["metadata"]["annotations"].update(patcher.current("Pod", task["Namespace"], task["Name"]))
        pod["spec"]["nodeName"] = assignment.node
        pods.append(pod)
    extender.close()
    assert all(ann.DEVICES in p["metadata"]["annotations"] for p in pods)
    return pods, node


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[Path, FakeKubelet]]:
    plugin_dir = tmp_path / "device-plugins"
    plugin_dir.mkdir()
    fake = FakeKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_grpc.add_RegistrationServicer_to_server(fake, server)
    server.add_insecure_port(f"unix://{plugin_dir / rp.KUBELET_SOCKET}")
    server.start()
    try:
        yield plugin_dir, fake
    finally:
        server.stop(0).wait(2)


def _nics(pod: dict[str, Any]) -> tuple[str, ...]:
    return ann.parse_device_annotation(pod["metadata"]["annotations"][ann.DEVICES], "pod").nics


def test_kubelet_gets_the_planned_nics(
    tmp_path: Path, kubelet: tuple[Path, FakeKubelet], planned: tuple[list[dict[str, Any]], str]
) -> None:
    plugin_dir, fake = kubelet
    pods, node = planned
    first = next(p for p in pods if p["spec"]["nodeName"] == node)
    # a second pod waiting on the same node, allocated later, with the NIC the gang left free there
    left = sorted(set(NICS[:9]) - set(_nics(first)))[:1]
    device = ann.parse_device_annotation(first["metadata"]["annotations"][ann.DEVICES], "first")
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "late-0"
    second["metadata"]["annotations"][ann.DEVICES] = device.model_copy(
        update={"nics": tuple(left), "at": device.at + 1, "gpus": ()}
    ).value()
    stranger = copy.deepcopy(first)  # planned for another node: never this node's
    stranger["metadata"]["name"] = "elsewhere"
    stranger["spec"]["nodeName"] = "gpu-99"
    source = MemoryPods([*pods, second, stranger])
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "rdma_cm").touch()
    plugin = rp.RdmaDevicePlugin(
        node=node,
        pods=source,
        sysfs=sysfs_tree(tmp_path / "sys", {"mlx5_9"}),
        dev_dir=tmp_path / "dev",
        poll_s=0.05,
    )
    stop = threading.Event()
    runner = threading.Thread(
        target=rp.run, args=(plugin, plugin_dir), kwargs={"stop": stop, "check_s": 0.05}, daemon=True
    )
    runner.start()
    try:
        assert fake.registered.wait(10), "the plugin never registered with the kubelet"
        reg = fake.requests[0]
        assert (reg.version, reg.endpoint, reg.resource_name) == ("v1beta1", rp.ENDPOINT, rp.RESOURCE)
        assert reg.options.get_preferred_allocation_available
        with grpc.insecure_channel(f"unix://{plugin_dir / reg.endpoint}") as channel:
            stub = api_grpc.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(api.Empty(), timeout=5)
            assert options.get_preferred_allocation_available and not options.pre_start_required
            stream = stub.ListAndWatch(api.Empty(), timeout=10)
            listed = next(stream)
            assert [d.ID for d in listed.devices] == list(NICS)
            health = {d.ID: d.health for d in listed.devices}
            assert health["mlx5_9"] == rp.UNHEALTHY and health["mlx5_0"] == rp.HEALTHY
            assert [n.ID for n in listed.devices[7].topology.nodes] == [1]
            stream.cancel()

            # the kubelet asks which NICs to take for the next pod: the plan's
            want = _nics(first)
            preferred = stub.GetPreferredAllocation(
                api.PreferredAllocationRequest(
                    container_requests=[
                        api.ContainerPreferredAllocationRequest(
                            available_deviceIDs=list(NICS), allocation_size=len(want)
                        )
                    ]
                ),
                timeout=5,
            )
            assert tuple(preferred.container_responses[0].deviceIDs) == want

            # it takes other IDs anyway: the container still gets the planned NICs
            unplanned = [n for n in NICS if n not in want]
            kubelet_ids = unplanned + list(want[len(unplanned) :])
            reply = stub.Allocate(
                api.AllocateRequest(
                    container_requests=[api.ContainerAllocateRequest(devices_ids=kubelet_ids)]
                ),
                timeout=5,
            )
            (container,) = reply.container_responses
            index = {n: i for i, n in enumerate(NICS)}
            uverbs = [str(tmp_path / "dev" / f"uverbs{index[n]}") for n in want]
            assert [d.host_path for d in container.devices] == [*uverbs, str(tmp_path / "dev" / "rdma_cm")]
            assert all(d.container_path == d.host_path and d.permissions == "rw" for d in container.devices)
            assert container.envs["NCCL_IB_HCA"] == "=" + ",".join(want)
            assert source.marks[0] == (
                first["metadata"]["namespace"], first["metadata"]["name"], {rp.RDMA_ALLOCATED: ",".join(want)}
            )  # fmt: skip

            # the next Allocate is the next pod's: the first is marked served
            reply = stub.Allocate(
                api.AllocateRequest(
                    container_requests=[api.ContainerAllocateRequest(devices_ids=list(_nics(second)))]
                ),
                timeout=5,
            )
            assert reply.container_responses[0].envs["TOPOPLACE_RDMA_NICS"] == ",".join(_nics(second))

            # a pod with no plan on this node gets what the kubelet chose
            for pod in source.pods:
                pod["metadata"]["annotations"][rp.RDMA_ALLOCATED] = "done"
            reply = stub.Allocate(
                api.AllocateRequest(
                    container_requests=[api.ContainerAllocateRequest(devices_ids=["mlx5_4"])]
                ),
                timeout=5,
            )
            assert reply.container_responses[0].envs["NCCL_IB_HCA"] == "=mlx5_4"
    finally:
        stop.set()
        runner.join(5)
    assert not (plugin_dir / rp.ENDPOINT).exists()


def test_plugin_registers_again_after_a_kubelet_restart(
    tmp_path: Path, kubelet: tuple[Path, FakeKubelet]
) -> None:
    """The kubelet wipes the plugin directory when it restarts: the plugin serves and registers again."""
    plugin_dir, fake = kubelet
    plugin = rp.RdmaDevicePlugin(node="n", pods=MemoryPods([]), sysfs=sysfs_tree(tmp_path / "sys", set()))
    stop = threading.Event()
    runner = threading.Thread(
        target=rp.run, args=(plugin, plugin_dir), kwargs={"stop": stop, "check_s": 0.05}, daemon=True
    )
    runner.start()
    try:
        assert fake.registered.wait(10)
        fake.registered.clear()
        (plugin_dir / rp.ENDPOINT).unlink()
        assert fake.registered.wait(10), "no second registration after the socket was removed"
        assert rp.wait_for(plugin_dir / rp.ENDPOINT, 5) and len(fake.requests) == 2
    finally:
        stop.set()
        runner.join(5)


def test_a_planned_nic_the_node_lacks_is_refused(tmp_path: Path, kubelet: tuple[Path, FakeKubelet]) -> None:
    plugin_dir, _ = kubelet
    device = ann.DeviceAnnotation(node="n", job="j", role="r", member=0, nics=("mlx5_77",))
    pod = {
        "metadata": {"namespace": "ns", "name": "p", "annotations": {ann.DEVICES: device.value()}},
        "spec": {"nodeName": "n"},
        "status": {"phase": "Pending"},
    }
    plugin = rp.RdmaDevicePlugin(node="n", pods=MemoryPods([pod]), sysfs=sysfs_tree(tmp_path / "sys", set()))
    running = rp.serve(plugin, plugin_dir)
    try:
        with (
            grpc.insecure_channel(f"unix://{running.socket}") as channel,
            pytest.raises(grpc.RpcError) as err,
        ):
            api_grpc.DevicePluginStub(channel).Allocate(
                api.AllocateRequest(
                    container_requests=[api.ContainerAllocateRequest(devices_ids=["mlx5_0"])]
                ),
                timeout=5,
            )
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "mlx5_77" in (err.value.details() or "") and "ns/p" in (err.value.details() or "")
    finally:
        running.stop()


def _rdma_task(rdma: int, gpus: int = 8, nics: str = "") -> Any:
    spec = build.PodSpec("ns", "p-0", "p", "worker", gpus=gpus, annotations={kube.NICS: nics} if nics else {})
    info = build.task_info(spec)
    info["Resreq"]["ScalarResources"][kube.RDMA] = rdma * 1000.0  # Volcano's milli-values
    return wire.task(info, "task")


def test_the_rdma_resource_sets_how_many_nics_are_planned() -> None:
    """The plugin hands exactly the ``topoplace.io/rdma`` units the pod asks for: the plan names as
    many NICs (one per GPU when they match the GPUs), and an annotation that plans another count is
    refused with the reason rather than planned wrong."""
    assert kube.member_shape(_rdma_task(8), []).nics.mode == NicMode.PER_GPU
    two = kube.member_shape(_rdma_task(2), []).nics
    assert (two.mode, two.count) == (NicMode.PER_MEMBER, 2)
    assert kube.member_shape(_rdma_task(8, nics="per-gpu"), []).nics.mode == NicMode.PER_GPU
    with pytest.raises(
        kube.PodRefused, match=r"asks for 4 topoplace\.io/rdma but annotation topoplace\.io/nics: 2"
    ):
        kube.member_shape(_rdma_task(4, nics="2"), [])


def test_cli_refuses_a_missing_plugin_directory(tmp_path: Path) -> None:
    import argparse

    from adapters.volcano import cli
    from solver.domain.errors import InvalidRequest

    parser = argparse.ArgumentParser()
    cli.add_rdma_plugin(parser.add_subparsers())
    args = parser.parse_args(["rdma-device-plugin", "--node", "n", "--plugin-dir", str(tmp_path / "none")])
    assert args.resource == kube.RDMA and args.sysfs == Path("/sys")
    with pytest.raises(InvalidRequest) as err:
        args.run(args)
    assert "--plugin-dir" in str(err.value.problems[0]) and "not a directory" in str(err.value.problems[0])
