"""A cluster inventory from per-node ``nvidia-smi topo -m`` captures and a node list.

A site has one capture per node type and knows its nodes' names, leaf and spine switches, CPUs,
memory and labels; ``topoplace ingest assemble NODES.yaml`` puts them together (docs/ingest.md):

.. code-block:: yaml

    nodes:
      - names: gpu-[001-004]          # one name, a list, or a bracket range
        capture: h100.txt             # relative to this file
        leaf: leaf-1
        spine: spine-1                # optional: the leaf's parent switch (tier 2)
        gpu_model: H100-SXM5-80GB     # else the capture's "# topoplace: gpu_model=..." comment
        gpu_memory_mib: 81920
        cpus: 224                     # or cpu_milli: 224000; else what the capture's affinity shows
        memory_gib: 2048              # or memory_mib
        labels: {zone: a}
        rails: true                   # rail k = the NIC paired with the k-th GPU (rail-optimised fabric)

The fabric is every spine (tier 2) and leaf (tier 1) the list names. Every problem is reported at
once as ``FILE:nodes[i].field: reason``; the assembled inventory is validated like a request's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import FabricSwitch, Inventory, Node, SolveRequest
from solver.domain.topology import gpu_nic_pairing
from solver.domain.validate import validate
from solver.ingest.files import _load_yaml, _read_text
from solver.ingest.nvidia_smi import capture_metadata, parse_topology

KEYS = {
    "name",
    "names",
    "capture",
    "leaf",
    "spine",
    "gpu_model",
    "gpu_memory_mib",
    "cpus",
    "cpu_milli",
    "memory_gib",
    "memory_mib",
    "labels",
    "rails",
}
_RANGE = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<first>\d+)-(?P<last>\d+)\](?P<suffix>[^\[\]]*)$")


def expand_names(text: str) -> list[str]:
    """``gpu-[001-004]`` → gpu-001 .. gpu-004 (zero padding kept); a plain name → itself."""
    match = _RANGE.match(text)
    if match is None:
        return [text]
    first, last = match["first"], match["last"]
    width = len(first) if first.startswith("0") else 0
    return [f"{match['prefix']}{k:0{width}d}{match['suffix']}" for k in range(int(first), int(last) + 1)]


def assemble(path: Path) -> Inventory:
    """The inventory the node list at ``path`` describes (see the module's docstring)."""
    source = str(path)
    data = _load_yaml(_read_text(path), source)
    problems: list[Problem] = []

    def bad(where: str, message: str) -> None:
        problems.append(Problem(path=f"{source}:{where}", message=message))

    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not data["nodes"]:
        message = "expected a mapping with a non-empty 'nodes' list"
        raise InvalidRequest([Problem(path=source, message=message)])
    unknown_top = set(data) - {"nodes"}
    if unknown_top:
        bad(sorted(unknown_top)[0], "unknown key; expected only 'nodes'")
    nodes: list[Node] = []
    leaves: dict[str, str] = {}  # leaf → its spine ("" for none)
    captures: dict[Path, str] = {}
    for i, entry in enumerate(data["nodes"]):
        where = f"nodes[{i}]"
        if not isinstance(entry, dict):
            bad(where, "must be a mapping (names, capture, leaf, ...)")
            continue
        for key in sorted(set(entry) - KEYS):
            bad(f"{where}.{key}", f"unknown key; known keys: {', '.join(sorted(KEYS))}")
        names = _names(entry, where, bad)
        capture = entry.get("capture")
        if not isinstance(capture, str) or not capture:
            bad(f"{where}.capture", "required: the nvidia-smi topo -m capture of this node type")
            continue
        capture_path = (path.parent / capture).resolve()
        if capture_path not in captures:
            try:
                captures[capture_path] = capture_path.read_text(encoding="utf-8", errors="replace")
            except OSError as err:
                bad(f"{where}.capture", f"cannot read {capture}: {err.strerror}")
                continue
        text = captures[capture_path]
        meta = capture_metadata(text)
        numbers = {
            key: _number(entry, key, where, bad)
            for key in ("gpu_memory_mib", "cpus", "cpu_milli", "memory_gib", "memory_mib")
        }
        leaf, spine = entry.get("leaf", ""), entry.get("spine", "")
        for key, value in (("leaf", leaf), ("spine", spine)):
            if not isinstance(value, str):
                bad(f"{where}.{key}", "must be a switch name (text)")
        if spine and not leaf:
            bad(f"{where}.spine", "a spine needs a leaf below it")
        if isinstance(leaf, str) and leaf and isinstance(spine, str):
            if leaves.get(leaf, spine) != spine:
                bad(f"{where}.spine", f"leaf {leaf} is under {leaves[leaf]} in an earlier entry")
            leaves.setdefault(leaf, spine)
        labels = entry.get("labels", {})
        if not isinstance(labels, dict) or not all(isinstance(v, (str, int, float)) for v in labels.values()):
            bad(f"{where}.labels", "must be a mapping of label names to values")
            labels = {}
        try:
            template = parse_topology(
                text,
                node="template",
                gpu_model=str(entry.get("gpu_model") or meta.get("gpu_model", "")),
                gpu_memory_mib=numbers["gpu_memory_mib"] or _int(meta.get("gpu_memory_mib")),
                source=capture,
            )
        except InvalidRequest as err:
            problems.extend(err.problems)
            continue
        cpu_milli = (
            numbers["cpu_milli"]
            or 1000 * numbers["cpus"]
            or _int(meta.get("cpu_milli"))
            or template.cpu_milli
        )
        memory_mib = numbers["memory_mib"] or 1024 * numbers["memory_gib"] or _int(meta.get("memory_mib"))
        nics = template.nics
        if entry.get("rails"):
            paired = [n for g in template.gpus for n in gpu_nic_pairing(template)[g.id]]
            rail = {nic: k for k, nic in enumerate(dict.fromkeys(paired))}
            nics = tuple(n.model_copy(update={"rail": rail.get(n.name)}) for n in nics)
        for name in names:
            nodes.append(
                template.model_copy(
                    update={
                        "name": name,
                        "leaf": leaf if isinstance(leaf, str) else "",
                        "cpu_milli": cpu_milli,
                        "memory_mib": memory_mib,
                        "labels": {str(k): str(v) for k, v in labels.items()},
                        "nics": nics,
                    }
                )
            )
    if problems:
        raise InvalidRequest(problems)
    spines = sorted({s for s in leaves.values() if s})
    switches = tuple(FabricSwitch(id=s, tier=2) for s in spines) + tuple(
        FabricSwitch(id=leaf, tier=1, parent=spine) for leaf, spine in sorted(leaves.items())
    )
    inventory = Inventory(nodes=tuple(nodes), switches=switches)
    found = validate(SolveRequest(inventory=inventory))
    if found:
        where = [Problem(path=f"{source}: inventory.{p.path}", message=p.message) for p in found]
        raise InvalidRequest(where)
    return inventory


def _names(entry: dict[str, Any], where: str, bad: Any) -> list[str]:
    given = entry.get("names", entry.get("name"))
    if isinstance(given, str) and given:
        return expand_names(given)
    if isinstance(given, list) and given and all(isinstance(n, str) and n for n in given):
        return [name for n in given for name in expand_names(n)]
    bad(f"{where}.names", "required: a node name, a list of names, or a range like gpu-[001-004]")
    return []


def _number(entry: dict[str, Any], key: str, where: str, bad: Any) -> int:
    value = entry.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        bad(f"{where}.{key}", f"must be a whole number of at least 0, got {value!r}")
        return 0
    return value


def _int(text: str | None) -> int:
    try:
        return int(text) if text else 0
    except ValueError:
        return 0
