"""Parsers of what a Slurm site has, on real-format samples and on malformed ones (FILE:LINE errors)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from adapters.slurm.gres import node_devices, parse_gres_conf, parse_gres_string
from adapters.slurm.inventory import build_inventory
from adapters.slurm.nodetypes import TopoDir
from adapters.slurm.scontrol import parse_nodes_json, parse_show_node
from adapters.slurm.topology_conf import parse_topology_conf, parse_topology_yaml
from solver.domain.errors import InvalidRequest


def problems(excinfo: pytest.ExceptionInfo[InvalidRequest]) -> list[str]:
    return [str(p) for p in excinfo.value.problems]


# --------------------------------------------------------------------------- scontrol


def test_show_node_capture_one_node_per_state(fixtures: Path) -> None:
    nodes = {n.name: n for n in parse_show_node((fixtures / "scontrol-show-node-d.txt").read_text())}
    assert {name: n.state for name, n in nodes.items()} == {
        "gpu01": ("IDLE",),
        "gpu02": ("MIXED",),
        "gpu03": ("ALLOCATED",),
        "gpu04": ("DOWN", "DRAIN"),
    }
    assert [n.schedulable for n in nodes.values()] == [True, True, True, False]
    gpu02 = nodes["gpu02"]
    assert gpu02.cpus == 16 and gpu02.alloc_cpus == 1 and gpu02.real_memory_mib == 512000
    used = {(i.name, i.type): i.indices for i in gpu02.gres_used if i.indices}
    assert used == {("gpu", "sw1"): (2, 3), ("nic", "sw1"): (2,)}
    assert gpu02.partitions == ("gpu",)


def test_show_node_values_with_spaces_and_the_multiline_form() -> None:
    text = (
        "NodeName=a1 Arch=x86_64 CPUTot=8 State=IDLE+DRAIN Reason=fan broken [root@2026-01-01] "
        "OS=Linux 6.1 #1 SMP Gres=gpu:2 GresUsed=gpu:1(IDX:1)\n\n"
        "NodeName=a2 CPUTot=8\n   State=MIXED Gres=gpu:h100:8(S:0-1)\n"
    )
    a1, a2 = parse_show_node(text)
    assert a1.state == ("IDLE", "DRAIN") and not a1.schedulable
    assert a1.gres_used[0].indices == (1,)
    assert a2.state == ("MIXED",) and a2.gres[0].type == "h100" and a2.gres[0].sockets == "0-1"


def test_show_node_malformed_lines_are_located() -> None:
    text = (
        "NodeName=a1 CPUTot=eight State=IDLE\nbogus line\nNodeName=a3 Gres=gpu:h100:x\nNodeName=a1 CPUTot=2\n"
    )
    with pytest.raises(InvalidRequest) as excinfo:
        parse_show_node(text, "nodes.txt")
    found = problems(excinfo)
    assert any(p.startswith("nodes.txt:1:") and "CPUTot" in p for p in found)
    assert any(p.startswith("nodes.txt:2:") and "NodeName" in p for p in found)
    assert any(p.startswith("nodes.txt:3:") and "Gres" in p for p in found)
    assert any(p.startswith("nodes.txt:4:") and "twice" in p for p in found)


@pytest.mark.parametrize("name", ["nodes-v0.0.38.json", "nodes-v0.0.40.json"])
def test_nodes_json_schemas(fixtures: Path, name: str) -> None:
    nodes = parse_nodes_json((fixtures / name).read_text(), name)
    assert len(nodes) == 2
    assert all(n.cpus == 16 and n.real_memory_mib == 512000 for n in nodes)
    assert [n.schedulable for n in nodes] == [True, False]
    assert any(i.indices for i in nodes[0].gres_used)


def test_nodes_json_malformed() -> None:
    with pytest.raises(InvalidRequest) as excinfo:
        parse_nodes_json('{"nodes": [\n{"cpus": 4}\n]}', "n.json")
    assert "name" in problems(excinfo)[0]
    with pytest.raises(InvalidRequest) as excinfo:
        parse_nodes_json('{"nodes": [\n', "n.json")
    assert problems(excinfo)[0].startswith("n.json:")


def test_gres_strings() -> None:
    items = parse_gres_string("gpu:h100:4(IDX:0,2-3,7),nic:0(IDX:N/A),gpu:2,gres/gpu:a100:1K")
    assert [(i.name, i.type, i.count, i.indices) for i in items] == [
        ("gpu", "h100", 4, (0, 2, 3, 7)),
        ("nic", "", 0, ()),
        ("gpu", "", 2, ()),
        ("gpu", "a100", 1024, ()),
    ]
    assert parse_gres_string("(null)") == []
    with pytest.raises(ValueError):
        parse_gres_string("gpu:h100:many")


# --------------------------------------------------------------------------- gres.conf


def test_gres_conf_fixture_orders_devices_as_idx(fixtures: Path) -> None:
    conf = parse_gres_conf((fixtures / "gres.conf").read_text())
    assert conf.autodetect == "off"
    devices = node_devices(conf, "gpu02")
    assert [d.number for d in devices.get("gpu")] == list(range(8))
    # NICs are typed by switch group, so IDX order is group order, not NIC number order.
    assert [d.number for d in devices.get("nic")] == [2, 3, 0, 1, 8, 9, 4, 5, 6, 7]
    first = next(line for line in conf.lines if line.name == "gpu")
    assert first.links == (-1, 12, 12, 12, 12, 12, 12, 12) and first.cores == "0-7"


def test_gres_conf_malformed_lines_are_located() -> None:
    text = "\n".join(
        [
            "# comment",
            "NodeName=n[1-2] Name=gpu Type=h100 File=/dev/nvidia[0-3] Count=3",
            "NodeName=n[3-1] Name=gpu File=/dev/nvidia0",
            "NodeName=n1 Type=h100 File=/dev/nvidia0",
            "NodeName=n1 Name=gpu File=/dev/nvidia[0-1] Links=-1,0",
            "NodeName=n1 Name=gpu Colour=blue",
            "NodeName=n1 Name=gpu File=/dev/nvidia0 \\",
            "   Cores=zero",
        ]
    )
    with pytest.raises(InvalidRequest) as excinfo:
        parse_gres_conf(text, "gres.conf")
    found = problems(excinfo)
    assert any(p.startswith("gres.conf:2:") and "Count=3" in p for p in found)
    assert any(p.startswith("gres.conf:3:") and "backwards" in p for p in found)
    assert any(p.startswith("gres.conf:4:") and "Name=" in p for p in found)
    assert any(p.startswith("gres.conf:5:") and "Links" in p for p in found)
    assert any(p.startswith("gres.conf:6:") and "Colour" in p for p in found)
    assert any(p.startswith("gres.conf:7:") and "Cores" in p for p in found)  # continuation: its first line


# --------------------------------------------------------------------------- topology


def test_topology_conf_tree(fixtures: Path) -> None:
    fabric = parse_topology_conf((fixtures / "topology.conf").read_text())
    assert {s.id: (s.tier, s.parent) for s in fabric.switches} == {
        "leaf1": (1, "spine1"),
        "leaf2": (1, "spine1"),
        "spine1": (2, ""),
    }
    assert fabric.leaf_of == {"gpu01": "leaf1", "gpu02": "leaf1", "gpu03": "leaf2", "gpu04": "leaf2"}


def test_topology_conf_blocks() -> None:
    fabric = parse_topology_conf("BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4,8\n")
    assert fabric.leaf_of["n6"] == "b2"
    tiers = {s.id: (s.tier, s.parent) for s in fabric.switches}
    assert tiers == {"b1": (1, "block-agg8-0"), "b2": (1, "block-agg8-0"), "block-agg8-0": (2, "")}


def test_topology_conf_malformed() -> None:
    text = (
        "SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n2\nSwitchName=top Switches=s[1-3]\n"
        "SwitchName=s1 Nodes=n9\nFoo=bar\nSwitchName=a Switches=b\nSwitchName=b Switches=a\n"
    )
    with pytest.raises(InvalidRequest) as excinfo:
        parse_topology_conf(text, "topology.conf")
    found = problems(excinfo)
    assert any(p.startswith("topology.conf:2:") and "n2" in p for p in found)
    assert any(p.startswith("topology.conf:3:") and "s3" in p for p in found)
    assert any(p.startswith("topology.conf:4:") and "twice" in p for p in found)
    assert any(p.startswith("topology.conf:5:") for p in found)
    assert any("ancestor" in p for p in found)


def test_topology_yaml(fixtures: Path) -> None:
    text = (fixtures / "topology.yaml").read_text()
    tree = parse_topology_yaml(text)
    assert tree.leaf_of["gpu03"] == "leaf2"
    blocks = parse_topology_yaml(text, name="blocks")
    assert blocks.leaf_of["gpu03"] == "b2"
    with pytest.raises(InvalidRequest) as excinfo:
        parse_topology_yaml("- topology: t\n  tree:\n    switches:\n      - nodes: n1\n", "t.yaml")
    assert problems(excinfo)[0].startswith("t.yaml:4:")


# --------------------------------------------------------------------------- inventory


def test_inventory_maps_gres_used_back_to_devices(fixtures: Path) -> None:
    built = build_inventory(
        parse_show_node((fixtures / "scontrol-show-node-d.txt").read_text()),
        topo_dir=TopoDir(fixtures / "topo"),
        gres_conf=parse_gres_conf((fixtures / "gres.conf").read_text()),
        fabric=parse_topology_conf((fixtures / "topology.conf").read_text()),
    )
    nodes = {n.name: n for n in built.inventory.nodes}
    assert nodes["gpu01"].allocations == ()
    (mixed,) = nodes["gpu02"].allocations
    # GresUsed gpu:sw1 IDX 2-3 → GPU2, GPU3; nic:sw1 IDX 2 → the first NIC of group sw1, mlx5_0.
    assert mixed.gpus == ("GPU2", "GPU3") and mixed.nics == ("mlx5_0",) and mixed.cpu_milli == 1000
    assert len(nodes["gpu03"].allocations[0].gpus) == 8
    assert not nodes["gpu04"].schedulable
    assert nodes["gpu03"].leaf == "leaf2"


def test_inventory_refuses_inconsistent_files(fixtures: Path, tmp_path: Path) -> None:
    gres = (fixtures / "gres.conf").read_text().replace("/dev/nvidia7 ", "/dev/nvidia9 ")
    nodes = parse_show_node((fixtures / "scontrol-show-node-d.txt").read_text(), "scontrol.txt")
    with pytest.raises(InvalidRequest) as excinfo:
        build_inventory(
            nodes, topo_dir=TopoDir(fixtures / "topo"), gres_conf=parse_gres_conf(gres), source="scontrol.txt"
        )
    assert any("nvidia9" in p and p.startswith("scontrol.txt:") for p in problems(excinfo))
    with pytest.raises(InvalidRequest) as excinfo:
        build_inventory(nodes, topo_dir=TopoDir(tmp_path))
    assert any("no nvidia-smi capture" in p for p in problems(excinfo))


def test_inventory_takes_nvlink_counts_from_gres_conf_links(fixtures: Path) -> None:
    """gres.conf ``Links=`` (what Slurm picks GPUs by) wins over the capture's NV#; rows are by IDX."""
    text = (fixtures / "gres.conf").read_text()
    # GPU0 (IDX 0) and GPU1 (IDX 1) become an NV18 pair; every other count stays the capture's 12.
    text = text.replace(
        "File=/dev/nvidia0 Cores=0-7 Links=-1,12,", "File=/dev/nvidia0 Cores=0-7 Links=-1,18,"
    )
    text = text.replace(
        "File=/dev/nvidia1 Cores=0-7 Links=12,-1,", "File=/dev/nvidia1 Cores=0-7 Links=18,-1,"
    )
    nodes = parse_show_node((fixtures / "scontrol-show-node-d.txt").read_text())
    built = build_inventory(nodes, topo_dir=TopoDir(fixtures / "topo"), gres_conf=parse_gres_conf(text))
    links = {(lk.gpu_a, lk.gpu_b): lk.links for lk in built.inventory.nodes[0].nvlinks}
    assert links[("GPU0", "GPU1")] == 18 and links[("GPU0", "GPU2")] == 12 and len(links) == 28
    short = text.replace("Links=-1,18,12,12,12,12,12,12", "Links=-1,18")
    with pytest.raises(InvalidRequest) as excinfo:
        build_inventory(nodes, topo_dir=TopoDir(fixtures / "topo"), gres_conf=parse_gres_conf(short))
    assert any("Links= has 2 values for 8 GPUs" in p for p in problems(excinfo))


