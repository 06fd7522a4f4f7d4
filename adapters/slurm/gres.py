"""GRES in the two places a site already has them: the strings ``scontrol`` prints
(``Gres=gpu:h100:8(S:0-1),nic:8``, ``GresUsed=gpu:h100:4(IDX:0-3),nic:0(IDX:N/A)``) and ``gres.conf``.

``IDX`` in ``GresUsed`` and in ``scontrol show job -d`` is a device's *position* in the node's list of
that GRES as gres.conf orders it (file order of the matching lines, then the order of each ``File=``
expansion), not its minor number: :class:`NodeDevices` keeps that order so an index maps back to a
device, and a device's identity is the trailing number of its ``File=`` path (``/dev/nvidia5`` is
nvidia-smi's GPU 5; ``/dev/infiniband/uverbs2`` or any ``…2`` is nvidia-smi's ``NIC2`` column).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from adapters.slurm.hostlist import HostlistError, expand
from adapters.slurm.problems import Problems, key_values, logical_lines

GRES_CONF_KEYS = {
    "nodename",
    "name",
    "type",
    "file",
    "files",
    "count",
    "cores",
    "links",
    "flags",
    "autodetect",
    "multiplefiles",
}
_COUNT = re.compile(r"(\d+)([KMGTP]?)$", re.IGNORECASE)
_MULTIPLIER = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_TRAILING_NUMBER = re.compile(r"(\d+)$")
SORTED_BY_FILE = "gpu"  # the GRES whose IDX slurmd numbers by device file, not by gres.conf line


# --------------------------------------------------------------------------- scontrol GRES strings


@dataclass(frozen=True)
class GresItem:
    """One ``name[:type]:count[(S:…)|(IDX:…)]`` element of a node's Gres or GresUsed."""

    name: str
    type: str
    count: int
    indices: tuple[int, ...] = ()  # from (IDX:…); () for N/A or absent
    sockets: str = ""  # from (S:…), kept as written


def split_outside_parens(text: str) -> list[str]:
    """Split at commas that are not inside ``( )``: ``IDX:0,2-3`` lists contain commas."""
    parts, depth, current = [], 0, []
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def parse_index_list(text: str) -> tuple[int, ...]:
    """``0-3,6`` → (0, 1, 2, 3, 6); ``N/A`` → ()."""
    if text in ("N/A", ""):
        return ()
    result: list[int] = []
    for part in text.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"invalid index list {text!r}")
        result.extend(range(int(low), int(high if dash else low) + 1))
    return tuple(result)


def parse_gres_item(text: str) -> GresItem:
    """One element; raises ValueError with a reason when it is not GRES syntax."""
    core, _, annotation = text.partition("(")
    annotation = annotation.rstrip(")")
    fields = core.split(":")
    if not fields[0] or len(fields) > 3:
        raise ValueError(f"{text!r} is not name[:type][:count]")
    name = fields[0].removeprefix("gres/").removeprefix("gres:")
    gres_type, count_text = "", "1"
    if len(fields) == 3:
        gres_type, count_text = fields[1], fields[2]
    elif len(fields) == 2:
        if _COUNT.fullmatch(fields[1]):
            count_text = fields[1]
        else:
            gres_type = fields[1]
    match = _COUNT.fullmatch(count_text)
    if match is None:
        raise ValueError(f"count {count_text!r} of {text!r} is not a number")
    count = int(match.group(1)) * _MULTIPLIER[match.group(2).upper()]
    indices: tuple[int, ...] = ()
    sockets = ""
    if annotation.startswith("IDX:"):
        indices = parse_index_list(annotation[4:])
    elif annotation.startswith("S:"):
        sockets = annotation[2:]
    return GresItem(name=name, type=gres_type, count=count, indices=indices, sockets=sockets)


def parse_gres_string(text: str) -> list[GresItem]:
    """A whole ``Gres=``/``GresUsed=`` value; ``(null)``/``N/A``/empty → []."""
    if text in ("", "(null)", "N/A", "none"):
        return []
    return [parse_gres_item(part) for part in split_outside_parens(text)]


# --------------------------------------------------------------------------- gres.conf


@dataclass(frozen=True)
class GresConfLine:
    """One gres.conf record (after continuation lines are joined)."""

    line: int
    nodes: tuple[str, ...] | None  # None: applies to every node
    name: str
    type: str
    files: tuple[str, ...]
    count: int
    cores: str
    links: tuple[int, ...]


@dataclass
class GresConf:
    source: str
    lines: list[GresConfLine] = field(default_factory=list)
    autodetect: str = ""

    def for_node(self, node: str) -> list[GresConfLine]:
        return [g for g in self.lines if g.nodes is None or node in g.nodes]


@dataclass(frozen=True)
class Device:
    """A GRES device of one node: its IDX (position), the gres.conf line, and its identity number."""

    name: str
    type: str
    idx: int
    number: int | None  # trailing number of its File=, None for a count-only GRES
    file: str
    conf_line: int
    links: tuple[int, ...] = ()  # gres.conf Links=: NVLink count to each GPU by IDX, -1 for itself


@dataclass(frozen=True)
class NodeDevices:
    """The ordered GRES devices of one node, per GRES name — the table IDX values index."""

    by_name: dict[str, tuple[Device, ...]]

    def get(self, name: str) -> tuple[Device, ...]:
        return self.by_name.get(name, ())


