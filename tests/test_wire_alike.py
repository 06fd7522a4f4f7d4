"""Nodes built alike share their devices' conversion on the wire (solver.service.wire, session 29):
a node never seen whose devices were converted for another node is made from them, and only its own
fields are validated. What it gives must be what converting the node whole gives: the same Node
(unset fields included), or the same problems at the same paths, for good nodes and bad ones — and a
node is never given another node's name, UUIDs or allocations."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Allocation, Node, SolveRequest
from solver.domain.nodekey import DEVICES, node_key
from solver.domain.validate import validate
from solver.service import wire
from tests import kit
from topoplace.v1 import placement_pb2

# --------------------------------------------------------------------------- random wire nodes

# Few names, so that devices repeat (nodes built alike), references dangle, ids clash; and, in a
# kind of devices drawn bad, numbers out of range, empty ids and unknown enum numbers, so that some
# nodes are refused for their devices (most kinds are good: only good devices are shared).
optional_bool = st.sampled_from((None, False, True))


def message(cls: Any, **fields: Any) -> Any:
    """``cls(**fields)`` with the fields drawn as None left unset (optional fields keep presence)."""
    return cls(**{k: v for k, v in fields.items() if v is not None})


def device_items(bad: bool) -> dict[str, st.SearchStrategy[Any]]:
    """A strategy per device field of a node, for its items; with ``bad``, wrong values too."""

    def pick(good: tuple[Any, ...], wrong: tuple[Any, ...]) -> st.SearchStrategy[Any]:
        return st.sampled_from(good + wrong if bad else good)

    gpu_ids, switches = pick(("GPU0", "GPU1", "GPU2"), ("",)), pick(("hb0", "pex0", "pex1"), ("",))
    numa = pick((None, 0, 1), (-1,))
    return {
        "numa_nodes": st.builds(
            message,
            st.just(placement_pb2.NumaNode),
            id=pick((0, 1), (-1,)),
            cpu_milli=pick((0, 64000), (-1,)),
        ),
        "gpus": st.builds(
            message,
            st.just(placement_pb2.Gpu),
            id=gpu_ids,
            index=pick((0, 1, 3), (-1,)),
            # Per GPU: the naming field the devices' key leaves out and each node puts back.
            uuid=st.sampled_from(("", "GPU-a", "GPU-b", " GPU-c ")),
            model=st.sampled_from(("", "H100")),
            memory_mib=pick((0, 81920), (-5,)),
            numa=numa,
            pcie_switch=switches,
            healthy=optional_bool,
        ),
        "nics": st.builds(
            message,
            st.just(placement_pb2.Nic),
            name=pick(("mlx5_0", "mlx5_1"), ("",)),
            numa=numa,
            pcie_switch=switches,
            bandwidth_gbps=pick((0, 400), (-1,)),
            rdma=optional_bool,
            rail=numa,
            healthy=optional_bool,
        ),
        "pcie_switches": st.builds(
            message,
            st.just(placement_pb2.PcieSwitch),
            id=switches,
            parent=switches,
            kind=pick((0, 1, 2), (9,)),  # 9: no such SwitchKind
            numa=numa,
        ),
        "nvlinks": st.builds(
            message,
            st.just(placement_pb2.NvLink),
            gpu_a=gpu_ids,
            gpu_b=gpu_ids,
            links=pick((0, 1, 18), (-1,)),
        ),
    }


GOOD, BAD = device_items(bad=False), device_items(bad=True)
shares = st.builds(
    message,
    st.just(placement_pb2.GpuShare),
    gpu=st.sampled_from(("GPU0", "GPU9")),
    milli=st.sampled_from((-1, 0, 500, 1001)),
    memory_mib=st.sampled_from((-1, 0, 1024)),
)
labels = st.dictionaries(st.sampled_from(("host", "rack", "")), st.sampled_from(("a", "b", "")), max_size=2)
allocations = st.builds(
    message,
    st.just(placement_pb2.Allocation),
    owner=st.sampled_from(("", "pod-a", "pod-b")),
    # Devices that exist, that do not (GPU9, mlx5_9), and the same one twice.
    gpus=st.lists(st.sampled_from(("GPU0", "GPU1", "GPU9")), max_size=3),
    nics=st.lists(st.sampled_from(("mlx5_0", "mlx5_9")), max_size=2),
    cpu_milli=st.sampled_from((-1, 0, 8000)),
    memory_mib=st.sampled_from((-1, 0, 1024)),
    gpu_shares=st.lists(shares, max_size=2),
    mutex=st.booleans(),
    labels=labels,
)


@st.composite
def devices(draw: st.DrawFn) -> placement_pb2.Node:
    """A node's devices, nothing else: what nodes built alike share; one kind in four may be bad."""
    items = BAD if draw(st.integers(0, 3)) == 0 else GOOD
    sizes = {"numa_nodes": 2, "gpus": 3, "nics": 2, "pcie_switches": 3, "nvlinks": 2}
    return placement_pb2.Node(
        **{name: draw(st.lists(items[name], max_size=most)) for name, most in sizes.items()}
    )


