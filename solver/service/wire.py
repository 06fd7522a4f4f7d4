"""Proto ⇄ domain conversion, as a generic walk.

The proto (``proto/topoplace/v1/placement.proto``) and the domain (``solver.domain.model``) share field
names and enum numbers, so a message becomes a domain value by ``MessageToDict`` followed by
``model_validate``, and back by a plain walk of the domain value followed by ``ParseDict``. No field
is named here: adding a field to both sides needs no change in this module.

Two proto3 rules need care, and they are the only logic here:

* ``MessageToDict`` omits a scalar that has no presence when it equals its zero value. That is what
  we want where the domain has a default ("0 means the default" is the wire rule), but not where the
  domain field is required (``Role.replicas``, ``JobResult.placed``): there the zero is put back so
  that the domain judges it ("must be at least 1, got 0") instead of calling it missing.
* ``optional`` scalars (``healthy``, ``numa``, ``min_replicas`` ...) keep presence on the wire, so an
  explicit ``healthy: false`` or ``numa: 0`` reaches the domain unchanged and an unset one takes the
  domain default.

Every way the input can be wrong becomes :class:`solver.domain.errors.InvalidRequest` with one
:class:`solver.domain.errors.Problem` per fault, each naming where (proto field names, list indexes in
brackets) and why.
"""

from __future__ import annotations

import functools
import json
import re
import time
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from enum import IntEnum
from typing import Any, ClassVar, TypeVar

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel, TypeAdapter, ValidationError, create_model

from solver.domain.cancel import checked
from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Inventory, Node, SolveRequest, SolveResult
from solver.domain.nodefold import NODE_BUDGET, OBJECT_BYTES, BoundedLru
from solver.domain.nodekey import DEVICES, NAMING
from solver.service.protojson import parse_dict
from topoplace.v1 import placement_pb2

M = TypeVar("M", bound=BaseModel)
P = TypeVar("P", bound=Message)

# --------------------------------------------------------------------------- public API


@dataclass
class Reading:
    """How long a request's nodes may be read (issue 23 item 2: a cold call keeps its deadline).

    Converting a node the server has never seen costs about a third of a millisecond (pydantic's
    validation of it), 0.12 ms when a node built alike was seen (its devices converted once:
    :data:`DEVICES_CACHE`), so 1,024 new nodes of new kinds are more than a 0.5 s deadline. Nodes
    are read in wire order while the clock, plus what each node read will cost afterwards
    (``after_s_per_node``: placing on it, verifying it; ``after_s_per_miss`` more for validating a
    node never seen), stays before ``until`` (``time.perf_counter()``); the nodes after that are
    left unread and the caller answers from the ones read (``solver.service.partial``).
    ``misses``: nodes converted afresh (not found in :data:`NODE_CACHE`), for the caller's pace;
    ``alike``: those of them whose devices were found converted (:data:`DEVICES_CACHE`), which cost
    ``convert_s_per_alike`` rather than ``convert_s_per_miss``; ``new_kinds``: those of them unlike
    every node read before them but in the fields that name a node (:func:`_kind`), which cost
    validation ``after_s_per_new_kind`` more: validating is done once per such kind
    (``solver.domain.validate``), and charging every node never seen as a new kind made
    validation the largest charge of a cold 16,384-node call (session 29: 1.2e-4 s charged a node,
    46-49 us spent).
    """

    until: float
    after_s: float = 0.0  # what the answer costs after reading whatever was read (its jobs' part)
    after_s_per_node: float = 0.0
    after_s_per_miss: float = 0.0  # validating a node never seen: its per-node memos are empty
    after_s_per_new_kind: float = 0.0  # more for one of a kind not read before: its rules run on it
    # What converting a node costs at the pace ``after_s_*`` were given for, found and not found in
    # the cache: the reading's own pace against them scales what comes after (a loaded machine
    # converts and places alike more slowly), from the first :attr:`PACED_AFTER` nodes on.
    convert_s_per_hit: float = 0.0
    convert_s_per_miss: float = 0.0
    convert_s_per_alike: float = 0.0
    convert_s_per_kind: float = 0.0  # a miss's kind (:func:`_kind`), found as it is read
    misses: int = 0
    alike: int = 0
    new_kinds: int = 0
    kinds: set[bytes] = dataclass_field(default_factory=set)
    started: float = dataclass_field(default_factory=time.perf_counter)

    PACED_AFTER: ClassVar[int] = 64
    SLOWEST: ClassVar[float] = 8.0  # as solver.compile.cost.Pace.MOST

    def more(self, read: int) -> bool:
        """Whether one more node may be read after ``read`` of them (the next counted as a miss of
        a new kind)."""
        now = time.perf_counter()
        after = (
            self.after_s
            + self.after_s_per_node * (read + 1)
            + self.after_s_per_miss * (self.misses + 1)
            + self.after_s_per_new_kind * (self.new_kinds + 1)
        )
        return now + after * self.pace(read, now) < self.until

    def saw(self, msg: placement_pb2.Node) -> None:
        """Count a node converted afresh, and whether it is of a kind not read before."""
        self.misses += 1
        kind = _kind(msg)
        if kind not in self.kinds:
            self.kinds.add(kind)
            self.new_kinds += 1

    def pace(self, read: int, now: float) -> float:
        """How much slower than predicted the nodes read so far were converted (1 when faster)."""
        predicted = self.predicted_s(read)
        if read < self.PACED_AFTER or predicted <= 0:
            return 1.0
        return min(self.SLOWEST, max(1.0, (now - self.started) / predicted))

    def predicted_s(self, read: int) -> float:
        """What converting the ``read`` nodes read so far costs at the pace the charges were given for."""
        fresh = self.misses - self.alike
        return (
            self.convert_s_per_miss * fresh
            + self.convert_s_per_alike * self.alike
            + self.convert_s_per_kind * self.misses
            + self.convert_s_per_hit * (read - self.misses)
        )