def parse_gres_conf(text: str, source: str = "gres.conf") -> GresConf:
    """Every record of a gres.conf; all faults raised together as ``InvalidRequest`` (FILE:LINE)."""
    problems = Problems(source)
    conf = GresConf(source=source)
    for number, line in logical_lines(text):
        record = _parse_gres_record(number, key_values(line), problems)
        if isinstance(record, str):
            conf.autodetect = record
        elif record is not None:
            conf.lines.append(record)
    problems.raise_if_any()
    return conf


def _parse_gres_record(
    number: int, pairs: list[tuple[str, str]], problems: Problems
) -> GresConfLine | str | None:
    values: dict[str, str] = {}
    for key, value in pairs:
        lowered = key.lower()
        if lowered not in GRES_CONF_KEYS:
            problems.add(number, f"unknown gres.conf key {key!r}")
            continue
        values[lowered] = value
    if set(values) == {"autodetect"}:
        return values["autodetect"].lower()
    if "name" not in values:
        problems.add(number, "a GRES record needs Name= (e.g. Name=gpu)")
        return None
    nodes = _record_nodes(number, values.get("nodename"), problems)
    files = _record_files(number, values.get("file") or values.get("files") or "", problems)
    count = _record_count(number, values.get("count"), len(files), problems)
    links = _record_links(number, values.get("links", ""), problems)
    if links and len(files) > 1:
        problems.add(number, "Links= describes one device: give one File= per line when Links= is set")
    if values.get("cores") and _bad_range_list(values["cores"]):
        problems.add(number, f"Cores={values['cores']!r} is not a core list like 0-31,64-95")
    return GresConfLine(
        line=number,
        nodes=nodes,
        name=values["name"],
        type=values.get("type", ""),
        files=files,
        count=count,
        cores=values.get("cores", ""),
        links=links,
    )


def _record_nodes(number: int, text: str | None, problems: Problems) -> tuple[str, ...] | None:
    if text is None:
        return None
    try:
        return tuple(expand(text))
    except HostlistError as err:
        problems.add(number, f"NodeName: {err}")
        return ()


def _record_files(number: int, text: str, problems: Problems) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        return tuple(expand(text))
    except HostlistError as err:
        problems.add(number, f"File: {err}")
        return ()


def _record_count(number: int, text: str | None, n_files: int, problems: Problems) -> int:
    if text is None:
        return n_files or 1
    match = _COUNT.fullmatch(text)
    if match is None:
        problems.add(number, f"Count={text!r} is not a number")
        return 0
    count = int(match.group(1)) * _MULTIPLIER[match.group(2).upper()]
    if n_files and count != n_files:
        problems.add(number, f"Count={count} but File= names {n_files} devices")
    return count


def _record_links(number: int, text: str, problems: Problems) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        problems.add(number, f"Links={text!r} is not a comma-separated list of integers")
        return ()


def _bad_range_list(text: str) -> bool:
    try:
        parse_index_list(text)
    except ValueError:
        return True
    return False


def node_devices(conf: GresConf, node: str) -> NodeDevices:
    """The node's devices per GRES name, in the order that defines IDX. GPUs by device-file number:
    slurmd 22.05's gres/gpu numbers them so whatever the order of the lines (``/dev/nvidia<k>`` is
    IDX k). Other GRES (gres/nic) in line order. Both seen on the emulated cluster (the IDX in
    ``scontrol show job -d`` against ``CUDA_VISIBLE_DEVICES`` and gres/nic's
    ``OMPI_MCA_btl_openib_if_include``). :func:`gpu_order_faults` finds GPU lines that make
    slurmctld's types disagree with those devices."""
    by_name: dict[str, list[Device]] = {}
    for record in conf.for_node(node):
        devices = by_name.setdefault(record.name, [])
        if record.files:
            for file in record.files:
                match = _TRAILING_NUMBER.search(file)
                number = int(match.group(1)) if match else None
                devices.append(
                    Device(record.name, record.type, len(devices), number, file, record.line, record.links)
                )
        else:
            for _ in range(record.count):
                devices.append(Device(record.name, record.type, len(devices), None, "", record.line))
    ordered = {}
    for name, devs in by_name.items():
        if name == SORTED_BY_FILE and all(d.number is not None for d in devs):
            devs = sorted(devs, key=lambda d: d.number)  # type: ignore[arg-type, return-value]
        ordered[name] = tuple(
            Device(d.name, d.type, i, d.number, d.file, d.conf_line, d.links) for i, d in enumerate(devs)
        )
    return NodeDevices(ordered)


def gpu_order_faults(conf: GresConf, node: str) -> list[tuple[GresConfLine, str]]:
    """GPU lines of the node that Slurm 22.05 would misread: slurmd numbers GPUs by device file,
    slurmctld gives each type one run of IDX. So lines must be in file order and each type's lines
    together, or ``gpu:<type>:k`` gets another type's devices (seen on the emulated cluster)."""
    faults: list[tuple[GresConfLine, str]] = []
    highest = -1
    seen_types: list[str] = []
    for record in conf.for_node(node):
        if record.name != SORTED_BY_FILE:
            continue
        if record.type != (seen_types[-1] if seen_types else None) and record.type in seen_types:
            faults.append(
                (record, f"type {record.type} again after {seen_types[-1]}: a type's lines must be together")
            )
        if not seen_types or seen_types[-1] != record.type:
            seen_types.append(record.type)
        for file in record.files:
            match = _TRAILING_NUMBER.search(file)
            if match is None:
                continue
            number = int(match.group(1))
            if number < highest:
                faults.append(
                    (record, f"{file} comes after a higher-numbered GPU: lines must be in file order")
                )
                break
            highest = number
    return faults
