"""Candidate nodes for one submit chosen from an index of the read (adapters/slurm/candidates.py)
equal the ones a walk over every node chooses, whatever plans were issued since the read."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.slurm.candidates import (
    EXPLAINING_NODES,
    Ask,
    NodeIndex,
    candidate_nodes,
    empty_candidates,
    gang_leaves,
    hosts_at_most,
    node_facts,
)
from solver.domain.model import Job, Locality, NicMode, Node, Requirement
from tests import kit


def walked(nodes: Sequence[Node], job: Job, closed: set[str], type_keys: dict[str, str]) -> tuple[Node, ...]:
    """The selection as the agent made it before the index (sessions 9-15): every node walked in
    order, the first ``replicas`` fitting nodes of each alike key kept. The oracle of this file."""
    role = job.roles[0]
    member, replicas = role.member, role.replicas
    need_nics = {NicMode.PER_GPU: member.gpus, NicMode.PER_MEMBER: member.nics.count}.get(member.nics.mode, 0)
    by_leaf = replicas > 1 or job.locality.mode not in (Requirement.UNSPECIFIED, Requirement.NONE)
    kept: list[Node] = []
    free_of: dict[str, int] = {}
    short: list[tuple[int, int, Node]] = []
    alike: dict[tuple[object, ...], int] = {}
    sizes: dict[tuple[int, int, int], Node] = {}
    for index, node in enumerate(nodes):
        sizes.setdefault((len(node.gpus), node.cpu_milli, node.memory_mib), node)
        if node.name in closed or not node.schedulable:
            continue
        used_gpus, used_nics, cpu, memory, labels = node_facts(node)
        free_gpus = len(node.gpus) - len(used_gpus)
        fits = (
            free_gpus >= member.gpus
            and len(node.nics) - len(used_nics) >= need_nics
            and cpu >= member.cpu_milli
            and memory >= member.memory_mib
            and all(node.labels.get(k) == v for k, v in member.node_selector.items())
        )
        if not fits:
            short.append((-free_gpus, index, node))
            continue
        key = (
            type_keys.get(node.name, node.name),
            node.leaf if by_leaf else "",
            labels,
            used_gpus,
            used_nics,
            cpu,
            memory,
        )
        if alike.get(key, 0) < replicas:
            alike[key] = alike.get(key, 0) + 1
            kept.append(node)
            free_of[node.name] = free_gpus
    if replicas > 1:
        kept = gang_leaves(kept, replicas, free_of)
    kept += [node for _, _, node in sorted(short, key=lambda t: t[:2])[:EXPLAINING_NODES]]
    present = {(len(n.gpus), n.cpu_milli, n.memory_mib) for n in kept}
    kept += [n.model_copy(update={"schedulable": False}) for size, n in sizes.items() if size not in present]
    return tuple(kept)


@st.composite
def reads(draw: st.DrawFn) -> tuple[list[Node], list[Node], Job, set[str], dict[str, str]]:
    """A read of up to 24 nodes (two sizes, four leaves, two zones, some down, some GPUs taken),
    the same nodes at submit with plans issued since on a few, a job, and closed nodes."""
    count = draw(st.integers(1, 24))
    read = []
    for i in range(count):
        gpus = draw(st.sampled_from([4, 8]))
        node = kit.node(
            f"n{i:02d}",
            gpus=gpus,
            leaf=draw(st.sampled_from(["l0", "l1", "l2", "l3"])),
            labels={"zone": draw(st.sampled_from(["a", "b"]))},
            # A few patterns, so that many nodes are alike (random subsets would make most unique).
            used_gpus=draw(st.sampled_from([(), (0, 1), (0, 1, 2, 3), tuple(range(gpus))])),
            schedulable=draw(st.booleans().map(lambda down: not down) | st.just(True)),
        )
        read.append(node)
    now = list(read)
    for i in draw(st.lists(st.integers(0, count - 1), max_size=4, unique=True)):
        node = now[i]
        taken = {g for a in node.allocations for g in a.gpus}
        free = [g.id for g in node.gpus if g.id not in taken]
        take = free[: draw(st.integers(0, len(free)))]
        now[i] = node.model_copy(
            update={"allocations": (*node.allocations, kit.allocation("planned:p", take))}
        )
    job = kit.job(
        "j",
        draw(st.integers(1, 8)),
        draw(st.integers(1, 4)),
        locality=Locality(mode=draw(st.sampled_from([Requirement.NONE, Requirement.PREFERRED]))),
        nics=draw(st.sampled_from([NicMode.NONE, NicMode.PER_GPU])),
        selector=draw(st.sampled_from([{}, {"zone": "a"}])),
    )
    closed = {n.name for n in read if draw(st.booleans().map(lambda c: c and count > 2))}
    type_keys = {n.name: f"hgx{len(n.gpus)}" for n in read}
    return read, now, job, closed, type_keys


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(reads())
def test_the_index_of_a_read_chooses_what_walking_every_node_chooses(
    case: tuple[list[Node], list[Node], Job, set[str], dict[str, str]],
) -> None:
    read, now, job, closed, type_keys = case
    index = NodeIndex(read, type_keys)
    chosen = index.candidates(now, Ask.of(job), closed)
    expected = walked(now, job, closed, type_keys)
    assert [(n.name, n.schedulable) for n in chosen] == [(n.name, n.schedulable) for n in expected]
    assert all(a.allocations == b.allocations for a, b in zip(chosen, expected, strict=True))
    member = job.roles[0].member
    assert index.hosts_at_most(member.gpus, member.node_selector) == hosts_at_most(
        now, member.gpus, member.node_selector
    )


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(reads())
def test_the_empty_cluster_is_asked_on_the_nodes_every_node_emptied_would_give(
    case: tuple[list[Node], list[Node], Job, set[str], dict[str, str]],
) -> None:
    """The agent's "can this job ever fit?" question: only the nodes alike when empty that selection
    would keep are copied empty; the solver is sent what copying every node gave."""
    _, now, job, _, type_keys = case
    emptied = [n.model_copy(update={"allocations": (), "schedulable": True}) for n in now]
    expected = candidate_nodes(emptied, job, (), type_keys)
    chosen = empty_candidates(now, job, type_keys)
    assert [(n.name, n.schedulable) for n in chosen] == [(n.name, n.schedulable) for n in expected]
    assert all(not n.allocations for n in chosen)


def test_nodes_not_of_the_read_are_indexed_afresh() -> None:
    """Another cluster's nodes (other names) are never matched against the read's groups."""
    read = [kit.node("a0"), kit.node("a1")]
    other = [kit.node("b0", used_gpus=range(8)), kit.node("b1")]
    job = kit.job("j", 8)
    chosen = NodeIndex(read, {}).candidates(other, Ask.of(job), set())
    assert [n.name for n in chosen][:1] == ["b1"]