def request_from_proto(msg: placement_pb2.SolveRequest, reading: Reading | None = None) -> SolveRequest:
    """The domain request a wire request stands for; :class:`InvalidRequest` when a local rule fails.

    Nodes are converted one by one and remembered by their wire bytes: a scheduler sends nearly the
    same inventory on every call, and converting thousands of unchanged nodes again would cost more
    than the whole search. With ``reading``, only the nodes :class:`Reading` has time for, in wire
    order (so every path a problem names is the wire's), and the policy's ``node_order`` is kept to
    the nodes read: the request is then the batch on the first nodes of the inventory.
    """
    if not msg.HasField("inventory"):
        return _from_proto(msg, SolveRequest)
    problems: list[Problem] = []
    nodes = []
    # checked: converting a big inventory cold is seconds; a caller gone stops it (solver.domain.cancel)
    for i, node_msg in enumerate(checked(msg.inventory.nodes)):
        if reading is not None and not reading.more(i):
            break
        try:
            nodes.append(_node_from_proto(node_msg, reading))
        except InvalidRequest as exc:
            problems += [_under(f"inventory.nodes[{i}]", p) for p in exc.problems]
    shell = _without_nodes(msg)
    data = _message_data(shell, SolveRequest)
    data.setdefault("inventory", {})["nodes"] = nodes
    if len(nodes) < len(msg.inventory.nodes) and not problems:
        read = {node.name for node in nodes}
        order = data.get("policy", {}).get("node_order")
        if order:
            data["policy"]["node_order"] = [name for name in order if name in read]
    try:
        request = SolveRequest.model_validate(data)
    except ValidationError as exc:
        problems += [_problem_from_error(err) for err in _root_causes(exc.errors())]
    if problems:
        raise InvalidRequest(problems)
    return request


def result_from_proto(msg: placement_pb2.SolveResponse) -> SolveResult:
    """The domain result a wire response stands for (used by the client and by round-trip tests)."""
    return _from_proto(msg, SolveResult)