def test_gpu_idx_counts_by_device_file_and_misread_typed_lines_are_refused(
    fixtures: Path, tmp_path: Path
) -> None:
    """slurmd numbers GPUs by file (IDX k = /dev/nvidia<k>) while slurmctld gives each type one run of
    IDX: typed GPU lines out of file order, or a type split in two runs, would hand a job another
    switch group's GPU. NICs keep line order."""
    from adapters.slurm.gres import gpu_order_faults

    text = (
        "NodeName=gpu01 Name=gpu Type=sw0 File=/dev/nvidia0\n"
        "NodeName=gpu01 Name=gpu Type=sw1 File=/dev/nvidia2\n"
        "NodeName=gpu01 Name=gpu Type=sw1 File=/dev/nvidia1\n"
        "NodeName=gpu01 Name=gpu Type=sw0 File=/dev/nvidia3\n"
        "NodeName=gpu01 Name=nic Type=sw1 File=/dev/nic1\n"
        "NodeName=gpu01 Name=nic Type=sw0 File=/dev/nic0\n"
    )
    conf = parse_gres_conf(text, "gres.conf")
    devices = node_devices(conf, "gpu01")
    assert [d.number for d in devices.get("gpu")] == [0, 1, 2, 3]
    assert [d.number for d in devices.get("nic")] == [1, 0]
    faults = [(r.line, reason.split(":")[0]) for r, reason in gpu_order_faults(conf, "gpu01")]
    assert faults == [(3, "/dev/nvidia1 comes after a higher-numbered GPU"), (4, "type sw0 again after sw1")]
    gres = (fixtures / "gres.conf").read_text()
    lines = gres.splitlines()
    swapped = "\n".join([*lines[:2], lines[3], lines[2], *lines[4:]]) + "\n"  # nvidia1 before nvidia0
    nodes = parse_show_node((fixtures / "scontrol-show-node-d.txt").read_text(), "scontrol.txt")
    with pytest.raises(InvalidRequest) as excinfo:
        build_inventory(
            nodes, topo_dir=TopoDir(fixtures / "topo"), gres_conf=parse_gres_conf(swapped, "gres.conf")
        )
    assert any("gres.conf line 4" in p and "file order" in p for p in problems(excinfo))