@st.composite
def node_on(draw: st.DrawFn, hardware: placement_pb2.Node) -> placement_pb2.Node:
    """A node with ``hardware``'s devices and fields of its own: a name (maybe empty or another
    node's), labels, numbers, allocations, and its own GPU UUIDs (some kept as drawn)."""
    node = placement_pb2.Node()
    node.CopyFrom(hardware)
    node.name = draw(st.sampled_from(("n0", "n1", "n2", "")))
    node.labels.update(draw(labels))
    node.cpu_milli = draw(st.sampled_from((-1, 0, 224000)))
    node.memory_mib = draw(st.sampled_from((-1, 0, 2000000)))
    node.leaf = draw(st.sampled_from(("", "leaf0", "leaf1")))
    node.nvlink_domain = draw(st.sampled_from(("", "nvl0")))
    node.allocations.extend(draw(st.lists(allocations, max_size=2)))
    schedulable = draw(optional_bool)
    if schedulable is not None:
        node.schedulable = schedulable
    for gpu in node.gpus:
        if draw(st.booleans()):
            gpu.uuid = draw(st.sampled_from(("", "GPU-x", "GPU-y")))
    return node


@st.composite
def near_twin(draw: st.DrawFn, hardware: placement_pb2.Node) -> placement_pb2.Node:
    """``hardware`` with one field of one device taken from another device, set or unset as there:
    nodes nearly alike, which must not share their devices."""
    twin = placement_pb2.Node()
    twin.CopyFrom(hardware)
    held = [name for name in DEVICES if getattr(twin, name)]
    if not held:
        return twin
    name = draw(st.sampled_from(held))
    items = getattr(twin, name)
    item = items[draw(st.integers(0, len(items) - 1))]
    other = draw(draw(st.sampled_from((GOOD, BAD)))[name])
    field = item.DESCRIPTOR.fields_by_name[draw(st.sampled_from(sorted(item.DESCRIPTOR.fields_by_name)))]
    if field.has_presence and not other.HasField(field.name):
        item.ClearField(field.name)
    else:
        setattr(item, field.name, getattr(other, field.name))
    return twin


@st.composite
def nodes_alike(draw: st.DrawFn) -> list[placement_pb2.Node]:
    """1-5 nodes on a kind of hardware, another kind, or the first but for one device field, in
    any order: most share their devices, and some nearly do."""
    first = draw(devices())
    kinds = [first, draw(devices()), draw(near_twin(first))]
    return [draw(node_on(draw(st.sampled_from(kinds)))) for _ in range(draw(st.integers(1, 5)))]


# --------------------------------------------------------------------------- the plain path


@contextmanager
def plain() -> Iterator[None]:
    """Conversion as it was before nodes shared their devices: every node validated whole."""
    with patch.object(wire, "_alike_node", lambda msg, reading=None: None):
        yield