def request_to_proto(request: SolveRequest) -> placement_pb2.SolveRequest:
    """The wire form of a domain request.

    Raises :class:`InvalidRequest` when a value the domain allows does not fit its wire type
    (e.g. a seed above 2**31 - 1), since that is still the caller's input.
    """
    try:
        return to_proto(request, placement_pb2.SolveRequest)
    except ValueError:
        pass  # a value out of its wire type's range: ParseDict's walk names where
    try:
        return json_format.ParseDict(_plain(request), placement_pb2.SolveRequest())
    except json_format.ParseError as exc:
        location, reason = split_parse_error(str(exc))
        raise InvalidRequest([Problem(path=location or "request", message=reason)]) from None


def result_to_proto(result: SolveResult) -> placement_pb2.SolveResponse:
    """The wire form of a domain result. A failure here is a bug, so it is not dressed as bad input."""
    return to_proto(result, placement_pb2.SolveResponse)


def node_to_json(node: Node) -> str:
    """One node as canonical JSON, e.g. what ``topoplace ingest nvidia-smi`` prints for pasting
    into ``inventory.nodes`` of a request file."""
    return json_text(to_proto(node, placement_pb2.Node))


def node_to_readable_json(node: Node) -> str:
    """One node as a person reads it: numbers as numbers (canonical JSON quotes 64-bit integers),
    every field shown with its default; still a valid ``Node`` for a request file."""
    return readable_json(to_proto(node, placement_pb2.Node))


def inventory_to_readable_json(inventory: Inventory) -> str:
    """An inventory as :func:`node_to_readable_json` writes a node."""
    return readable_json(to_proto(inventory, placement_pb2.Inventory))


def readable_json(msg: Message) -> str:
    data = json_format.MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return json.dumps(_numbers(data, msg.DESCRIPTOR), indent=2) + "\n"


_INT64 = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)


def _numbers(data: Any, desc: Descriptor) -> Any:
    """64-bit integers back from the strings proto3 JSON writes them as."""
    if not isinstance(data, dict):
        return data
    out = {}
    order = {f.name: i for i, f in enumerate(desc.fields)}  # proto order, as json_text writes
    for key, value in sorted(data.items(), key=lambda kv: order.get(kv[0], len(order))):
        field = desc.fields_by_name.get(key)
        if field is None:
            out[key] = value
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[key] = {
                k: _numbers(v, value_field.message_type) if value_field.message_type else v
                for k, v in value.items()
            }
        elif field.message_type is not None:
            out[key] = (
                [_numbers(v, field.message_type) for v in value]
                if isinstance(value, list)
                else _numbers(value, field.message_type)
            )
        elif field.cpp_type in _INT64:
            out[key] = [int(v) for v in value] if isinstance(value, list) else int(value)
        else:
            out[key] = value
    return out


def json_text(msg: Message) -> str:
    """A message as the JSON of request and result files: proto field names, enum names, indent 2.

    Proto field names rather than lowerCamelCase because they are the names the domain and every
    error path use, so what a person reads in a file is what an error points at. Fields come in
    proto order and map entries sorted (by :func:`_plain`), so equal values give equal text.
    """
    return json_format.MessageToJson(msg, preserving_proto_field_name=True, indent=2)


def request_from_json_text(text: str, source_name: str) -> SolveRequest:
    """Parse a request in protobuf's canonical JSON mapping (lowerCamelCase or proto field names).

    ``source_name`` (a file name, ``<stdin>``...) is the path of problems found before the text is a
    message: bad JSON (with ``:line:col``), unknown fields, wrong types, unknown enum names.
    """
    return request_from_dict(_load_json(text, source_name), source_name)


def result_from_json_text(text: str, source_name: str) -> SolveResult:
    """Parse a result in protobuf's canonical JSON mapping; see :func:`request_from_json_text`."""
    return result_from_dict(_load_json(text, source_name), source_name)


