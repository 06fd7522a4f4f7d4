"""The nodes worth sending to the solver for one job at submit: the hook's fast path.

The request, its wire form and the model all grow with the nodes sent; at 1,024 nodes the whole
cluster cost seconds a submit. Nothing that could change the answer is dropped:

* a node that cannot host one member now (too few free GPUs, NICs or CPUs, wrong labels, down,
  excluded or promised) cannot take part — except the few with the most free GPUs, kept so the
  solver's "no room now" names the closest node;
* nodes alike in everything the model sees (type, labels, what is taken, and for a job of several
  nodes the leaf) are interchangeable: a job of ``n`` members uses at most ``n`` of them, so the
  first ``n`` (in the inventory's order) are kept;
* one node of each size the cluster has stays (unschedulable), as the packing tier measures free
  capacity against the cluster's largest node;
* a gang that fits whole under several leaves is sent with the tightest few (:func:`gang_leaves`).

Choosing them walked every node per submit: 3.5 ms a submit at 1,024 nodes idle, 5-20 ms under
load, the largest part of the hook's ``job`` stage (bench/RESULTS-slurm.md, sessions 14 and 16). A
:class:`NodeIndex` is built once per read of Slurm's state, in the refresh thread, and groups the
nodes alike; a submit then looks at each group once, and at the few nodes the plans issued since
the read changed, not at every node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from heapq import nsmallest

from solver.domain.model import Job, NicMode, Node, Requirement

EXPLAINING_NODES = 3  # nodes that cannot host the job, sent so the solver can say what is missing
GANG_LEAVES = 8  # leaves that hold a whole gang, kept for the solver to choose among

NodeFacts = tuple[frozenset[str], frozenset[str], int, int, tuple[tuple[str, str], ...]]


def node_facts(node: Node) -> NodeFacts:
    """What candidate selection asks of a node: GPUs and NICs in use, free CPU and memory, labels."""
    return (
        frozenset(g for a in node.allocations for g in a.gpus),
        frozenset(n for a in node.allocations for n in a.nics),
        node.cpu_milli - sum(a.cpu_milli for a in node.allocations),
        node.memory_mib - sum(a.memory_mib for a in node.allocations),
        tuple(sorted(node.labels.items())),
    )


@dataclass(frozen=True)
class Ask:
    """What one member of the job needs of a node, and how many members there are."""

    gpus: int
    nics: int
    cpu: int
    memory: int
    selector: tuple[tuple[str, str], ...]
    replicas: int
    by_leaf: bool  # nodes under different leaves differ for this job (it spans nodes, or names locality)

    @classmethod
    def of(cls, job: Job) -> Ask:
        """A one-role job's ask (the hook plans one-role jobs: adapters.slurm.jobdesc)."""
        role = job.roles[0]
        member = role.member
        if member.nics.mode == NicMode.PER_GPU:
            nics = member.gpus
        elif member.nics.mode == NicMode.PER_MEMBER:
            nics = member.nics.count
        else:
            nics = 0
        return cls(
            gpus=member.gpus,
            nics=nics,
            cpu=member.cpu_milli,
            memory=member.memory_mib,
            selector=tuple(member.node_selector.items()),
            replicas=role.replicas,
            # Where a node sits matters only to a job that spans nodes (its locality); for one node,
            # two alike nodes under different leaves are the same choice.
            by_leaf=role.replicas > 1 or job.locality.mode not in (Requirement.UNSPECIFIED, Requirement.NONE),
        )


@dataclass(frozen=True)
class _Alike:
    """One node's free capacity and what makes nodes interchangeable, as plain values."""

    free_gpus: int
    free_nics: int
    cpu: int
    memory: int
    labels: Mapping[str, str]
    key: tuple[object, ...]  # type, labels, devices taken, CPU, memory (not the leaf)
    leaf: str

    @classmethod
    def of(cls, node: Node, type_key: str, facts: NodeFacts) -> _Alike:
        used_gpus, used_nics, cpu, memory, labels = facts
        return cls(
            free_gpus=len(node.gpus) - len(used_gpus),
            free_nics=len(node.nics) - len(used_nics),
            cpu=cpu,
            memory=memory,
            labels=node.labels,
            key=(type_key, labels, used_gpus, used_nics, cpu, memory),
            leaf=node.leaf,
        )

    def fits(self, ask: Ask) -> bool:
        return (
            self.free_gpus >= ask.gpus
            and self.free_nics >= ask.nics
            and self.cpu >= ask.cpu
            and self.memory >= ask.memory
            and all(self.labels.get(k) == v for k, v in ask.selector)
        )


