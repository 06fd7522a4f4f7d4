"""The TaskProlog's helper exports what Slurm allocated (scontrol IDX through gres.conf, SLURM_STEP_GPUS),
never the plan; a plan that disagrees is logged. On a real ``scontrol show job -d`` capture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.slurm.captures import nic_legend
from adapters.slurm.gres import Device, node_devices, parse_gres_conf
from adapters.slurm.job_devices import exports, nic_name_of, node_gres, paired_nics

HERE = Path(__file__).resolve().parents[2]
CAPTURE = HERE / "fixtures" / "topo" / "a100-nv12-8gpu-10nic-fixture.txt"
TASKPROLOG = HERE / "adapters" / "slurm" / "taskprolog.sh"


@pytest.fixture
def job_text(fixtures: Path) -> str:
    return (fixtures / "scontrol-show-job-d.txt").read_text()


@pytest.fixture
def gres_conf(tmp_path: Path, fixtures: Path) -> Path:
    """The gres.conf the capture's cluster ran with: the fixture's lines (the A100 capture, NICs one
    line per switch group as written then) for gn[01-02]."""
    path = tmp_path / "gres.conf"
    path.write_text((fixtures / "gres.conf").read_text().replace("gpu[01-04]", "gn[01-02]"))
    return path


def run(job_text: str, node: str, gres_conf: Path, **env: str) -> tuple[dict[str, str], list[str]]:
    devices = node_devices(parse_gres_conf(gres_conf.read_text()), node)
    legend = nic_legend(CAPTURE.read_text())
    lines, log = exports(job_text, node, devices, legend, {"SLURM_JOB_ID": "2", **env})
    return dict(line.removeprefix("export ").split("=", 1) for line in lines), log


def test_exports_are_slurms_allocation_and_a_wrong_plan_is_only_logged(
    job_text: str, gres_conf: Path
) -> None:
    # Job 2's comment plans GPUs 0,1 on gn[01-02]; Slurm gave gn01 GPUs 4,5 (IDX 4-5) with NIC IDX 4
    # (mlx5_8, group sw2) and IDX 8 (mlx5_6, NIC-only group sw4).
    job2 = job_text[job_text.index("JobId=2") :]
    env, log = run(job2, "gn01", gres_conf)
    assert env["CUDA_VISIBLE_DEVICES"] == env["TOPOPLACE_GPUS"] == "4,5"
    assert env["NCCL_IB_HCA"] == "=mlx5_8,mlx5_6"  # exact-match form; mlx5_8 shares GPU4's switch
    assert env["TOPOPLACE_PLAN_ID"] == "abc"
    (line,) = log
    assert "plan abc named GPUs [0, 1]" in line and "Slurm allocated GPUs [4, 5]" in line
    env, log = run(job2, "gn02", gres_conf)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["NCCL_IB_HCA"] == "=mlx5_2,mlx5_6"
    assert len(log) == 1  # GPUs agree, NICs do not (plan mlx5_3, Slurm mlx5_6)


def test_a_step_holding_part_of_the_job_gets_its_share(job_text: str, gres_conf: Path) -> None:
    job2 = job_text[job_text.index("JobId=2") :]
    env, _ = run(job2, "gn01", gres_conf, SLURM_STEP_GPUS="5")
    assert env["CUDA_VISIBLE_DEVICES"] == "5" and env["NCCL_IB_HCA"] == "=mlx5_8"
    # SLURM_JOB_GPUS is the batch host's value in every step (seen on 22.05): never read.
    env, _ = run(job2, "gn02", gres_conf, SLURM_JOB_GPUS="4,5")
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_keep_cuda_and_jobs_not_on_this_node(job_text: str, gres_conf: Path) -> None:
    job1 = job_text[: job_text.index("JobId=2")]
    env, log = run(job1, "gn01", gres_conf, TOPOPLACE_KEEP_CUDA="1")
    assert "CUDA_VISIBLE_DEVICES" not in env and env["TOPOPLACE_GPUS"] == "2"
    assert env["NCCL_IB_HCA"] == "=mlx5_0" and log == []  # no plan, nothing to compare
    env, log = run(job1, "gn02", gres_conf)
    assert env == {} and "no allocation on gn02" in log[0]


def test_nic_names_from_sysfs_before_the_legend(tmp_path: Path) -> None:
    (tmp_path / "uverbs3").mkdir()
    (tmp_path / "uverbs3" / "ibdev").write_text("mlx5_7\n")
    device = Device("nic", "sw1", 0, 3, "/dev/infiniband/uverbs3", 9)
    assert nic_name_of(device, {3: "mlx5_3"}, sysfs=tmp_path) == "mlx5_7"
    assert nic_name_of(device, {3: "mlx5_3"}, sysfs=tmp_path / "none") == "mlx5_3"
    assert paired_nics(((4, "sw2"), (0, "sw0")), (("a", "sw0"), ("b", "sw9"), ("c", "sw2"))) == (
        "c",
        "a",
        "b",
    )


def test_node_gres_reads_hostlists(job_text: str) -> None:
    assert node_gres(job_text, "gn02") is not None
    assert (
        node_gres("   Nodes=gn[01-03] CPU_IDs=0 Mem=0 GRES=gpu:sw0:1(IDX:0)\n", "gn02") == "gpu:sw0:1(IDX:0)"
    )


def test_taskprolog_runs_without_site_packages(job_text: str, gres_conf: Path, tmp_path: Path) -> None:
    """The real script under /bin/sh with the system python3 -I -S: a fake scontrol prints the capture."""
    scontrol = tmp_path / "scontrol"
    (tmp_path / "job.txt").write_text(job_text[job_text.index("JobId=2") :])
    scontrol.write_text(f"#!/bin/sh\ncat {tmp_path / 'job.txt'}\n")
    scontrol.chmod(0o755)
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "gn[01-02].txt").write_text(CAPTURE.read_text())
    log = tmp_path / "prolog.log"
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_JOB_ID": "2",
        "SLURMD_NODENAME": "gn01",
        "TOPOPLACE_SCONTROL": str(scontrol),
        "TOPOPLACE_GRES_CONF": str(gres_conf),
        "TOPOPLACE_TOPO_DIR": str(topo),
        "TOPOPLACE_PROLOG_LOG": str(log),
        "TOPOPLACE_PYTHON": sys.executable,
    }
    linked = tmp_path / "lib" / "taskprolog.sh"  # installed as a link elsewhere, as docs/slurm.md says
    linked.parent.mkdir()
    linked.symlink_to(TASKPROLOG)
    done = subprocess.run(["/bin/sh", str(linked)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert "export CUDA_VISIBLE_DEVICES=4,5" in done.stdout.splitlines()
    assert "plan abc named GPUs [0, 1]" in log.read_text()
    # A broken gres.conf: the task still starts, nothing is exported, the reason is logged.
    gres_conf.write_text("Name=gpu Bogus=1\n")
    done = subprocess.run(["/bin/sh", str(TASKPROLOG)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout == ""
    assert "nothing exported" in log.read_text() and "unknown gres.conf key 'Bogus'" in log.read_text()
