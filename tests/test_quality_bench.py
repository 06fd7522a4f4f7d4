"""bench.quality's comparison of gangs' switch tiers: what the README's tier figures are read from."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from bench.quality import common_tiers, merged_rows


def test_gang_tiers_are_compared_on_the_gangs_both_place_by_count_and_by_gpus() -> None:
    """Two small gangs one tier higher and one big gang one tier lower: worse by count, better
    by GPUs (the solver's locality tier weighs gangs by GPUs); a gang only one side placed is
    left out of both means."""
    ours = {"small-a": 2, "small-b": 2, "big": 2, "only-ours": 3}
    theirs = {"small-a": 1, "small-b": 1, "big": 3}
    gpus = {"small-a": 8, "small-b": 8, "big": 128, "only-ours": 16}
    assert common_tiers(ours, theirs, gpus) == "2.00/1.67 (3), by GPUs 2.00/2.78"
    assert common_tiers(ours, theirs) == "2.00/1.67 (3)"
    assert common_tiers({"a": 1}, {"b": 1}) == "-"


def _row(placer: str, seed: int, jobs: int, tiers: dict[str, int]) -> dict:
    return {
        "nodes": 16384, "load": 0.7, "jobs_asked": 500, "seed": seed, "placer": placer,
        "by_priority": [1, 2], "jobs": jobs, "gang_tiers": tiers,
    }  # fmt: skip


def test_saved_runs_are_tabled_together_the_later_run_replacing_the_earlier(tmp_path: Path) -> None:
    """``--table A.json B.json``: the greedy's best orders from a long run beside topoplace from a
    later one. B's rows replace A's of the same cell and placer; a greedy row that differs (a
    different request, or a changed greedy) stops it, naming the file."""
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps([_row("volcano-best10", 1, 9, {"g": 2}), _row("volcano", 1, 8, {"g": 3}),
                             _row("topoplace-15s", 1, 7, {"g": 3})]))  # fmt: skip
    b.write_text(json.dumps([_row("volcano", 1, 8, {"g": 3}), _row("topoplace-15s", 1, 9, {"g": 1})]))
    rows = {r["placer"]: r for r in merged_rows([str(a), str(b)])}
    assert set(rows) == {"volcano-best10", "volcano", "topoplace-15s"}
    assert rows["topoplace-15s"]["gang_tiers"] == {"g": 1} and rows["volcano-best10"]["jobs"] == 9
    c.write_text(json.dumps([_row("volcano", 1, 8, {"g": 2})]))
    with pytest.raises(SystemExit, match=re.escape("c.json: volcano seed 1 differs")):
        merged_rows([str(a), str(c)])


def test_bench_cold_prints_one_verified_calls_figures(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m bench.cold``: one call on bench.quality's request, its plan's source, first tier
    and stage times on one line (what bench/RESULTS.md's cold rows are read from)."""
    from bench import cold

    monkeypatch.setattr(
        sys, "argv", ["cold", "--nodes", "64", "--load", "0.5", "--jobs", "10", "--seed", "1", "--limit", "2"]
    )
    cold.main()
    line = capsys.readouterr().out
    assert re.search(r"64 nodes seed 1 limit 2 s · wall [0-9.]+ s · \S+ · first tier \(\(", line), line
    assert "verify=" in line, line  # every answer is verified before it is printed


def test_bench_cold_asks_again_warm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--warm-with S --calls N``: one call first on the same cluster (its line marked as the call
    that warms), then N calls, each a line marked warm (what bench/RESULTS.md's warm rows are read
    from); every line says the first tier and the gangs' mean tier."""
    from bench import cold

    argv = ["cold", "--nodes", "64", "--load", "0.5", "--jobs", "10", "--limit", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--warm-with", "2", "--calls", "2"])
    cold.main()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "limit 2 s (the call that warms) · wall" in lines[0], lines
    assert all("limit 1 s warm · wall" in line for line in lines[1:]), lines
    assert all("first tier" in line and "gangs' mean tier" in line for line in lines), lines


def test_the_locality_proof_searches_each_gang_the_answer_spread_over_leaves(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench.locality_proof reads a call's answer back into a model and searches one neighbourhood
    per gang spread over leaves: one row for each such gang of the answer (its own decode says which),
    each settled or open, and a locality tier that never falls (a better plan is kept, never a worse)."""
    from bench import locality_proof
    from solver.search import neighbourhood
    from solver.solve import solve

    monkeypatch.setattr(neighbourhood, "MIN_VARIABLES", 0)  # a small cluster searched as a big one's
    args = ["--nodes", "256", "--jobs", "40", "--limit", "2", "--per", "2", "--seed", "2"]
    monkeypatch.setattr(sys, "argv", ["locality_proof", *args])
    locality_proof.main()
    out = capsys.readouterr().out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| gang-")]
    base = locality_proof.request(256, 0.7, 40, 2)
    answer = solve(base.model_copy(update={"policy": base.policy.model_copy(update={"time_limit_s": 2})}))
    spread = {job.job_id for job in answer.jobs if job.placed and job.leaves_spanned > 1}
    assert spread, "the request should leave a gang spread over leaves to look at"
    assert {row[0].removeprefix("| ") for row in rows} == spread
    assert all(row[-1].rstrip(" |") in {"proven", "better", "open"} for row in rows)
    before, after = map(int, re.search(r"locality tier (-?\d+) -> (-?\d+)", out).groups())  # type: ignore[union-attr]
    assert after >= before
