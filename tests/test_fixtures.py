"""The committed fixtures load, mean what their README says, and never drift from ``fixtures/build.py``.

Fixtures are generated; a hand edit or a change to the ingest that is not followed by
``python -m fixtures.build`` fails here, naming the stale file.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from solver.domain.model import Distance, NicMode, Node, Requirement, SolveRequest
from solver.domain.topology import device_distance, gpu_nic_pairing
from topoplace.v1 import placement_pb2

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
T = TypeVar("T")


def load_build() -> ModuleType:
    """``fixtures/build.py`` by path, so the test does not depend on how pytest sets ``sys.path``."""
    spec = importlib.util.spec_from_file_location("fixtures_build", FIXTURES / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


BUILD = load_build()
GENERATED: dict[str, str] = BUILD.build_all()


def to_domain(path: Path, message: Message, model: Callable[..., T]) -> T:
    """Parse canonical JSON into the proto message, then into the domain.

    ``always_print_fields_with_no_presence`` keeps zero-valued scalars (``index: 0``, NUMA ``id: 0``)
    that ``MessageToDict`` would otherwise drop, since the domain requires those fields.
    """
    json_format.Parse(path.read_text(), message)
    data = json_format.MessageToDict(
        message,
        preserving_proto_field_name=True,
        use_integers_for_enums=True,
        always_print_fields_with_no_presence=True,
    )
    return model(data)


def request(name: str) -> SolveRequest:
    return to_domain(FIXTURES / "requests" / name, placement_pb2.SolveRequest(), SolveRequest.model_validate)


@pytest.mark.parametrize("relative", sorted(GENERATED))
def test_committed_file_equals_what_build_generates(relative: str) -> None:
    path = FIXTURES / relative
    assert path.exists(), f"{relative} missing: run python -m fixtures.build"
    assert path.read_text() == GENERATED[relative], f"{relative} is stale: run python -m fixtures.build"


def test_build_is_deterministic() -> None:
    assert load_build().build_all() == GENERATED


def test_no_unexpected_json_files() -> None:
    """The builder's folders hold only what it builds (adapters keep their fixtures elsewhere)."""
    built = ("nodes", "requests")
    committed = {str(p.relative_to(FIXTURES)) for folder in built for p in (FIXTURES / folder).glob("*.json")}
    assert committed == set(GENERATED)


@pytest.mark.parametrize("name", sorted(p for p in GENERATED if p.startswith("nodes/")))
def test_node_files_load(name: str) -> None:
    node = to_domain(FIXTURES / name, placement_pb2.Node(), Node.model_validate)
    assert len(node.gpus) == 8
    assert {g.memory_mib for g in node.gpus} <= {40 * 1024, 80 * 1024}


@pytest.mark.parametrize(
    "name", sorted(p.removeprefix("requests/") for p in GENERATED if p.startswith("requests/"))
)
def test_request_files_load_and_round_trip(name: str) -> None:
    loaded = request(name)
    assert loaded == BUILD.REQUEST_FILES[f"requests/{name}"]()
    assert loaded.request_id == name.removesuffix(".json")


@pytest.mark.parametrize(
    "name", sorted(p.removeprefix("requests/") for p in GENERATED if p.startswith("requests/"))
)
def test_requests_are_internally_consistent(name: str) -> None:
    """Every allocation names devices of its node, no device is held twice, every leaf exists."""
    loaded = request(name)
    switches = {s.id for s in loaded.inventory.switches}
    for node in loaded.inventory.nodes:
        assert node.leaf in switches
        gpus = [g for a in node.allocations for g in a.gpus]
        nics = [n for a in node.allocations for n in a.nics]
        assert set(gpus) <= {g.id for g in node.gpus} and len(gpus) == len(set(gpus))
        assert set(nics) <= {n.name for n in node.nics} and len(nics) == len(set(nics))
        assert sum(a.cpu_milli for a in node.allocations) <= node.cpu_milli
        assert sum(a.memory_mib for a in node.allocations) <= node.memory_mib


def test_dgx4_mixed_exercises_every_rule() -> None:
    loaded = request("dgx4-mixed.json")
    members = [(job, role) for job in loaded.jobs for role in job.roles]
    shapes = [role.member for _, role in members]
    assert {m.gpus for m in shapes} >= {1, 2, 4, 8}
    assert any(m.nics.mode == NicMode.PER_GPU and m.alignment.mode == Requirement.REQUIRED for m in shapes)
    assert any(m.alignment.mode == Requirement.PREFERRED for m in shapes)
    assert any(m.numa == Requirement.REQUIRED for m in shapes)
    assert any(m.nvlink == Requirement.REQUIRED for m in shapes)
    assert any(m.nics.mode == NicMode.PER_MEMBER for m in shapes)
    assert any(role.minimum < role.replicas for _, role in members)
    assert any(role.replicas == 2 and role.minimum == 2 for _, role in members)  # the 2-node gang
    assert any(len(job.roles) > 1 for job in loaded.jobs)
    assert all(m.cpu_milli > 0 and m.memory_mib > 0 for m in shapes)
    too_big = next(job for job in loaded.jobs if job.id == "pretrain-3x8")
    free_nodes = [n for n in loaded.inventory.nodes if not n.allocations]
    assert too_big.roles[0].minimum > len(free_nodes) == 2
    assert too_big.priority == max(job.priority for job in loaded.jobs)
    used = {n.name: sum(len(a.gpus) for a in n.allocations) for n in loaded.inventory.nodes}
    assert used == {"dgx-01": 0, "dgx-02": 4, "dgx-03": 2, "dgx-04": 0}


def test_dgx4_allocations_hold_the_nics_of_their_gpus() -> None:
    node = request("dgx4-mixed.json").inventory.nodes[1]
    (allocation,) = node.allocations
    assert allocation.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert all(
        device_distance(node, gpu, nic) <= Distance.PXB
        for gpu in allocation.gpus
        for nic in gpu_nic_pairing(node)[gpu]
    )


def test_pcie_only_has_numa_but_no_nics_or_nvlink() -> None:
    loaded = request("pcie-only-4.json")
    for node in loaded.inventory.nodes:
        assert node.nics == () and node.nvlinks == ()
        assert [g.numa for g in node.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
        assert device_distance(node, "GPU0", "GPU4") == Distance.SYS  # still what the capture says
        assert device_distance(node, "GPU0", "GPU1") == Distance.PIX
    shapes = [role.member for job in loaded.jobs for role in job.roles]
    assert any(m.nvlink == Requirement.PREFERRED for m in shapes)
    assert any(m.numa == Requirement.REQUIRED for m in shapes)


def test_twotier_is_half_used_on_a_two_tier_tree() -> None:
    loaded = request("twotier-64.json")
    nodes = loaded.inventory.nodes
    assert len(nodes) == 64
    tiers = {s.id: s.tier for s in loaded.inventory.switches}
    assert sorted(tiers.values()) == [1, 1, 1, 1, 2]
    assert {sum(1 for n in nodes if n.leaf == leaf) for leaf in tiers if tiers[leaf] == 1} == {16}
    used = sum(len(a.gpus) for n in nodes for a in n.allocations)
    assert 0.4 <= used / (8 * len(nodes)) <= 0.6
    assert 45 <= len(loaded.jobs) <= 55
    gang_sizes = {role.replicas for job in loaded.jobs for role in job.roles if role.member.gpus == 8}
    assert {1, 2, 16} <= gang_sizes
    # the a100-nv12 shape: GPU k is not next to NIC k
    assert gpu_nic_pairing(nodes[0])["GPU0"] == ["mlx5_2", "mlx5_3"]
