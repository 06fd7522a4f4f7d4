"""Issue 21: what-if plots a person can read — no empty panels, variant names that fit, drained nodes
told apart from empty slots, identical policy lines named as such, misaligned pairs plotted."""

from __future__ import annotations

import numpy as np

from solver.whatif.plots import heatmap_figure, occupancy_grid, summary_figure, timeline_figure
from solver.whatif.report import NodeUse, Outcome, Sample, Summary, WhatIfReport


def outcome(variant: str, policy: str, *, placed: int = 3, misaligned: int = 0, stranded: float = 0.0,
            timeline: tuple[Sample, ...] = ()) -> Outcome:  # fmt: skip
    summary = Summary(jobs_total=4, jobs_placed=placed, gpus_used_after=8, misaligned_pairs=misaligned,
                      stranded_gpus_after=stranded)  # fmt: skip
    return Outcome(variant=variant, policy=policy, summary=summary, timeline=timeline)


def titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes if ax.get_title()]


def test_measures_that_are_zero_everywhere_get_no_panel_but_a_note() -> None:
    report = WhatIfReport(scenario="s", outcomes=(outcome("base", "solver"), outcome("base", "volcano")))
    fig = summary_figure(report)
    assert titles(fig) == ["jobs placed", "GPUs in use after placing"]
    notes = " ".join(t.get_text() for t in fig.texts)
    assert "GPUs stranded after placing" in notes and "GPU↔NIC pairs misaligned" in notes


def test_misaligned_pairs_are_plotted_when_any_policy_leaves_some() -> None:
    report = WhatIfReport(
        scenario="s", outcomes=(outcome("base", "solver"), outcome("base", "volcano", misaligned=19))
    )
    assert "GPU↔NIC pairs misaligned" in titles(summary_figure(report))


def test_long_variant_names_are_wrapped_to_fit() -> None:
    name = "drain dgx-01, GPU3 of dgx-04 fails"
    report = WhatIfReport(scenario="s", outcomes=(outcome(name, "solver"),))
    fig = summary_figure(report)
    labels = [t.get_text() for t in fig.axes[-1].get_xticklabels()]
    assert labels and all(max(len(line) for line in label.split("\n")) <= 18 for label in labels)


def test_drained_nodes_and_empty_slots_are_told_apart() -> None:
    nodes = [
        NodeUse(node="a0", leaf="l0", gpus=8, used=4),
        NodeUse(node="a1", leaf="l0", gpus=8, used=0, schedulable=False),
        NodeUse(node="b0", leaf="l1", gpus=8, used=8),
    ]
    grid, drained = occupancy_grid(nodes, ["l0", "l1"])
    assert grid[0, 0] == 0.5 and grid[0, 1] == 1.0
    assert drained[1, 0] and not drained[1, 1]  # a1 drained; the slot under b0 holds no node
    assert np.isnan(grid[1, 1])
    cell = Outcome(variant="v", policy="solver", before=tuple(nodes), after=tuple(nodes))
    fig = heatmap_figure("v", [cell])
    labels = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert labels == ["drained", "no node"]


def test_identical_policy_lines_are_named_not_hidden() -> None:
    samples = tuple(Sample(t_s=t, gpus_used=t, gpus_total=10, queue_length=0, running_jobs=1,
                           fragmentation=0.1, stranded_gpus=0) for t in range(5))  # fmt: skip
    other = tuple(s.model_copy(update={"gpus_used": 1}) for s in samples)
    report = WhatIfReport(
        scenario="s",
        outcomes=(
            outcome("base", "solver", timeline=samples),
            outcome("base", "volcano", timeline=samples),
            outcome("base", "bestfit", timeline=other),
        ),
    )
    fig = timeline_figure(report)
    legend = fig.axes[0].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == ["solver", "volcano (identical to solver)", "bestfit"]
    widths = [line.get_linewidth() for line in fig.axes[0].get_lines()]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 3  # thick to thin
