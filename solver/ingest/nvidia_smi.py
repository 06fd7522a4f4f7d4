"""Read what ``nvidia-smi topo -m`` prints into a :class:`solver.domain.model.Node`.

Operators already have this matrix for every server; asking them to describe the PCIe tree by hand
would be slower and wrong more often. The matrix does not print the tree, only the distance class of
every device pair, so this module *infers* the smallest PCIe forest whose distances
(:func:`solver.domain.topology.pcie_distance`) reproduce every PCIe cell of the matrix:

* devices that are ``PIX`` to each other share a leaf switch;
* groups that are ``PXB`` to each other hang off one upstream switch;
* groups that are ``PHB`` to each other (and every group, so that each tree has a CPU root) meet at
  a ``HOST_BRIDGE`` root;
* devices in different trees are ``NODE`` apart on the same NUMA node and ``SYS`` apart otherwise.

GPU↔GPU cells reading ``NV#`` hide the PCIe relation; it is inferred through the NICs (two GPUs
``PXB`` to one NIC are in one ``PXB`` group) and the result is checked against every cell the matrix
does show. A matrix no PCIe forest can reproduce is refused, like any other malformed input.

Accepted input: a header row naming ``GPU<k>`` and NIC columns (``NIC<k>``, or ``mlx5_<k>`` as older
drivers print them) followed by ``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID`` (each
optional); one row per device; cells separated by tabs and/or spaces; ``#`` comment lines anywhere;
the ``Legend:`` block (ignored) and the ``NIC Legend:`` block (``NIC0: mlx5_0``) naming the NICs.
``SOC`` (old drivers' word for ``SYS``) is read as ``SYS``.

What people paste is read too: a shell prompt or other lines before the header and after the
matrix or legend, terminal colour codes (ANSI escapes, removed before columns are counted), Windows
line ends. Older drivers print no ``NUMA Affinity`` column: the NUMA node is then read off the ``CPU
Affinity`` sets (GPUs listing the same CPUs share one), and without either, off the matrix (devices
``NODE`` or closer to each other share one). A ``# topoplace: gpu_model=H100-SXM5-80GB
gpu_memory_mib=81920 cpu_milli=224000 memory_mib=2097152`` comment completes what the matrix does not
print (:func:`capture_metadata`).

Errors are :class:`solver.domain.errors.InvalidRequest` with one :class:`~solver.domain.errors.Problem`
per fault, each located as ``SOURCE:LINE:COLUMN``: LINE is the 1-based line of the text (comments count) and
COLUMN the 1-based *character* column where the offending cell starts (a tab counts as one
character), so an editor's "go to" lands on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import networkx as nx

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Distance, Gpu, Nic, Node, NumaNode, NvLink, PcieSwitch, SwitchKind
from solver.domain.topology import gpu_nic_pairing, pcie_distance

__all__ = ["capture_metadata", "gpu_nic_pairing", "parse_topology"]

AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER_TOKEN = re.compile("|".join(re.escape(name) for name in AFFINITY_COLUMNS) + r"|\S+")
_CELL = re.compile(r"\S+")
_GPU_COLUMN = re.compile(r"GPU(\d+)")
_NVLINK = re.compile(r"NV(\d+)")
_CPU_LIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")
_LEGEND_ENTRY = re.compile(r"\s*(\S+)\s*:\s*(\S+)\s*")
# Terminal colour and cursor codes (CSI ... final byte) and window titles (OSC ... BEL/ST) of a copy
# from a coloured terminal.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_META = re.compile(r"^\s*#\s*topoplace:(.*)$", re.MULTILINE)
_PCIE_WORDS = {
    "PIX": Distance.PIX,
    "PXB": Distance.PXB,
    "PHB": Distance.PHB,
    "NODE": Distance.NODE,
    "SYS": Distance.SYS,
    "SOC": Distance.SYS,
}
SELF = "X"


# --------------------------------------------------------------------------- raw text


@dataclass(frozen=True)
class _Cell:
    """One whitespace-separated word of the text and where it starts (1-based)."""

    text: str
    line: int
    col: int


@dataclass
class _Row:
    label: _Cell
    cells: list[_Cell]  # device cells, then affinity cells

    @property
    def line(self) -> int:
        return self.label.line


@dataclass
class _Text:
    """The matrix as read, before any meaning is given to it."""

    header_line: int
    devices: list[_Cell]  # device columns, in header order
    affinity: list[str]  # affinity column names, in header order
    rows: dict[str, _Row] = field(default_factory=dict)
    nic_legend: dict[str, _Cell] = field(default_factory=dict)


class _Problems:
    """Collects problems with their FILE:LINE:COL path so every fault is reported at once."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[Problem] = []

    def add(self, line: int, col: int, message: str) -> None:
        self.items.append(Problem(path=f"{self.source}:{line}:{col}", message=message))

    def at(self, cell: _Cell, message: str) -> None:
        self.add(cell.line, cell.col, message)

    def raise_if_any(self) -> None:
        if self.items:
            raise InvalidRequest(self.items)