def request_from_dict(data: Any, source_name: str) -> SolveRequest:
    """A request from JSON-like data (e.g. loaded from YAML) in the canonical JSON mapping."""
    return request_from_proto(_parse_dict(data, placement_pb2.SolveRequest(), source_name))


def result_from_dict(data: Any, source_name: str) -> SolveResult:
    """A result from JSON-like data in the canonical JSON mapping."""
    return result_from_proto(_parse_dict(data, placement_pb2.SolveResponse(), source_name))


# --------------------------------------------------------------------------- proto → domain


def _from_proto(msg: Message, model_cls: type[M]) -> M:
    data = _message_data(msg, model_cls)
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequest([_problem_from_error(err) for err in _root_causes(exc.errors())]) from None


# Nodes by their wire bytes, least recently used dropped first, bounded by bytes (issue 23: a count
# bound let callers pin gigabytes with large labels): each entry is charged its key, and the Node
# made from it once, in the budget it shares with the per-node memos (solver.domain.nodefold).
NODE_CACHE: BoundedLru[bytes, Node] = BoundedLru(budget=NODE_BUDGET)


def _node_from_proto(msg: placement_pb2.Node, reading: Reading | None = None) -> Node:
    key = msg.SerializeToString(deterministic=True)
    node = NODE_CACHE.get(key)
    if node is None:
        if reading is not None:
            reading.saw(msg)
        node = _alike_node(msg, reading)
        if node is None:
            node = _from_proto(msg, Node)
        NODE_CACHE.put(key, node, len(key), node=node)
    return node


def _kind(msg: placement_pb2.Node) -> bytes:
    """The node's wire bytes without the fields that name it or what it holds
    (``solver.domain.nodekey.NAMING``): two nodes of one kind convert to nodes of one
    ``node_key``, which validation checks once. (Nodes of one ``node_key`` may still differ here,
    in how their bytes encode it: they count as two kinds, which only charges more.)"""
    kind = placement_pb2.Node()
    kind.CopyFrom(msg)
    own, items = _naming()
    for name in own:
        kind.ClearField(name)
    for field, names in items:
        for item in getattr(kind, field):
            for name in names:
                item.ClearField(name)
    return kind.SerializeToString(deterministic=True)


@functools.cache
def _naming() -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """Node's own naming fields, and each field of Node whose items have naming fields (its GPUs,
    its allocations) with those fields: ``nodekey.NAMING`` as the wire's field names."""
    items = tuple(
        (name, tuple(sorted(NAMING[model])))
        for name, info in Node.model_fields.items()
        if (model := _nested_model(info.annotation)) is not None and model in NAMING
    )
    return tuple(sorted(NAMING[Node])), items


# --------------------------------------------------------------------------- nodes built alike

# A node never seen is mostly a machine seen before: a cluster is built of a few kinds of node, and
# nodes of one kind differ in their names, labels, allocations and GPU UUIDs (solver.domain.nodekey's
# NAMING), not in their devices. Validating the devices (GPUs, NICs, PCIe tree, NVLinks, NUMA nodes:
# nodekey.DEVICES) was most of a cold node's conversion, 0.3 ms a node. So the devices are kept,
# validated, by the wire bytes of the node with every other field cleared and the devices' own
# naming fields too, and a node whose devices are found there is made from them (its devices'
# naming fields put back, and those devices validated again with them) with only its own other
# fields validated, by Node itself. The node is equal to what validating it whole makes, unset
# fields included, and its problems are the same: Node's fields are validated one by one (no
# validator of Node reads two fields: _alike checks), devices that fail their validation are kept
# as _UNFIT and their nodes take the plain path (so do devices that fail only with their naming
# fields), and a node whose devices passed can only fail in its other fields
# (tests/test_wire_alike.py). Devices seen once are only marked (_SEEN) and their node converted
# whole: a cluster whose nodes are all unlike pays the key alone, 20-25 us a node (+9 %).
DEVICES_CACHE: BoundedLru[bytes, Any] = BoundedLru(budget=NODE_BUDGET)
_SEEN, _UNFIT = object(), object()


