"""Requests and results as files: protobuf's canonical JSON mapping, written as JSON or as YAML.

The file format *is* the wire contract (``proto/topoplace/v1/placement.proto``) in its JSON mapping,
so a fixture, a ``topoplace solve`` input and a gRPC request are one thing in three encodings. Field
names may be the proto's (``pcie_switch``) or lowerCamelCase (``pcieSwitch``), as ``json_format``
accepts both; enums are written by name (``REQUIREMENT_REQUIRED``) or number.

Every failure is an :class:`InvalidRequest` whose problem path is the file, with ``:line:col`` where
the parser knows it, so a person can jump straight to the fault.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import SolveRequest, SolveResult
from solver.service import wire

JSON_SUFFIXES = frozenset({".json"})
YAML_SUFFIXES = frozenset({".yaml", ".yml"})


def load_request(path: Path) -> SolveRequest:
    """Read a request from a ``.json``, ``.yaml`` or ``.yml`` file."""
    path = Path(path)
    text = _read_text(path)
    if path.suffix.lower() in YAML_SUFFIXES:
        return wire.request_from_dict(_load_yaml(text, str(path)), str(path))
    return wire.request_from_json_text(text, str(path))


def load_result(path: Path) -> SolveResult:
    """Read a result (e.g. one written by :func:`dump_result_json`) from a JSON or YAML file."""
    path = Path(path)
    text = _read_text(path)
    if path.suffix.lower() in YAML_SUFFIXES:
        return wire.result_from_dict(_load_yaml(text, str(path)), str(path))
    return wire.result_from_json_text(text, str(path))


def dump_request_json(request: SolveRequest) -> str:
    """The request as canonical JSON (see :func:`solver.service.wire.json_text`), no trailing newline."""
    return wire.json_text(wire.request_to_proto(request))


def dump_result_json(result: SolveResult) -> str:
    """The result as canonical JSON; :func:`load_result` reads it back to an equal value."""
    return wire.json_text(wire.result_to_proto(result))


def _read_text(path: Path) -> str:
    if path.suffix.lower() not in JSON_SUFFIXES | YAML_SUFFIXES:
        known = ", ".join(sorted(JSON_SUFFIXES | YAML_SUFFIXES))
        raise InvalidRequest([Problem(path=str(path), message=f"unknown file type; expected one of {known}")])
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidRequest([Problem(path=str(path), message="no such file")]) from None
    except IsADirectoryError:
        raise InvalidRequest([Problem(path=str(path), message="is a directory, not a file")]) from None
    except UnicodeDecodeError as exc:
        message = f"not UTF-8 text (byte {exc.start})"
        raise InvalidRequest([Problem(path=str(path), message=message)]) from None
    except OSError as exc:
        raise InvalidRequest([Problem(path=str(path), message=exc.strerror or str(exc))]) from None


def _load_yaml(text: str, source_name: str) -> Any:
    """Parse YAML safely; a syntax error names its line and column (1-based, as editors count)."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source_name}:{mark.line + 1}:{mark.column + 1}" if mark else source_name
        reason = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise InvalidRequest([Problem(path=where, message=f"invalid YAML: {reason}")]) from None
    except yaml.YAMLError as exc:
        raise InvalidRequest([Problem(path=source_name, message=f"invalid YAML: {exc}")]) from None
