"""Nodes built alike share their validation and their shape (solver.domain.nodekey): what the shared
value says is what computing it for the node itself says, and a node differing from its twin in one
field only is never given the twin's value (the bug a hardware key invites)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from solver.domain.model import (
    Allocation,
    Gpu,
    GpuShare,
    Inventory,
    Nic,
    Node,
    NumaNode,
    NvLink,
    PcieSwitch,
    SolveRequest,
    SwitchKind,
)
from solver.domain.nodekey import content_key, kept_fields, node_key
from solver.domain.validate import RULES, at_node, node_problems, validate
from solver.reduce.normalise import cached_node_shape, node_shape
from tests import kit

# The fields a node's key may leave out, spelled out here rather than read from solver.domain.nodekey:
# a field wrongly added there must fail these tests, not move their expectations with it.
NAMING: dict[type[BaseModel], frozenset[str]] = {
    Node: frozenset({"name", "labels", "leaf", "nvlink_domain"}),
    Gpu: frozenset({"uuid"}),
    Allocation: frozenset({"owner", "labels"}),
}

# --------------------------------------------------------------------------- random nodes

# Few names of everything, so that references resolve or dangle, ids repeat, and twins are common.
SWITCHES = ("hb0", "hb1", "pex0", "pex1", "gone")
GPU_IDS = ("GPU0", "GPU1", "GPU2", "GPU3")
NIC_NAMES = ("mlx5_0", "mlx5_1", "mlx5_2")
numa = st.sampled_from((None, 0, 1, 2))
switch_ref = st.sampled_from(("", *SWITCHES))

gpus = st.builds(
    Gpu,
    id=st.sampled_from(GPU_IDS),
    index=st.integers(0, 3),
    uuid=st.sampled_from(("", "GPU-a", "GPU-b")),
    model=st.sampled_from(("H100", "A100")),
    memory_mib=st.sampled_from((0, 40_000, 80_000)),
    numa=numa,
    pcie_switch=switch_ref,
    healthy=st.booleans(),
)
nics = st.builds(
    Nic,
    name=st.sampled_from(NIC_NAMES),
    numa=numa,
    pcie_switch=switch_ref,
    bandwidth_gbps=st.sampled_from((0, 400)),
    rdma=st.booleans(),
    rail=st.sampled_from((None, 0, 1)),
    healthy=st.booleans(),
)
pcie = st.builds(
    PcieSwitch,
    id=st.sampled_from(SWITCHES[:4]),
    parent=switch_ref,
    kind=st.sampled_from(tuple(SwitchKind)),
    numa=numa,
)
numas = st.builds(NumaNode, id=st.integers(0, 1), cpu_milli=st.sampled_from((0, 64_000)))
nvlinks = st.builds(
    NvLink, gpu_a=st.sampled_from(GPU_IDS), gpu_b=st.sampled_from(GPU_IDS), links=st.sampled_from((1, 18))
)
shares = st.builds(
    GpuShare,
    gpu=st.sampled_from(GPU_IDS),
    milli=st.sampled_from((0, 300, 800)),
    memory_mib=st.sampled_from((0, 50_000)),
)
allocations = st.builds(
    Allocation,
    owner=st.sampled_from(("", "pod-a", "pod-b")),
    gpus=st.lists(st.sampled_from(GPU_IDS), max_size=2).map(tuple),
    nics=st.lists(st.sampled_from(NIC_NAMES), max_size=2).map(tuple),
    cpu_milli=st.sampled_from((0, 8_000, 200_000)),
    memory_mib=st.sampled_from((0, 64_000)),
    gpu_shares=st.lists(shares, max_size=2).map(tuple),
    mutex=st.booleans(),
    labels=st.sampled_from(({}, {"team": "a"})),
)
hardware = st.fixed_dictionaries(
    {
        "labels": st.sampled_from(({}, {"pool": "train"}, {"pool": "infer"})),
        "cpu_milli": st.sampled_from((0, 128_000)),
        "memory_mib": st.sampled_from((0, 1_000_000)),
        "numa_nodes": st.lists(numas, max_size=2).map(tuple),
        "gpus": st.lists(gpus, max_size=4).map(tuple),
        "nics": st.lists(nics, max_size=3).map(tuple),
        "pcie_switches": st.lists(pcie, max_size=4).map(tuple),
        "nvlinks": st.lists(nvlinks, max_size=3).map(tuple),
        "leaf": st.sampled_from(("", "leaf-a")),
        "allocations": st.lists(allocations, max_size=2).map(tuple),
        "schedulable": st.booleans(),
    }
)


@st.composite
def inventories(draw: st.DrawFn) -> tuple[Node, ...]:
    """Nodes drawn from a few machines: exact twins under other names, twins changed in one field
    of the node or of one device or allocation, and nodes of their own."""
    machines = draw(st.lists(hardware, min_size=1, max_size=3))
    out: list[Node] = []
    for i in range(draw(st.integers(1, 8))):
        node = Node(name=f"n{i}", **draw(st.sampled_from(machines)))
        if draw(st.booleans()):
            node = draw(one_field_off(node))
        out.append(node)
    return tuple(out)


@st.composite
def one_field_off(draw: st.DrawFn, node: Node) -> Node:
    """``node`` with one field changed: of the node itself, or of one of its devices or allocations."""
    parts = [
        f
        for f in ("gpus", "nics", "pcie_switches", "numa_nodes", "nvlinks", "allocations")
        if getattr(node, f)
    ]
    where = draw(st.sampled_from(("node", *parts)))
    if where == "node":
        field = draw(st.sampled_from(("cpu_milli", "memory_mib", "schedulable", "labels", "leaf")))
        value = draw(hardware)[field]
        return node.model_copy(update={field: value})
    items = list(getattr(node, where))
    k = draw(st.integers(0, len(items) - 1))
    strategy = {
        "gpus": gpus,
        "nics": nics,
        "pcie_switches": pcie,
        "numa_nodes": numas,
        "nvlinks": nvlinks,
        "allocations": allocations,
    }[where]
    other = draw(strategy)
    field = draw(st.sampled_from(tuple(type(other).model_fields)))
    items[k] = items[k].model_copy(update={field: getattr(other, field)})
    return node.model_copy(update={where: tuple(items)})


def unnamed(node: Node) -> dict:
    """``node`` as data, without the fields :data:`NAMING` says only name it."""

    def strip(model: BaseModel) -> dict:
        out = {}
        for name in type(model).model_fields:
            if name in NAMING.get(type(model), ()):
                continue
            value = getattr(model, name)
            if isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
                value = [strip(v) for v in value]
            out[name] = value
        return out

    return strip(node)


def request(nodes: tuple[Node, ...]) -> SolveRequest:
    return SolveRequest(inventory=Inventory(nodes=nodes), jobs=())


def unshared_validate(req: SolveRequest) -> tuple:
    """What validate answered before nodes shared anything: every node checked itself."""
    inside = [at_node(i, p) for i, node in enumerate(req.inventory.nodes) for p in node_problems(node)]
    return (*inside, *(p for rule in RULES for p in rule(req)))


# --------------------------------------------------------------------------- the key


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inventories())
def test_key_is_equal_exactly_when_all_but_the_names_is(nodes: tuple[Node, ...]) -> None:
    for a in nodes:
        for b in nodes:
            assert (node_key(a) == node_key(b)) == (unnamed(a) == unnamed(b)), (a, b)


def test_every_field_but_the_naming_ones_is_in_the_key() -> None:
    """One field changed anywhere in a node, its key changes; one naming field changed, it does not.
    Walks the models' own field lists, so a field added later is checked too."""
    base = kit.node(
        "n0",
        allocations=[Allocation(owner="a", gpus=("GPU0",), gpu_shares=(GpuShare(gpu="GPU1", milli=300),))],
    )
    key = content_key(base)
    changed: dict[type, object] = {str: "x-changed", int: 12_345}

    def other(value: object) -> object:
        if isinstance(value, bool):
            return not value
        if isinstance(value, SwitchKind):
            return next(k for k in SwitchKind if k != value)
        if isinstance(value, tuple):
            return (*value, "extra") if not value or isinstance(value[0], str) else value[:-1]
        if isinstance(value, dict):
            return {**value, "extra": "x"}
        if value is None:
            return 3
        return changed[type(value)]

    def variants(node: Node) -> list[tuple[str, Node, bool]]:
        out = []
        for name in Node.model_fields:
            out.append(
                (
                    f"node.{name}",
                    node.model_copy(update={name: other(getattr(node, name))}),
                    name in NAMING[Node],
                )
            )
        for part in ("gpus", "nics", "pcie_switches", "numa_nodes", "nvlinks", "allocations"):
            first = getattr(node, part)[0]
            for name in type(first).model_fields:
                if name == "gpu_shares":
                    share = first.gpu_shares[0] if first.gpu_shares else GpuShare(gpu="GPU1")
                    for s in GpuShare.model_fields:
                        edited = first.model_copy(
                            update={"gpu_shares": (share.model_copy(update={s: other(getattr(share, s))}),)}
                        )
                        out.append(
                            (
                                f"{part}[0].gpu_shares[0].{s}",
                                node.model_copy(update={part: (edited, *getattr(node, part)[1:])}),
                                False,
                            )
                        )
                    continue
                edited = first.model_copy(update={name: other(getattr(first, name))})
                naming = name in NAMING.get(type(first), ())
                out.append(
                    (
                        f"{part}[0].{name}",
                        node.model_copy(update={part: (edited, *getattr(node, part)[1:])}),
                        naming,
                    )
                )
        return out

    found = variants(base)
    assert len(found) > 40
    for where, variant, naming in found:
        if where in (
            "node.gpus",
            "node.nics",
            "node.pcie_switches",
            "node.numa_nodes",
            "node.nvlinks",
            "node.allocations",
        ):
            naming = False  # a device or allocation fewer
        assert (content_key(variant) == key) == naming, where
    assert {f for f in kept_fields(Gpu)} == set(Gpu.model_fields) - {"uuid"}