def outcome(convert: Callable[[], BaseModel]) -> tuple[str, Any]:
    """What converting gives, comparably: the value with the fields it sets (unset fields read as
    their defaults but are not written back), or the problems."""
    try:
        value = convert()
    except InvalidRequest as exc:
        return "problems", exc.problems
    return "value", (value, value.model_dump(exclude_unset=True))


def cold(convert: Callable[[], BaseModel]) -> tuple[str, Any]:
    """``outcome`` with no node in the wire's cache by its bytes (devices may be: that is the point)."""
    wire.NODE_CACHE.clear()
    return outcome(convert)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes_alike())
def test_a_node_made_from_its_twins_devices_is_the_node_converted_whole(
    nodes: list[placement_pb2.Node],
) -> None:
    """Each node, valid or not, by the shared path and by the plain ``_from_proto``: same Node with
    the same fields set, or the same problems in the same order."""
    for msg in nodes:
        assert cold(lambda m=msg: wire._node_from_proto(m)) == outcome(
            lambda m=msg: wire._from_proto(m, Node)
        )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes_alike())
def test_a_request_of_nodes_alike_reads_and_validates_as_before(nodes: list[placement_pb2.Node]) -> None:
    """A whole request: the same problems at the same paths (``inventory.nodes[i]...``), or the same
    request, whose validation (allocations naming devices that do not exist, names given twice,
    unhealthy devices...) finds the same problems."""
    msg = placement_pb2.SolveRequest(inventory=placement_pb2.Inventory(nodes=nodes))
    fast = cold(lambda: wire.request_from_proto(msg))
    with plain():
        before = cold(lambda: wire.request_from_proto(msg))
    assert fast == before
    if fast[0] == "value":
        request: SolveRequest = fast[1][0]
        reference: SolveRequest = before[1][0]
        assert validate(request) == validate(reference)


def test_twins_share_their_devices_but_not_their_names_uuids_or_allocations() -> None:
    """Nodes alike but for their names, GPU UUIDs and allocations: the first is converted whole, the
    second converts their devices for both, the third is made from them (the very objects, where
    nothing names them), and each keeps its own names, UUIDs and allocations."""
    base = kit.node("n", kit.SMALL)

    def twin(name: str, allocations: tuple[Allocation, ...] = ()) -> Node:
        gpus = tuple(g.model_copy(update={"uuid": f"GPU-{name}-{g.id}"}) for g in base.gpus)
        return base.model_copy(update={"name": name, "gpus": gpus, "allocations": allocations})

    sent = [twin("a"), twin("b", (kit.allocation("job-b", [base.gpus[0].id]),)), twin("c")]
    wire.NODE_CACHE.clear()
    wire.DEVICES_CACHE.clear()
    reading = wire.Reading(until=float("inf"))
    a, b, c = (wire._node_from_proto(wire.to_proto(n, placement_pb2.Node), reading) for n in sent)
    assert (reading.misses, reading.alike) == (3, 1)
    assert [a, b, c] == sent
    for got, name in zip((a, b, c), "abc", strict=True):
        assert got.name == name and [g.uuid for g in got.gpus] == [f"GPU-{name}-{g.id}" for g in base.gpus]
    assert b.allocations == sent[1].allocations and a.allocations == c.allocations == ()
    assert b.nics and all(x is y for x, y in zip(b.nics, c.nics, strict=True))  # shared, unnamed
    assert all(x is not y for x, y in zip(b.gpus, c.gpus, strict=True))  # named: their own
    # A node differing in one device field is not their twin: its own devices, its own values.
    gpus = (sent[2].gpus[0].model_copy(update={"healthy": False}), *sent[2].gpus[1:])
    sick = sent[2].model_copy(update={"name": "d", "gpus": gpus})
    d = wire._node_from_proto(wire.to_proto(sick, placement_pb2.Node), reading)
    assert (reading.misses, reading.alike) == (4, 1)
    assert d == sick and not d.gpus[0].healthy and c.gpus[0].healthy
    # Kinds (what validation checks once): a; b holds other devices; c is a's but for its names; d.
    assert reading.new_kinds == 3 and len(reading.kinds) == 3


