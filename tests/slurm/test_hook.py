"""The hook's logic without a Slurm: job descriptions → solver jobs, plans → Slurm fields and the
comment, the agent's answers (with the real solver in process), the fast client, and the CLI."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from adapters.slurm import cli, place_client
from adapters.slurm.agent import Agent, AgentConfig, serve_agent
from adapters.slurm.jobdesc import Unsupported, job_from_description
from adapters.slurm.plan import NodePlan, parse_plan_comment, plan_comment
from solver.domain.model import NicMode, Requirement, Scope
from tests.slurm.conftest import agent_on, fake_slurm

NO_VAL = 0xFFFFFFFE


def job(**desc: object):
    return job_from_description(desc, plan_id="p1", max_gpus_per_node=8)


def test_gpus_per_node_gang() -> None:
    spec = job(min_nodes=4, max_nodes=4, tres_per_node="gres:gpu:8", req_switch=1, cpus_per_task=4)
    assert spec is not None and spec.nodes == 4 and spec.gpus_per_node == 8
    (role,) = spec.job.roles
    assert role.replicas == 4 and role.member.gpus == 8
    # GPU-only: no NICs added (the job's GRES stay what the user asked), NVLink preferred.
    assert role.member.nics.mode in (NicMode.UNSPECIFIED, NicMode.NONE)
    assert role.member.alignment.mode in (Requirement.UNSPECIFIED, Requirement.NONE)
    assert role.member.nvlink == Requirement.PREFERRED
    assert role.member.cpu_milli == 4000
    assert spec.job.locality.mode == Requirement.REQUIRED and spec.job.locality.highest_tier == 1
    # -N 4: one member per node, as anti-affinity to the job's own label at node scope.
    (rule,) = spec.job.anti_affinity
    assert rule.scope == Scope.NODE and rule.labels == spec.job.labels


def test_nics_only_when_asked_one_per_gpu_when_counts_match() -> None:
    spec = job(tres_per_node="gres:gpu:2,gres:nic:2")
    assert spec is not None
    member = spec.job.roles[0].member
    assert member.nics.mode == NicMode.PER_GPU and member.alignment.mode == Requirement.PREFERRED
    spec = job(tres_per_node="gres:gpu:4,gres:nic:1")
    assert spec is not None
    assert spec.job.roles[0].member.nics.mode == NicMode.PER_MEMBER
    assert spec.job.roles[0].member.nics.count == 1
    one = job(tres_per_node="gres:gpu:1")
    assert one is not None and one.job.roles[0].member.nvlink == Requirement.NONE


def test_a_gang_of_small_members_gets_distinct_nodes_from_the_solver() -> None:
    from solver.solve import solve
    from tests import kit

    spec = job(min_nodes=2, max_nodes=2, tres_per_node="gres:gpu:1")
    assert spec is not None
    result = solve(kit.request([kit.node("n0", kit.SMALL), kit.node("n1", kit.SMALL)], [spec.job]))
    assert sorted(m.node for m in result.jobs[0].members) == ["n0", "n1"]  # binpack alone: one node


def test_gpus_per_job_per_task_and_unset_sentinels() -> None:
    assert job(tres_per_job="gres/gpu:16", min_nodes=2, max_nodes=NO_VAL).gpus_per_node == 8  # type: ignore[union-attr]
    assert job(tres_per_job="gres:gpu:3", min_nodes=NO_VAL).nodes == 1  # type: ignore[union-attr]
    spec = job(tres_per_task="gres:gpu:1", ntasks_per_node=4, min_nodes=2)
    assert spec is not None and spec.gpus_per_node == 4 and spec.gres_prefix == "gres:"
    assert job(tres_per_node="gres/gpu:2").gres_prefix == "gres/"  # type: ignore[union-attr]


def test_a_gpu_model_becomes_a_feature_or_a_model_filter() -> None:
    def spec(**known: object):
        return job_from_description(
            {"tres_per_node": "gres/gpu:h100:2"}, plan_id="p1", max_gpus_per_node=8, **known
        )

    by_model = spec(known_models=("H100-SXM5-80GB", "A100-SXM4-40GB"))
    assert by_model is not None and by_model.job.roles[0].member.gpu_models == ("H100-SXM5-80GB",)
    by_feature = spec(known_features=frozenset({"H100"}))
    assert by_feature is not None and by_feature.job.roles[0].member.gpu_models == ()
    assert by_feature.job.roles[0].member.node_selector == {"slurm/feature.H100": "1"}
    with pytest.raises(Unsupported, match="no GPU model topoplace knows"):
        spec()
    with pytest.raises(Unsupported, match="names a switch group"):
        job(tres_per_node="gres:gpu:sw2:2")
    assert job(min_nodes=2, num_tasks=4) is None  # no GPUs: not ours


@pytest.mark.parametrize(
    ("desc", "reason"),
    [
        ({"min_nodes": 2, "max_nodes": 4, "tres_per_node": "gres:gpu:8"}, "node range"),
        ({"tres_per_job": "gres:gpu:12"}, "more than one node"),
        ({"tres_per_job": "gres:gpu:5", "min_nodes": 2}, "evenly"),
        ({"tres_per_node": "gres:gpu:2", "tres_per_job": "gres:gpu:4"}, "more than one way"),
        ({"tres_per_node": "gres:gpu:2", "features": "a|b"}, "AND"),
        ({"tres_per_node": "gres:gpu:2", "partition": "a,b"}, "partitions"),
        ({"tres_per_node": "gres:gpu:2", "req_nodes": "n1"}, "-w"),
        ({"tres_per_task": "gres:gpu:1"}, "ntasks"),
    ],
)
def test_unsupported_combinations_are_reported(desc: dict, reason: str) -> None:
    with pytest.raises(Unsupported, match=reason):
        job_from_description(desc, plan_id="p", max_gpus_per_node=8)


def test_plan_comment_round_trip() -> None:
    nodes = (
        NodePlan("gn01", ("GPU4", "GPU5"), ("mlx5_8", "mlx5_9")),
        NodePlan("gn02", ("GPU4", "GPU5"), ("mlx5_8", "mlx5_9")),
        NodePlan("gn07", ("GPU0",), ("mlx5_2",)),
    )
    text = plan_comment("abc", nodes)
    assert text == "topoplace/v1 id=abc gn[01-02]:gpu=4,5:nic=mlx5_8,mlx5_9 gn07:gpu=0:nic=mlx5_2"
    parsed = parse_plan_comment("my own words " + text)
    assert parsed is not None and parsed.plan_id == "abc"
    assert parsed.nodes["gn02"] == ((4, 5), ("mlx5_8", "mlx5_9"))
    assert parse_plan_comment("topoplace/v1 id=x gn[1-:gpu=1:nic=") is None
    assert parse_plan_comment("no plan here") is None


# --------------------------------------------------------------------------- the agent, for real


@pytest.mark.needs_pipeline
def test_agent_plans_on_free_devices_and_reserves_them(agent: Agent) -> None:
    first = agent.place({"min_nodes": 1, "tres_per_node": "gres:gpu:2"})
    assert first["action"] == "apply", first
    fields = first["set"]
    assert fields["min_nodes"] == fields["max_nodes"] == 1
    plan = parse_plan_comment(fields["comment"])
    assert plan is not None
    (node,) = plan.nodes
    assert node in ("gpu01", "gpu02")  # gpu03 is full, gpu04 is down
    gpus, nics = plan.nodes[node]
    if node == "gpu02":
        assert not {2, 3} & set(gpus)  # held by the running job
    assert fields["tres_per_node"].startswith("gres:gpu:sw")
    assert nics == () and "nic" not in fields["tres_per_node"]  # a GPU-only job gets no NICs
    second = agent.place({"min_nodes": 1, "tres_per_node": "gres:gpu:2"})
    plan2 = parse_plan_comment(second["set"]["comment"])
    assert plan2 is not None
    for n, (g, _) in plan2.nodes.items():
        if n in plan.nodes:
            assert not set(g) & set(plan.nodes[n][0]), "second plan reuses the first plan's GPUs"
    with_nics = agent.place({"min_nodes": 1, "tres_per_node": "gres:gpu:2,gres:nic:2"})
    assert with_nics["action"] == "apply", with_nics
    assert ",gres:nic:sw" in with_nics["set"]["tres_per_node"]
    plan3 = parse_plan_comment(with_nics["set"]["comment"])
    assert plan3 is not None
    for g, n in plan3.nodes.values():
        assert len(g) == len(n) == 2


@pytest.mark.needs_pipeline
def test_agent_answers_never_fits_pass_and_error(agent: Agent) -> None:
    assert agent.place({"tres_per_node": "gres:gpu:9"})["action"] == "never_fits"
    assert agent.place({"min_nodes": 5, "tres_per_node": "gres:gpu:1"})["action"] == "never_fits"
    answer = agent.place({"min_nodes": 2, "max_nodes": 3, "tres_per_node": "gres:gpu:1"})
    assert answer["action"] == "pass" and "node range" in answer["message"]
    assert agent.place({"min_nodes": 1})["action"] == "pass"
    agent._snapshot = None
    assert agent.place({"tres_per_node": "gres:gpu:1"})["action"] == "error"


@pytest.mark.needs_pipeline
def test_a_job_every_schedulable_node_is_closed_to_is_not_told_the_cluster_has_none(agent: Agent) -> None:
    """Nodes excluded by the job or promised by backfill to a job ahead are not sent to the solver,
    which then saw no schedulable node and said so: 23 submits of the churn bench (session 28) read
    "the cluster has no schedulable node" on a cluster of 64 running nodes."""
    answer = agent.place({"tres_per_node": "gres:gpu:1", "exc_nodes": "gpu[01-03]"})  # gpu04 is down
    assert answer["action"] == "pass", answer
    assert "excluded or promised by backfill" in answer["message"], answer
    assert "no schedulable node" not in answer["message"]


@pytest.mark.needs_pipeline
def test_fast_client_talks_to_the_agent_and_fails_closed_when_it_cannot(agent: Agent) -> None:
    running = serve_agent(agent)
    try:
        out = io.StringIO()
        place_client.main(["--agent", running.address], io.BytesIO(b'{"tres_per_node": "gres:gpu:1"}'), out)
        lines = out.getvalue().splitlines()
        assert lines[0] == "action apply"
        assert any(line.startswith("set req_nodes ") for line in lines)
        assert any(line.startswith("setenv SLURM_GPUS_PER_NODE sw") for line in lines)
        out = io.StringIO()
        place_client.main(["--agent", running.address], io.BytesIO(b"not json"), out)
        assert out.getvalue().startswith("action error")
    finally:
        running.stop()
    out = io.StringIO()
    place_client.main(["--agent", running.address, "--timeout", "0.5"], io.BytesIO(b"{}"), out)
    assert out.getvalue().startswith("action error") and "unreachable" in out.getvalue()


def test_fast_client_imports_only_the_standard_library() -> None:
    code = (
        "import sys, runpy; sys.argv=['x','--agent','127.0.0.1:1','--timeout','0.2'];"
        "sys.stdin=open('/dev/null');"
        "import adapters.slurm.place_client as c; print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pydantic','grpc','solver','ortools')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------- CLI


def test_cli_inventory_and_gres_conf(fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "slurm",
            "inventory",
            "--scontrol",
            str(fixtures / "scontrol-show-node-d.txt"),
            "--topo-dir",
            str(fixtures / "topo"),
            "--gres-conf",
            str(fixtures / "gres.conf"),
            "--topology",
            str(fixtures / "topology.conf"),
        ]
    )
    assert code == 0
    inventory = json.loads(capsys.readouterr().out)
    assert [n["name"] for n in inventory["nodes"]] == ["gpu01", "gpu02", "gpu03", "gpu04"]
    assert (
        cli.main(
            [
                "slurm",
                "gres-conf",
                "--topo-dir",
                str(fixtures / "topo"),
                "--nodes",
                "gpu[01-04]",
                "--gpu-file",
                "/dev/nvidia{index}",
                "--nic-file",
                "/dev/nic{index}",
                "--sockets",
                "2",
                "--cores-per-socket",
                "8",
            ]
        )
        == 0
    )
    generated = capsys.readouterr().out
    # What the emulated cluster ran with (file order is group order on this capture).
    assert generated.split("\n", 2)[2] == (fixtures / "gres.conf").read_text().split("\n", 2)[2]
    assert (
        cli.main(
            [
                "slurm",
                "gres-conf",
                "--topo-dir",
                str(fixtures / "topo"),
                "--nodes",
                "gpu[01-04]",
                "--slurm-conf",
            ]
        )
        == 0
    )
    assert "Gres=gpu:sw0:2" in capsys.readouterr().out


def test_cli_bad_files_exit_2_with_file_and_line(
    tmp_path: Path, fixtures: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "gres.conf"
    bad.write_text("AutoDetect=off\nNodeName=gpu[01-04] Name=gpu File=/dev/nvidia[0-7] Count=2\n")
    code = cli.main(
        [
            "slurm",
            "inventory",
            "--scontrol",
            str(fixtures / "scontrol-show-node-d.txt"),
            "--topo-dir",
            str(fixtures / "topo"),
            "--gres-conf",
            str(bad),
        ]
    )
    assert code == 2
    assert f"error: {bad}:2: Count=2" in capsys.readouterr().err
    code = cli.main(
        ["slurm", "inventory", "--scontrol", str(tmp_path / "missing"), "--topo-dir", str(tmp_path)]
    )
    assert code == 2


def test_model_typed_requests_keep_working_once_gres_are_typed_per_switch() -> None:
    from adapters.slurm.jobdesc import untyped_model_request

    models = ("H100-SXM5-80GB",)
    fields, note = untyped_model_request(
        {"tres_per_node": "gres:gpu:h100:2,gres:nic:2"}, {"h100", "ib"}, models
    )
    assert fields == {"tres_per_node": "gres:gpu:2,gres:nic:2", "features": "h100"}, note
    fields, _ = untyped_model_request({"tres_per_job": "gres/gpu:H100:4", "features": "ib"}, {"h100"}, models)
    assert fields == {"tres_per_job": "gres/gpu:4", "features": "ib&h100"}
    # No feature, but every GPU is an H100: untyped is the same request.
    fields, note = untyped_model_request({"tres_per_node": "gres:gpu:h100:1"}, set(), models)
    assert fields == {"tres_per_node": "gres:gpu:1"} and "every GPU" in note
    # A mixed cluster without the feature: no safe rewrite, and the reason says what to fix.
    fields, note = untyped_model_request({"tres_per_node": "gres:gpu:a100:1"}, set(), (*models, "A100"))
    assert fields == {} and "Features=a100" in note
    # Switch types (the hook's own plans, or users who learnt them) and plain gpu:N are left alone.
    assert untyped_model_request({"tres_per_node": "gres:gpu:sw2:2"}, {"h100"}, models) == ({}, "")
    assert untyped_model_request({"tres_per_node": "gres:gpu:2"}, {"h100"}, models) == ({}, "")
    fields, note = untyped_model_request(
        {"tres_per_node": "gres:gpu:h100:1", "features": "a|b"}, {"h100"}, models
    )
    assert fields == {} and "left as submitted" in note


@pytest.mark.needs_pipeline
def test_agent_passes_model_requests_on_as_untyped_gpus(agent: Agent) -> None:
    """A job the hook does not plan (a node range) still has its gpu:<model> request made valid."""
    desc = {"min_nodes": 2, "max_nodes": 3, "tres_per_node": "gres:gpu:h100:1"}
    answer = agent.place(desc)  # the fixture's nodes have no features and GPUs of no known model
    assert answer["action"] == "pass" and "set" not in answer and "Features=h100" in answer["notice"]
    snapshot = agent._snapshot
    assert snapshot is not None
    nodes = [dataclasses.replace(n, features=("h100",)) for n in snapshot.nodes]
    agent._snapshot = dataclasses.replace(snapshot, nodes=nodes, features=frozenset({"h100"}))
    answer = agent.place(desc)
    assert answer["action"] == "pass"
    assert answer["set"] == {"tres_per_node": "gres:gpu:1", "features": "h100"}, answer
    assert "node range" in answer["notice"] and "untyped" in answer["notice"]
    out = place_client.render(answer)
    assert "set tres_per_node gres:gpu:1" in out and "\nnotice " in out


def test_stale_pending_plans_do_not_hold_devices(fixtures: Path) -> None:
    """Plans of held jobs, of jobs waiting on a dependency or a begin time, of old pending jobs, or on
    drained nodes are not counted as taken capacity; a fresh eligible one is."""
    from datetime import datetime, timedelta

    from adapters.slurm.pending import held_plans, parse_pending
    from adapters.slurm.scontrol import parse_show_node

    nodes = parse_show_node((fixtures / "scontrol-show-node-d.txt").read_text())  # gpu04 is DOWN+DRAIN
    now = datetime(2026, 12, 4, 8, 0, 0)
    fresh = (now - timedelta(seconds=10)).isoformat(timespec="seconds")
    old = (now - timedelta(seconds=600)).isoformat(timespec="seconds")

    def plan(pid: str, node: str = "gpu01") -> str:
        return f"N/A|(null)|1|N/A|5:00|my run|x topoplace/v1 id={pid} {node}:gpu=0:nic="

    squeue = "\n".join(
        [
            f"1|{fresh}|Resources|{plan('keep')}",
            f"2|{fresh}|JobHeldUser|{plan('held')}",
            f"3|{fresh}|Dependency|{plan('dep')}",
            f"4|{fresh}|BeginTime|{plan('later')}",
            f"5|{old}|Resources|{plan('old')}",
            f"6|{fresh}|Resources|{plan('drained', 'gpu04')}",
            f"7|{fresh}|Resources|N/A|(null)|1|N/A|5:00|no plan in this comment",
        ]
    )
    kept = held_plans(parse_pending(squeue), nodes, now.timestamp(), ttl_s=120)
    assert [p.plan_id for p in kept] == ["keep"]


def test_refresh_reads_pending_jobs_first_and_dates_the_snapshot_by_its_start(
    tmp_path: Path, fixtures: Path
) -> None:
    """A plan issued while a slow refresh runs stays reserved: the snapshot is dated by the start of
    its reads, and pending jobs are read before nodes (a job starting in between is seen at least once).
    Before, a plan issued during a slow ``scontrol`` was dropped and its devices planned twice."""
    import time as clock

    log = tmp_path / "calls"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        f"#!/bin/sh\necho scontrol >> {log}\nsleep 1.5\ncat {fixtures / 'scontrol-show-node-d.txt'}\n"
    )
    squeue = tmp_path / "squeue"
    squeue.write_text(f"#!/bin/sh\necho squeue >> {log}\n")
    for path in (scontrol, squeue):
        path.chmod(0o755)
    agent = Agent(
        AgentConfig(
            solver="unused",
            topo_dir=fixtures / "topo",
            gres_conf=fixtures / "gres.conf",
            scontrol=str(scontrol),
            squeue=str(squeue),
        )
    )
    agent._read_resolution()  # once per agent (scontrol show config), before the first read
    log.write_text("")
    started = clock.monotonic()
    agent.refresh()
    # then the running jobs' ends (squeue -t R, for the later-start choice: adapters/slurm/running.py)
    assert log.read_text().split() == ["squeue", "scontrol", "squeue"]
    assert agent._snapshot is not None and agent._snapshot.taken - started < 0.5


# --------------------------------------------------------------------------- pending jobs: promises, releases


def test_pending_jobs_promised_nodes_and_releases() -> None:
    """squeue's expected start and SchedNodeList say which nodes backfill keeps for earlier jobs, and
    which planned jobs will not start soon (on the real Slurm: jobs pinned to gn28, promised to an
    earlier gang, waited an hour while typed GRES alone started them elsewhere)."""
    from adapters.slurm.pending import parse_pending, promised_nodes, released_comment, to_release

    now = datetime(2026, 12, 4, 10, 0, 0)

    def at(minutes: float) -> str:
        return (now + timedelta(minutes=minutes)).isoformat(timespec="seconds")

    squeue = "\n".join(
        [
            f"146|{at(-1)}|Priority|{at(56)}|gn[25-26]|1|N/A|5:00|",
            f"147|{at(-1)}|Resources|{at(40)}|gn[27-28]|1|N/A|5:00|",
            f"153|{at(-1)}|Priority|{at(120)}|gn28|1|N/A|5:00|"
            "run 3 topoplace/v1 id=abc gn28:gpu=4,5:nic=mlx5_4,mlx5_5",
            f"154|{at(-1)}|Priority|N/A|(null)|1|N/A|5:00|topoplace/v1 id=new gn30:gpu=0:nic=",
            f"155|{at(-1)}|JobHeldUser|{at(120)}|gn31|1|N/A|5:00|topoplace/v1 id=held gn31:gpu=0:nic=",
            f"156|{at(-1)}|Priority|{at(0.2)}|gn32|1|N/A|5:00|topoplace/v1 id=soon gn32:gpu=0:nic=",
            "not|enough|fields",
        ]
    )
    jobs = parse_pending(squeue)
    assert [j.job_id for j in jobs] == ["146", "147", "153", "154", "155", "156"]
    promised = promised_nodes(jobs)
    assert promised["gn25"] == promised["gn26"] == datetime.fromisoformat(at(56)).timestamp()
    assert promised["gn28"] == datetime.fromisoformat(at(40)).timestamp()  # the earliest promise wins
    assert "gn31" not in promised and "gn30" not in promised  # held job; start not computed yet
    released = [job for job, _why in to_release(jobs, now.timestamp(), after_s=30)]
    assert [j.job_id for j in released] == ["153"]  # not: unplanned, not computed, held, starting soon
    comment = released_comment(released[0].comment)
    assert comment == "run 3 topoplace/released id=abc gn28:gpu=4,5:nic=mlx5_4,mlx5_5"
    assert parse_pending(f"153|{at(-1)}|Priority|{at(120)}|gn28|1|N/A|5:00|{comment}")[0].plan is None


def test_plans_gone_stale_are_released_at_once_with_the_reason() -> None:
    """A plan stays true or is let go: a held job pinned to a node that is then drained, or an
    eligible job whose planned node others filled, is released now (not 30 s after Slurm's start
    estimate, which a held job never gets); a plan on a free, up node is kept."""
    from adapters.slurm.pending import parse_pending, to_release
    from adapters.slurm.scontrol import parse_show_node

    now = datetime(2026, 12, 4, 10, 0, 0)
    stamp = (now - timedelta(minutes=2)).isoformat(timespec="seconds")
    just_now = (now - timedelta(seconds=2)).isoformat(timespec="seconds")

    def node(name: str, state: str, used: int) -> str:
        return (
            f"NodeName={name} Arch=x86_64 CoresPerSocket=8 CPUAlloc=0 CPUTot=16 State={state} "
            f"Gres=gpu:sw0:4(S:0),gpu:sw1:4(S:1) GresUsed=gpu:sw0:{min(used, 4)}(IDX:N/A),"
            f"gpu:sw1:{max(0, used - 4)}(IDX:N/A) RealMemory=1000 AllocMem=0 Partitions=gpu"
        )

    nodes = parse_show_node(
        "\n".join([node("gn01", "IDLE+DRAIN", 0), node("gn02", "MIXED", 7), node("gn03", "IDLE", 0)])
    )
    jobs = parse_pending(
        "\n".join(
            [
                f"201|{stamp}|JobHeldUser|N/A|(null)|1|N/A|5:00|topoplace/v1 id=held gn01:gpu=0,1:nic=",
                f"202|{stamp}|Priority|N/A|(null)|1|N/A|5:00|topoplace/v1 id=filled gn02:gpu=4,5:nic=",
                f"203|{stamp}|Priority|N/A|(null)|1|N/A|5:00|topoplace/v1 id=fine gn03:gpu=0,1:nic=",
                f"204|{stamp}|JobHeldUser|N/A|(null)|1|N/A|5:00|topoplace/v1 id=heldfull gn02:gpu=4,5:nic=",
                f"205|{just_now}|Priority|N/A|(null)|1|N/A|5:00|topoplace/v1 id=new gn02:gpu=4,5:nic=",
                f"206|{stamp}|Priority|N/A|(null)|1|N/A|5:00|topoplace/v1 id=gone gn99:gpu=0:nic=",
            ]
        )
    )
    released = {job.job_id: why for job, why in to_release(jobs, now.timestamp(), 30, nodes)}
    assert released == {
        "201": "planned node gn01 is idle/drain",
        "202": "planned node gn02 has 1 free GPUs, the plan needs 2",
        "206": "planned node gn99 is gone",
    }
    # Without the node state only Slurm's start estimate counts (none computed here).
    assert to_release(jobs, now.timestamp(), 30) == []


@pytest.mark.needs_pipeline
def test_agent_does_not_pin_a_job_to_nodes_promised_to_earlier_jobs(tmp_path: Path, fixtures: Path) -> None:
    """A job that would still run when an earlier pending job is due on a node is planned elsewhere;
    a job short enough to end before may use it, as backfill would let it."""

    scontrol, _ = fake_slurm(tmp_path, fixtures)
    squeue = tmp_path / "squeue-promised"
    start = (datetime.now() + timedelta(minutes=30)).isoformat(timespec="seconds")
    squeue.write_text(f"#!/bin/sh\necho '9|{start}|Resources|{start}|gpu02|1|N/A|5:00|'\n")
    squeue.chmod(0o755)
    agent = agent_on(fixtures, scontrol, squeue, topology=False)
    agent.refresh()

    def node(**desc: object) -> str:
        answer = agent.place({"min_nodes": 1, "tres_per_node": "gres:gpu:2", **desc})
        assert answer["action"] == "apply", answer
        return answer["set"]["req_nodes"]

    # gpu02 (already half used) is where the solver packs a 2-GPU job; a job ending a backfill step
    # before the promised start may go there. One ending less than a step before it may not
    # (backfill rounds the promise down to its resolution: 60 s here, the stand-in's config has no
    # bf_resolution), nor an hour-long one or one without a limit.
    assert node(time_limit=28) == "gpu02"
    assert node(time_limit=29) == "gpu01"
    assert node(time_limit=60) == "gpu01"
    assert node() == "gpu01"


def test_backfill_resolution_is_read_from_the_scheduler_parameters() -> None:
    from adapters.slurm.pending import BACKFILL_RESOLUTION_S, backfill_resolution_s, promised_before

    config = (
        "SchedulerParameters     = sched_min_interval=100000,bf_interval=1,bf_resolution=300\n"
        "SchedulerTimeSlice      = 30 sec\n"
    )
    assert backfill_resolution_s(config) == 300
    assert backfill_resolution_s("SchedulerParameters     = bf_interval=1\n") == BACKFILL_RESOLUTION_S == 60
    assert backfill_resolution_s("SchedulerParameters     = (null)\n") == 60
    promised = {"a": 1000.0, "b": 2000.0}
    assert promised_before(promised, ends=939.0, resolution_s=60) == set()
    assert promised_before(promised, ends=941.0, resolution_s=60) == {"a"}
    assert promised_before(promised, ends=float("inf"), resolution_s=60) == {"a", "b"}


def test_candidate_nodes_cut_alike_nodes_keep_the_closest_misses_and_the_ruler(agent: Agent) -> None:
    """The fast path sends only nodes that can host a member, at most one per member of each set of
    interchangeable nodes, the nodes closest to fitting (for the solver's 'no room' reason), and one
    node of each size (the packing tier's ruler)."""
    from adapters.slurm.candidates import candidate_nodes

    base = agent.inventory().inventory.nodes
    by_name = {n.name: n for n in base}
    idle = by_name["gpu01"]
    # Six copies of the idle node: alike for a one-node job; for a gang, alike only within a leaf.
    copies = [idle.model_copy(update={"name": f"gpu9{i}", "leaf": f"x{i % 2}"}) for i in range(6)]
    nodes = [*base, *copies]
    keys = {n.name: "t" for n in nodes}

    def names(**desc: object) -> list[str]:
        spec = job_from_description({"tres_per_node": "gres:gpu:2", **desc}, plan_id="p", max_gpus_per_node=8)
        assert spec is not None
        return [n.name for n in candidate_nodes(nodes, spec.job, set(), keys)]

    one = names()
    # gpu01 and its copies are alike for one node: one kept; gpu02 differs (half used); gpu03 is full
    # (kept as the closest miss); gpu04 is down (dropped; same size as the others, so no ruler).
    assert one == ["gpu01", "gpu02", "gpu03"], one
    gang = names(min_nodes=2, max_nodes=2)
    assert sorted(gang) == ["gpu01", "gpu02", "gpu03", "gpu90", "gpu91", "gpu92", "gpu93"], gang
    # Excluded or promised nodes are not sent; a bigger node size than any sent stays as a ruler.
    big = idle.model_copy(update={"name": "big1", "cpu_milli": 10 * idle.cpu_milli, "schedulable": False})
    nodes.append(big)
    spec = job_from_description({"tres_per_node": "gres:gpu:2"}, plan_id="p", max_gpus_per_node=8)
    assert spec is not None
    sent = {n.name: n for n in candidate_nodes(nodes, spec.job, {"gpu01", "gpu02"}, keys | {"big1": "b"})}
    assert "gpu01" not in sent and "gpu02" not in sent and sent["big1"].schedulable is False


@pytest.mark.needs_pipeline
def test_no_room_now_is_a_pass_and_never_fits_is_asked_once_per_shape(agent: Agent) -> None:
    """The 'no room now' path (an unhashable cache key once made it an error with a traceback that
    took 36 s to render on a loaded host, past the hook's timeout)."""
    assert agent.place({"tres_per_node": "gres:gpu:8"})["action"] == "apply"  # gpu01, the idle one
    second = agent.place({"tres_per_node": "gres:gpu:8"})
    assert second["action"] == "pass" and "no room now" in second["message"], second
    assert "never_fits" in second["stages_ms"]
    third = agent.place({"tres_per_node": "gres:gpu:8"})
    assert third["action"] == "pass" and "never_fits" not in third["stages_ms"], third


def test_an_unexpected_error_is_an_error_answer_with_its_traceback_as_text(
    agent: Agent, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(desc: object, plan_id: str) -> dict:
        raise ValueError("boom")

    monkeypatch.setattr(agent, "_place_locked", broken)
    answer = agent.place({"tres_per_node": "gres:gpu:1"})
    assert answer["action"] == "error" and "ValueError: boom" in answer["message"], answer
    assert 'raise ValueError("boom")' in capsys.readouterr().out  # the traceback, as plain text


@pytest.mark.needs_pipeline
def test_a_one_node_job_is_not_pinned_while_an_earlier_job_waits_for_backfill(
    tmp_path: Path, fixtures: Path
) -> None:
    """Seen on the real Slurm (bench seed 1): a job pinned to a node the next backfill pass reserved
    for an earlier job (submitted a second before, no reservation yet) waited, typed, while Slurm
    alone started it elsewhere. While such a job exists, a one-node job keeps its switch types but
    Slurm chooses the node; a gang stays pinned."""

    scontrol, squeue = fake_slurm(tmp_path, fixtures)
    just_now = datetime.now().isoformat(timespec="seconds")
    Path(squeue).write_text(f"#!/bin/sh\necho '7|{just_now}|Priority|N/A|(null)|1|N/A|5:00|'\n")
    agent = agent_on(fixtures, scontrol, squeue, unpin_window_s=30.0)
    agent.refresh()
    one = agent.place({"min_nodes": 1, "tres_per_node": "gres:gpu:2,gres:nic:2", "comment": "mine"})
    assert one["action"] == "apply" and one.get("unpinned"), one
    assert "req_nodes" not in one["set"]
    assert one["set"]["tres_per_node"].startswith("gres:gpu:sw")  # GPU↔NIC alignment stays enforced
    assert "node left to Slurm (job 7 waits for backfill's reservation" in one["message"]
    assert one["set"]["comment"].startswith("mine topoplace/released id=")
    assert parse_plan_comment(one["set"]["comment"]) is None  # holds nothing, compared with nothing
    gang = agent.place({"min_nodes": 2, "max_nodes": 2, "tres_per_node": "gres:gpu:2"})
    assert gang["action"] == "apply" and gang["set"]["req_nodes"] == "gpu[01-02]", gang
    # Once Slurm has given job 7 a start (its reservation is made), plans pin again.
    Path(squeue).write_text(f"#!/bin/sh\necho '7|{just_now}|Priority|{just_now}|gpu01|1|N/A|5:00|'\n")
    agent.refresh()
    again = agent.place({"min_nodes": 1, "tres_per_node": "gres:gpu:1"})
    assert again["action"] == "apply" and not again.get("unpinned") and "req_nodes" in again["set"], again


@pytest.mark.needs_pipeline
def test_by_default_a_one_node_job_is_pinned_while_an_earlier_job_waits_for_backfill(
    tmp_path: Path, fixtures: Path
) -> None:
    """Seen on the real Slurm (64 nodes, seeds 1-3, session 18): every job the hook started fewer
    than typed GRES alone had been left unpinned while an earlier job waited for backfill, its
    switch types split (`gpu:sw0:1,gpu:sw2:1`) fitting no node Slurm then chose. By default the plan
    pins its node (nodes backfill promised are closed to plans; a job Slurm will not start soon is
    planned again or released)."""
    scontrol, squeue = fake_slurm(tmp_path, fixtures)
    just_now = datetime.now().isoformat(timespec="seconds")
    Path(squeue).write_text(f"#!/bin/sh\necho '7|{just_now}|Priority|N/A|(null)|1|N/A|5:00|'\n")
    agent = agent_on(fixtures, scontrol, squeue, unpin_window_s=AgentConfig.unpin_window_s)
    agent.refresh()
    one = agent.place({"min_nodes": 1, "tres_per_node": "gres:gpu:2,gres:nic:2"})
    assert one["action"] == "apply" and not one.get("unpinned"), one
    assert "req_nodes" in one["set"] and one["set"]["tres_per_node"].startswith("gres:gpu:sw"), one


PLANNED = "topoplace/v1 id=p9 gpu03:gpu=0,1:nic=mlx5_2,mlx5_3"


@pytest.mark.needs_pipeline
def _slurm_with_a_planned_job(tmp_path: Path, fixtures: Path, tres: str) -> tuple[Path, Path, Path]:
    """scontrol/squeue stand-ins for a cluster where job 9, asking ``tres`` per node, has waited a
    minute under the plan ``PLANNED`` (pinned to gpu03); ``scontrol update`` lines are written to the
    third path returned."""
    updates = tmp_path / "updates.txt"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = update ]; then echo "$@" >> {updates}; exit 0; fi\n'
        'if [ "$3" = job ]; then echo "JobId=9 JobName=wrap Priority=1 TimeLimit=01:00:00 NumNodes=1 '
        f'NumCPUs=1 TresPerNode={tres} Comment=x"; exit 0; fi\n'
        f"cat {fixtures / 'scontrol-show-node-d.txt'}\n"
    )
    scontrol.chmod(0o755)
    stamp = (datetime.now() - timedelta(minutes=1)).isoformat(timespec="seconds")
    squeue = tmp_path / "squeue"
    squeue.write_text(f"#!/bin/sh\necho '9|{stamp}|Resources|N/A|(null)|1|N/A|5:00|mine {PLANNED}'\n")
    squeue.chmod(0o755)
    return scontrol, squeue, updates


@pytest.mark.parametrize(
    ("tres", "replanned"),
    [
        ("gres:gpu:sw0:2,gres:nic:sw0:2", True),  # sw0 pairs are free on gpu01 (and gpu02)
        ("gres:gpu:sw1:2,gres:nic:sw1:2", True),  # gpu02's sw1 GPUs are busy: gpu01 only
        ("gres:gpu:2", False),  # not typed per switch (not planned by us): released as before
    ],
)
def test_a_stale_plan_is_made_again_on_nodes_where_its_gres_types_are_free(
    tmp_path: Path, fixtures: Path, tres: str, replanned: bool
) -> None:
    """A pending job planned on gpu03, which others filled while it waited, is planned again with
    topoplace (not just released to Slurm's choice): on the nodes where the switch types it already
    holds are free, as a pending job cannot be re-typed; the node list and the comment are updated."""

    scontrol, squeue, updates = _slurm_with_a_planned_job(tmp_path, fixtures, tres)
    agent = agent_on(fixtures, scontrol, squeue)
    agent.refresh()
    agent.wait_follow_up()  # re-plans run in the solve pool, on the read's node state
    (line,) = updates.read_text().splitlines()
    (tried,) = agent.replans[-1:]
    assert tried["why"] == "planned node gpu03 has 0 free GPUs, the plan needs 2"
    if not replanned:
        assert "not typed per switch" in tried["outcome"]
        assert line == f"update JobId=9 ReqNodeList= Comment=mine {PLANNED.replace('/v1', '/released')}"
        return
    assert tried["outcome"].startswith("re-planned on gpu0"), tried
    assert line.startswith("update JobId=9 ReqNodeList=gpu0") and " Comment=mine topoplace/v1 id=p9 " in line
    plan = parse_plan_comment(line.split("Comment=", 1)[1])
    assert plan is not None and list(plan.nodes) != ["gpu03"]
    ((node, (gpus, _nics)),) = plan.nodes.items()
    gtype = tres.split(":")[2]
    assert set(gpus) == ({0, 1} if gtype == "sw0" else {2, 3})  # the devices of its own switch type
    if gtype == "sw1":
        assert node == "gpu01"  # gpu02's sw1 GPUs run another job
    assert set(agent._issued["p9"].nodes) == {node}  # the new plan holds its devices at once


@pytest.mark.needs_pipeline
def test_a_slow_re_plan_does_not_hold_up_the_refresh(tmp_path: Path, fixtures: Path) -> None:
    """The re-plan's solve ran on the refresh thread and held it (and so the node state every answer
    plans on) up to 1 s. It now runs in the solve pool: the read returns while the solve is held,
    the next read comes in meanwhile, and the re-plan is applied once the solve answers."""
    import threading

    from solver.solve import solve

    scontrol, squeue, updates = _slurm_with_a_planned_job(tmp_path, fixtures, "gres:gpu:sw0:2,gres:nic:sw0:2")
    release = threading.Event()

    def held_solve(request, timeout):  # type: ignore[no-untyped-def]
        assert release.wait(30), "the test never released the solve"
        return solve(request, deadline_s=timeout)

    agent = agent_on(fixtures, scontrol, squeue, held_solve)
    agent.refresh()  # job 9's plan is stale: its re-plan waits in the pool for the held solve
    taken = agent._snapshot.taken if agent._snapshot else 0.0
    assert not agent.replans, "the re-plan ended while its solve was held"
    agent.refresh()  # the refresh thread is free: it reads again meanwhile
    assert agent._snapshot is not None and agent._snapshot.taken > taken
    held = {plan.plan_id for plan in agent._snapshot.pending}
    assert "p9" not in held  # the plan being re-made holds no devices meanwhile
    assert not updates.exists()
    release.set()
    agent.wait_follow_up()
    (line,) = updates.read_text().splitlines()
    assert line.startswith("update JobId=9 ReqNodeList=gpu0"), line
    assert agent.replans[-1]["outcome"].startswith("re-planned on gpu0"), agent.replans


@pytest.mark.needs_pipeline
@pytest.mark.parametrize(
    ("earlier", "unpinned"),
    [
        ("topoplace/v1 id=e1 gpu02:gpu=0:nic=", False),  # ours, pinned to one node: about to start there
        ("topoplace/v1 id=e2 gpu01:gpu=0:nic= gpu02:gpu=0:nic=", True),  # a pinned gang: may reserve more
        ("topoplace/released id=e3 gpu02:gpu=0:nic=", True),  # Slurm chooses its node
        ("", True),  # left to Slurm
    ],
)
def test_only_an_earlier_job_slurm_may_place_elsewhere_unpins_the_next_one(
    tmp_path: Path, fixtures: Path, earlier: str, unpinned: bool
) -> None:
    """Seen on the real Slurm (bench seed 3, session 13): every job waits up to 1 s for backfill's
    pass, so the agent's last read nearly always showed the previous job — one of ours, pinned to one
    node — without a start estimate, and 19 of 108 one-node jobs were left to Slurm's node choice.
    One of them, a 4-GPU job, took the only empty node, where the agent (not knowing it) then pinned
    an 8-GPU job that never started; typed GRES alone started it. A job pinned to one node by a live
    plan can only be started on that node, whose devices its plan holds: it no longer unpins."""

    scontrol, squeue = fake_slurm(tmp_path, fixtures)
    just_now = datetime.now().isoformat(timespec="seconds")
    Path(squeue).write_text(f"#!/bin/sh\necho '7|{just_now}|None|N/A|(null)|1|N/A|5:00|{earlier}'\n")
    agent = agent_on(fixtures, scontrol, squeue, unpin_window_s=30.0)
    agent.refresh()
    one = agent.place({"min_nodes": 1, "tres_per_node": "gres:gpu:1"})
    assert one["action"] == "apply", one
    assert bool(one.get("unpinned")) == unpinned, one
    assert ("req_nodes" in one["set"]) != unpinned


@pytest.mark.needs_pipeline
def test_a_re_plan_does_not_take_devices_an_answer_planned_meanwhile(tmp_path: Path, fixtures: Path) -> None:
    """Seen on the real Slurm (bench seed 3, session 13): a re-plan (solve pool) and a new job's answer
    took GPUs 4-5 of gn39 within the same millisecond, as the re-plan's devices were reserved only
    after its ``scontrol update``. They are now claimed under the answers' lock first: devices an
    answer planned on while the re-plan's solve ran are not taken again, and the job is released."""
    import threading

    from adapters.slurm.agent import _Issued
    from solver.solve import solve

    scontrol, squeue, updates = _slurm_with_a_planned_job(tmp_path, fixtures, "gres:gpu:sw0:2,gres:nic:sw0:2")
    asked, release = threading.Event(), threading.Event()

    def held_solve(request, timeout):  # type: ignore[no-untyped-def]
        asked.set()
        assert release.wait(30), "the test never released the solve"
        return solve(request, deadline_s=timeout)

    agent = agent_on(fixtures, scontrol, squeue, held_solve)
    agent.refresh()  # job 9's plan is stale: its re-plan's solve is asked, and held
    assert asked.wait(30)
    # Meanwhile answers planned every device of gpu01 and gpu02 (what place() leaves in _issued).
    for node in agent.inventory().inventory.nodes:
        if node.name in ("gpu01", "gpu02"):
            every = (tuple(g.id for g in node.gpus), tuple(n.name for n in node.nics))
            agent._issued[f"other-{node.name}"] = _Issued(time.monotonic(), {node.name: every})
    release.set()
    agent.wait_follow_up()
    (tried,) = agent.replans
    assert tried["outcome"].startswith("its new devices were planned for another job meanwhile"), tried
    (line,) = updates.read_text().splitlines()
    assert line.startswith("update JobId=9 ReqNodeList= Comment=mine topoplace/released id=p9"), line
    assert "p9" not in agent._issued  # no devices held for a plan that was not applied
