"""The Slurm bench's packing replay (``bench.slurm_packing``) on a hand-written end state."""

from __future__ import annotations

from pathlib import Path

from bench.slurm_packing import replay

NODE = (
    "NodeName={name} Arch=x86_64 Gres=gpu:sw0:2(S:0),gpu:sw1:2(S:0),nic:sw0:2(S:0),nic:sw1:2(S:0) "
    "GresUsed=gpu:sw0:0(IDX:N/A) State=MIXED\n"
)


def _job(job: int, node: str, gres: str, state: str = "RUNNING") -> str:
    return (
        f"JobId={job} JobName=wrap\n   JobState={state} Reason=None Dependency=(null)\n"
        f"     Nodes={node} CPU_IDs=0 Mem=0 GRES={gres}\n   TresPerNode=gres:gpu:1\n\n"
    )


def test_a_job_on_an_emptier_node_than_the_fullest_that_could_take_it_is_a_miss(tmp_path: Path) -> None:
    """a holds 3 of its 4 GPUs (background job 1); b and c are empty. Job 2 (1 GPU) on a: best fit.
    Job 3 (1 GPU + NIC) on b: a is full by then, so b is as full as any node that takes it. Job 4
    (1 GPU) on the empty c while b has 3 free: a miss. A pending job and a gang are not checked."""
    (tmp_path / "nodes.txt").write_text("".join(NODE.format(name=n) for n in ("a", "b", "c")))
    (tmp_path / "jobs.txt").write_text(
        _job(1, "a", "gpu:sw0:2(IDX:0-1),gpu:sw1:1(IDX:2)")
        + _job(2, "a", "gpu:sw1:1(IDX:3)")
        + _job(3, "b", "gpu:sw0:1(IDX:0),nic:sw0:1(IDX:0)")
        + _job(4, "c", "gpu:sw0:1(IDX:0)")
        + _job(5, "c", "gpu:sw0:1(IDX:1)", state="PENDING")
        + _job(6, "b,c", "gpu:sw1:2(IDX:2-3)")
    )
    (tmp_path / "submitted.txt").write_text(
        "2 -N1 --gpus-per-node=1 -t 60\n3 -N1 --gpus-per-node=1 --gres=nic:1 -t 60\n"
        "4 -N1 --gpus-per-node=1 -t 60\n5 -N1 --gpus-per-node=1 -t 60\n6 -N2 --gpus-per-node=2 -t 60\n"
    )
    packing = replay(tmp_path)
    assert packing.checked == 3
    assert [(m.job, m.got, m.fullest) for m in packing.misses] == [(4, 4, 3)]


def test_a_nic_job_needs_its_nics_behind_the_gpus_switches(tmp_path: Path) -> None:
    """a has a free GPU on sw1 but its sw1 NICs are taken: a 1-GPU job asking a NIC cannot use a, so
    going to the empty b is no miss; the same job without NICs would have been one."""
    (tmp_path / "nodes.txt").write_text("".join(NODE.format(name=n) for n in ("a", "b")))
    background = _job(1, "a", "gpu:sw0:2(IDX:0-1),gpu:sw1:1(IDX:2),nic:sw1:2(IDX:2-3)")
    for args, misses in (("--gres=nic:1 ", 0), ("", 1)):
        (tmp_path / "jobs.txt").write_text(background + _job(2, "b", "gpu:sw0:1(IDX:0)"))
        (tmp_path / "submitted.txt").write_text(f"2 -N1 --gpus-per-node=1 {args}-t 60\n")
        assert len(replay(tmp_path).misses) == misses


def test_session_26s_kept_runs_replay_to_the_figures_quoted() -> None:
    """bench/RESULTS-slurm.md, session 26: 50 of 168 one-node jobs off best fit before the late pass
    took the fullest nodes first, 1 of 169 after (the end states kept gzipped in bench/results)."""
    kept = Path(__file__).resolve().parents[2] / "bench" / "results" / "slurm-keep-s26"
    figures = {}
    for run in ("hook-128-1-before-33e7024", "hook-128-1-after-c80eefd"):
        packing = replay(kept / run)
        figures[run] = (len(packing.misses), packing.checked)
    assert figures == {"hook-128-1-before-33e7024": (50, 168), "hook-128-1-after-c80eefd": (1, 169)}
