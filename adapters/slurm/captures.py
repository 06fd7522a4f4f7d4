"""Finding a node's ``nvidia-smi topo -m`` capture, and the NIC names in its legend.

Standard library only: the TaskProlog's helper (:mod:`adapters.slurm.job_devices`) runs on compute
nodes as ``python3 -I -S`` and reads NIC names from here when sysfs cannot tell them.

Rule (most specific first): ``DIR/<node>.txt``, then a ``DIR/<hostlist>.txt`` whose expansion holds
the node (``gpu[001-032].txt`` for one node type), then ``DIR/default.txt``.
"""

from __future__ import annotations

import re
from pathlib import Path

from adapters.slurm.hostlist import HostlistError, expand

_NIC_LEGEND = re.compile(r"^\s*NIC(\d+):\s*(\S+)\s*$", re.MULTILINE)


def hostlist_captures(directory: Path) -> tuple[list[tuple[Path, set[str]]], list[tuple[Path, str]]]:
    """Captures named by a hostlist, with the nodes each names; and (path, reason) for bad names."""
    found: list[tuple[Path, set[str]]] = []
    bad: list[tuple[Path, str]] = []
    for path in sorted(directory.glob("*.txt")):
        if "[" in path.stem:
            try:
                found.append((path, set(expand(path.stem))))
            except HostlistError as err:
                bad.append((path, f"file name is not a hostlist: {err}"))
    return found, bad


def capture_for(directory: Path, node: str, patterns: list[tuple[Path, set[str]]]) -> Path | None:
    exact = directory / f"{node}.txt"
    if exact.is_file():
        return exact
    for path, names in patterns:
        if node in names:
            return path
    default = directory / "default.txt"
    return default if default.is_file() else None


def nic_legend(text: str) -> dict[int, str]:
    """``NIC2: mlx5_2`` lines of a capture's legend: column number → device name."""
    return {int(number): name for number, name in _NIC_LEGEND.findall(text)}