def _cells(line: str, number: int, pattern: re.Pattern[str] = _CELL) -> list[_Cell]:
    return [_Cell(m.group(0), number, m.start() + 1) for m in pattern.finditer(line)]


def _is_skipped(line: str) -> bool:
    """Blank lines and ``#`` comments carry no data (our captures document their origin in comments)."""
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _is_link_word(word: str) -> bool:
    return word == SELF or word in _PCIE_WORDS or _NVLINK.fullmatch(word) is not None


def _read_header(lines: list[str], problems: _Problems) -> _Text | None:
    """The header is the first line naming ``GPU<k>`` columns. Lines before it that carry neither
    column names nor link words (a shell prompt, the command itself, a title) are pasted noise and
    skipped; a matrix row before any header means the header is missing."""
    for number, line in enumerate(lines, start=1):
        if _is_skipped(line):
            continue
        tokens = _cells(line, number, _HEADER_TOKEN)
        words = [t.text for t in tokens]
        links = any(_is_link_word(w) for w in words)
        gpus = any(_GPU_COLUMN.fullmatch(w) for w in words)
        if not links and not gpus:
            continue
        if links:
            problems.add(
                number,
                1,
                "no header row: this line is a matrix row, but no line before it names the columns "
                "(GPU0 GPU1 ... CPU Affinity)",
            )
            return None
        return _split_header(tokens, number, problems)
    problems.add(1, 1, "no header row: no line names the columns GPU0 GPU1 ... (is this nvidia-smi topo -m?)")
    return None


def _split_header(tokens: list[_Cell], number: int, problems: _Problems) -> _Text:
    """Device columns come first, then the affinity columns; names must be unique."""
    devices: list[_Cell] = []
    affinity: list[str] = []
    seen: set[str] = set()
    for token in tokens:
        if token.text in seen:
            problems.at(token, f"duplicate column {token.text!r}")
            continue
        seen.add(token.text)
        if token.text in AFFINITY_COLUMNS:
            affinity.append(token.text)
        elif affinity:
            problems.at(token, f"device column {token.text!r} after the affinity columns")
        else:
            devices.append(token)
    return _Text(header_line=number, devices=devices, affinity=affinity)


def _read_body(lines: list[str], text: _Text, problems: _Problems) -> None:
    """Rows until ``Legend:``; then skip the legend; read ``NIC Legend:`` entries."""
    columns = {c.text for c in text.devices}
    nic_columns = {c for c in columns if not _GPU_COLUMN.fullmatch(c)}
    section = "matrix"
    for number, line in enumerate(lines[text.header_line :], start=text.header_line + 1):
        if _is_skipped(line):
            continue
        stripped = line.strip()
        if stripped == "Legend:":
            section = "legend"
        elif stripped == "NIC Legend:":
            section = "nic_legend"
        elif section == "matrix":
            cells = _cells(line, number)
            if cells[0].text not in columns and set(text.rows) == columns:
                section = "after"  # every row read: what follows is pasted noise (the next prompt)
                continue
            _read_row(cells, columns, text, problems)
        elif section == "nic_legend":
            if set(text.nic_legend) >= nic_columns and _LEGEND_ENTRY.fullmatch(line) is None:
                section = "after"  # every NIC named: the rest is noise after the output
                continue
            _read_legend_entry(line, number, text, problems)


def _read_row(cells: list[_Cell], columns: set[str], text: _Text, problems: _Problems) -> None:
    label, rest = cells[0], cells[1:]
    if label.text not in columns:
        problems.at(label, f"row {label.text!r} names no column of the header")
        return
    if label.text in text.rows:
        first = text.rows[label.text].line
        problems.at(label, f"duplicate row {label.text} (first at line {first})")
        return
    text.rows[label.text] = _Row(label, rest)
    _check_row_length(text.rows[label.text], text, problems)