@dataclass(frozen=True)
class _Alike:
    others: tuple[tuple[str, int, Any, Any], ...]  # _plan of Node's fields but its devices
    devices: tuple[tuple[str, int, Any, Any], ...]  # _plan of its devices
    cleared: tuple[str, ...]  # the wire's fields of a node other than its devices
    # A device field, and the naming fields of its items left out of the key and put back per node
    naming: tuple[tuple[str, tuple[str, ...]], ...]
    model: type[BaseModel]  # the devices alone, each field as Node declares it
    items: dict[str, TypeAdapter[Any]]  # a device field's items, as Node's field validates them


def forget_nodes() -> None:
    """Forget every node converted here and the devices kept for nodes built alike: the next call
    converts cold, as a scheduler's first call does (benchmarks and tests of the cold path)."""
    NODE_CACHE.clear()
    DEVICES_CACHE.clear()


def _plain_validation(model: type[BaseModel]) -> bool:
    """Whether ``model`` validates each field alone: no validator that could read another field."""
    decorators = model.__pydantic_decorators__
    return not (decorators.model_validators or decorators.field_validators or decorators.root_validators)


@functools.cache
def _alike() -> _Alike | None:
    """How nodes built alike share their devices' validation; None if Node's validation does not
    allow it (a validator reading several fields would see the devices' objects, not their data)."""
    if not _plain_validation(Node):
        return None
    desc = placement_pb2.Node.DESCRIPTOR
    plan = _plan(desc, Node)
    naming = []
    for name in DEVICES:
        item = _nested_model(Node.model_fields[name].annotation)
        fields = desc.fields_by_name[name].message_type.fields_by_name
        # A naming field left out of the key must be unset exactly when empty, as _message_data
        # reads it: a string without presence, not required (a required one is read when empty).
        names = tuple(
            n
            for n in sorted(NAMING.get(item, ()))  # type: ignore[arg-type]
            if n in fields
            and fields[n].type == FieldDescriptor.TYPE_STRING
            and not fields[n].has_presence
            and not _is_repeated(fields[n])
            and not item.model_fields[n].is_required()  # type: ignore[union-attr]
        )
        if names:
            naming.append((name, names))
    model = create_model(  # type: ignore[call-overload]
        "NodeDevices",
        __config__=Node.model_config,
        **{name: (Node.model_fields[name].annotation, Node.model_fields[name]) for name in DEVICES},
    )
    return _Alike(
        others=tuple(p for p in plan if p[0] not in DEVICES),
        devices=tuple(p for p in plan if p[0] in DEVICES),
        cleared=tuple(f.name for f in desc.fields if f.name not in DEVICES),
        naming=tuple(naming),
        model=model,
        items={name: TypeAdapter(Node.model_fields[name].annotation) for name, _ in naming},
    )


def _alike_node(msg: placement_pb2.Node, reading: Reading | None = None) -> Node | None:
    """``msg`` as a Node made from the devices of a node built alike (validated now if they are
    seen for the second time), or None for the plain path: devices seen for the first time, or
    failing their validation (the plain path then names the problems). :class:`InvalidRequest`
    for a problem in its other fields."""
    alike = _alike()
    if alike is None:
        return None
    shell = placement_pb2.Node()
    shell.MergeFrom(msg)
    for name in alike.cleared:
        shell.ClearField(name)
    named = []  # (device field, the naming fields each of its items sets)
    for field, names in alike.naming:
        items = getattr(shell, field)
        if len(names) == 1:  # a GPU's uuid: the one case today, kept short (it is per node)
            name = names[0]
            values = [getattr(item, name) for item in items]
            if any(values):
                for item in items:
                    item.ClearField(name)
                named.append((field, [{name: v} if v else {} for v in values]))
            continue
        sets = [{n: v for n in names if (v := getattr(item, n))} for item in items]
        if any(sets):
            for item in items:
                for n in names:
                    item.ClearField(n)
            named.append((field, sets))
    key = shell.SerializeToString(deterministic=True)
    devices = DEVICES_CACHE.get(key)
    if devices is None or devices is _SEEN:
        # Validated the second time they are seen (see above).
        devices = _SEEN if devices is None else _devices(shell, alike)
        size = len(key) + (
            2 * OBJECT_BYTES * sum(map(len, devices[0].values())) if isinstance(devices, tuple) else 0
        )
        DEVICES_CACHE.put(key, devices, size)
    elif reading is not None and devices is not _UNFIT:
        reading.alike += 1
    if not isinstance(devices, tuple):  # seen once, or unfit
        return None
    checked, raw = devices
    data = _fields_data(msg, alike.others)
    data.update(checked)
    for field, sets in named:
        # Devices whose naming fields are set are validated again with them, from their data (one C
        # call: 2 us a GPU); the field as a whole is then validated by Node, with the rest.
        items = [{**item, **own} for item, own in zip(raw[field], sets, strict=True)]
        try:
            data[field] = alike.items[field].validate_python(items)
        except ValidationError:
            return None  # not for a plain string; were it to happen, the plain path says why
    try:
        return Node.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequest([_problem_from_error(err) for err in _root_causes(exc.errors())]) from None


