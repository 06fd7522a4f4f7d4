"""Slurm hostlist expressions (``gpu[001-004,010]``, ``rack[1-2]-n[01-16]``), expanded and compressed
exactly as Slurm 22.05+ does (``src/common/hostlist.c``), so that a node list we write into
``req_nodes`` or a plan reads back identically through ``scontrol show hostnames``.

The rules that are easy to get subtly wrong, all checked against ``scontrol`` in the tests:

* a range's zero-padding width is the *length of its low bound as written*: ``n[01-10]`` gives
  ``n01 … n10`` and ``n[1-10]`` gives ``n1 … n10``;
* several bracket groups in one name are a cartesian product, leftmost outermost;
* expansion keeps order and duplicates (``n1,n[1-2]`` is ``n1 n1 n2``);
* compression keeps input order: a host joins the previous range only if it has the same prefix and
  continues it (``n3,n1,n2`` → ``n[3,1-2]``); widths combine when zero-padding allows it
  (``n9,n10`` → ``n[9-10]``, but ``n1,n01`` stay apart); consecutive ranges of one prefix share one
  bracket; a name without a numeric suffix never joins anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["HostlistError", "compress", "expand"]

# Slurm refuses ranges larger than this (MAX_RANGE in hostlist.c is 64k hosts).
MAX_RANGE = 64 * 1024
_SUFFIX = re.compile(r"^(.*?)(\d+)$", re.DOTALL)


class HostlistError(ValueError):
    """A hostlist expression Slurm would refuse (unbalanced brackets, a range running backwards ...)."""


# --------------------------------------------------------------------------- expand


def expand(expression: str) -> list[str]:
    """Every host name ``expression`` names, in Slurm's order, duplicates kept."""
    hosts: list[str] = []
    for item in _split_top_level(expression):
        hosts.extend(_expand_item(item))
    return hosts


def _split_top_level(expression: str) -> list[str]:
    """Split at commas and whitespace outside brackets."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in expression:
        if ch == "[":
            if depth:
                raise HostlistError(f"nested '[' in {expression!r}")
            depth += 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"']' without '[' in {expression!r}")
            depth -= 1
        if depth == 0 and (ch == "," or ch.isspace()):
            if current:
                items.append("".join(current))
            current = []
            continue
        current.append(ch)
    if depth:
        raise HostlistError(f"unclosed '[' in {expression!r}")
    if current:
        items.append("".join(current))
    return items


def _expand_item(item: str) -> list[str]:
    """One comma-free item: literal text and bracket groups, combined as a cartesian product."""
    results = [""]
    for literal, group in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
        if literal:
            results = [r + literal for r in results]
        if group or (group == "" and f"{literal}[]" in item):
            numbers = _expand_group(group, item)
            results = [r + n for r in results for n in numbers]
    return results


def _expand_group(group: str, item: str) -> list[str]:
    """``1-3,05`` → ``1 2 3 05``: each range padded to the width of its low bound."""
    if not group:
        raise HostlistError(f"empty brackets in {item!r}")
    numbers: list[str] = []
    for part in group.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise HostlistError(f"invalid range {part!r} in {item!r}")
        lo, hi = int(low), int(high) if dash else int(low)
        if hi < lo:
            raise HostlistError(f"range {part!r} runs backwards in {item!r}")
        if hi - lo >= MAX_RANGE:
            raise HostlistError(f"range {part!r} in {item!r} is too large")
        numbers.extend(f"{n:0{len(low)}d}" for n in range(lo, hi + 1))
    return numbers


# --------------------------------------------------------------------------- compress


@dataclass
class _Range:
    """Slurm's hostrange: prefix + [lo, hi] at a zero-padding width; ``single`` for a name with no
    numeric suffix (which never joins or shares a bracket)."""

    prefix: str
    lo: int
    hi: int
    width: int
    single: bool

    def text(self) -> str:
        if self.lo == self.hi:
            return f"{self.lo:0{self.width}d}"
        return f"{self.lo:0{self.width}d}-{self.hi:0{self.width}d}"


def _parse_host(name: str) -> _Range:
    match = _SUFFIX.match(name)
    if match is None:
        return _Range(name, 0, 0, 0, True)
    digits = match.group(2)
    return _Range(match.group(1), int(digits), int(digits), len(digits), False)


def _zero_padded(number: int, width: int) -> int:
    return max(0, width - len(str(number)))


def _widths_combine(tail: _Range, host: _Range) -> bool:
    """``hostrange_width_combine``: equal widths, or widths that print the same numbers the same way.
    Adjusts ``tail.width`` like Slurm does when the combination is allowed."""
    if tail.width == host.width:
        return True
    # Slurm compares the *low* bound of the range being extended, not its high bound.
    npad, nmpad = _zero_padded(tail.lo, tail.width), _zero_padded(tail.lo, host.width)
    mpad, mnpad = _zero_padded(host.lo, host.width), _zero_padded(host.lo, tail.width)
    if npad != nmpad and mpad != mnpad:
        return False
    if npad != nmpad:  # the host's number prints the same at the tail's width: keep the tail's
        return True
    tail.width = host.width
    return True


def _push(ranges: list[_Range], host: _Range) -> None:
    """``hostlist_push_range``: extend the last range when the host continues it, else append."""
    if ranges:
        tail = ranges[-1]
        if (
            not tail.single
            and not host.single
            and tail.prefix == host.prefix
            and tail.hi == host.lo - 1
            and _widths_combine(tail, host)
        ):
            tail.hi = host.hi
            return
    ranges.append(host)


def _within(a: _Range, b: _Range) -> bool:
    """``hostrange_within_range``: two numeric ranges of one prefix share a bracket."""
    return a.prefix == b.prefix and not a.single and not b.single


def _natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p)


def compress(hosts: Iterable[str], *, sort: bool = False) -> str:
    """The ranged string Slurm prints for ``hosts`` (``scontrol show hostlist``; with ``sort``,
    ``scontrol show hostlistsorted``). Duplicates are kept, as Slurm keeps them.

    ``sort`` matches Slurm for node-like names (one zero-padding width per prefix, no duplicates);
    with mixed widths under one prefix Slurm's comparator is not transitive and its order depends on
    qsort internals — either order names the same hosts.
    """
    parsed = [_parse_host(h) for h in hosts]
    if sort:
        parsed.sort(key=lambda r: (_natural_key(r.prefix), r.single, r.lo, r.width))
    ranges: list[_Range] = []
    for host in parsed:
        _push(ranges, host)
    parts: list[str] = []
    i = 0
    while i < len(ranges):
        first = ranges[i]
        group = [first]
        while i + len(group) < len(ranges) and _within(ranges[i + len(group)], group[-1]):
            group.append(ranges[i + len(group)])
        if first.single:
            parts.append(first.prefix)
        elif len(group) == 1 and first.lo == first.hi:
            parts.append(first.prefix + first.text())
        else:
            parts.append(first.prefix + "[" + ",".join(r.text() for r in group) + "]")
        i += len(group)
    return ",".join(parts)
