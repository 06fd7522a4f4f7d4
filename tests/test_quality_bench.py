"""bench.quality's comparison of gangs' switch tiers: what the README's tier figures are read from."""

from __future__ import annotations

from bench.quality import common_tiers


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
