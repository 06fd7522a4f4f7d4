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
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display on servers and in CI

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from solver.whatif.report import NodeUse, Outcome, WhatIfReport

DPI = 100
ANNOTATE_MAX_CELLS = 64  # write "used/total" in each cell of small heatmaps


def write_plots(report: WhatIfReport, out_dir: Path, stem: str) -> list[Path]:
    """Every plot that applies to the report, written into ``out_dir``; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if any(o.timeline for o in report.outcomes):
        written.append(_save(timeline_figure(report), out_dir / f"{stem}-timeline.png"))
    elif report.outcomes:
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


def timeline_figure(report: WhatIfReport) -> Figure:
    """One column per variant; in each, allocation, fragmentation and queue length per policy."""
    outcomes = [o for o in report.outcomes if o.timeline]
    variants = list(dict.fromkeys(o.variant for o in outcomes))
    many_seeds = len({o.seed for o in outcomes}) > 1
    fig, axes = plt.subplots(
        3, len(variants), figsize=(5.5 * len(variants) + 1, 8), sharex=True, squeeze=False
    )
    styles = ("-", "--", ":", "-.")
    policies = list(dict.fromkeys(o.policy for o in outcomes))
    for o in outcomes:
        col = variants.index(o.variant)
        alloc, frag, queue = axes[0][col], axes[1][col], axes[2][col]
        t = [s.t_s for s in o.timeline]
        k = policies.index(o.policy)
        style = {"where": "post", "label": _label(o, False, many_seeds), "linestyle": styles[k % len(styles)],
                 "color": f"C{k}", "linewidth": 1.4}  # fmt: skip
        alloc.step(t, [100 * s.utilisation for s in o.timeline], **style)
        frag.step(t, [s.fragmentation for s in o.timeline], **style)
        queue.step(t, [s.queue_length for s in o.timeline], **style)
    for col, variant in enumerate(variants):
        axes[0][col].set_title(variant)
        axes[0][col].set_ylim(0, 105)
        axes[1][col].set_ylim(0, 1.05)
        axes[2][col].set_xlabel("time (s)")
        for row in range(3):
            axes[row][col].grid(True, alpha=0.3)
    axes[0][0].set_ylabel("GPUs allocated (%)")
    axes[1][0].set_ylabel("fragmentation\n(free GPUs unusable)")
    axes[2][0].set_ylabel("jobs waiting")
    axes[0][0].legend(loc="lower right", fontsize="small")
    fig.suptitle(f"{report.scenario}: allocation, fragmentation and queue over time")
    return fig


def summary_figure(report: WhatIfReport) -> Figure:
    seed = min(o.seed for o in report.outcomes)
    outcomes = [o for o in report.outcomes if o.seed == seed]
    variants = list(dict.fromkeys(o.variant for o in outcomes))
    policies = list(dict.fromkeys(o.policy for o in outcomes))
    by = {(o.variant, o.policy): o for o in outcomes}
    fig, (placed, stranded) = plt.subplots(1, 2, figsize=(max(8, 2.2 * len(variants) + 4), 4))
    width = 0.8 / max(1, len(policies))
    x = np.arange(len(variants))
    for k, policy in enumerate(policies):
        jobs = [by[(v, policy)].summary.jobs_placed if (v, policy) in by else 0 for v in variants]
        lost = [by[(v, policy)].summary.stranded_gpus_after if (v, policy) in by else 0 for v in variants]
        placed.bar(x + k * width, jobs, width, label=policy)
        stranded.bar(x + k * width, lost, width, label=policy)
    total = max((o.summary.jobs_total for o in outcomes), default=0)
    placed.axhline(total, color="grey", linestyle="--", linewidth=1, label="jobs in the batch")
    for ax, title in ((placed, "jobs placed"), (stranded, "GPUs stranded after placing")):
        ax.set_xticks(x + width * (len(policies) - 1) / 2, variants, rotation=15, ha="right")
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    placed.legend(fontsize="small")
    fig.suptitle(report.scenario)
    return fig


def occupancy_grid(nodes: Sequence[NodeUse], leaves: Sequence[str]) -> np.ndarray:
    """Rows = node slot within its leaf (name order), columns = leaves; used/GPUs, NaN where there is
    no node, a node without GPUs, or a drained node (drawn grey)."""
    by_leaf: dict[str, list[NodeUse]] = {leaf: [] for leaf in leaves}
    for n in nodes:
        by_leaf[n.leaf or "(no leaf)"].append(n)
    rows = max((len(v) for v in by_leaf.values()), default=0)
    grid = np.full((max(1, rows), max(1, len(leaves))), np.nan)
    for c, leaf in enumerate(leaves):
        for r, n in enumerate(sorted(by_leaf[leaf], key=lambda n: n.node)):
            if n.gpus and n.schedulable:
                grid[r, c] = n.used / n.gpus
    return grid


def heatmap_figure(variant: str, outcomes: Sequence[Outcome]) -> Figure:
    """Before placing, then after each policy, on one colour scale."""
    panels = [("before", outcomes[0].before)] + [(f"after {o.policy}", o.after) for o in outcomes]
    leaves = sorted({n.leaf or "(no leaf)" for _, nodes in panels for n in nodes})
    cmap = plt.get_cmap("viridis").with_extremes(bad="lightgrey")
    cols = len(panels)
    grids = [occupancy_grid(nodes, leaves) for _, nodes in panels]
    height = min(12, 2.5 + 0.18 * grids[0].shape[0])
    width = min(24, cols * max(2.6, 0.25 * len(leaves) + 1.2))
    fig, axes = plt.subplots(1, cols, figsize=(width, height), squeeze=False)
    image = None
    for ax, (title, nodes), grid in zip(axes[0], panels, grids, strict=True):
        image = ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.set_title(title, fontsize="medium")
        step = max(1, math.ceil(len(leaves) / 16))
        ax.set_xticks(
            range(0, len(leaves), step), leaves[::step], rotation=60, ha="right", fontsize="x-small"
        )
        rows = grid.shape[0]
        ax.set_yticks(range(0, rows, max(1, math.ceil(rows / 16))))
        if ax is axes[0][0]:
            ax.set_ylabel("node within leaf (by name)")
        if grid.size <= ANNOTATE_MAX_CELLS:
            _annotate(ax, nodes, leaves)
    assert image is not None
    fig.colorbar(image, ax=axes[0].tolist(), label="GPUs occupied (fraction); grey = drained or no node")
    fig.suptitle(f"GPU occupancy per node, by leaf switch — {variant}")
    return fig


def _annotate(ax: plt.Axes, nodes: Sequence[NodeUse], leaves: Sequence[str]) -> None:
    for c, leaf in enumerate(leaves):
        members = sorted((n for n in nodes if (n.leaf or "(no leaf)") == leaf), key=lambda n: n.node)
        for r, n in enumerate(members):
            text = f"{n.node}\n{n.used}/{n.gpus}" + ("" if n.schedulable else "\ndrained")
            ax.text(
                c,
                r,
                text,
                ha="center",
                va="center",
                fontsize="x-small",
                color="black" if not n.schedulable or n.used >= n.gpus / 2 else "white",
            )