def _size(node: Node) -> tuple[int, int, int]:
    return len(node.gpus), node.cpu_milli, node.memory_mib


class NodeIndex:
    """The schedulable nodes of one read grouped alike (with and without their leaf), in the
    inventory's order, and the first node of each size; see the module docstring."""

    def __init__(
        self,
        nodes: Sequence[Node],
        type_keys: Mapping[str, str],
        facts: Mapping[int, NodeFacts] | None = None,
    ) -> None:
        self.nodes = tuple(nodes)
        self.type_keys = type_keys
        self.alike: list[_Alike | None] = []  # by position; None: not schedulable
        self.sizes: dict[tuple[int, int, int], int] = {}  # size -> position of its first node
        self.groups: dict[tuple[object, ...], list[int]] = {}  # (alike key, leaf) -> positions
        self.groups_any: dict[tuple[object, ...], list[int]] = {}  # alike key -> positions
        self.position = {node.name: i for i, node in enumerate(self.nodes)}
        self._hosts: dict[tuple[int, tuple[tuple[str, str], ...]], int] = {}
        for i, node in enumerate(self.nodes):
            self.sizes.setdefault(_size(node), i)
            alike = self._alike(node, facts) if node.schedulable else None
            self.alike.append(alike)
            if alike is not None:
                self.groups.setdefault((alike.key, alike.leaf), []).append(i)
                self.groups_any.setdefault(alike.key, []).append(i)

    def hosts_at_most(self, gpus: int, selector: Mapping[str, str]) -> int:
        """:func:`hosts_at_most` of this read's nodes, counted once per shape asked."""
        key = (gpus, tuple(sorted(selector.items())))
        if key not in self._hosts:
            self._hosts[key] = hosts_at_most(self.nodes, gpus, selector)
        return self._hosts[key]

    def _free_gpus(self, i: int, changed: Mapping[int, _Alike]) -> int:
        alike = changed[i] if i in changed else self.alike[i]
        assert alike is not None
        return alike.free_gpus

    def _alike(self, node: Node, facts: Mapping[int, NodeFacts] | None) -> _Alike:
        known = facts.get(id(node)) if facts is not None else None
        return _Alike.of(node, self.type_keys.get(node.name, node.name), known or node_facts(node))

    def candidates(self, nodes: Sequence[Node], ask: Ask, closed: Iterable[str]) -> tuple[Node, ...]:
        """The nodes of ``nodes`` to send for a job asking ``ask``, none of ``closed``. ``nodes`` is
        this index's read with some nodes replaced (the plans issued since add allocations to a
        few): those are looked at one by one; any other difference and the index is built afresh."""
        if len(nodes) != len(self.nodes):
            return NodeIndex(nodes, self.type_keys).candidates(nodes, ask, closed)
        skip: set[int] = set()
        for i, (now, read) in enumerate(zip(nodes, self.nodes, strict=True)):
            if now is not read:
                if now.name != read.name:  # not this read's nodes: index them afresh
                    return NodeIndex(nodes, self.type_keys).candidates(nodes, ask, closed)
                skip.add(i)
        changed = {i: self._alike(nodes[i], None) for i in skip if nodes[i].schedulable}
        closed = set(closed)
        skip |= {self.position[name] for name in closed if name in self.position}
        groups = self.groups if ask.by_leaf else self.groups_any

        def group_of(alike: _Alike) -> tuple[object, ...]:
            return (alike.key, alike.leaf) if ask.by_leaf else alike.key

        # The nodes replaced since the read, in their groups (their own or a new one), in order.
        extra: dict[tuple[object, ...], list[int]] = {}
        for i in sorted(changed):
            if nodes[i].name not in closed:
                extra.setdefault(group_of(changed[i]), []).append(i)
        kept: list[int] = []
        short: list[tuple[int, int]] = []  # (-free GPUs, position) of nodes that cannot host a member
        for key in [*groups, *(k for k in extra if k not in groups)]:
            members = groups.get(key, [])
            # A group is alike in all it holds: its first node as read (or, new, as replaced) says.
            alike = self.alike[members[0]] if members else changed[extra[key][0]]
            assert alike is not None  # groups hold schedulable nodes only
            want = ask.replicas if alike.fits(ask) else EXPLAINING_NODES
            taken = _first(members, skip, want)
            if key in extra:
                taken = sorted(taken + extra[key])[:want]
            if alike.fits(ask):
                kept += taken
            else:
                short += [(-alike.free_gpus, i) for i in taken]
        kept.sort()
        sent = [nodes[i] for i in kept]
        if ask.replicas > 1:
            free_of = {nodes[i].name: self._free_gpus(i, changed) for i in kept}
            sent = gang_leaves(sent, ask.replicas, free_of)
        sent += [nodes[i] for _, i in nsmallest(EXPLAINING_NODES, short)]
        present = {_size(n) for n in sent}
        sent += [
            nodes[i].model_copy(update={"schedulable": False})
            for size, i in self.sizes.items()
            if size not in present
        ]
        return tuple(sent)