def _devices(shell: placement_pb2.Node, alike: _Alike) -> Any:
    """The devices of ``shell`` (a node's, nothing else set) validated: their values by field, only
    the fields the wire sets (as Node's own validation would see them), and the data they were
    validated from (a device given its naming fields back is validated from it); _UNFIT if any
    fails."""
    data = _fields_data(shell, alike.devices)
    try:
        checked = alike.model.model_validate(data)
    except ValidationError:
        return _UNFIT
    return {name: getattr(checked, name) for name in data}, data


def _without_nodes(msg: placement_pb2.SolveRequest) -> placement_pb2.SolveRequest:
    """``msg`` with every field but the inventory's nodes (copied field by field, nodes skipped)."""
    shell = placement_pb2.SolveRequest()
    for field, value in msg.ListFields():
        if field.name == "inventory":
            continue
        if field.message_type is None:
            setattr(shell, field.name, value)
        else:
            getattr(shell, field.name).MergeFrom(value)
    shell.inventory.SetInParent()
    for field, value in msg.inventory.ListFields():
        if field.name != "nodes":
            getattr(shell.inventory, field.name).MergeFrom(value)
    return shell


def _under(prefix: str, problem: Problem) -> Problem:
    path = prefix if problem.path == "request" else f"{prefix}.{problem.path}"
    return Problem(path=path, message=problem.message)


def _root_causes(errors: list[Any]) -> list[Any]:
    """Drop pydantic's echo of item errors: a list whose items all failed is also reported as
    "too short" (no valid items left), which is not a fault of its own."""

    def echoes(err: Any) -> bool:
        loc = err["loc"]
        return err["type"] == "too_short" and any(
            other["loc"][: len(loc)] == loc and len(other["loc"]) > len(loc) for other in errors
        )

    return [err for err in errors if not echoes(err)]


_MAP, _MESSAGES, _SCALARS, _MESSAGE, _PRESENT, _PLAIN = range(6)


@functools.cache
def _plan(desc: Descriptor, model_cls: type[BaseModel]) -> tuple[tuple[str, int, Any, Any], ...]:
    """How to read each field of ``desc`` the domain knows: (name, how, nested class, zero)."""
    plan = []
    for name, info in model_cls.model_fields.items():
        field = desc.fields_by_name.get(name)
        if field is None:
            continue
        nested = _nested_model(info.annotation)
        required_zero = _zero_value(field) if info.is_required() and not field.has_presence else None
        if _is_map(field):
            plan.append((name, _MAP, None, required_zero))
        elif _is_repeated(field):
            how = _MESSAGES if field.message_type is not None else _SCALARS
            plan.append((name, how, nested, required_zero))
        elif field.message_type is not None:
            plan.append((name, _MESSAGE, nested, None))
        elif field.has_presence:
            plan.append((name, _PRESENT, None, None))
        else:
            plan.append((name, _PLAIN, _zero_value(field), required_zero))
    return tuple(plan)