# --------------------------------------------------------------------------- validation


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inventories())
def test_validate_answers_what_checking_every_node_itself_answers(nodes: tuple[Node, ...]) -> None:
    req = request(nodes)
    assert validate(req) == unshared_validate(req)
    # Again on fresh objects of the same nodes: now every node has a twin remembered as clean or not.
    again = request(tuple(n.model_copy(deep=True) for n in reversed(nodes)))
    assert validate(again) == unshared_validate(again)


def test_a_twin_bad_in_one_field_is_reported_under_its_own_name_and_path() -> None:
    clean = kit.node("dgx-01", kit.DISTANCE_TREE)
    gpus = list(clean.gpus)
    gpus[1] = gpus[1].model_copy(update={"pcie_switch": "nowhere"})
    bad = clean.model_copy(update={"name": "dgx-02", "gpus": tuple(gpus)})
    bad_too = bad.model_copy(update={"name": "dgx-03"})
    twin = clean.model_copy(update={"name": "dgx-04"})
    problems = validate(kit.request([clean, bad, twin, bad_too], []))
    assert [(p.path, "node dgx-02" in p.message or "node dgx-03" in p.message) for p in problems] == [
        ("inventory.nodes[1].gpus[1].pcie_switch", True),
        ("inventory.nodes[3].gpus[1].pcie_switch", True),
    ]
    assert "node dgx-02" in problems[0].message and "node dgx-03" in problems[1].message


