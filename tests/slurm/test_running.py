"""When each GPU frees (adapters/slurm/running.py): the running jobs' GPUs read from Slurm's own
output, once per job, and their ends from every read."""

from __future__ import annotations

import math
from pathlib import Path

from adapters.slurm.running import BATCH_READ, RunningJobs, gpus_held, parse_running


def test_the_gpus_a_job_holds_are_read_per_node_from_the_capture(fixtures: Path) -> None:
    held = gpus_held((fixtures / "scontrol-show-job-d.txt").read_text())
    # job 1: gn01 IDX 2; job 2, a gang: gn01 IDX 4-5 and gn02 IDX 0-1 (empty "IDX:" items skipped)
    assert held["1"] == {"gn01": (2,)}
    assert held["2"] == {"gn01": (4, 5), "gn02": (0, 1)}


def test_running_ends_are_read_and_a_job_without_an_end_never_ends() -> None:
    text = "11|2026-12-06T21:00:00\n12|Unknown\nnot a line\n|2026-12-06T21:00:00\n"
    ends = parse_running(text)
    assert set(ends) == {"11", "12"} and math.isinf(ends["12"]) and ends["11"] < math.inf


def job(job_id: str, node: str, idx: str) -> str:
    return (
        f"JobId={job_id} JobName=wrap\n   JobState=RUNNING Reason=None\n"
        f"     Nodes={node} CPU_IDs=0 Mem=0 GRES=gpu:sw0:2(IDX:{idx}),nic:sw0:2(IDX:{idx})\n\n"
    )


def test_a_job_is_read_once_its_end_every_time_and_forgotten_when_it_ends() -> None:
    calls: list[list[str]] = []
    texts = {"1": job("1", "n1", "0-1"), "2": job("2", "n2", "4")}

    def show(ids: list[str]) -> str:
        calls.append(ids)
        return "".join(texts[i] for i in (ids or texts))

    running = RunningJobs()
    running.read({"1": 100.0}, show)
    running.read({"1": 160.0, "2": 200.0}, show)  # job 1's limit raised; job 2 started
    assert calls == [["1"], ["2"]]
    assert running.ends() == {"n1": {0: 160.0, 1: 160.0}, "n2": {4: 200.0}}
    running.read({"2": 200.0}, show)  # job 1 ended
    assert calls == [["1"], ["2"]] and running.ends() == {"n2": {4: 200.0}}


def test_many_new_jobs_are_read_in_one_call_and_one_gone_meanwhile_holds_nothing() -> None:
    calls: list[list[str]] = []
    ids = [str(i) for i in range(BATCH_READ + 1)]

    def show(asked: list[str]) -> str:
        calls.append(asked)
        return "".join(job(i, f"n{i}", "0") for i in ids[1:])  # job 0 ended before the read

    running = RunningJobs()
    running.read(dict.fromkeys(ids, 50.0), show)
    assert calls == [[]]  # one read of all jobs
    ends = running.ends()
    assert "n0" not in ends and ends["n1"] == {0: 50.0} and len(ends) == BATCH_READ


def test_jobs_whose_read_failed_are_read_again_not_taken_as_holding_nothing() -> None:
    """A failed ``scontrol`` (slurmctld busy, a timeout) used to leave the new jobs recorded with no
    GPUs for good: their GPUs then counted as held by no job read."""
    answers: list[str | None] = [None, job("1", "n1", "0-1")]
    calls: list[list[str]] = []

    def show(ids: list[str]) -> str | None:
        calls.append(ids)
        return answers.pop(0)

    running = RunningJobs()
    running.read({"1": 100.0}, show)
    assert running.ends() == {}
    running.read({"1": 100.0}, show)
    assert calls == [["1"], ["1"]] and running.ends() == {"n1": {0: 100.0, 1: 100.0}}