def _message_data(msg: Message, model_cls: type[BaseModel]) -> dict[str, Any]:
    """The dict ``model_validate`` reads, straight from the message: what ``MessageToDict`` with
    integer enums and proto names gives, but an order of magnitude faster on big inventories (it
    reads fields through the C extension instead of building JSON in Python), with 64-bit integers
    as numbers, and the zeros of fields the domain requires put back (proto3 drops a zero without
    presence; a zero ``replicas`` must read "at least 1, got 0", not "is required")."""
    return _fields_data(msg, _plan(msg.DESCRIPTOR, model_cls))


def _fields_data(msg: Message, plan: tuple[tuple[str, int, Any, Any], ...]) -> dict[str, Any]:
    """:func:`_message_data` of the fields ``plan`` (a part of :func:`_plan`'s) names."""
    out: dict[str, Any] = {}
    for name, how, extra, required_zero in plan:
        value = getattr(msg, name)
        if how == _MAP:
            if value:
                out[name] = dict(value)
            elif required_zero is not None:
                out[name] = {}
        elif how == _MESSAGES:
            if value:
                out[name] = [_message_data(item, extra) for item in value]
            elif required_zero is not None:
                out[name] = []
        elif how == _SCALARS:
            if value:
                out[name] = list(value)
            elif required_zero is not None:
                out[name] = []
        elif how == _MESSAGE:
            if msg.HasField(name):
                out[name] = _message_data(value, extra)
        elif how == _PRESENT:
            if msg.HasField(name):
                out[name] = value
        elif value != extra or required_zero is not None:
            out[name] = value
    return out


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model class inside ``X``, ``tuple[X, ...]`` or ``X | None``; None for scalars and maps."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (tuple, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _nested_model(arg)
            if found is not None:
                return found
    return None


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _zero_value(field: FieldDescriptor) -> Any:
    """The value proto3 means by an absent field without presence."""
    if _is_map(field):
        return {}
    if _is_repeated(field):
        return []
    if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        return ""
    if field.type == FieldDescriptor.TYPE_BOOL:
        return False
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return 0.0
    return 0


def _is_repeated(field: FieldDescriptor) -> bool:
    # ``is_repeated`` is the modern spelling; ``label`` is deprecated but present in older protobufs.
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED


# --------------------------------------------------------------------------- domain → proto


def to_proto(value: BaseModel, message: type[P]) -> P:
    """A domain value as a ``message``, built by the message's own constructor from plain data:
    ``json_format.ParseDict`` walks the descriptors in Python and took 40 ms of a 500-job answer at
    4,096 nodes, outside any budget; the constructor makes the same bytes in about a third of the
    time (23 -> 8 ms for 200 jobs).
    A value outside its wire type's range raises ``ValueError``."""
    return message(**_plain(value))


def _plain(value: Any) -> Any:
    """A domain value as JSON-like data ``ParseDict`` accepts.

    ``None`` (an unset ``optional``) is dropped, tuples become lists, enums their numbers, and map
    entries are sorted so that equal values always serialise to equal bytes.
    """
    if isinstance(value, BaseModel):
        items = ((name, getattr(value, name)) for name in type(value).model_fields)
        return {name: _plain(v) for name, v in items if v is not None}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(value[k]) for k in sorted(value)}
    if isinstance(value, IntEnum):
        return int(value)
    return value


# --------------------------------------------------------------------------- JSON text


def _load_json(text: str, source_name: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except json.JSONDecodeError as exc:
        path = f"{source_name}:{exc.lineno}:{exc.colno}"
        raise InvalidRequest([Problem(path=path, message=f"invalid JSON: {exc.msg}")]) from None
    except _DuplicateKey as exc:
        raise InvalidRequest([Problem(path=source_name, message=str(exc))]) from None


class _DuplicateKey(ValueError):
    pass


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A key given twice would silently keep only the last value (e.g. two ``nodes`` lists)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"key {key!r} appears more than once in one object")
        out[key] = value
    return out


