"""Where a figure came from: the commit and the machine, printed beside every benchmark table."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def commit() -> str:
    """The commit of the tree whose ``solver`` runs (a bench may run another tree's, from anywhere)."""
    import solver.solve

    tree = Path(solver.solve.__file__).resolve().parents[1]
    try:
        return subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
