"""Nodes as Slurm reports them: ``scontrol -o show node -d`` (one ``Key=Value`` line per node) and
``scontrol show nodes --json`` / slurmrestd ``/nodes`` (22.05 – 25.x schemas, read by field name).

Both become the same :class:`SlurmNode`, the only shape the inventory builder knows, so supporting
one more Slurm release means touching one reader, not the builder.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from adapters.slurm.gres import GresItem, parse_gres_string
from adapters.slurm.problems import Problems

# Node state words (base state or flag) that mean "do not place new work here".
UNSCHEDULABLE = {
    "DOWN",
    "DRAIN",
    "DRAINED",
    "DRAINING",
    "FAIL",
    "FAILING",
    "FUTURE",
    "MAINT",
    "NOT_RESPONDING",
    "NO_RESPOND",
    "POWERED_DOWN",
    "POWERING_DOWN",
    "POWER_DOWN",
    "POWERING_UP",
    "REBOOT_ISSUED",
    "REBOOT_REQUESTED",
    "INVAL",
    "UNKNOWN",
    "RESERVED",
}
# A key starts a new field: start of line or whitespace, then an identifier, then '='.
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")


@dataclass(frozen=True)
class SlurmNode:
    name: str
    line: int  # where it was read (1-based line; for JSON, the line its object starts on)
    state: tuple[str, ...]  # upper-case words: ("IDLE",), ("DOWN", "DRAIN"), ("MIXED",)
    cpus: int
    alloc_cpus: int
    real_memory_mib: int
    alloc_memory_mib: int
    gres: tuple[GresItem, ...]
    gres_used: tuple[GresItem, ...]
    features: tuple[str, ...]
    partitions: tuple[str, ...]

    @property
    def schedulable(self) -> bool:
        return not (set(self.state) & UNSCHEDULABLE)


# --------------------------------------------------------------------------- scontrol -o show node -d


def split_fields(line: str) -> dict[str, str]:
    """``NodeName=n1 OS=Linux 6.1 #1 SMP Reason=not responding`` → fields; a value runs until the next
    ``Key=`` (OS and Reason values contain spaces)."""
    matches = list(_KEY.finditer(line))
    fields: dict[str, str] = {}
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        fields[match.group(1)] = line[match.end() : end].strip()
    return fields


def parse_show_node(text: str, source: str = "scontrol") -> list[SlurmNode]:
    """Every node of ``scontrol -o show node -d`` output; also accepts the multi-line form of plain
    ``scontrol show node -d`` (blank-line separated records)."""
    problems = Problems(source)
    nodes: list[SlurmNode] = []
    for number, record in _records(text):
        fields = split_fields(record)
        if "NodeName" not in fields:
            problems.add(number, "not a node record: no NodeName= field")
            continue
        node = _node_from_fields(fields, number, problems)
        if node is not None:
            nodes.append(node)
    _check_unique(nodes, problems)
    problems.raise_if_any()
    return nodes


def _records(text: str) -> list[tuple[int, str]]:
    """One record per line (``-o``), or per blank-line-separated block."""
    records: list[tuple[int, str]] = []
    block: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        if not line.strip():
            if block:
                records.append((start, " ".join(block)))
                block = []
            continue
        # A record continues only on indented lines (the multi-line form); anything else starts one.
        if block and not line[:1].isspace():
            records.append((start, " ".join(block)))
            block = []
        if not block:
            start = number
        block.append(line.strip())
    if block:
        records.append((start, " ".join(block)))
    return records


def _int_field(fields: dict[str, str], key: str, number: int, problems: Problems, default: int = 0) -> int:
    value = fields.get(key)
    if value is None or value in ("N/A", ""):
        return default
    try:
        return int(value)
    except ValueError:
        problems.add(number, f"{key}={value!r} is not an integer")
        return default


@functools.lru_cache(maxsize=8192)
def _gres_items(text: str) -> tuple[GresItem, ...]:
    """:func:`parse_gres_string`, remembered: the agent reads every node every 0.5 s, and nodes of
    one type share their ``Gres=`` (and often their ``GresUsed=``) strings — parsing them afresh was
    0.21 of a 0.28 s read of 1,024 nodes, all of it holding the agent's interpreter lock."""
    return tuple(parse_gres_string(text))


def _gres_field(fields: dict[str, str], key: str, number: int, problems: Problems) -> tuple[GresItem, ...]:
    try:
        return _gres_items(fields.get(key, ""))
    except ValueError as err:
        problems.add(number, f"{key}: {err}")
        return ()


