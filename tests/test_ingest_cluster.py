"""`topoplace ingest cluster`: an NVL72 cluster assembled from what it publishes, precedence, the report,
incremental re-reads that keep unchanged nodes byte-identical, and the what-if example of docs/ingest.md."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from fixtures.ingest.nvl72 import build
from solver.cli import main
from solver.domain.model import Inventory, SolveRequest
from solver.ingest import cluster as cluster_module
from solver.ingest.cluster import ClusterReader, assemble_cluster
from solver.service import wire
from solver.service.wire import inventory_to_readable_json

NVL72 = Path(__file__).parent.parent / "fixtures" / "ingest" / "nvl72"
SCENARIO = Path(__file__).parent.parent / "fixtures" / "whatif" / "nvl72-drain-rack3.yaml"


@pytest.fixture(scope="module")
def assembled() -> tuple[Inventory, cluster_module.Report]:
    return assemble_cluster(NVL72 / "cluster.yaml")


def test_nvl72_sources_make_four_rack_domains_under_two_blocks(assembled) -> None:
    inventory, _ = assembled
    assert len(inventory.nodes) == 72
    domains = Counter(n.nvlink_domain for n in inventory.nodes)
    assert sorted(domains.values()) == [18, 18, 18, 18]
    by_name = {n.name: n for n in inventory.nodes}
    # gb200-r4-18's clique label is stale (rack 3); its own nvidia-smi -q outranks it.
    assert by_name["gb200-r4-18"].nvlink_domain == by_name["gb200-r4-01"].nvlink_domain
    assert by_name["gb200-r4-18"].nvlink_domain == f"{build.CLUSTER_UUID[4]}.{build.CLIQUE[4]}"
    tiers = {s.id: (s.tier, s.parent) for s in inventory.switches}
    assert tiers == {
        "block-1": (2, ""),
        "block-2": (2, ""),
        **{f"rack-{r}": (1, f"block-{(r + 1) // 2}") for r in range(1, 5)},
    }
    assert {n.leaf for n in inventory.nodes if n.name.startswith("gb200-r3-")} == {"rack-3"}


def test_devices_come_from_the_capture_and_uuids_from_lower_sources(assembled) -> None:
    inventory, _ = assembled
    by_name = {n.name: n for n in inventory.nodes}
    tray = by_name["gb200-r3-05"]  # DRA publishes 3 of its GPUs: the capture (higher) keeps 4
    assert [g.id for g in tray.gpus] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert [n.rail for n in tray.nics] == [0, 1, 2, 3]
    assert tray.cpu_milli == 144_000 and tray.memory_mib == 983_040  # the node list's allocatable
    # UUIDs the capture cannot print: from nvidia-smi -q (rack 1) and DRA (racks 3-4), by GPU id
    assert by_name["gb200-r1-01"].gpus[2].uuid == build.gpu_uuid(1, 1, 2)
    assert by_name["gb200-r3-07"].gpus[1].uuid == build.gpu_uuid(3, 7, 1)
    assert by_name["gb200-r2-07"].gpus[1].uuid == ""  # no source prints it
    assert {g.model for n in inventory.nodes for g in n.gpus} == {"GB200"}


def test_report_names_each_source_and_every_disagreement(assembled) -> None:
    _, report = assembled
    kinds = [line.split(" (", 1)[0] for line in report.contributions]
    assert kinds == [
        "nvidia-smi topo -m",
        "nvidia-smi -q",
        "DRA ResourceSlices",
        "kubernetes nodes",
        "GPU Feature Discovery labels",
        "Kueue topology",
    ]
    assert len(report.disagreements) == 2, report.disagreements
    devices, domain = report.disagreements
    assert devices.startswith("node gb200-r3-05: devices:") and "has 4 GPUs" in devices and ") 3;" in devices
    assert domain.startswith("node gb200-r4-18: NVLink domain:") and "kept nvidia-smi -q" in domain


def test_committed_fixtures_are_what_build_and_assembly_write(assembled) -> None:
    for relative, text in build.files().items():
        assert (NVL72 / relative).read_text() == text, (
            f"{relative} drifted: python -m fixtures.ingest.nvl72.build"
        )
    inventory, _ = assembled
    # Parsed, not as text: protobuf writes a map's entries (labels) in no fixed order.
    committed = json.loads((NVL72 / "inventory.json").read_text())
    assert committed == json.loads(inventory_to_readable_json(inventory)), (
        "inventory.json drifted: topoplace ingest cluster fixtures/ingest/nvl72/cluster.yaml "
        "-o fixtures/ingest/nvl72/inventory.json"
    )


def test_cli_writes_the_inventory_and_reports_on_stderr(tmp_path: Path, capsys) -> None:
    out = tmp_path / "inventory.json"
    assert main(["ingest", "cluster", str(NVL72 / "cluster.yaml"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "sources (highest precedence first):" in err and "disagreements: 2" in err
    assert len(json.loads(out.read_text())["nodes"]) == 72


def _node_bytes(inventory: Inventory) -> dict[str, bytes]:
    msg = wire.request_to_proto(SolveRequest(inventory=inventory))
    return {n.name: n.SerializeToString(deterministic=True) for n in msg.inventory.nodes}


def test_a_moved_label_rebuilds_only_its_node_and_keeps_the_others_byte_identical(
    tmp_path, monkeypatch
) -> None:
    copy = tmp_path / "nvl72"
    shutil.copytree(NVL72, copy)
    parsed: list[str] = []
    real = cluster_module.read_slices
    monkeypatch.setattr(cluster_module, "read_slices", lambda p: parsed.append(str(p)) or real(p))
    reader = ClusterReader(copy / "cluster.yaml")
    first, report = reader.read()
    assert len(report.rebuilt) == 72 and len(parsed) == 1
    # An operator moves gb200-r2-05 to rack 1 (its rack label), nothing else changes.
    nodes = json.loads((copy / "nodes.json").read_text())
    moved = next(n for n in nodes["items"] if n["metadata"]["name"] == "gb200-r2-05")
    moved["metadata"]["labels"]["cloud.provider.com/topology-rack"] = "rack-1"
    (copy / "nodes.json").write_text(json.dumps(nodes, indent=1))
    second, report = reader.read()
    assert report.rebuilt == ["gb200-r2-05"]
    assert len(parsed) == 1, "the ResourceSlices did not change and must not be parsed again"
    old, new = {n.name: n for n in first.nodes}, {n.name: n for n in second.nodes}
    assert new["gb200-r2-05"].leaf == "rack-1"
    assert all(new[name] is old[name] for name in old if name != "gb200-r2-05")
    before, after = _node_bytes(first), _node_bytes(second)
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"gb200-r2-05"}
    # The service's warm path: the second request finds 71 of 72 nodes in its node cache.
    budget = wire.NODE_CACHE.max_bytes
    wire.NODE_CACHE.resize(max(budget, 64 << 20))  # room for both reads, whatever ran before
    try:
        warm = wire.request_from_proto(wire.request_to_proto(SolveRequest(inventory=first)))
        again = wire.request_from_proto(wire.request_to_proto(SolveRequest(inventory=second)))
    finally:
        wire.NODE_CACHE.resize(budget)
    same = sum(a is b for a, b in zip(warm.inventory.nodes, again.inventory.nodes, strict=True))
    assert same == 71


def test_the_docs_what_if_answers_the_nvl72_question() -> None:
    from solver.whatif import load_and_prepare
    from solver.whatif.run import run_prepared

    report = run_prepared(load_and_prepare(SCENARIO), seeds=[0], workers=1)
    placed = {(o.variant, o.policy): set(o.placed_ids()) for o in report.outcomes}
    everyone = {"pretrain-a", "pretrain-b", "pretrain-c", "finetune-16g"}
    assert placed[("base", "solver")] == everyone
    # Rack 3 drained: each remaining rack keeps 8 GPUs beside its 64-GPU gang, no domain has 16.
    assert placed[("drain rack 3", "solver")] == everyone - {"finetune-16g"}
    spanning = report.outcome("drain rack 3, fine-tune may span racks", "solver")
    finetune = next(j for j in spanning.jobs if j.job_id == "finetune-16g")
    assert finetune.placed and finetune.locality_tier == 2  # two racks: they meet at their block


def test_cli_bad_sources_exit_2_with_the_path(tmp_path: Path, capsys) -> None:
    (tmp_path / "cluster.yaml").write_text("nodes: missing.json\n")
    assert main(["ingest", "cluster", str(tmp_path / "cluster.yaml")]) == 2
    err = capsys.readouterr().err
    assert "missing.json: cannot read" in err and "Traceback" not in err
