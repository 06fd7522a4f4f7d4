"""Scenario and report ⇄ proto ⇄ JSON/YAML, by the same generic walk as ``solver.service.wire``.

A scenario file is the canonical JSON mapping of ``topoplace.v1.Scenario`` written as YAML or JSON
(proto field names or lowerCamelCase, enums by name). Loading goes text → data → proto message →
domain value, and every failure is an :class:`InvalidRequest` whose problem path is
``FILE:PATH`` — the file and the path inside it (``scenario.yaml:edits[1].add_nodes.count``) — with
the YAML line appended to the message where it is known, so a person can jump to the fault.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format
from google.protobuf.message import Message

from solver.domain.errors import InvalidRequest, Problem
from solver.service import wire
from solver.service.protojson import parse_dict
from solver.service.wire import split_parse_error
from solver.whatif.report import WhatIfReport
from solver.whatif.scenario import Edit, Scenario
from topoplace.v1 import whatif_pb2

YAML_SUFFIXES = frozenset({".yaml", ".yml"})
JSON_SUFFIXES = frozenset({".json"})

# ``wire`` converts by walking the domain class and the message descriptor together; it names no
# field, so it serves these messages as it serves placement.proto's.
_from_proto = wire._from_proto
to_proto = wire.to_proto


# --------------------------------------------------------------------------- proto ⇄ domain


def scenario_from_proto(msg: whatif_pb2.Scenario, source: str = "scenario") -> Scenario:
    """The domain scenario a wire scenario stands for; problems are prefixed with ``source:``."""
    try:
        return _scenario(msg)
    except InvalidRequest as exc:
        raise InvalidRequest([_prefixed(source, p) for p in exc.problems]) from None


def _scenario(msg: whatif_pb2.Scenario) -> Scenario:
    """``wire``'s walk, except for ``change_job.patch``: a ``google.protobuf.Struct`` is free-form
    JSON with no domain class to walk into, so patches are read as plain JSON and put back after."""
    copy = whatif_pb2.Scenario()
    copy.CopyFrom(msg)
    patches: dict[tuple[int, int], dict[str, Any]] = {}  # (variant or -1 for edits, edit) → patch
    for v, edits in [(-1, copy.edits), *((v, var.edits) for v, var in enumerate(copy.variants))]:
        for e, edit in enumerate(edits):
            if edit.HasField("change_job") and edit.change_job.HasField("patch"):
                patches[(v, e)] = json_format.MessageToDict(edit.change_job.patch)
                edit.change_job.ClearField("patch")
    scenario = _from_proto(copy, Scenario)
    if not patches:
        return scenario

    def patched(v: int, edits: tuple[Edit, ...]) -> tuple[Edit, ...]:
        out = list(edits)
        for (pv, e), patch in patches.items():
            if pv == v and out[e].change_job is not None:
                change = out[e].change_job.model_copy(update={"patch": patch})
                out[e] = out[e].model_copy(update={"change_job": change})
        return tuple(out)

    variants = tuple(
        var.model_copy(update={"edits": patched(v, var.edits)}) for v, var in enumerate(scenario.variants)
    )
    return scenario.model_copy(update={"edits": patched(-1, scenario.edits), "variants": variants})


def scenario_to_proto(scenario: Scenario) -> whatif_pb2.Scenario:
    return to_proto(scenario, whatif_pb2.Scenario)


def report_to_proto(report: WhatIfReport) -> whatif_pb2.WhatIfReport:
    return to_proto(report, whatif_pb2.WhatIfReport)


def report_from_proto(msg: whatif_pb2.WhatIfReport) -> WhatIfReport:
    return _from_proto(msg, WhatIfReport)


def report_json(report: WhatIfReport) -> str:
    """The report as canonical JSON (proto field names, enum names, indent 2)."""
    return wire.json_text(report_to_proto(report))


def report_from_json(text: str) -> WhatIfReport:
    msg = json_format.Parse(text, whatif_pb2.WhatIfReport())
    return report_from_proto(msg)


def scenario_json(scenario: Scenario) -> str:
    return wire.json_text(scenario_to_proto(scenario))


# --------------------------------------------------------------------------- files


def load_scenario_file(path: Path) -> Scenario:
    """Read a scenario from ``.yaml``/``.yml``/``.json``; relative file references stay as written
    (``solver.whatif.world`` resolves them against the scenario's folder)."""
    path = Path(path)
    data, lines = load_data(path)
    return scenario_from_data(data, str(path), lines)


def scenario_from_data(data: Any, source: str, lines: dict[str, int] | None = None) -> Scenario:
    """A scenario from JSON-like data; ``lines`` maps paths inside it to YAML lines for messages."""
    lines = lines or {}
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise InvalidRequest([Problem(path=source, message=f"must be a mapping (a scenario), got {kind}")])
    msg = whatif_pb2.Scenario()
    try:
        parse_dict(data, msg)  # every problem at its indexed path; short enum names accepted
    except InvalidRequest as exc:
        raise InvalidRequest([_problem(source, p.path, p.message, lines) for p in exc.problems]) from None
    except json_format.ParseError as exc:
        where, reason = split_parse_error(str(exc), ROOTS)
        raise InvalidRequest([_problem(source, where, reason, lines)]) from None
    try:
        return _scenario(msg)
    except InvalidRequest as exc:
        problems = [
            _problem(source, "" if p.path == "request" else p.path, p.message, lines) for p in exc.problems
        ]
        raise InvalidRequest(problems) from None


def load_data(path: Path) -> tuple[Any, dict[str, int]]:
    """Parsed JSON/YAML data of a file, and the line of every path inside it (YAML only)."""
    suffix = path.suffix.lower()
    if suffix not in YAML_SUFFIXES | JSON_SUFFIXES:
        known = ", ".join(sorted(YAML_SUFFIXES | JSON_SUFFIXES))
        raise InvalidRequest([Problem(path=str(path), message=f"unknown file type; expected one of {known}")])
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidRequest([Problem(path=str(path), message="no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest([Problem(path=str(path), message=f"cannot read: {exc}")]) from None
    if suffix in JSON_SUFFIXES:
        try:
            return json.loads(text), {}
        except json.JSONDecodeError as exc:
            where = f"{path}:{exc.lineno}:{exc.colno}"
            raise InvalidRequest([Problem(path=where, message=f"invalid JSON: {exc.msg}")]) from None
    try:
        return yaml.safe_load(text), yaml_lines(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        reason = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise InvalidRequest([Problem(path=where, message=f"invalid YAML: {reason}")]) from None


def yaml_lines(text: str) -> dict[str, int]:
    """``{"edits[1].add_nodes.count": 12, ...}``: the 1-based line of every key and list item.

    Keys are recorded as written and in snake_case, since errors use proto field names while a file
    may use lowerCamelCase.
    """
    out: dict[str, int] = {}

    def walk(node: yaml.Node, path: str) -> None:
        out.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = str(key.value)
                for spelled in {name, _snake(name)}:
                    child = f"{path}.{spelled}" if path else spelled
                    out.setdefault(child, key.start_mark.line + 1)
                    walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{path}[{i}]")

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return out
    if root is not None:
        walk(root, "")
    return out


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _problem(source: str, where: str, reason: str, lines: dict[str, int]) -> Problem:
    reason = _plain_reason(reason)
    line = _nearest_line(where, lines)
    suffix = f" (line {line})" if line else ""
    return Problem(path=f"{source}:{where or '(top)'}", message=f"{reason}{suffix}")


_VALUE_ERROR = re.compile(r"^value error, (?:[\w ]+: )?(.*?)(?:, got \w+)?$")


def _plain_reason(reason: str) -> str:
    """A scenario rule's own sentence without pydantic's wrapping ("value error, base: ..., got dict")."""
    match = _VALUE_ERROR.match(reason)
    return match.group(1) if match else reason


def _nearest_line(where: str, lines: dict[str, int]) -> int | None:
    """The line of ``where`` or of its closest ancestor that the file spells out."""
    path = where
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None


def _prefixed(source: str, problem: Problem) -> Problem:
    return Problem(path=f"{source}:{problem.path}", message=problem.message)


# Where a what-if parse error's path starts (the Placement messages' roots are wire's default).
ROOTS = ("Scenario", "WhatIfRequest", "WhatIfReport")


def message_from(data: Any, msg: Message, source: str) -> Message:
    """``ParseDict`` with the scenario's error style, for the other files a scenario names."""
    try:
        parse_dict(data, msg)
    except InvalidRequest as exc:
        raise InvalidRequest(
            [Problem(path=f"{source}:{p.path or '(top)'}", message=p.message) for p in exc.problems]
        ) from None
    except json_format.ParseError as exc:
        where, reason = split_parse_error(str(exc), ROOTS)
        raise InvalidRequest([Problem(path=f"{source}:{where or '(top)'}", message=reason)]) from None
    return msg