def room_for_members(nodes: Iterable[Node], ask: Ask) -> int:
    """Nodes of ``nodes`` that can take one member now (schedulable, free GPUs, NICs, CPU, memory
    and labels enough): a plan needs one per member, so fewer than ``ask.replicas`` means no plan."""
    return sum(1 for n in nodes if n.schedulable and _Alike.of(n, "", node_facts(n)).fits(ask))


def hosts_at_most(nodes: Iterable[Node], gpus: int, selector: Mapping[str, str]) -> int:
    """Nodes with at least ``gpus`` GPUs and the labels of ``selector``, whatever runs on them: how
    many members of distinct nodes an empty cluster could hold at most. GPU counts and labels do
    not change between reads, nor with the plans issued since one."""
    return sum(
        1 for n in nodes if len(n.gpus) >= gpus and all(n.labels.get(k) == v for k, v in selector.items())
    )


def _first(positions: list[int], skip: set[int], want: int) -> list[int]:
    """The first ``want`` of ``positions`` (ascending) not in ``skip``."""
    out: list[int] = []
    for i in positions:
        if len(out) == want:
            break
        if i not in skip:
            out.append(i)
    return out


def candidate_nodes(
    nodes: Sequence[Node],
    job: Job,
    closed: Iterable[str],
    type_keys: Mapping[str, str],
    facts: Mapping[int, NodeFacts] | None = None,
) -> tuple[Node, ...]:
    """:meth:`NodeIndex.candidates` for ``job`` without an index kept between submits."""
    return NodeIndex(nodes, type_keys, facts).candidates(nodes, Ask.of(job), closed)


def empty_candidates(nodes: Sequence[Node], job: Job, type_keys: Mapping[str, str]) -> tuple[Node, ...]:
    """:func:`candidate_nodes` of the same cluster with nothing running and every node up: what "can
    this job ever fit?" is asked on. Empty, nodes of one type, labels, CPU and memory (and leaf, for
    a job that spans nodes) are alike, and candidate selection keeps at most ``replicas`` (or
    :data:`EXPLAINING_NODES`) of a group, first in order; so only those are copied empty. Copying
    and indexing every node cost 14 ms a question at 1,024 nodes idle, 30-40 ms loaded: the
    slowest part of the hook's "no room now" answers (bench/RESULTS-slurm.md, session 30)."""
    ask = Ask.of(job)
    keep = max(ask.replicas, EXPLAINING_NODES)
    groups: dict[tuple[object, ...], int] = {}
    chosen: list[Node] = []
    for node in nodes:
        key = (
            type_keys.get(node.name, node.name),
            node.cpu_milli,
            node.memory_mib,
            tuple(sorted(node.labels.items())),
            node.leaf if ask.by_leaf else "",
        )
        if groups.get(key, 0) < keep:
            groups[key] = groups.get(key, 0) + 1
            chosen.append(node.model_copy(update={"allocations": (), "schedulable": True}))
    return candidate_nodes(chosen, job, (), type_keys)


def gang_leaves(nodes: list[Node], replicas: int, free_of: dict[str, int]) -> list[Node]:
    """A gang that fits under one leaf is placed under one (locality comes before packing): when
    several leaves can hold it whole, only the :data:`GANG_LEAVES` tightest are sent (fewest free
    GPUs on the ``replicas`` fullest hosts: binpack's order). The one shortlist that can cut a
    better answer — a leaf left out might offer better NVLink or NIC pairs — bounded so that a
    gang on 1,024 nodes is a model of ~50 nodes, not ~700. A gang no leaf holds keeps every node."""
    by_leaf: dict[str, list[Node]] = {}
    for node in nodes:
        by_leaf.setdefault(node.leaf, []).append(node)
    whole = {leaf: members for leaf, members in by_leaf.items() if leaf and len(members) >= replicas}
    if len(whole) <= GANG_LEAVES:
        return nodes

    def tightness(leaf: str) -> tuple[int, str]:
        return sum(sorted(free_of[n.name] for n in whole[leaf])[:replicas]), leaf

    chosen = set(sorted(whole, key=tightness)[:GANG_LEAVES])
    return [n for n in nodes if n.leaf in chosen]