def test_bad_devices_are_named_as_before_on_every_node_that_has_them() -> None:
    """Devices that fail validation are not shared: each node holding them is converted whole and
    refused with its own path, again and again (the failure is remembered, not the node)."""
    msg = wire.request_to_proto(
        kit.request([kit.node(f"n{i}", kit.SMALL) for i in range(3)], [kit.job("a", 1)])
    )
    for i in (0, 2):
        msg.inventory.nodes[i].gpus[1].memory_mib = -1
    msg.inventory.nodes[2].name = ""
    wire.NODE_CACHE.clear()
    wire.DEVICES_CACHE.clear()
    with pytest.raises(InvalidRequest) as caught:
        wire.request_from_proto(msg)
    assert caught.value.problems == (
        Problem(path="inventory.nodes[0].gpus[1].memory_mib", message="must be at least 0, got -1"),
        Problem(path="inventory.nodes[2].name", message="must not be empty"),
        Problem(path="inventory.nodes[2].gpus[1].memory_mib", message="must be at least 0, got -1"),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes_alike())
def test_nodes_of_one_wire_kind_are_of_one_node_key(nodes: list[placement_pb2.Node]) -> None:
    """Two valid nodes the reading counts as one kind (charged validation once: ``_kind``) are
    validated once, as one ``node_key``; and the nodes' names, labels, leaves, GPU UUIDs and
    allocations' owners and labels never make a kind of their own."""
    converted = []
    for msg in nodes:
        kind, done = cold(lambda m=msg: wire._node_from_proto(m))
        if kind == "value":
            converted.append((wire._kind(msg), node_key(done[0])))
    for kind_a, key_a in converted:
        for kind_b, key_b in converted:
            if kind_a == kind_b:
                assert key_a == key_b
    for msg in nodes:
        renamed = placement_pb2.Node()
        renamed.CopyFrom(msg)
        renamed.name, renamed.leaf, renamed.nvlink_domain = "other", "leaf-other", "domain-other"
        renamed.labels["team"] = "other"
        for gpu in renamed.gpus:
            gpu.uuid = f"GPU-other-{gpu.id}"
        for allocation in renamed.allocations:
            allocation.owner = "someone-else"
            allocation.labels["app"] = "other"
        assert wire._kind(renamed) == wire._kind(msg)


def test_a_reading_charges_a_kind_of_node_read_before_less_validation() -> None:
    """The next node is charged as one of a new kind; a node of a kind read before was charged
    only the miss's part: validating it is a lookup of its kind (``solver.domain.validate``)."""
    reading = wire.Reading(until=100.0, after_s_per_miss=1.0, after_s_per_new_kind=10.0, started=0.0)
    base = kit.node("n", kit.SMALL)
    for i in range(3):
        reading.saw(wire.to_proto(base.model_copy(update={"name": f"n{i}"}), placement_pb2.Node))
    assert (reading.misses, reading.new_kinds) == (3, 1)
    # after reading 3: 4 misses (1 each) and 2 new kinds (10 each) = 24 s of the 100 from now
    with patch.object(wire.time, "perf_counter", lambda: 75.9):
        assert reading.more(3)
    with patch.object(wire.time, "perf_counter", lambda: 76.1):
        assert not reading.more(3)


def test_a_reading_charges_nodes_alike_their_own_conversion() -> None:
    """Nodes never seen but built alike are charged their own (cheaper) conversion in the reading's
    pace, so a reading that converts them at that price reads its pace as 1, not as a fast spell."""
    reading = wire.Reading(
        until=float("inf"),
        convert_s_per_hit=0.01,
        convert_s_per_miss=1.0,
        convert_s_per_alike=0.25,
        convert_s_per_kind=0.125,
    )
    reading.misses, reading.alike = 100, 90
    assert reading.predicted_s(120) == 10 * 1.0 + 90 * 0.25 + 100 * 0.125 + 20 * 0.01
    reading.started = 0.0
    assert reading.pace(120, now=2 * reading.predicted_s(120)) == 2.0
