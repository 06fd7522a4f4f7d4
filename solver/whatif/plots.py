"""PNG plots of a what-if report, drawn headless (matplotlib's Agg backend, no display needed).

- ``<stem>-timeline.png`` (traces): GPU allocation, fragmentation and queue length over time, one line
  per policy (and variant, when there are several).
- ``<stem>-summary.png`` (batches): jobs placed and GPUs left stranded, per variant and policy.
- ``<stem>-heatmap-<variant>.png``: GPU occupancy of every node, one column per leaf switch, before
  placing and after each policy placed.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on servers and in CI

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from solver.whatif.report import NodeUse, Outcome, WhatIfReport

DPI = 100
ANNOTATE_MAX_CELLS = 64  # write "used/total" in each cell of small heatmaps


def write_plots(report: WhatIfReport, out_dir: Path, stem: str) -> list[Path]:
    """Every plot that applies to the report, written into ``out_dir``; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if any(o.timeline for o in report.outcomes):
        written.append(_save(timeline_figure(report), out_dir / f"{stem}-timeline.png"))
    if report.outcomes:  # traces too: jobs placed and misaligned pairs are totals a timeline hides
        written.append(_save(summary_figure(report), out_dir / f"{stem}-summary.png"))
    seeds = sorted({o.seed for o in report.outcomes})
    for variant in dict.fromkeys(o.variant for o in report.outcomes):
        cells = [o for o in report.outcomes if o.variant == variant and o.seed == (seeds[0] if seeds else 0)]
        if cells and cells[0].before:
            path = out_dir / f"{stem}-heatmap-{slug(variant)}.png"
            written.append(_save(heatmap_figure(variant, cells), path))
    return written


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "variant"


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def _label(o: Outcome, many_variants: bool, many_seeds: bool) -> str:
    parts = [o.policy]
    if many_variants:
        parts.append(o.variant)
    if many_seeds:
        parts.append(f"seed {o.seed}")
    return " · ".join(parts)


def _wrap(text: str, width: int = 18) -> str:
    """Long variant names on several lines, so tick labels stay inside the figure."""
    return "\n".join(textwrap.wrap(text, width)) or text


# One colour, marker and hatch per policy, in the order policies are listed: told apart in colour,
# in grey print and by colour-blind readers alike.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "--", "oo")


def _style(k: int) -> dict[str, object]:
    return {"color": f"C{k % 10}", "marker": MARKERS[k % len(MARKERS)]}