def test_gres_conf_generation_refuses_switch_groups_slurm_cannot_type() -> None:
    from adapters.slurm.gresconf import gres_conf_lines
    from adapters.slurm.nodetypes import NodeType, switch_groups
    from bench.slurm_compare import halves_capture
    from solver.ingest.nvidia_smi import parse_topology

    def node_type(kind: str) -> NodeType:
        node = parse_topology(halves_capture(kind), node=kind)
        return NodeType(f"{kind}.txt", node, switch_groups(node))

    with pytest.raises(ValueError, match=r"sw0=\['GPU0', 'GPU4'\].*not runs of consecutive GPU numbers"):
        gres_conf_lines(node_type("straddling"), ["n1"])
    assert len(gres_conf_lines(node_type("straddling"), ["n1"], typed=False)) == 1 + 8 + 4
    lines = gres_conf_lines(node_type("rotated"), ["n1"])
    gpus = [ln for ln in lines if " Name=gpu " in ln]
    assert [ln.split("File=/dev/nvidia")[1].split()[0] for ln in gpus] == [str(k) for k in range(8)]
    assert "Links=-1,18,18,18,2,2,2,2" in gpus[0]
    assert "Name=nic Type=sw0 File=/dev/infiniband/uverbs2,/dev/infiniband/uverbs3" in lines[9]
    from adapters.slurm.gres import gpu_order_faults

    assert gpu_order_faults(parse_gres_conf("\n".join(lines)), "n1") == []