def test_a_twin_overcommitted_by_its_allocations_is_reported() -> None:
    clean = kit.node("n0", allocations=[Allocation(owner="a", cpu_milli=1000)])
    over = clean.model_copy(
        update={"name": "n1", "allocations": (clean.allocations[0].model_copy(update={"cpu_milli": 10**9}),)}
    )
    problems = [
        p for p in validate(kit.request([clean, over], [])) if ".leaf" not in p.path
    ]  # no fabric here
    assert [p.path for p in problems] == ["inventory.nodes[1].allocations"]
    assert "allocations of node n1 hold 1000000000 milli-CPU" in problems[0].message


# --------------------------------------------------------------------------- normalise's shapes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inventories(), st.sampled_from((frozenset(), frozenset({"pool"}))), st.booleans())
def test_shapes_shared_by_twins_are_each_nodes_own(
    nodes: tuple[Node, ...], selected: frozenset[str], rails: bool
) -> None:
    for node in nodes:
        if not node.schedulable or validate(request((node,))):
            continue  # normalise sees validated requests' schedulable nodes only
        shape, concrete = cached_node_shape(node, selected, rails)
        own_shape, own_concrete = node_shape(node, selected, rails=rails)
        assert shape == own_shape
        assert concrete == own_concrete


def test_a_twin_with_other_labels_or_free_devices_gets_its_own_shape() -> None:
    a = kit.node("n0", labels={"pool": "train"})
    b = a.model_copy(update={"name": "n1", "labels": {"pool": "infer"}})
    c = a.model_copy(update={"name": "n2", "allocations": (Allocation(gpus=("GPU3",)),)})
    d = a.model_copy(update={"name": "n3", "labels": {"pool": "train", "rack": "r9"}})
    selected = frozenset({"pool"})
    shapes = [cached_node_shape(n, selected, True) for n in (a, b, c, d)]
    assert shapes[0][0].labels == (("pool", "train"),) and shapes[1][0].labels == (("pool", "infer"),)
    assert len(shapes[2][0].gpus) == len(shapes[0][0].gpus) - 1
    assert shapes[3][0] is shapes[0][0]  # a label no job selects on does not split a class
    assert [c.name for _, c in shapes] == ["n0", "n1", "n2", "n3"]


def test_a_twin_whose_share_is_mutex_loses_that_gpu() -> None:
    share = Allocation(owner="p", gpu_shares=(GpuShare(gpu="GPU0", milli=300),))
    a = kit.node("n0", allocations=[share])
    b = a.model_copy(update={"name": "n1", "allocations": (share.model_copy(update={"mutex": True}),)})
    shared, mutex = (cached_node_shape(n, frozenset(), True)[0] for n in (a, b))
    assert len(mutex.gpus) == len(shared.gpus) - 1
    assert mutex == node_shape(b, frozenset(), rails=True)[0]
