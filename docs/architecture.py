"""Draws docs/architecture.png, the README's picture of the pipeline and where Volcano and Slurm plug in.

Run: python docs/architecture.py  (matplotlib only; the picture is committed, this is how to redraw it)
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

INPUT = "#dbe9f6"
CORE = "#fde9c9"
OUTPUT = "#d9f0d3"
EDGE = "#333333"


def box(ax, x: float, y: float, w: float, h: float, title: str, body: str, colour: str) -> None:
    ax.add_patch(
        FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08", fc=colour, ec=EDGE, lw=1.2)
    )
    ax.text(x + w / 2, y + h - 0.16, title, ha="center", va="top", fontsize=10.5, weight="bold")
    if body:
        ax.text(x + w / 2, y + h - 0.48, body, ha="center", va="top", fontsize=8.5, linespacing=1.35)


def arrow(ax, a: tuple[float, float], b: tuple[float, float], label: str = "") -> None:
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=14, lw=1.3, color=EDGE))
    if label:
        ax.text((a[0] + b[0]) / 2 + 0.06, (a[1] + b[1]) / 2, label, fontsize=8, va="center", color="#444")


def draw(path: Path) -> None:
    fig, ax = plt.subplots(figsize=(12, 7.2), dpi=110)
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 7.2)
    ax.axis("off")

    # Who asks: four front doors, all speaking the same SolveRequest.
    ax.text(0.1, 7.0, "Who asks", fontsize=11, weight="bold", va="top", color="#1f4e79")
    box(
        ax,
        0.1,
        5.0,
        2.75,
        1.75,
        "Volcano",
        "scheduler's extender plugin\n→ adapters/volcano\n(HTTP: onSessionOpen,\npredicate, allocateFunc)",
        INPUT,
    )
    box(
        ax,
        3.05,
        5.0,
        2.75,
        1.75,
        "Slurm",
        "job_submit.lua hook\n→ adapters/slurm agent\n(scontrol, gres.conf,\ntopology.conf)",
        INPUT,
    )
    box(
        ax,
        6.0,
        5.0,
        2.75,
        1.75,
        "You, on the CLI",
        "topoplace solve REQUEST.json\ntopoplace ingest nvidia-smi\ntopoplace serve (gRPC)",
        INPUT,
    )
    box(
        ax,
        8.95,
        5.0,
        2.95,
        1.75,
        "What-if",
        "topoplace whatif SCENARIO\nadd / drain / fail nodes,\n"
        "replay a trace, compare\nwith greedy baselines",
        INPUT,
    )

    # The core: one pipeline per batch.
    ax.add_patch(
        FancyBboxPatch(
            (0.1, 2.05),
            11.8,
            2.3,
            boxstyle="round,pad=0.02,rounding_size=0.1",
            fc="#fff8ee",
            ec="#c98a2b",
            lw=1.5,
        )
    )
    ax.text(
        0.3,
        4.22,
        "solver/  —  one batch of gang jobs on one cluster inventory "
        "(over gRPC Placement/Solve or in-process)",
        fontsize=10.5,
        weight="bold",
        va="top",
        color="#7a4a00",
    )
    stages = [
        ("validate", "errors with\nfield paths"),
        ("reduce", "policy chains,\nnode classes,\nrails, shapes"),
        ("compile", "one CP-SAT\nmodel"),
        ("search", "greedy floor,\nthen CP-SAT\ntier by tier"),
        ("decode", "nodes, GPUs,\nNICs, shares"),
        ("explain", "why a job is\nunplaced + fix"),
        ("verify", "independent\nchecker of\nevery answer"),
    ]
    w, gap, x0, y0 = 1.45, 0.2, 0.3, 2.25
    for i, (name, body) in enumerate(stages):
        x = x0 + i * (w + gap)
        box(ax, x, y0, w, 1.45, name, body, CORE)
        if i:
            arrow(ax, (x - gap, y0 + 0.72), (x, y0 + 0.72))
    for xc in (1.47, 4.42, 7.37, 10.42):
        arrow(ax, (xc, 5.0), (xc, 4.37))

    # What comes back, and how each scheduler enforces it.
    ax.text(0.1, 1.75, "What comes back", fontsize=11, weight="bold", va="top", color="#2d6a1f")
    box(
        ax,
        0.1,
        0.1,
        3.7,
        1.4,
        "Volcano",
        "pod annotations with the chosen\nGPU UUIDs and NICs (HAMi /\nvolcano-vgpu device plugin)",
        OUTPUT,
    )
    box(
        ax,
        4.15,
        0.1,
        3.7,
        1.4,
        "Slurm",
        "ReqNodeList + GRES typed by PCIe\nswitch; TaskProlog exports\nCUDA_VISIBLE_DEVICES, NCCL_IB_HCA",
        OUTPUT,
    )
    box(
        ax,
        8.2,
        0.1,
        3.7,
        1.4,
        "CLI / what-if",
        "a table per member: node, GPUs,\nNICs (GPU↔NIC pairs), NUMA; the\nreason for every unplaced job",
        OUTPUT,
    )
    for xc in (3.0, 7.0, 11.0):
        arrow(ax, (xc, 2.05), (xc, 1.52))

    fig.savefig(path, bbox_inches="tight", facecolor="white")
    plt.close(fig)


if __name__ == "__main__":
    draw(Path(__file__).with_name("architecture.png"))
