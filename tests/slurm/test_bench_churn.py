"""The slurm_compare bench's stream of jobs that end (``--churn``), and how it reads what each job
was given at its start (the job writes ``scontrol show job -d`` of itself: an ended job leaves
``scontrol``). The runs themselves need the real Slurm and minutes: bench only."""

from __future__ import annotations

from pathlib import Path

from adapters.slurm.emulate import parse_jobs
from bench.slurm_compare import _seconds_between, _started_records, churn_stream, job_stream


def test_the_churn_stream_arrives_over_the_first_part_of_the_window_and_every_job_ends() -> None:
    stream = churn_stream(64, 1, 420)
    assert len(stream) == 3 * len(job_stream(64, 1))
    assert stream == churn_stream(64, 1, 420)  # same seed, same stream: configurations side by side
    assert stream != churn_stream(64, 2, 420)
    arrivals = [s.at_s for s in stream]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    assert 0.4 * 420 < arrivals[-1] < 0.75 * 420
    assert all(40 <= s.seconds <= 160 for s in stream)
    for submit in stream:  # the time limit a user would give: past the run time, in whole minutes
        minutes = int(submit.args()[submit.args().index("-t") + 1])
        assert submit.seconds < minutes * 60 <= submit.seconds + 90
    assert job_stream(64, 1)[0].args()[-2:] == ["-t", "60"]  # jobs that never end keep the old limit


def test_parse_jobs_reads_state_times_allocation_and_plan(fixtures: Path) -> None:
    jobs = parse_jobs((fixtures / "scontrol-show-job-d.txt").read_text())
    first, second = jobs["1"], jobs["2"]
    assert first["state"] == "RUNNING" and first["plan"] == ""
    assert first["alloc"] == {"gn01": "gpu:sw1:1(IDX:2),nic:sw1:1(IDX:2)"}
    assert _seconds_between(first["submitted"], first["started"]) == 1.0
    assert set(second["alloc"]) == {"gn01", "gn02"}
    assert second["plan"] == "topoplace/v1 id=abc gn[01-02]:gpu=0,1:nic=mlx5_2,mlx5_3"
    assert second["comment"] == "mine topoplace/v1 id=abc gn[01-02]:gpu=0,1:nic=mlx5_2,mlx5_3"
    assert _seconds_between("2026-12-04T07:18:54", "Unknown") is None


def test_a_job_counts_as_started_only_from_its_own_record_with_an_allocation(
    tmp_path: Path, fixtures: Path
) -> None:
    text = (fixtures / "scontrol-show-job-d.txt").read_text()
    first = text[: text.index("JobId=2")]
    (tmp_path / "1.alloc").write_text(first.replace("JobState=RUNNING", "JobState=COMPLETING"))
    (tmp_path / "7.alloc").write_text("")  # scontrol failed in the job: not counted as started
    (tmp_path / "1.out").write_text("TP gn01 gpus=2 hca==mlx5_2\n")
    started = _started_records(tmp_path)
    assert list(started) == ["1"] and started["1"]["state"] == "RUNNING"
    assert started["1"]["alloc"] == {"gn01": "gpu:sw1:1(IDX:2),nic:sw1:1(IDX:2)"}