def timeline_figure(report: WhatIfReport) -> Figure:
    """One column per variant; in each, allocation, fragmentation and queue length per policy.

    Policies often agree for long stretches: lines are drawn thick to thin (the first policy thickest)
    with markers, so one under another still shows, and a legend entry says when a policy's whole
    series equals an earlier one's."""
    outcomes = [o for o in report.outcomes if o.timeline]
    variants = list(dict.fromkeys(o.variant for o in outcomes))
    many_seeds = len({o.seed for o in outcomes}) > 1
    fig, axes = plt.subplots(
        3, len(variants), figsize=(5.5 * len(variants) + 1, 8.5), sharex=True, squeeze=False
    )
    policies = list(dict.fromkeys(o.policy for o in outcomes))
    metrics = (
        lambda s: 100 * s.utilisation,
        lambda s: s.fragmentation,
        lambda s: s.queue_length,
    )
    earlier: dict[tuple[str, int], list[tuple[str, list[tuple[float, ...]]]]] = {}  # per cell column
    for o in outcomes:
        col = variants.index(o.variant)
        t = [s.t_s for s in o.timeline]
        k = policies.index(o.policy)
        label = _label(o, False, many_seeds)
        rows = [[metric(s) for s in o.timeline] for metric in metrics]
        series = [(*t, *values) for values in rows]
        seen = earlier.setdefault((o.variant, o.seed), [])
        twin = next((name for name, other in seen if other == series), None)
        seen.append((label, series))
        for row, values in enumerate(rows):
            axes[row][col].step(
                t,
                values,
                where="post",
                linewidth=1.2 + 1.6 * (len(policies) - 1 - k),
                alpha=0.85,
                markersize=3,
                markevery=max(1, len(t) // 12),
                label=label + (f" (identical to {twin})" if twin else ""),
                **_style(k),
            )
    for col, variant in enumerate(variants):
        axes[0][col].set_title(_wrap(variant, 40))
        axes[0][col].set_ylim(0, 105)
        axes[1][col].set_ylim(0, 1.05)
        axes[2][col].set_xlabel("time (s)")
        for row in range(3):
            axes[row][col].grid(True, alpha=0.3)
    axes[0][0].set_ylabel("GPUs allocated (%)")
    axes[1][0].set_ylabel("fragmentation\n(free GPUs unusable)")
    axes[2][0].set_ylabel("jobs waiting")
    for col in range(len(variants)):  # each variant says which of its policies drew the same lines
        axes[0][col].legend(loc="lower left", fontsize="small", title="policy (thick to thin)")
    fig.suptitle(f"{report.scenario}: allocation, fragmentation and queue over time")
    fig.tight_layout()
    return fig


def summary_figure(report: WhatIfReport) -> Figure:
    """Per variant and policy: jobs placed, and each measure that is not zero everywhere (GPUs in use,
    GPUs left stranded, GPU↔NIC pairs left misaligned); the all-zero ones are named under the plot
    instead of drawn as empty panels."""
    seed = min(o.seed for o in report.outcomes)
    outcomes = [o for o in report.outcomes if o.seed == seed]
    variants = list(dict.fromkeys(o.variant for o in outcomes))
    policies = list(dict.fromkeys(o.policy for o in outcomes))
    by = {(o.variant, o.policy): o for o in outcomes}
    measures = [
        ("jobs placed", lambda o: o.summary.jobs_placed),
        ("GPUs in use after placing", lambda o: o.summary.gpus_used_after),
        ("GPUs stranded after placing", lambda o: o.summary.stranded_gpus_after),
        ("GPU↔NIC pairs misaligned", lambda o: o.summary.misaligned_pairs),
    ]
    shown = [m for m in measures if m is measures[0] or any(m[1](o) for o in outcomes)]
    zero = [name for name, value in measures if (name, value) not in shown]
    panel_width = max(7.0, 0.55 * len(variants) * max(1, len(policies)) + 3)
    fig, grid = plt.subplots(
        len(shown), 1, figsize=(panel_width, 3.0 * len(shown) + 1.0), sharex=True, squeeze=False
    )
    axes = [[row[0] for row in grid]]  # one panel per measure, stacked: long variant names fit below
    width = 0.8 / max(1, len(policies))
    x = np.arange(len(variants))
    for ax, (title, value) in zip(axes[0], shown, strict=True):
        for k, policy in enumerate(policies):
            values = [value(by[(v, policy)]) if (v, policy) in by else 0 for v in variants]
            bars = ax.bar(x + k * width, values, width, label=policy, color=f"C{k % 10}",
                          hatch=HATCHES[k % len(HATCHES)], edgecolor="white", linewidth=0.5)  # fmt: skip
            ax.bar_label(bars, fontsize="x-small", fmt="%g")
        ax.set_xticks(x + width * (len(policies) - 1) / 2, [_wrap(v) for v in variants], fontsize="small")
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
        ax.margins(y=0.15)
    total = max((o.summary.jobs_total for o in outcomes), default=0)
    axes[0][0].axhline(total, color="grey", linestyle="--", linewidth=1, label="jobs in the batch")
    axes[0][0].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(report.scenario)
    if zero:
        fig.text(0.5, -0.02, "zero for every variant and policy: " + "; ".join(zero), ha="center",
                 fontsize="small", color="dimgrey")  # fmt: skip
    fig.tight_layout()
    return fig


def occupancy_grid(nodes: Sequence[NodeUse], leaves: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Rows = node slot within its leaf (name order), columns = leaves: used/GPUs (NaN where there is
    no node or a node without GPUs), and where a node is drained (drawn apart from "no node")."""
    by_leaf: dict[str, list[NodeUse]] = {leaf: [] for leaf in leaves}
    for n in nodes:
        by_leaf[n.leaf or "(no leaf)"].append(n)
    rows = max((len(v) for v in by_leaf.values()), default=0)
    grid = np.full((max(1, rows), max(1, len(leaves))), np.nan)
    drained = np.zeros(grid.shape, dtype=bool)
    for c, leaf in enumerate(leaves):
        for r, n in enumerate(sorted(by_leaf[leaf], key=lambda n: n.node)):
            if not n.schedulable:
                drained[r, c] = True
            elif n.gpus:
                grid[r, c] = n.used / n.gpus
    return grid, drained


DRAINED = "#e9a3a3"  # a muted red: taken out of service, unlike the white of "no node here"


def heatmap_figure(variant: str, outcomes: Sequence[Outcome]) -> Figure:
    """Before placing, then after each policy, on one colour scale; drained nodes hatched red, empty
    slots white."""
    panels = [("before", outcomes[0].before)] + [(f"after {o.policy}", o.after) for o in outcomes]
    leaves = sorted({n.leaf or "(no leaf)" for _, nodes in panels for n in nodes})
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    cols = len(panels)
    grids = [occupancy_grid(nodes, leaves) for _, nodes in panels]
    height = min(12, 3.0 + 0.5 * grids[0][0].shape[0])
    width = min(26, cols * max(3.0, 0.55 * len(leaves) + 1.2) + 1.5)
    fig, axes = plt.subplots(1, cols, figsize=(width, height), squeeze=False)
    image = None
    for ax, (title, nodes), (grid, drained) in zip(axes[0], panels, grids, strict=True):
        image = ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        for r, c in zip(*np.nonzero(drained), strict=True):
            cell = Rectangle((c - 0.5, r - 0.5), 1, 1, facecolor=DRAINED, hatch="//", edgecolor="white")
            ax.add_patch(cell)
        ax.set_title(title, fontsize="medium")
        step = max(1, math.ceil(len(leaves) / 16))
        ax.set_xticks(range(0, len(leaves), step), leaves[::step], rotation=45, ha="right", fontsize="small")
        rows = grid.shape[0]
        ax.set_yticks(range(0, rows, max(1, math.ceil(rows / 16))))
        if ax is axes[0][0]:
            ax.set_ylabel("node within leaf (by name)")
        if grid.size <= ANNOTATE_MAX_CELLS:
            _annotate(ax, nodes, leaves)
    assert image is not None
    fig.colorbar(image, ax=axes[0].tolist(), label="GPUs occupied (fraction)", shrink=0.9)
    fig.legend(
        handles=[
            Patch(facecolor=DRAINED, hatch="//", edgecolor="white", label="drained"),
            Patch(facecolor="white", edgecolor="grey", label="no node"),
        ],
        loc="lower center",
        ncol=2,
        fontsize="small",
        bbox_to_anchor=(0.45, -0.08),
    )
    fig.suptitle(f"GPU occupancy per node, by leaf switch — {variant}", y=1.04)
    return fig


def _annotate(ax: plt.Axes, nodes: Sequence[NodeUse], leaves: Sequence[str]) -> None:
    for c, leaf in enumerate(leaves):
        members = sorted((n for n in nodes if (n.leaf or "(no leaf)") == leaf), key=lambda n: n.node)
        for r, n in enumerate(members):
            dark = n.schedulable and n.gpus and n.used < n.gpus / 2
            ax.text(
                c,
                r,
                f"{n.node}\n{n.used}/{n.gpus}" + (f"\n{n.unhealthy} failed" if n.unhealthy else ""),
                ha="center",
                va="center",
                fontsize=6.5,
                color="white" if dark else "black",
            )