def _check_row_length(row: _Row, text: _Text, problems: _Problems) -> None:
    """GPU rows carry the affinity cells; NIC rows may or may not (drivers differ).

    A row too long is reported at its first cell beyond what is allowed; a row too short just past
    its last cell, where the missing ones should be.
    """
    n_devices, n_affinity = len(text.devices), len(text.affinity)
    is_gpu = _GPU_COLUMN.fullmatch(row.label.text) is not None
    allowed = [n_devices + n_affinity] if is_gpu else sorted({n_devices, n_devices + n_affinity})
    count = len(row.cells)
    if count in allowed:
        return
    message = f"row {row.label.text} has {count} cells, expected {' or '.join(map(str, allowed))}"
    if count > allowed[0]:
        first_extra = row.cells[max(n for n in allowed if n < count)]
        problems.at(first_extra, message + " (this one is extra)")
    else:
        last = row.cells[-1] if row.cells else row.label
        problems.add(last.line, last.col + len(last.text), message + " (missing at the end of the line)")


def _read_legend_entry(line: str, number: int, text: _Text, problems: _Problems) -> None:
    match = _LEGEND_ENTRY.fullmatch(line)
    if match is None:
        problems.add(number, 1, f"unreadable NIC legend entry {line.strip()!r} (expected 'NIC0: mlx5_0')")
        return
    column, name = match.group(1), match.group(2)
    if column in {c.text for c in text.devices}:
        text.nic_legend[column] = _Cell(name, number, match.start(2) + 1)


# --------------------------------------------------------------------------- the matrix


@dataclass
class _Matrix:
    """Meaningful cells: a PCIe class or an NVLink count per ordered device pair."""

    order: list[str]  # device columns in header order
    pcie: dict[tuple[str, str], Distance] = field(default_factory=dict)
    nvlinks: dict[tuple[str, str], int] = field(default_factory=dict)
    where: dict[tuple[str, str], _Cell] = field(default_factory=dict)

    def word(self, pair: tuple[str, str]) -> str | None:
        if pair in self.pcie:
            return self.pcie[pair].name
        if pair in self.nvlinks:
            return f"NV{self.nvlinks[pair]}"
        return None


def _read_matrix(text: _Text, problems: _Problems) -> _Matrix:
    matrix = _Matrix(order=[c.text for c in text.devices])
    for column in text.devices:
        if column.text not in text.rows:
            problems.at(column, f"no row for {column.text}")
    for row_name, row in text.rows.items():
        for column, cell in zip(matrix.order, row.cells, strict=False):
            _read_cell(row_name, column, cell, matrix, problems)
    _check_symmetry(matrix, problems)
    return matrix


def _read_cell(row: str, column: str, cell: _Cell, matrix: _Matrix, problems: _Problems) -> None:
    word = cell.text
    pair = (row, column)
    matrix.where[pair] = cell
    if row == column:
        if word != SELF:
            problems.at(cell, f"{row}/{column} is {word!r}; a device's own cell must be X")
        return
    if word == SELF:
        problems.at(cell, f"{row}/{column} is X (self) off the diagonal")
    elif word in _PCIE_WORDS:
        matrix.pcie[pair] = _PCIE_WORDS[word]
    elif (nv := _NVLINK.fullmatch(word)) is not None and int(nv.group(1)) >= 1:
        if _GPU_COLUMN.fullmatch(row) and _GPU_COLUMN.fullmatch(column):
            matrix.nvlinks[pair] = int(nv.group(1))
        else:
            problems.at(cell, f"{row}/{column} is {word}: NVLink joins GPUs only")
    else:
        problems.at(cell, f"unknown link word {word!r} (expected X, NV#, PIX, PXB, PHB, NODE or SYS)")


def _check_symmetry(matrix: _Matrix, problems: _Problems) -> None:
    """The matrix is symmetric; a mismatch is reported at the lower-triangle cell, naming its mirror."""
    for i, a in enumerate(matrix.order):
        for b in matrix.order[i + 1 :]:
            upper, lower = matrix.word((a, b)), matrix.word((b, a))
            if upper is not None and lower is not None and upper != lower:
                mirror = matrix.where[(a, b)]
                problems.at(
                    matrix.where[(b, a)],
                    f"asymmetric matrix: {b}/{a} is {lower} but {a}/{b} "
                    f"(line {mirror.line}, column {mirror.col}) is {upper}",
                )