def test_a_pending_gang_is_stranded_in_total_but_fits_only_on_whole_rooms() -> None:
    """The Slurm bench's two measures of a pending gang, on ``scontrol -o show node -d`` lines as
    slurmctld 22.05 prints them (typed per switch): 5 GPUs free in total on two nodes is "enough in
    total" for a 2x2 gang but not room for a 2x4 one; NICs count only when the gang asks for them."""
    from bench.slurm_compare import Submit, _stranded

    def line(name: str, gpus_used: tuple[int, int, int, int], nics_used: tuple[int, int, int, int]) -> str:
        total = ",".join(f"{kind}:sw{i}:2(S:0)" for kind in ("gpu", "nic") for i in range(4))
        used = ",".join(
            f"{kind}:sw{i}:{n}(IDX:N/A)"
            for kind, counts in (("gpu", gpus_used), ("nic", nics_used))
            for i, n in enumerate(counts)
        )
        return f"NodeName={name} Arch=x86_64 Gres={total} GresUsed={used} State=MIXED"

    text = "\n".join([line("gn1", (2, 2, 1, 0), (2, 2, 2, 2)), line("gn2", (2, 2, 2, 0), (0, 0, 0, 0))])
    assert _stranded(text, Submit(2, 2, False)) == (True, True)  # gn1: 3 free, gn2: 2 free
    assert _stranded(text, Submit(2, 2, True)) == (True, False)  # gn1 has no NIC free
    assert _stranded(text, Submit(2, 4, False)) == (False, False)  # 5 free in total, no room of 4
    assert _stranded(text, Submit(1, 3, False)) == (True, True)


def test_slurm_durations_read_as_squeue_and_scontrol_print_them() -> None:
    """One reader for both: squeue's ``%l`` (``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``) for the untyped
    jobs queued ahead, and scontrol's ``TimeLimit`` for a job planned again. What is no duration
    (UNLIMITED, Partition_Limit, NOT_SET) is held for good."""
    from adapters.slurm.pending import slurm_seconds

    assert slurm_seconds("2:00") == 120.0
    assert slurm_seconds("00:02:01") == 121.0
    assert slurm_seconds("1:00:00") == 3600.0
    assert slurm_seconds("1-00:00:30") == 86430.0
    assert slurm_seconds("5") == 300.0  # minutes alone, as Slurm reads a bare number
    for text in ("UNLIMITED", "Partition_Limit", "NOT_SET", "", "1:xx", "1-2-3:00"):
        assert slurm_seconds(text) == math.inf, text
