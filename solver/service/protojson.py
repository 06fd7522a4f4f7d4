"""Reading protobuf's canonical JSON as people write it: every problem at its path, in words.

``json_format.ParseDict`` stops at the first problem, names it by field chain without indexes
(``jobs.roles.member.gpus``), and lets Python's own messages through (``unhashable type: 'dict'``,
``invalid literal for int() with base 10``). It also refuses the short enum names the docs use
(``PXB`` for ``DISTANCE_PXB``, ``REQUIRED`` for ``REQUIREMENT_REQUIRED``).

:func:`parse_dict` walks the data against the message's descriptor first: it collects every wrong
type, unknown field and unknown enum value with its indexed path (``jobs[1].roles[0].member.gpus``),
lists the valid values of an enum, and rewrites short and lower-case enum names to the full ones.
Only data that passed the walk reaches ``ParseDict``, which then cannot fail on these grounds.
"""

from __future__ import annotations

from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from solver.domain.errors import InvalidRequest, Problem

M = TypeVar("M", bound=Message)

_INTS = {
    FieldDescriptor.TYPE_INT32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_SINT32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(1 << 31), (1 << 31) - 1),
    FieldDescriptor.TYPE_UINT32: (0, (1 << 32) - 1),
    FieldDescriptor.TYPE_FIXED32: (0, (1 << 32) - 1),
    FieldDescriptor.TYPE_INT64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_SINT64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(1 << 63), (1 << 63) - 1),
    FieldDescriptor.TYPE_UINT64: (0, (1 << 64) - 1),
    FieldDescriptor.TYPE_FIXED64: (0, (1 << 64) - 1),
}
_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)
# Well-known types with a JSON form of their own (google.protobuf.Struct for a patch, ...): ParseDict
# reads them; the walk leaves them alone.
_OPAQUE = ("google.protobuf.",)


def parse_dict(data: dict[str, Any], msg: M) -> M:
    """Fill ``msg`` from JSON-like ``data``; raises :class:`InvalidRequest` with every problem found,
    each with a path relative to the message (e.g. ``jobs[1].roles[0].member.alignment.mode``; empty
    for the top level)."""
    problems: list[Problem] = []
    cleaned = _message(data, msg.DESCRIPTOR, "", problems)
    if problems:
        raise InvalidRequest(problems)
    json_format.ParseDict(cleaned, msg)
    return msg


def enum_names(enum: EnumDescriptor) -> list[str]:
    """The names a person may write for an enum's values, short form first: ``PXB`` (``DISTANCE_PXB``)."""
    prefix = _prefix(enum)
    return [v.name.removeprefix(prefix) for v in enum.values if not v.name.endswith("_UNSPECIFIED")]


def enum_value(enum: EnumDescriptor, given: Any) -> str | int | None:
    """The full enum name for ``given`` (full or short name, any case; or a defined number), else None."""
    if isinstance(given, bool):
        return None
    if isinstance(given, int):
        return given if given in enum.values_by_number else None
    if not isinstance(given, str):
        return None
    word = given.strip().upper().replace("-", "_")
    prefix = _prefix(enum)
    for candidate in (word, prefix + word):
        if candidate in enum.values_by_name:
            return candidate
    return None


def _prefix(enum: EnumDescriptor) -> str:
    """``DISTANCE_`` for Distance: what every value name starts with (proto style's enum prefix)."""
    names = [v.name for v in enum.values]
    unspecified = next((n for n in names if n.endswith("_UNSPECIFIED")), "")
    return unspecified.removesuffix("UNSPECIFIED")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value:g}" if isinstance(value, float) else f"the number {value}"
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _message(data: Any, desc: Descriptor, path: str, problems: list[Problem]) -> Any:
    if desc.full_name.startswith(_OPAQUE):
        return data
    if not isinstance(data, dict):
        problems.append(Problem(path=path, message=f"must be an object, got {_kind(data)}"))
        return data
    by_name = {**{f.json_name: f for f in desc.fields}, **desc.fields_by_name}
    out: dict[str, Any] = {}
    for key, value in data.items():
        field = by_name.get(key) if isinstance(key, str) else None
        if field is None:
            known = ", ".join(f.name for f in desc.fields)
            # The object's path, not the unknown name's: the place to look for the typo.
            problems.append(Problem(path=path, message=f'unknown field "{key}"; known fields: {known}'))
            continue
        if value is None:  # JSON null: the field's default, as proto3 JSON says
            continue
        out[key] = _field(value, field, _join(path, key), problems)
    return out


def _field(value: Any, field: FieldDescriptor, path: str, problems: list[Problem]) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        if not isinstance(value, dict):
            problems.append(Problem(path=path, message=f"must be an object (a map), got {_kind(value)}"))
            return value
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        out = {}
        for k, v in value.items():
            if key_field.type in _INTS:
                _scalar(k, key_field, f"{path}[{k!r}] (key)", problems)
            out[k] = _single(v, value_field, f"{path}[{k!r}]", problems)
        return out
    if _is_repeated(field):
        if not isinstance(value, list):
            problems.append(Problem(path=path, message=f"must be a list, got {_kind(value)}"))
            return value
        return [_single(v, field, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    return _single(value, field, path, problems)


def _is_repeated(field: FieldDescriptor) -> bool:
    # ``is_repeated`` is the modern spelling; ``label`` is deprecated but present in older protobufs.
    repeated = getattr(field, "is_repeated", None)
    return bool(repeated) if repeated is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _single(value: Any, field: FieldDescriptor, path: str, problems: list[Problem]) -> Any:
    if field.message_type is not None:
        return _message(value, field.message_type, path, problems)
    if field.enum_type is not None:
        full = enum_value(field.enum_type, value)
        if full is None:
            valid = ", ".join(enum_names(field.enum_type))
            problems.append(Problem(path=path, message=f"must be one of {valid}, got {_kind(value)}"))
            return value
        return full
    return _scalar(value, field, path, problems)


def _scalar(value: Any, field: FieldDescriptor, path: str, problems: list[Problem]) -> Any:
    t = field.type
    if t in _INTS:
        number: Any = value
        if isinstance(value, str):  # proto3 JSON writes 64-bit integers as strings
            try:
                number = int(value.strip())
            except ValueError:
                number = None
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        if isinstance(number, bool) or not isinstance(number, int):
            problems.append(Problem(path=path, message=f"must be a whole number, got {_kind(value)}"))
            return value
        low, high = _INTS[t]
        if not low <= number <= high:
            problems.append(Problem(path=path, message=f"must be between {low} and {high}, got {number}"))
        return value
    if t in _FLOATS:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if isinstance(value, str):  # proto3 JSON allows "1.5", "NaN", "Infinity"
            try:
                float(value)
                ok = True
            except ValueError:
                ok = False
        if not ok:
            problems.append(Problem(path=path, message=f"must be a number, got {_kind(value)}"))
        return value
    if t == FieldDescriptor.TYPE_BOOL:
        if not isinstance(value, bool):
            problems.append(Problem(path=path, message=f"must be true or false, got {_kind(value)}"))
        return value
    if t == FieldDescriptor.TYPE_STRING:
        if not isinstance(value, str):
            problems.append(Problem(path=path, message=f"must be text (in quotes), got {_kind(value)}"))
        return value
    return value  # bytes: ParseDict checks its base64