def _pcie_pairs(matrix: _Matrix) -> Iterable[tuple[str, str, Distance]]:
    """Each unordered device pair the matrix gives a PCIe class for, once, in header order."""
    for i, a in enumerate(matrix.order):
        for b in matrix.order[i + 1 :]:
            if (a, b) in matrix.pcie:
                yield a, b, matrix.pcie[(a, b)]


# --------------------------------------------------------------------------- affinity


@dataclass(frozen=True)
class _Affinity:
    cpus: frozenset[int]
    numa: int | None


def _parse_cpu_list(cell: _Cell, problems: _Problems) -> frozenset[int]:
    """``48-63,176-191`` → those CPUs; ``N/A`` → none."""
    if cell.text == "N/A":
        return frozenset()
    if _CPU_LIST.fullmatch(cell.text) is None:
        problems.at(cell, f"unreadable CPU Affinity {cell.text!r} (expected a list like 0-15,64-79)")
        return frozenset()
    cpus: set[int] = set()
    for part in cell.text.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first:
            problems.at(cell, f"CPU range {part!r} runs backwards")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def _read_affinity(text: _Text, problems: _Problems) -> dict[str, _Affinity]:
    """CPU set and NUMA node of every row that carries affinity cells."""
    result: dict[str, _Affinity] = {}
    n_devices = len(text.devices)
    for name, row in text.rows.items():
        if len(row.cells) != n_devices + len(text.affinity) or not text.affinity:
            continue
        by_column = dict(zip(text.affinity, row.cells[n_devices:], strict=True))
        cpus = _parse_cpu_list(by_column["CPU Affinity"], problems) if "CPU Affinity" in by_column else None
        numa_cell = by_column.get("NUMA Affinity")
        numa = int(numa_cell.text) if numa_cell is not None and numa_cell.text.isdigit() else None
        result[name] = _Affinity(cpus or frozenset(), numa)
    if "NUMA Affinity" not in text.affinity:
        # Older drivers print CPU Affinity only: rows listing the same CPUs sit on one NUMA node,
        # numbered in the order of their first CPU (the kernel numbers NUMA nodes that way too).
        sets = sorted({a.cpus for a in result.values() if a.cpus}, key=min)
        if len(sets) > 1 and all(a.isdisjoint(b) for i, a in enumerate(sets) for b in sets[i + 1 :]):
            numa_of = {cpus: k for k, cpus in enumerate(sets)}
            result = {n: _Affinity(a.cpus, numa_of.get(a.cpus)) for n, a in result.items()}
    return result


# --------------------------------------------------------------------------- the tree


def _groups(matrix: _Matrix, within: Distance) -> list[list[str]]:
    """Devices joined by cells at ``within`` or closer, as groups in header order.

    Unknown (NVLink) cells join nothing, so GPUs are grouped through the NICs the matrix relates them to.
    """
    graph = nx.Graph()
    graph.add_nodes_from(matrix.order)
    graph.add_edges_from((a, b) for a, b, d in _pcie_pairs(matrix) if d <= within)
    position = {name: i for i, name in enumerate(matrix.order)}
    groups = [sorted(c, key=position.__getitem__) for c in nx.connected_components(graph)]
    return sorted(groups, key=lambda g: position[g[0]])


def _infer_numa(
    matrix: _Matrix, known: dict[str, int | None], is_gpu: dict[str, bool]
) -> dict[str, int | None]:
    """NICs without a NUMA cell take the NUMA node of the devices at NODE or closer (same root
    complex or same socket). GPUs keep what the matrix says: their NUMA Affinity is authoritative."""
    numa = dict(known)
    for group in _groups(matrix, Distance.NODE):
        values = {known[d] for d in group if known[d] is not None}
        if len(values) == 1:
            (value,) = values
            for device in group:
                if numa[device] is None and not is_gpu[device]:
                    numa[device] = value
    return numa


def _common_numa(devices: Iterable[str], numa: dict[str, int | None]) -> int | None:
    values = {numa[d] for d in devices} - {None}
    return values.pop() if len(values) == 1 else None