def _words(value: str) -> tuple[str, ...]:
    return tuple(w for w in value.split(",") if w and w != "(null)")


def _node_from_fields(fields: dict[str, str], number: int, problems: Problems) -> SlurmNode | None:
    state = tuple(w for w in fields.get("State", "UNKNOWN").rstrip("*~#%!$@^-").upper().split("+") if w)
    return SlurmNode(
        name=fields["NodeName"],
        line=number,
        state=state,
        cpus=_int_field(fields, "CPUEfctv", number, problems, _int_field(fields, "CPUTot", number, problems)),
        alloc_cpus=_int_field(fields, "CPUAlloc", number, problems),
        real_memory_mib=_int_field(fields, "RealMemory", number, problems),
        alloc_memory_mib=_int_field(fields, "AllocMem", number, problems),
        gres=_gres_field(fields, "Gres", number, problems),
        gres_used=_gres_field(fields, "GresUsed", number, problems),
        features=_words(fields.get("AvailableFeatures", "")),
        partitions=_words(fields.get("Partitions", "")),
    )


def _check_unique(nodes: list[SlurmNode], problems: Problems) -> None:
    seen: dict[str, int] = {}
    for node in nodes:
        if node.name in seen:
            problems.add(node.line, f"node {node.name} listed twice (first at line {seen[node.name]})")
        seen.setdefault(node.name, node.line)


# --------------------------------------------------------------------------- --json


def parse_nodes_json(text: str, source: str = "nodes.json") -> list[SlurmNode]:
    """``{"nodes": [...]}`` from ``scontrol show nodes --json`` or slurmrestd, any of 22.05 – 25.x.

    Schema differences handled by field name: ``state`` a string ("idle", 0.0.38) or a list
    (["IDLE", "DRAIN"], 0.0.39+) plus ``state_flags``; numbers plain or ``{"set", "number"}`` objects
    (0.0.40+); ``features``/``partitions`` a comma string or a list; ``cpus`` or ``cpus_effective``.
    """
    problems = Problems(source)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        problems.add(err.lineno, f"not JSON: {err.msg}")
        problems.raise_if_any()
        raise AssertionError("unreachable") from err
    raw_nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(raw_nodes, list):
        problems.add(1, 'expected an object with a "nodes" list')
        problems.raise_if_any()
    starts = _object_lines(text, len(raw_nodes or []))
    nodes = []
    for i, raw in enumerate(raw_nodes or []):
        line = starts[i] if i < len(starts) else 1
        node = _node_from_json(raw, line, problems)
        if node is not None:
            nodes.append(node)
    _check_unique(nodes, problems)
    problems.raise_if_any()
    return nodes


def _object_lines(text: str, count: int) -> list[int]:
    """Best-effort line numbers of the node objects: lines that open an object holding a "name"."""
    lines = [n for n, line in enumerate(text.splitlines(), 1) if re.search(r'"name"\s*:', line)]
    return lines[:count]


def _number(value: Any) -> int | None:
    """Plain numbers, or 0.0.40's ``{"set": true, "infinite": false, "number": 5}``."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _list_or_csv(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value if v)
    if isinstance(value, str):
        return _words(value)
    return ()


def _node_from_json(raw: Any, line: int, problems: Problems) -> SlurmNode | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        problems.add(line, "a node entry must be an object with a string 'name'")
        return None
    state_value = raw.get("state", "UNKNOWN")
    state = [
        s.upper() for s in (state_value if isinstance(state_value, list) else str(state_value).split("+"))
    ]
    state += [s.upper() for s in _list_or_csv(raw.get("state_flags", []))]
    gres: dict[str, tuple[GresItem, ...]] = {}
    for key in ("gres", "gres_used"):
        try:
            gres[key] = tuple(parse_gres_string(str(raw.get(key) or "")))
        except ValueError as err:
            problems.add(line, f"node {raw['name']}: {key}: {err}")
            gres[key] = ()
    cpus = (
        _number(raw.get("cpus_effective")) or _number(raw.get("effective_cpus")) or _number(raw.get("cpus"))
    )
    return SlurmNode(
        name=raw["name"],
        line=line,
        state=tuple(dict.fromkeys(state)),
        cpus=cpus or 0,
        alloc_cpus=_number(raw.get("alloc_cpus")) or 0,
        real_memory_mib=_number(raw.get("real_memory")) or 0,
        alloc_memory_mib=_number(raw.get("alloc_memory")) or 0,
        gres=gres["gres"],
        gres_used=gres["gres_used"],
        features=_list_or_csv(raw.get("features")),
        partitions=_list_or_csv(raw.get("partitions")),
    )
