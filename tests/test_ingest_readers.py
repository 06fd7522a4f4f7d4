"""The readers of published topology, one by one: what each reads, and the error each inconsistency
gets (naming the object and the field)."""

from __future__ import annotations

import json
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

from fixtures.ingest.nvl72 import build
from solver.domain.errors import InvalidRequest
from solver.domain.model import Distance
from solver.domain.topology import device_distance
from solver.ingest.cluster import assemble_cluster
from solver.ingest.dra import read_slices
from solver.ingest.kube import read_nodes
from solver.ingest.kueue import read_topology
from solver.ingest.smi_query import read_query

ROOT = Path(__file__).parent.parent
NVL72 = ROOT / "fixtures" / "ingest" / "nvl72"


def problems(err: pytest.ExceptionInfo[InvalidRequest]) -> str:
    return "\n".join(str(p) for p in err.value.problems)


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else str(data))
    return path


def kube_node(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


# --------------------------------------------------------------------------- nvidia-smi -q


def test_xml_and_text_of_one_tray_say_the_same() -> None:
    xml = read_query(NVL72 / "smi" / "gb200-r4-17.xml", "a")
    text = read_query(NVL72 / "smi" / "gb200-r4-18.txt", "a")
    assert xml.nvlink_domain == text.nvlink_domain == f"{build.CLUSTER_UUID[4]}.{build.CLIQUE[4]}"
    assert [(g.id, g.model, g.memory_mib) for g in xml.devices.gpus] == [
        (f"GPU{k}", "GB200", 189_471) for k in range(4)
    ]
    assert [g.uuid for g in text.devices.gpus] == [build.gpu_uuid(4, 18, k) for k in range(4)]


def test_gpus_of_one_node_in_two_cliques_are_refused(tmp_path: Path) -> None:
    text = build.smi_text(1, 1).replace(
        f"CliqueId                          : {build.CLIQUE[1]}", "CliqueId                          : 7", 1
    )
    with pytest.raises(InvalidRequest) as err:
        read_query(write(tmp_path, "n.txt", text), "n1")
    assert "n.txt:" in problems(err) and "Fabric/ClusterUUID" in problems(err)
    assert "node n1: GPU1 is in NVLink clique" in problems(err)


def test_a_gpu_not_registered_with_the_fabric_puts_the_node_in_no_domain(tmp_path: Path) -> None:
    text = build.smi_xml(1, 1).replace("<state>Completed</state>", "<state>In Progress</state>")
    assert read_query(write(tmp_path, "n.xml", text), "n").nvlink_domain is None
    zero = build.smi_xml(1, 1).replace(build.CLUSTER_UUID[1], "00000000-0000-0000-0000-000000000000")
    assert read_query(write(tmp_path, "z.xml", zero), "n").nvlink_domain is None


def test_broken_xml_is_refused_at_its_line(tmp_path: Path) -> None:
    text = build.smi_xml(1, 1).replace("</uuid>", "</uuidd>", 1)
    with pytest.raises(InvalidRequest) as err:
        read_query(write(tmp_path, "b.xml", text), "n")
    assert "b.xml:12:51: not XML: mismatched tag" in problems(err) and "not XML" in problems(err)


# --------------------------------------------------------------------------- the node list


def test_node_list_errors_name_the_item_and_field(tmp_path: Path) -> None:
    nodes = {"kind": "List", "items": [kube_node("a"), kube_node("a"), {"kind": "Node", "metadata": {}}]}
    nodes["items"][0]["status"] = {"allocatable": {"cpu": "lots"}}
    with pytest.raises(InvalidRequest) as err:
        read_nodes(write(tmp_path, "nodes.json", nodes))
    found = problems(err)
    assert "nodes.json:items[1].metadata.name: node a also at" in found
    assert "nodes.json:items[2].metadata.name: required" in found
    assert "nodes.json:items[0].status.allocatable.cpu: not a Kubernetes quantity: 'lots'" in found


def test_topograph_labels_give_tiers_and_refuse_a_leaf_under_two_spines(tmp_path: Path) -> None:
    leaf, spine, core = (f"network.topology.nvidia.com/{t}" for t in ("leaf", "spine", "core"))
    accel = "network.topology.nvidia.com/accelerator"
    good = [
        kube_node("a", **{leaf: "s1", spine: "s2", core: "s3", accel: "nvl1"}),
        kube_node("b", **{leaf: "s4", spine: "s2"}),
    ]
    parts = {p.kind: p for p in read_nodes(write(tmp_path, "ok.json", {"kind": "List", "items": good}))}
    topograph = parts["topograph labels"]
    assert topograph.nodes["a"].path == ("s1", "s2", "s3") and topograph.nodes["a"].nvlink_domain == "nvl1"
    assert {s.id: (s.tier, s.parent) for s in topograph.switches.values()} == {
        "s1": (1, "s2"),
        "s2": (2, "s3"),
        "s3": (3, ""),
        "s4": (1, "s2"),
    }
    bad = [
        kube_node("a", **{leaf: "s1", spine: "s2"}),
        kube_node("b", **{leaf: "s1", spine: "s9"}),
        kube_node("c", **{spine: "s2"}),
    ]
    with pytest.raises(InvalidRequest) as err:
        read_nodes(write(tmp_path, "bad.json", {"kind": "List", "items": bad}))
    assert "bad.json:items[1].metadata.labels: switch s1 is under s9 here but under s2 at " in problems(err)
    assert (
        "bad.json:items[2].metadata.labels: node c has network.topology.nvidia.com/spine but no tier-1"
        in problems(err)
    )


def test_topograph_v1_fabric_tier_labels(tmp_path: Path) -> None:
    items = [
        kube_node(
            "a",
            **{
                "fabric.topograph.run/tier-0": "leaf7",
                "fabric.topograph.run/tier-1": "spine2",
                "accelerator.topograph.run/domain": "d1",
            },
        )
    ]
    topograph = read_nodes(write(tmp_path, "n.json", {"kind": "List", "items": items}))[-1]
    assert topograph.nodes["a"].path == ("leaf7", "spine2") and topograph.nodes["a"].nvlink_domain == "d1"


# --------------------------------------------------------------------------- Kueue / KAI Topology


def labels_of(items: list[dict]) -> dict:
    return {
        n["metadata"]["name"]: (f"nodes.json:items[{i}]", n["metadata"]["labels"])
        for i, n in enumerate(items)
    }


TOPOLOGY = """apiVersion: {api}
kind: Topology
metadata: {{name: t}}
spec:
  levels:
  - nodeLabel: block
  - nodeLabel: rack
  - nodeLabel: kubernetes.io/hostname
"""


def test_a_rack_name_reused_in_two_blocks_is_two_racks(tmp_path: Path) -> None:
    items = [
        kube_node("a", block="b1", rack="r1"),
        kube_node("b", block="b2", rack="r1"),
        kube_node("c", block="b2", rack="r2"),
    ]
    parts = read_topology(
        write(tmp_path, "t.yaml", TOPOLOGY.format(api="kai.scheduler/v1alpha1")), labels_of(items)
    )
    assert parts.kind == "KAI topology"
    assert parts.nodes["a"].path == ("b1/r1", "b1") and parts.nodes["b"].path == ("b2/r1", "b2")
    assert parts.nodes["c"].path == ("r2", "b2")
    assert parts.switches["b2/r1"].tier == 1 and parts.switches["b2"].tier == 2


def test_a_clique_level_is_a_tier_and_the_nvlink_domain(tmp_path: Path) -> None:
    text = TOPOLOGY.format(api="kai.scheduler/v1alpha1").replace(
        "nodeLabel: rack", "nodeLabel: nvidia.com/gpu.clique"
    )
    items = [
        kube_node("a", block="b1", **{"nvidia.com/gpu.clique": "u1.7"}),
        kube_node("b", block="b1", **{"nvidia.com/gpu.clique": "u2.7"}),
    ]
    parts = read_topology(write(tmp_path, "t.yaml", text), labels_of(items))
    assert parts.nodes["a"].path == ("u1.7", "b1") and parts.nodes["a"].nvlink_domain == "u1.7"
    assert (
        parts.nodes["b"].nvlink_domain == "u2.7" and "nvidia.com/gpu.clique" in parts.nodes["b"].nvlink_field
    )


def test_a_level_label_missing_on_some_nodes_is_refused(tmp_path: Path) -> None:
    items = [kube_node("a", block="b1", rack="r1"), kube_node("b", block="b1"), kube_node("cpu-1")]
    with pytest.raises(InvalidRequest) as err:
        read_topology(
            write(tmp_path, "t.yaml", TOPOLOGY.format(api="kueue.x-k8s.io/v1beta1")), labels_of(items)
        )
    assert "nodes.json:items[1].metadata.labels: node b has block but not rack" in problems(err)
    assert "cpu-1" not in problems(err)  # no level label at all: outside the topology, not an error


def test_topology_object_errors_name_the_field(tmp_path: Path) -> None:
    text = "apiVersion: kueue.x-k8s.io/v9\nkind: Topology\nmetadata: {name: t}\nspec:\n  levels:\n"
    text += "  - nodeLabel: kubernetes.io/hostname\n  - nodeLabel: rack\n  - {}\n"
    with pytest.raises(InvalidRequest) as err:
        read_topology(write(tmp_path, "t.yaml", text), {})
    found = problems(err)
    assert "t.yaml.apiVersion: unknown apiVersion 'kueue.x-k8s.io/v9'" in found
    assert (
        "t.yaml.spec.levels[0].nodeLabel: kubernetes.io/hostname is the node itself and must be the last"
        in found
    )
    assert "t.yaml.spec.levels[2].nodeLabel: required" in found


# --------------------------------------------------------------------------- DRA ResourceSlices


def test_resource_slices_give_gpus_nics_and_pcie_roots() -> None:
    parts = read_slices(NVL72 / "resourceslices.json")
    tray = parts.nodes["gb200-r4-02"].devices
    assert [(g.id, g.model, g.memory_mib) for g in tray.gpus] == [
        (f"GPU{k}", "GB200", 189_471) for k in range(4)
    ]
    assert [(n.name, n.numa) for n in tray.nics] == [(f"mlx5_{k}", k // 2) for k in range(4)]
    # One PCIe root: at most PXB, never claimed PIX; different roots on unknown NUMA: SYS
    assert device_distance(tray, "GPU0", "mlx5_0") == Distance.PXB
    assert device_distance(tray, "GPU0", "mlx5_1") == Distance.SYS
    assert len(parts.nodes["gb200-r3-05"].devices.gpus) == 3


def test_v1beta1_slices_older_generations_and_duplicate_devices(tmp_path: Path) -> None:
    def device(name: str, index: int) -> dict:
        return {"name": name, "basic": {"attributes": {"type": {"string": "gpu"}, "index": {"int": index}}}}

    def slice_(generation: int, devices: list) -> dict:
        spec = {
            "driver": "gpu.nvidia.com",
            "nodeName": "n",
            "pool": {"name": "n", "generation": generation},
            "devices": devices,
        }
        return {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice", "spec": spec}

    old, new = (
        slice_(1, [device("gpu-0", 0), device("gpu-1", 1), device("gpu-2", 2)]),
        slice_(2, [device("gpu-0", 0)]),
    )
    parts = read_slices(write(tmp_path, "s.json", {"kind": "List", "items": [old, new]}))
    assert [g.id for g in parts.nodes["n"].devices.gpus] == ["GPU0"]
    twice = slice_(1, [device("gpu-0", 0), device("gpu-0b", 0)])
    no_driver = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "spec": {"nodeName": "m"}}
    with pytest.raises(InvalidRequest) as err:
        read_slices(write(tmp_path, "bad.json", {"kind": "List", "items": [twice, no_driver]}))
    assert "bad.json:items[0].spec.devices[1]: node n: GPU0 is also published at" in problems(err)
    assert "bad.json:items[1].spec.driver: required" in problems(err)


# --------------------------------------------------------------------------- assembling


def copy_nvl72(tmp_path: Path) -> Path:
    shutil.copytree(NVL72, tmp_path / "c")
    return tmp_path / "c"


def test_a_clique_on_a_node_not_in_the_list_is_refused(tmp_path: Path) -> None:
    root = copy_nvl72(tmp_path)
    shutil.copy(root / "smi" / "gb200-r1-01.xml", root / "smi" / "gb200-r9-01.xml")
    with pytest.raises(InvalidRequest) as err:
        assemble_cluster(root / "cluster.yaml")
    assert (
        "smi/gb200-r9-01.xml: nvidia-smi -q names node gb200-r9-01, which is not in the node list"
        in problems(err)
    )


def test_cluster_file_errors_name_the_key(tmp_path: Path) -> None:
    root = copy_nvl72(tmp_path)
    (root / "cluster.yaml").write_text(
        "nodes: nodes.json\ncaptures: [{capture: gb200-tray.txt, nodes: dgx-*}]\nslurm: x\n"
    )
    with pytest.raises(InvalidRequest) as err:
        assemble_cluster(root / "cluster.yaml")
    assert "cluster.yaml:slurm: unknown source" in problems(err)
    (root / "cluster.yaml").write_text(
        "nodes: nodes.json\ncaptures: [{capture: gb200-tray.txt, nodes: dgx-*}]\n"
    )
    with pytest.raises(InvalidRequest) as err:
        assemble_cluster(root / "cluster.yaml")
    assert "cluster.yaml:captures[0].nodes: matches no node of the node list: dgx-*" in problems(err)
    two = "{capture: gb200-tray.txt, nodes: gb200-r1-*}"
    (root / "cluster.yaml").write_text(f"nodes: nodes.json\ncaptures: [{two}, {two[:-1]}, cpus: many}}]\n")
    with pytest.raises(InvalidRequest) as err:
        assemble_cluster(root / "cluster.yaml")
    assert "cluster.yaml:captures[1].cpus: must be a whole number of at least 0, got 'many'" in problems(err)
    (root / "cluster.yaml").write_text(f"nodes: nodes.json\ncaptures: [{two}, {two}]\n")
    with pytest.raises(InvalidRequest) as err:
        assemble_cluster(root / "cluster.yaml")
    assert (
        "cluster.yaml:captures[1].nodes: node gb200-r1-01 is already of the type of captures[0]"
        in problems(err)
    )


@pytest.fixture
def worktree_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry points this checkout's pyproject.toml declares, visible to importlib.metadata.

    Mock: a development venv holds the metadata of whichever checkout installed it; a fresh install
    (CI) has these already. Written from pyproject.toml itself, so the test sees what CI installs."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    dist = tmp_path / "eps" / "topoplace_worktree-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: topoplace-worktree\nVersion: 0.0.0\n")
    lines = [
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in declared.items()
    ]
    (dist / "entry_points.txt").write_text("\n".join(lines))
    monkeypatch.syspath_prepend(str(tmp_path / "eps"))
    monkeypatch.setattr(sys, "path", sys.path)


def test_slurm_blocks_as_nvlink_domains_agree_with_the_kueue_racks(
    tmp_path: Path, worktree_entry_points
) -> None:
    root = copy_nvl72(tmp_path)
    config = (
        root / "cluster.yaml"
    ).read_text() + "slurm_topology: {file: slurm-topology.yaml, blocks: nvlink}\n"
    (root / "cluster.yaml").write_text(config)
    _, report = assemble_cluster(root / "cluster.yaml")
    assert any(c.startswith("Slurm topology") and "72 switch paths" in c for c in report.contributions)
    # Slurm names the racks rack1..rack4 and Kueue rack-1..rack-4: the same grouping, no disagreement;
    # its block for gb200-r4-18 agrees with nvidia-smi -q against the stale clique label.
    assert len(report.disagreements) == 2
    # A node in two blocks is Slurm's own error, with its line.
    (root / "slurm-topology.yaml").write_text(
        build.SLURM.replace("gb200-r2-[01-18]", "gb200-r2-[01-18],gb200-r1-01")
    )
    with pytest.raises(InvalidRequest) as err:
        assemble_cluster(root / "cluster.yaml")
    assert "slurm-topology.yaml:" in problems(
        err
    ) and "node gb200-r1-01 is already in block rack1" in problems(err)


def test_the_cluster_file_is_an_inventory_source(worktree_entry_points) -> None:
    from solver.ingest.sources import inventory_source

    inventory = inventory_source("cluster", "base.cluster")("cluster.yaml", lambda name: NVL72 / name)
    assert len(inventory.nodes) == 72


def test_without_a_node_list_the_captures_name_the_nodes(tmp_path: Path) -> None:
    root = copy_nvl72(tmp_path)
    (root / "cluster.yaml").write_text(
        "captures: [{capture: gb200-tray.txt, nodes: 'gb200-r1-[01-02]'}]\n"
        "nvidia_smi_q: {gb200-r1-01: smi/gb200-r1-01.xml}\n"
    )
    inventory, report = assemble_cluster(root / "cluster.yaml")
    assert [(n.name, n.nvlink_domain) for n in inventory.nodes] == [
        ("gb200-r1-01", f"{build.CLUSTER_UUID[1]}.{build.CLIQUE[1]}"),
        ("gb200-r1-02", ""),
    ]
    assert inventory.nodes[1].cpu_milli == 144_000 and report.disagreements == []


# --------------------------------------------------------------------------- malformed objects


def _mutations(value: object, path: tuple = ()) -> list[tuple[tuple, object]]:
    """Every place in ``value`` (up to a few levels), each with a wrong-typed replacement."""
    found: list[tuple[tuple, object]] = []
    if len(path) > 6:
        return found
    children = (
        value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    )
    for key, child in children:
        for wrong in (None, [], "x", 7, {}):
            if type(wrong) is not type(child):
                found.append(((*path, key), wrong))
                break
        found += _mutations(child, (*path, key))
    return found


def _mutated(value: object, path: tuple, wrong: object) -> object:
    copy = json.loads(json.dumps(value))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = wrong
    return copy


@pytest.mark.parametrize("reader", ["nodes", "slices", "topology"])
def test_wrong_types_anywhere_are_refused_or_ignored_never_a_traceback(tmp_path: Path, reader: str) -> None:
    """A seeded sweep over every field of real-shaped objects: each replaced by a wrong type must give
    InvalidRequest (with a path) or a clean read — never another exception."""
    items = json.loads((NVL72 / "nodes.json").read_text())["items"][:2]
    objects = {
        "nodes": {"kind": "List", "items": items},
        "slices": {"kind": "List", "items": build.slices(3, 5)},
        "topology": {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Topology",
            "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": "cloud.provider.com/topology-rack"}]},
        },
    }[reader]
    labels = {n["metadata"]["name"]: ("nodes.json", n["metadata"]["labels"]) for n in items}
    cases = _mutations(objects)
    assert len(cases) > 5
    for path, wrong in cases:
        file = write(tmp_path, f"{reader}.json", _mutated(objects, path, wrong))
        try:
            if reader == "nodes":
                read_nodes(file)
            elif reader == "slices":
                read_slices(file)
            else:
                read_topology(file, labels)
        except InvalidRequest as err:
            assert all(p.path and p.message for p in err.problems), (path, wrong)