def _root_numa(matrix: _Matrix, roots: list[list[str]], numa: dict[str, int | None]) -> list[int | None]:
    """The NUMA node of each root host bridge, as far as the matrix allows.

    Roots joined by NODE cells form one group and take the NUMA node their devices agree on. But the
    matrix has the last word on NODE vs SYS: a group the matrix shows SYS apart from another group of
    the same NUMA node gets None ("not known to be the same NUMA node"), and so does the other. Real
    AMD servers print SYS between root complexes of one socket (the A100 NV12 capture does), so this
    is needed to reproduce real captures, not only broken ones; devices keep their NUMA Affinity.
    """
    root_of = {device: i for i, group in enumerate(roots) for device in group}
    joined = nx.Graph()
    joined.add_nodes_from(range(len(roots)))
    apart: list[tuple[int, int]] = []
    for a, b, distance in _pcie_pairs(matrix):
        ra, rb = root_of[a], root_of[b]
        if ra != rb and distance == Distance.NODE:
            joined.add_edge(ra, rb)
        elif ra != rb and distance == Distance.SYS:
            apart.append((ra, rb))
    component_of = {r: frozenset(c) for c in nx.connected_components(joined) for r in c}
    value: list[int | None] = [
        _common_numa((d for member in component_of[r] for d in roots[member]), numa)
        for r in range(len(roots))
    ]
    clashing = {
        r
        for ra, rb in apart
        if value[ra] is not None and value[ra] == value[rb]
        for side in (ra, rb)
        for r in component_of[side]
    }
    return [None if r in clashing else v for r, v in enumerate(value)]


def _build_switches(matrix: _Matrix, numa: dict[str, int | None]) -> tuple[list[PcieSwitch], dict[str, str]]:
    """One host bridge per PHB group, one upstream switch per PXB group of several leaves, one leaf
    switch per PIX group. Returns the switches and each device's leaf switch.

    Every tree gets a host-bridge root, even one holding a single device: a real PCIe tree always
    ends at a CPU root complex, and it makes "different roots" mean "not PHB or closer" uniformly.
    Switches below the root carry the NUMA node their devices agree on (informational).
    """
    switches: list[PcieSwitch] = []
    leaf_of: dict[str, str] = {}
    counts = {"pcie-hb": 0, "pcie-sw": 0, "pcie-leaf": 0}

    def add(prefix: str, parent: str, kind: SwitchKind, numa_id: int | None) -> str:
        switch_id = f"{prefix}{counts[prefix]}"
        counts[prefix] += 1
        switches.append(PcieSwitch(id=switch_id, parent=parent, kind=kind, numa=numa_id))
        return switch_id

    pxb_groups = _groups(matrix, Distance.PXB)
    pix_groups = _groups(matrix, Distance.PIX)
    roots = _groups(matrix, Distance.PHB)
    for root_group, root_numa in zip(roots, _root_numa(matrix, roots, numa), strict=True):
        root = add("pcie-hb", "", SwitchKind.HOST_BRIDGE, root_numa)
        for upper_group in (g for g in pxb_groups if g[0] in root_group):
            leaves = [g for g in pix_groups if g[0] in upper_group]
            parent = root
            if len(leaves) > 1:
                parent = add("pcie-sw", root, SwitchKind.SWITCH, _common_numa(upper_group, numa))
            for leaf_group in leaves:
                leaf = add("pcie-leaf", parent, SwitchKind.SWITCH, _common_numa(leaf_group, numa))
                leaf_of.update(dict.fromkeys(leaf_group, leaf))
    return switches, leaf_of


# --------------------------------------------------------------------------- the node


def _numa_nodes(numa: dict[str, int | None], affinity: dict[str, _Affinity]) -> tuple[list[NumaNode], int]:
    """One NumaNode per NUMA id seen, with the CPUs the rows on it list; and the node's CPU total."""
    cpus_by_numa: dict[int, set[int]] = {}
    for device, value in numa.items():
        if value is not None:
            cpus_by_numa.setdefault(value, set()).update(affinity[device].cpus if device in affinity else ())
    all_cpus = set().union(*(a.cpus for a in affinity.values()))
    nodes = [NumaNode(id=i, cpu_milli=1000 * len(cpus)) for i, cpus in sorted(cpus_by_numa.items())]
    # The rows list only the CPUs near GPUs; CPUs are numbered from 0, so the highest one listed
    # says how many the machine has at least (a DGX A100 lists 128 of its 256).
    return nodes, 1000 * (max(all_cpus) + 1) if all_cpus else 0


