"""Issue 21: from captures to a cluster a person can solve on — ``topoplace ingest nvidia-smi`` prints
clean JSON (numbers as numbers, defaults shown, the capture's ``# topoplace:`` comment honoured) and
``topoplace ingest assemble`` builds an inventory from captures and a node list (docs/ingest.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solver.cli import main
from solver.domain.model import Job, MemberShape, NicMode, NicRequest, Role
from solver.ingest.assemble import expand_names
from solver.service import wire
from solver.solve import solve

ROOT = Path(__file__).resolve().parents[1]
DGX = ROOT / "fixtures/topo/dgx-a100-8gpu-10nic.txt"
NODES = ROOT / "fixtures/ingest/nodes.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ingest_prints_numbers_as_numbers_and_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "ingest", "nvidia-smi", str(DGX), "--node", "dgx-01", "--leaf", "leaf-1")
    assert code == 0
    node = json.loads(out)
    assert node["cpu_milli"] == 256_000  # a number, and the whole machine (was "128000", a string)
    assert node["numa_nodes"][0] == {"id": 1, "cpu_milli": 32_000, "memory_mib": 0}
    assert node["gpus"][0]["memory_mib"] == 0 and node["gpus"][0]["index"] == 0  # defaults shown
    assert node["leaf"] == "leaf-1"
    assert {n["numa"] for n in node["nics"] if "numa" in n} <= {n["id"] for n in node["numa_nodes"]}
    # and it is still a node a request file takes
    request = wire.request_from_dict({"inventory": {"nodes": [node]}}, "x.json")
    assert request.inventory.nodes[0].cpu_milli == 256_000


def test_the_capture_comment_fills_what_the_options_do_not(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    capture = tmp_path / "h.txt"
    capture.write_text(
        "# topoplace: gpu_model=A100-SXM4-80GB gpu_memory_mib=81920 memory_mib=2097152\n" + DGX.read_text()
    )
    _, out, _ = run(capsys, "ingest", "nvidia-smi", str(capture), "--node", "n", "--cpu-milli", "250000")
    node = json.loads(out)
    assert {g["model"] for g in node["gpus"]} == {"A100-SXM4-80GB"}
    assert {g["memory_mib"] for g in node["gpus"]} == {81920}
    assert node["memory_mib"] == 2_097_152
    assert node["cpu_milli"] == 250_000  # the option wins over the capture


def test_a_bad_comment_value_is_an_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    capture = tmp_path / "h.txt"
    capture.write_text("# topoplace: gpu_memory_mib=80GB\n" + DGX.read_text())
    code, _, err = run(capsys, "ingest", "nvidia-smi", str(capture), "--node", "n")
    assert code == 2
    assert "gpu_memory_mib=80GB: expected a whole number" in err


def test_hostlist_ranges_expand_with_their_padding() -> None:
    assert expand_names("gpu-[001-003]") == ["gpu-001", "gpu-002", "gpu-003"]
    assert expand_names("n[8-10]") == ["n8", "n9", "n10"]
    assert expand_names("single") == ["single"]


def test_the_documented_node_list_assembles_into_a_cluster_the_solver_places_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "inventory.json"
    code, _, err = run(capsys, "ingest", "assemble", str(NODES), "-o", str(out))
    assert code == 0, err
    data = json.loads(out.read_text())
    assert [n["name"] for n in data["nodes"]] == ["dgx-01", "dgx-02", "pcie-01"]
    assert [(n["leaf"], n["cpu_milli"], n["memory_mib"]) for n in data["nodes"]] == [
        ("leaf-1", 256_000, 2_097_152),
        ("leaf-1", 256_000, 2_097_152),
        ("leaf-2", 96_000, 524_288),
    ]
    assert data["switches"] == [
        {"id": "spine-1", "tier": 2, "parent": ""},
        {"id": "leaf-1", "tier": 1, "parent": "spine-1"},
        {"id": "leaf-2", "tier": 1, "parent": "spine-1"},
    ]
    assert [n.get("rail") for n in data["nodes"][0]["nics"]][:8] == list(range(8))
    # a 2-node job of 8 aligned GPUs each lands on the two DGX
    job = Job(
        id="train",
        roles=(
            Role(
                name="worker",
                replicas=2,
                member=MemberShape(
                    gpus=8, nics=NicRequest(mode=NicMode.PER_GPU), gpu_models=("A100-SXM4-80GB",)
                ),
            ),
        ),
    )
    request = wire.request_from_dict({"inventory": data}, str(out)).model_copy(update={"jobs": (job,)})
    (result,) = solve(request).jobs
    assert result.placed and {m.node for m in result.members} == {"dgx-01", "dgx-02"}


def test_every_problem_of_a_node_list_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "dgx.txt").write_text(DGX.read_text())
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        "nodes:\n"
        "  - {names: a, capture: dgx.txt, leaf: l1, spine: s1, cpus: many}\n"
        "  - {names: b, capture: missing.txt}\n"
        "  - {capture: dgx.txt, colour: red}\n"
        "  - {names: c, capture: dgx.txt, leaf: l1, spine: s2}\n"
    )
    code, _, err = run(capsys, "ingest", "assemble", str(nodes))
    assert code == 2
    lines = err.splitlines()
    assert any(f"{nodes}:nodes[0].cpus: must be a whole number" in line for line in lines)
    assert any(f"{nodes}:nodes[1].capture: cannot read missing.txt" in line for line in lines)
    assert any(f"{nodes}:nodes[2].colour: unknown key" in line for line in lines)
    assert any(f"{nodes}:nodes[2].names: required" in line for line in lines)
    assert any(f"{nodes}:nodes[3].spine: leaf l1 is under s1" in line for line in lines)
    assert "Traceback" not in err


def test_two_entries_naming_one_node_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "dgx.txt").write_text(DGX.read_text())
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("nodes:\n  - {names: 'n[1-2]', capture: dgx.txt}\n  - {names: n2, capture: dgx.txt}\n")
    code, _, err = run(capsys, "ingest", "assemble", str(nodes))
    assert code == 2 and "inventory.nodes[2].name" in err
