"""Collecting every fault of a Slurm file before refusing it, each located as ``FILE:LINE``.

An admin fixing a 2,000-line gres.conf wants all the mistakes at once, not one per run; the solver's
:class:`~solver.domain.errors.InvalidRequest` carries a list, and the CLI prints each on its own line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the solver (pydantic) is imported only to raise: the TaskProlog's helper reads
    from solver.domain.errors import Problem  # gres.conf through this module and must start in ~30 ms


class Problems:
    """Problems of one source (a file name, or ``<stdin>``), raised together by :meth:`raise_if_any`."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.found: list[tuple[str, str]] = []  # (FILE:LINE, reason)

    def add(self, line: int, message: str) -> None:
        self.found.append((f"{self.source}:{line}", message))

    @property
    def items(self) -> list[Problem]:
        from solver.domain.errors import Problem

        return [Problem(path=path, message=message) for path, message in self.found]

    def raise_if_any(self) -> None:
        if not self.found:
            return
        try:
            from solver.domain.errors import InvalidRequest
        except ImportError:  # the TaskProlog's helper runs without site-packages
            raise ValueError("; ".join(f"{path}: {reason}" for path, reason in self.found)) from None
        raise InvalidRequest(self.items)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Slurm config lines with ``#`` comments stripped, ``\\`` continuations joined and blank lines
    dropped; each with the 1-based number of the line it *starts* on (where an editor should go)."""
    result: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        joined = " ".join(p.strip() for p in pending).strip()
        pending = []
        if joined:
            result.append((start, joined))
    if pending and (joined := " ".join(p.strip() for p in pending).strip()):
        result.append((start, joined))
    return result


def key_values(line: str) -> list[tuple[str, str]]:
    """``A=1 B=x y``-style config lines as (key, value) pairs; a value ends at whitespace (Slurm config
    values have no spaces unless quoted, and quotes are removed)."""
    pairs: list[tuple[str, str]] = []
    for token in _split_quoted(line):
        key, eq, value = token.partition("=")
        pairs.append((key, value if eq else ""))
    return pairs


def _split_quoted(line: str) -> list[str]:
    tokens: list[str] = []
    current: list[str] = []
    quote = ""
    for ch in line:
        if quote:
            if ch == quote:
                quote = ""
            else:
                current.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch.isspace():
            if current:
                tokens.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        tokens.append("".join(current))
    return tokens