def _nvlinks(matrix: _Matrix) -> list[NvLink]:
    return [
        NvLink(gpu_a=a, gpu_b=b, links=matrix.nvlinks[(a, b)])
        for i, a in enumerate(matrix.order)
        for b in matrix.order[i + 1 :]
        if (a, b) in matrix.nvlinks
    ]


def _nic_names(text: _Text, problems: _Problems) -> dict[str, str]:
    """Column → NIC name from the legend (the column's own name when the legend is silent)."""
    names: dict[str, str] = {}
    used: dict[str, str] = {}
    for column in text.devices:
        if _GPU_COLUMN.fullmatch(column.text):
            continue
        cell = text.nic_legend.get(column.text)
        name = cell.text if cell is not None else column.text
        if name in used:
            problems.at(cell or column, f"NIC name {name!r} of {column.text} is already {used[name]}'s")
        used[name] = column.text
        names[column.text] = name
    return names


def _check_reproduced(node: Node, matrix: _Matrix, names: dict[str, str], problems: _Problems) -> None:
    """The inferred tree must give back every PCIe cell; if not, the matrix is no PCIe forest."""
    where = {g.id: (g.pcie_switch, g.numa) for g in node.gpus}
    where.update({n.name: (n.pcie_switch, n.numa) for n in node.nics})
    for a, b, shown in _pcie_pairs(matrix):
        (switch_a, numa_a), (switch_b, numa_b) = where[names.get(a, a)], where[names.get(b, b)]
        derived = pcie_distance(node, switch_a, switch_b, numa_a, numa_b)
        if derived != shown:
            problems.at(
                matrix.where[(a, b)],
                f"{a}/{b} is {shown.name} but the other cells (and NUMA affinities) imply {derived.name}: "
                "no PCIe tree fits this matrix",
            )


def parse_topology(
    text: str,
    *,
    node: str,
    gpu_model: str = "",
    source: str = "<text>",
    gpu_memory_mib: int = 0,
) -> Node:
    """The :class:`Node` that ``nvidia-smi topo -m`` output ``text`` describes.

    ``node`` names it, ``gpu_model``/``gpu_memory_mib`` fill what the matrix does not print, ``source``
    prefixes error locations. Raises :class:`InvalidRequest` listing every problem found.
    """
    problems = _Problems(source)
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    raw = _read_header(lines, problems)
    if raw is None:  # without column names no row can be read: stop at the one problem
        raise InvalidRequest(problems.items)
    _read_body(lines, raw, problems)
    matrix = _read_matrix(raw, problems)
    affinity = _read_affinity(raw, problems)
    names = _nic_names(raw, problems)
    problems.raise_if_any()

    is_gpu = {d: _GPU_COLUMN.fullmatch(d) is not None for d in matrix.order}
    known = {d: affinity[d].numa if d in affinity else None for d in matrix.order}
    if not raw.affinity and all(v is None for v in known.values()):
        # No affinity columns at all (very old drivers): devices NODE or closer share a NUMA node.
        known = {d: k for k, group in enumerate(_groups(matrix, Distance.NODE)) for d in group}
    numa = _infer_numa(matrix, known, is_gpu)
    switches, leaf_of = _build_switches(matrix, numa)
    numa_nodes, cpu_milli = _numa_nodes(numa, affinity)
    result = Node(
        name=node,
        cpu_milli=cpu_milli,
        numa_nodes=tuple(numa_nodes),
        gpus=tuple(
            Gpu(
                id=d,
                index=int(d[3:]),
                model=gpu_model,
                memory_mib=gpu_memory_mib,
                numa=numa[d],
                pcie_switch=leaf_of[d],
            )
            for d in matrix.order
            if is_gpu[d]
        ),
        nics=tuple(
            Nic(name=names[d], numa=numa[d], pcie_switch=leaf_of[d]) for d in matrix.order if not is_gpu[d]
        ),
        pcie_switches=tuple(switches),
        nvlinks=tuple(_nvlinks(matrix)),
    )
    _check_reproduced(result, matrix, names, problems)
    problems.raise_if_any()
    return result


def capture_metadata(text: str) -> dict[str, str]:
    """``key=value`` words of ``# topoplace:`` comment lines: what a site writes into a capture to
    complete it (``gpu_model``, ``gpu_memory_mib``, ``cpu_milli``, ``memory_mib``)."""
    values: dict[str, str] = {}
    for match in _META.finditer(_ANSI.sub("", text)):
        for token in match.group(1).split():
            key, _, value = token.partition("=")
            values[key] = value
    return values