def _parse_dict(data: Any, msg: Message, source_name: str) -> Any:
    if data is None:
        raise InvalidRequest([Problem(path=source_name, message="is empty")])
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise InvalidRequest([Problem(path=source_name, message=f"top level must be an object, got {kind}")])
    # Every wrong type, unknown field and enum value with its indexed path; short enum names (PXB).
    try:
        return parse_dict(data, msg)
    except InvalidRequest as exc:
        where = [(f"{p.path}: " if p.path else "") + p.message for p in exc.problems]
        raise InvalidRequest([Problem(path=source_name, message=m) for m in where]) from None
    except json_format.ParseError as exc:  # what the walk does not check (bytes' base64)
        location, reason = split_parse_error(str(exc))
        message = f"{location}: {reason}" if location else reason
        raise InvalidRequest([Problem(path=source_name, message=message)]) from None


_CHAIN_STEP = re.compile(r"^Failed to parse (\w+) field: ")
_AVAILABLE = re.compile(r'\.?\s*Available Fields\(except extensions\): "\[(.*?)\]"', re.DOTALL)


def split_parse_error(
    text: str, roots: tuple[str, ...] = ("SolveRequest", "SolveResponse")
) -> tuple[str, str]:
    """Split a ``json_format.ParseError`` message into (field path, reason).

    Its messages nest one "Failed to parse X field: " per level and usually end in
    ``at SolveRequest.jobs[0].roles[0]...`` (``roots``: the message types a path may start at); the
    path with indexes wins when present, else the chain of field names.
    """
    location_re = re.compile(rf' at "?(?:{"|".join(roots)})\.?([\w.\[\]]*)"?')
    chain: list[str] = []
    while match := _CHAIN_STEP.match(text):
        chain.append(match.group(1))
        text = text[match.end() :]
    location = ".".join(chain)
    if found := location_re.search(text):
        location = found.group(1).rstrip(".") or location
        text = text[: found.start()] + text[found.end() :]
    text = _AVAILABLE.sub(lambda m: "; known fields: " + m.group(1).replace("'", ""), text)
    reason = " ".join(text.split()).rstrip(".")
    return location, reason[:1].lower() + reason[1:]


# --------------------------------------------------------------------------- pydantic errors


def _problem_from_error(err: Any) -> Problem:
    return Problem(path=_format_loc(err["loc"]), message=_describe(err))


def _format_loc(loc: tuple[int | str, ...]) -> str:
    """``('inventory', 'nodes', 3, 'index')`` → ``inventory.nodes[3].index``.

    Strings are field names (the domain's names are the proto's); pydantic's ``[key]`` marker of a
    bad map key is kept as is.
    """
    path = ""
    for part in loc:
        if isinstance(part, int) or part == "[key]":
            path += f"[{part}]" if isinstance(part, int) else "[key]"
        else:
            path += f".{part}" if path else str(part)
    return path or "request"


def _describe(err: Any) -> str:
    """A plain sentence for one pydantic error, with the offending value."""
    kind, ctx, got = err["type"], err.get("ctx") or {}, _show(err.get("input"))
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}, got {got}"
    if kind == "greater_than":
        return f"must be greater than {ctx['gt']}, got {got}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}, got {got}"
    if kind == "less_than":
        return f"must be less than {ctx['lt']}, got {got}"
    if kind == "string_too_short":
        if ctx.get("min_length") == 1:
            return "must not be empty"
        return f"must have at least {ctx['min_length']} characters, got {got}"
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} item(s), got {ctx.get('actual_length', 0)}"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known field"
    if kind == "enum":
        return f"must be one of {ctx.get('expected', 'the enum values')}, got {got}"
    message = str(err["msg"]).replace("Input should be", "must be")
    return f"{message[:1].lower()}{message[1:]}, got {got}"


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (dict, list)):
        return type(value).__name__
    return str(value)
