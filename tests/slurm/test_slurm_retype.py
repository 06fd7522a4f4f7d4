"""What Slurm 22.05 itself does when a pending job's switch-typed GRES is updated: the fact the agent's
design rests on (a plan's GRES types are chosen once, at submit; a release clears the node list only).

On a real slurmctld with two ``slurmd -N`` on loopback (GRES typed per PCIe switch, the hook disabled),
a held job ``--gres=gpu:sw0:1`` is updated with ``scontrol update JobId=… TresPerNode=…``, released, and
its allocation read back from ``scontrol show job -d``:

- back to untyped (``gres:gpu:1``): refused, "with and without type identification";
- the slash form (``gres/gpu:1``): accepted and shown, but the job still runs on a ``sw0`` GPU;
- another type (``gres:gpu:sw1:1``): accepted, and the job runs holding *both* (sw0 and sw1: two GPUs
  for a one-GPU job).

If a later Slurm replaces the request instead, these fail, and releasing a job to Slurm's own GPU choice
(issue 20) becomes possible. Skips only when the Slurm/MUNGE programs are not installed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.slurm.emulate import ClusterSpec, EmulatedCluster, missing_binaries

MISSING = missing_binaries()
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"Slurm/MUNGE not installed ({', '.join(MISSING)}): run scripts/install-slurm.sh"
)
CAPTURE = Path(__file__).resolve().parents[2] / "fixtures" / "topo" / "a100-nv12-8gpu-10nic-fixture.txt"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedCluster]:
    root = tmp_path_factory.mktemp("retype")
    cluster = EmulatedCluster(root, ClusterSpec(nodes=2, nodes_per_leaf=2, capture=CAPTURE), taskprolog=False)
    cluster.write_files({"enabled": "no"})
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _held_job(cluster: EmulatedCluster) -> str:
    done = cluster.run(
        "sbatch", "--parsable", "-H", "-N1", "-w", "gn01", "--gres=gpu:sw0:1", "--wrap", "sleep 60"
    )
    return done.stdout.strip()


def _allocated_when_running(cluster: EmulatedCluster, job_id: str) -> str:
    """The job's GRES with IDX once it runs (``gpu:sw0:1(IDX:0),…``); the job is then cancelled."""
    cluster.run("scontrol", "release", job_id)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            text = cluster.run("scontrol", "show", "job", "-d", job_id).stdout
            if "JobState=RUNNING" in text:
                return re.findall(r"GRES=(\S+)", text)[-1]
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} did not run: {text}")
    finally:
        cluster.run("scancel", job_id, check=False)
        _until_no_job_holds_a_node(cluster)


def _until_no_job_holds_a_node(cluster: EmulatedCluster, timeout_s: float = 60.0) -> None:
    """Until no job runs or is still completing: the next test's job asks for the same node whole
    (its memory), and a cancelled job holds it until slurmd reports it gone — once 30 s on a loaded
    CI host, and the next job, estimated to start just then, missed its 30 s wait (session 16)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        listed = cluster.run("squeue", "-h", "-t", "R,CG", "-o", "%i", check=False)
        if listed.returncode == 0 and not listed.stdout.strip():
            return
        time.sleep(0.3)


def test_a_pending_typed_job_cannot_go_back_to_untyped_gres(cluster: EmulatedCluster) -> None:
    job = _held_job(cluster)
    try:
        done = cluster.run("scontrol", "update", f"JobId={job}", "TresPerNode=gres:gpu:1", check=False)
        assert done.returncode != 0
        assert "with and without type identification" in done.stderr
    finally:
        cluster.run("scancel", job, check=False)


def test_the_slash_form_is_accepted_but_changes_only_the_text(cluster: EmulatedCluster) -> None:
    job = _held_job(cluster)
    cluster.run("scontrol", "update", f"JobId={job}", "TresPerNode=gres/gpu:1")
    assert "TresPerNode=gres/gpu:1" in cluster.run("scontrol", "show", "job", job).stdout
    assert _allocated_when_running(cluster, job) == "gpu:sw0:1(IDX:0)"


def test_another_type_is_added_to_the_old_one_not_put_in_its_place(cluster: EmulatedCluster) -> None:
    job = _held_job(cluster)
    cluster.run("scontrol", "update", f"JobId={job}", "TresPerNode=gres:gpu:sw1:1")
    allocated = _allocated_when_running(cluster, job)
    assert "gpu:sw0:1" in allocated and "gpu:sw1:1" in allocated, allocated
