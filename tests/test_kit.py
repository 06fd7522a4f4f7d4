"""The test kit keeps the promises its docstrings make: the hardware kinds are what tests rely on."""

from __future__ import annotations

import pytest

from solver.domain.model import Distance
from solver.domain.topology import device_distance, gpu_nic_pairing
from solver.domain.validate import validate
from tests import kit


def test_every_kind_of_node_is_a_valid_inventory() -> None:
    nodes = [
        kit.node("hgx"),
        kit.node("small", kit.SMALL, used_gpus=(0,), used_nics=(1,)),
        kit.node("tree", kit.DISTANCE_TREE),
        kit.node("crossed", kit.DISTANCE_TREE_CROSSED, leaf="leaf0"),
    ]
    assert validate(kit.request(kit.inventory(*nodes), [kit.job("j", 1)])) == ()


def test_hgx_is_eight_gpus_on_eight_rails_all_nvlinked() -> None:
    n = kit.node("n0")
    assert len(n.gpus) == 8 and [nic.rail for nic in n.nics] == list(range(8))
    assert len(n.nvlinks) == 28 and {link.links for link in n.nvlinks} == {18}
    assert {g.numa for g in n.gpus} == {0, 1} and len({g.pcie_switch for g in n.gpus}) == 4


def test_a_small_node_names_its_nics_so_pairing_by_name_is_wrong() -> None:
    near = gpu_nic_pairing(kit.node("s", kit.SMALL))
    assert near["GPU0"] == ["mlx5_1"] and near["GPU2"] == ["mlx5_0"]


def test_the_distance_tree_has_every_distance_class_from_gpu0() -> None:
    n = kit.node("t", kit.DISTANCE_TREE)
    got = {nic: device_distance(n, "GPU0", nic) for nic in ("mlx5_0", "mlx5_2", "mlx5_4", "mlx5_8", "mlx5_6")}
    assert got == {
        "mlx5_0": Distance.PIX,
        "mlx5_2": Distance.PXB,
        "mlx5_4": Distance.PHB,
        "mlx5_8": Distance.NODE,
        "mlx5_6": Distance.SYS,
    }
    crossed = kit.node("x", kit.DISTANCE_TREE_CROSSED)
    assert device_distance(crossed, "GPU0", "mlx5_0") == Distance.PXB  # NIC 0 is not GPU 0's


def test_a_job_takes_roles_or_one_roles_shape_not_both() -> None:
    two = kit.job("j", roles=(kit.role("a", 1, kit.shape(1)), kit.role("b", 2, kit.shape(0, cpu_milli=10))))
    assert [r.name for r in two.roles] == ["a", "b"]
    with pytest.raises(TypeError, match="not both"):
        kit.job("j", 4, roles=two.roles)
