"""What-if: kit.scenario edits, validation with paths, policy diffs, determinism, traces, plots, the CLI.

Scenarios are small (a handful of DGX-shaped nodes) so the whole module runs in seconds; the RPC and
the sweeps (local processes and Ray) are in ``test_whatif_service.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from solver.domain.errors import InvalidRequest
from solver.domain.model import (
    Allocation,
    BatchOrder,
    GpuShare,
    Inventory,
    Job,
    NicMode,
    ReasonCode,
    Requirement,
)
from solver.service import wire
from solver.whatif import load_and_prepare, run_scenario
from solver.whatif.convert import (
    load_scenario_file,
    report_from_json,
    report_json,
    scenario_from_data,
    to_proto,
)
from solver.whatif.policies import solver_policy
from solver.whatif.report import WhatIfReport, without_timings
from solver.whatif.run import run_prepared
from solver.whatif.scenario import (
    BaseInventory,
    PolicySpec,
    Scenario,
    SolverPolicy,
    Trace,
    TraceEntry,
)
from solver.whatif.world import prepare
from tests import kit
from topoplace.v1 import placement_pb2

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "whatif"
TOPO = ROOT / "fixtures" / "topo" / "dgx-a100-8gpu-10nic.txt"


def edited(edits: list[dict], jobs: tuple[Job, ...] = ()) -> tuple[Inventory, tuple[Job, ...]]:
    world = prepare(kit.scenario(edits, jobs), root=None, source="test.yaml").worlds["edited"]
    return world.inventory, world.jobs


def node_named(inventory: Inventory, name: str):
    return next(n for n in inventory.nodes if n.name == name)


# --------------------------------------------------------------------------- each edit kind


def test_add_nodes_from_a_template_under_a_new_leaf() -> None:
    inventory, _ = edited(
        [{"add_nodes": {"count": 3, "template": "twin", "leaf": "leaf9", "parent": "spine0"}}]
    )
    added = [n for n in inventory.nodes if n.leaf == "leaf9"]
    assert [n.name for n in added] == ["leaf9-new000", "leaf9-new001", "leaf9-new002"]
    assert all(len(n.gpus) == 8 and not n.allocations for n in added)
    assert any(s.id == "leaf9" and s.tier == 1 and s.parent == "spine0" for s in inventory.switches)


def test_add_nodes_from_nvidia_smi_text() -> None:
    data = {
        "base": {"file": "x.json"},
        "templates": [
            {"name": "dgx", "nvidia_smi_text": TOPO.read_text(), "gpu_model": "A100", "cpu_milli": 1000}
        ],
        "edits": [{"add_nodes": {"count": 1, "template": "dgx", "leaf": "leaf1", "name_prefix": "dgx"}}],
    }
    parsed = scenario_from_data(data, "t.yaml").model_copy(
        update={"base": BaseInventory(inventory=kit.busy_cluster())}
    )
    added = node_named(prepare(parsed, root=None).worlds["edited"].inventory, "dgx000")
    assert added.leaf == "leaf1" and len(added.gpus) == 8 and added.gpus[0].model == "A100"
    assert added.cpu_milli == 1000 and added.pcie_switches


def test_remove_nodes_under_a_switch() -> None:
    inventory, _ = edited([{"remove_nodes": {"select": {"switch": "leaf1"}}}])
    assert [n.name for n in inventory.nodes] == ["n0", "n1"]


def test_drain_nodes_by_glob_keeps_running_work() -> None:
    inventory, _ = edited([{"drain_nodes": {"select": {"nodes": ["n[03]"]}}}])
    assert [n.name for n in inventory.nodes if not n.schedulable] == ["n0", "n3"]
    assert node_named(inventory, "n0").allocations


def test_fail_gpus_and_nics() -> None:
    inventory, _ = edited([{"fail_gpus": {"node": "n1", "gpus": ["GPU7"]}}, {"fail_nics": {"node": "n2"}}])
    assert [g.id for g in node_named(inventory, "n1").gpus if not g.healthy] == ["GPU7"]
    assert not any(n.healthy for n in node_named(inventory, "n2").nics)


def test_release_and_add_allocations() -> None:
    inventory, _ = edited(
        [
            {"release_allocations": {"owners": ["train-*"]}},
            {"add_allocation": {"node": "n2", "allocation": {"owner": "new", "gpus": ["GPU0", "GPU1"]}}},
        ]
    )
    assert not node_named(inventory, "n0").allocations
    assert node_named(inventory, "n3").allocations[0].owner == "infer-b"
    assert node_named(inventory, "n2").allocations == (Allocation(owner="new", gpus=("GPU0", "GPU1")),)


def test_change_job_merges_a_patch_into_one_role() -> None:
    jobs = (kit.job("gang", 8, 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED, priority=1),)
    patch = {"priority": 7, "locality": {"mode": "REQUIREMENT_REQUIRED", "highest_tier": 1},
             "roles": {"worker": {"min_replicas": 2}}}  # fmt: skip
    _, changed = edited([{"change_job": {"job": "gang", "patch": patch}}], jobs)
    job = changed[0]
    assert job.priority == 7 and job.locality.highest_tier == 1
    assert job.roles[0].min_replicas == 2 and job.roles[0].replicas == 4


def test_an_edit_that_matches_nothing_is_refused_with_its_path() -> None:
    with pytest.raises(InvalidRequest) as err:
        edited(
            [
                {"drain_nodes": {"select": {"nodes": ["gpu-99"]}}},
                {"fail_gpus": {"node": "n1", "gpus": ["GPU42"]}},
                {"add_nodes": {"count": 1, "template": "nope", "leaf": "leaf0"}},
                {"release_allocations": {"owners": ["ghost"]}},
                {"change_job": {"job": "missing"}},
            ]
        )
    paths = [p.path for p in err.value.problems]
    assert paths == [
        "test.yaml:edits[0].drain_nodes.select.nodes[0]",
        "test.yaml:edits[1].fail_gpus.gpus[0]",
        "test.yaml:edits[2].add_nodes.template",
        "test.yaml:edits[3].release_allocations",
        "test.yaml:edits[4].change_job.job",
    ]


# --------------------------------------------------------------------------- kit.scenario files


def write(tmp_path: Path, data: dict, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_bad_scenario_names_file_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "base:\n  file: inv.json\nedits:\n  - add_nodes:\n      count: 0\n      template: t\n      leaf: l\n"
    )
    with pytest.raises(InvalidRequest) as err:
        load_scenario_file(path)
    (problem,) = err.value.problems
    assert problem.path == f"{path}:edits[0].add_nodes.count"
    assert "at least 1" in problem.message and "(line 5)" in problem.message


def test_unknown_field_and_enum_are_refused_with_paths(tmp_path: Path) -> None:
    for data, where in (
        ({"policies": [{"name": "s", "solver": {"packing": "TIGHT"}}]}, "policies[0].solver.packing"),
        ({"edits": [{"drain_nodes": {"selector": {}}}]}, "edits[0].drain_nodes"),
    ):
        with pytest.raises(InvalidRequest) as err:
            load_scenario_file(write(tmp_path, {"base": {"file": "a"}, **data}))
        assert err.value.problems[0].path.endswith(f":{where}"), err.value.problems


def test_unknown_baseline_and_missing_base_file(tmp_path: Path) -> None:
    path = write(
        tmp_path, {"base": {"file": "missing.json"}, "policies": [{"name": "x", "baseline": "nope"}]}
    )
    with pytest.raises(InvalidRequest) as err:
        load_and_prepare(path)
    messages = [str(p) for p in err.value.problems]
    assert any("policies[0]" in m and "unknown baseline 'nope'" in m for m in messages), messages


def test_over_rpc_files_are_refused() -> None:
    s = kit.scenario([]).model_copy(update={"base": BaseInventory(file="/etc/passwd")})
    with pytest.raises(InvalidRequest) as err:
        prepare(s, root=None, source="kit.scenario")
    assert err.value.problems[0].path == "kit.scenario:base"


# --------------------------------------------------------------------------- answers


def test_adding_nodes_answers_whether_the_gang_fits() -> None:
    """Capacity planning's question: a 4-node gang does not fit on the busy cluster; with 2 more
    nodes under leaf0 it does, and the diff says so."""
    s = kit.scenario(
        [{"add_nodes": {"count": 2, "template": "twin", "leaf": "leaf0"}}],
        (kit.job("big", 8, 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),),
        policies=[{"name": "solver", "solver": {"time_limit_s": 2}}],
    )
    report = run_scenario(s)
    assert not report.outcome("base", "solver").jobs[0].placed
    reason = report.outcome("base", "solver").jobs[0].reason
    assert reason is not None and reason.code == ReasonCode.INSUFFICIENT_CAPACITY and reason.relaxation
    assert report.outcome("edited", "solver").jobs[0].placed
    (diff,) = [d for d in report.diffs if d.variant == "base→edited"]
    assert diff.only_b == ("big",) and diff.only_a == ()


def test_removing_every_big_node_answers_no_node_fits_instead_of_refusing() -> None:
    edits = [
        {"remove_nodes": {"select": {"nodes": ["n*"]}}},
        {"add_nodes": {"count": 1, "template": "small", "leaf": "leaf0"}},
    ]
    s = kit.scenario(edits, (kit.job("big8", 8, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),))
    small = kit.node("small", gpus=4, nics=4)
    s = s.model_copy(
        update={
            "templates": (
                *s.templates,
                s.templates[0].model_copy(update={"name": "small", "like": None, "node": small}),
            )
        }
    )
    report = run_scenario(s.model_copy(update={"policies": (kit.SOLVER,)}))
    job = report.outcome("edited", "solver").jobs[0]
    assert not job.placed and job.reason is not None and job.reason.code == ReasonCode.NO_NODE_FITS


def test_policy_diff_on_the_demo_fixture() -> None:
    """On dgx4-grow's last variant (dgx-01 drained, a GPU of dgx-04 failed) the joint solver places
    two jobs the Volcano-like greedy does not, and the greedy one the solver does not."""
    s = load_scenario_file(FIXTURES / "dgx4-grow.yaml")
    s = s.model_copy(update={"variants": s.variants[-1:], "policies": s.policies[:2]})
    report = run_prepared(prepare(s, root=FIXTURES, source="dgx4-grow.yaml"))
    variant = s.variants[0].name
    (diff,) = [d for d in report.diffs if d.variant == variant]
    assert (diff.policy_a, diff.policy_b) == ("solver", "volcano")
    assert set(diff.only_a) == {"infer-2g-nvlink", "finetune-2g-numa"} and diff.only_b == ("notebook-1g",)
    solver, volcano = report.outcome(variant, "solver"), report.outcome(variant, "volcano")
    assert solver.summary.jobs_placed > volcano.summary.jobs_placed
    assert solver.summary.gpus_total == 23  # 4 nodes × 8, minus dgx-01 drained, minus one failed GPU


def test_same_scenario_same_answer() -> None:
    s = kit.scenario(
        [{"drain_nodes": {"select": {"nodes": ["n1"]}}}],
        (
            kit.job("a", 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
            kit.job("b", 8, 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        ),
    )
    s = s.model_copy(update={"policies": (kit.SOLVER, kit.BESTFIT)})
    first, second = run_scenario(s), run_scenario(s)
    assert without_timings(first) == without_timings(second)
    assert report_json(without_timings(first)) == report_json(without_timings(second))


def test_report_json_round_trips() -> None:
    s = kit.scenario([], (kit.job("a", 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),)).model_copy(
        update={"policies": (kit.SOLVER,)}
    )
    report = run_scenario(s)
    assert report_from_json(report_json(report)) == report


# --------------------------------------------------------------------------- traces


def test_trace_replay_with_departures() -> None:
    report = run_scenario(kit.trace_scenario())
    for policy in ("solver", "bestfit"):
        o = report.outcome("base", policy)
        starts = {j.job_id: (j.start_s, j.end_s) for j in o.jobs}
        assert starts == {"a": (0, 100), "b": (50, 150), "c": (150, 180)}, policy
        assert [(s.t_s, s.queue_length, s.gpus_used) for s in o.timeline] == [
            (0, 0, 16), (10, 1, 16), (20, 2, 16), (50, 1, 16), (100, 1, 8), (150, 0, 16), (180, 0, 0),
        ]  # fmt: skip
        waits = {w.job_class: w for w in o.waits}
        assert waits["training"].mean_wait_s == 130 and waits["8-gpu"].max_wait_s == 40
        assert o.summary.jobs_placed == 3 and o.summary.end_s == 180
        assert 0.8 < o.summary.mean_utilisation < 1.0


def test_share_jobs_started_one_after_another_share_a_gpu() -> None:
    # Each started job is held in the inventory the next decision sees; a share used to be held as
    # its whole GPU as well, which made that inventory invalid ("shared but also held whole").
    one_gpu = kit.node("n0", gpus=1, nics=0, switches=1, numa_nodes=1, leaf="")
    entries = tuple(
        TraceEntry(job=kit.job(f"s{k}", role="pod", share=GpuShare(milli=300)), arrival_s=k, duration_s=100)
        for k in range(3)
    )
    s = Scenario(
        name="shares",
        base=BaseInventory(inventory=Inventory(nodes=(one_gpu,))),
        trace=Trace(entries=entries),
        policies=(kit.SOLVER,),
    )
    o = run_scenario(s).outcome("base", "solver")
    assert {j.job_id: j.start_s for j in o.jobs} == {"s0": 0, "s1": 1, "s2": 2}


def test_a_batch_order_is_a_policy_to_compare() -> None:
    jobs = (
        kit.job("a", 1, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        kit.job("b", 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        kit.job("c", 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        kit.job("d", 8, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
    )
    largest_first = PolicySpec(
        name="largest-first", solver=SolverPolicy(time_limit_s=2, batch_order=BatchOrder.LARGEST_FIRST)
    )
    s = kit.scenario([], jobs).model_copy(update={"policies": (kit.SOLVER, largest_first)})
    report = run_scenario(s)
    joint, in_order = report.outcome("base", "solver"), report.outcome("base", "largest-first")
    assert in_order.summary.jobs_placed == joint.summary.jobs_placed == 4
    best = SolverPolicy(batch_order=BatchOrder.BEST_OF_ORDERS, order_shuffles=0)
    assert solver_policy(PolicySpec(name="best", solver=best), seed=1).order_shuffles == 0


def test_interrupted_replay_keeps_what_was_computed() -> None:
    calls = iter(range(1000))
    report = run_prepared(prepare(kit.trace_scenario(), root=None), should_stop=lambda: next(calls) >= 4)
    assert not report.complete
    (partial,) = report.outcomes
    assert not partial.complete and [s.t_s for s in partial.timeline] == [0, 10, 20]
    assert report_from_json(report_json(report)) == report, "incomplete stays incomplete on the wire"


# --------------------------------------------------------------------------- reports


def assert_png(path: Path) -> None:
    import matplotlib.image

    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0.01, f"{path} is blank"


def test_plots_are_written_and_not_blank(tmp_path: Path) -> None:
    from solver.whatif.plots import write_plots

    trace = run_scenario(kit.trace_scenario())
    drained = kit.scenario(
        [{"drain_nodes": {"select": {"nodes": ["n2"]}}}],
        (kit.job("a", 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),),
    )
    batch = run_scenario(drained.model_copy(update={"policies": (kit.SOLVER,)}))
    written = write_plots(trace, tmp_path, "trace") + write_plots(batch, tmp_path, "batch")
    names = sorted(p.name for p in written)
    assert names == ["batch-heatmap-base.png", "batch-heatmap-edited.png", "batch-summary.png",
                     "trace-heatmap-base.png", "trace-summary.png", "trace-timeline.png"]  # fmt: skip
    for path in written:
        assert_png(path)


def test_table_shows_cells_diffs_and_reasons() -> None:
    from solver.whatif.table import render

    report = run_scenario(kit.trace_scenario())
    text = render(report)
    rows = [line.split() for line in text.splitlines()]
    assert rows[3][:3] == ["base", "solver", "3/3"] and rows[4][:3] == ["base", "bestfit", "3/3"]
    assert "MEAN UTIL" in text and "training" in text and "differences: none" in text


def test_cli_writes_json_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from solver.cli import main

    inventory_file = tmp_path / "inv.json"
    inventory_file.write_text(wire.json_text(to_proto(kit.busy_cluster(), placement_pb2.Inventory)))
    path = write(tmp_path, {
        "name": "cli",
        "base": {"file": "inv.json"},
        "jobs": [{"id": "j", "roles": [{"name": "w", "replicas": 1, "member": {"gpus": 2}}]}],
        "variants": [{"name": "drained", "edits": [{"drain_nodes": {"select": {"switch": "leaf0"}}}]}],
        "policies": [{"name": "solver", "solver": {"time_limit_s": 2}}],
    })  # fmt: skip
    assert main(["whatif", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert "drained" in capsys.readouterr().out
    report = report_from_json((tmp_path / "out" / "s.json").read_text())
    assert isinstance(report, WhatIfReport) and report.outcome("drained", "solver").jobs[0].placed
    assert (tmp_path / "out" / "s-heatmap-drained.png").exists()
    assert main(["whatif", str(tmp_path / "nope.yaml")]) == 2


def test_committed_fixtures_load() -> None:
    for name in ("dgx4-grow.yaml", "hgx16-trace.yaml"):
        prepared = load_and_prepare(FIXTURES / name)
        assert len(prepared.worlds) >= 2
