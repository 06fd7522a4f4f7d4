"""The inventory as the checks read it: a node indexed for lookups, PCIe distances computed here
(not by ``solver.domain.topology``), and one placed member with its job and role.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from solver.domain.model import (
    Distance,
    Gpu,
    Job,
    MemberPlacement,
    Nic,
    Node,
    Requirement,
    Role,
    SwitchKind,
)


@dataclass(frozen=True)
class Device:
    """What distance needs of a GPU or NIC: where it hangs in the PCIe tree and its NUMA node."""

    name: str
    switch: str
    numa: int | None


@dataclass
class NodeView:
    """One node, indexed for lookups; ``None`` CPU/memory free = the node does not track it."""

    node: Node
    gpus: dict[str, Gpu]
    nics: dict[str, Nic]
    parent: dict[str, str]
    kind: dict[str, SwitchKind]
    switch_numa: dict[str, int | None]
    nvlinks: set[tuple[str, str]]  # both orders of every linked pair
    held_by: dict[tuple[str, str], str]  # ("GPU"|"NIC", id) -> owner of the allocation holding it
    cpu_free: int | None
    memory_free: int | None
    shares: dict[str, tuple[int, int]]  # GPU → (milli, MiB) of shares already running on it
    _ancestors: dict[str, frozenset[str]] = field(default_factory=dict)
    _distances: dict[tuple[str, int | None, str, int | None], Distance] = field(default_factory=dict)

    @classmethod
    def of(cls, node: Node) -> NodeView:
        allocs = node.allocations
        held_by: dict[tuple[str, str], str] = {}
        for a, alloc in enumerate(allocs):
            owner = alloc.owner or f"allocation {a}"
            held_by.update({("GPU", g): owner for g in alloc.gpus if ("GPU", g) not in held_by})
            held_by.update({("NIC", n): owner for n in alloc.nics if ("NIC", n) not in held_by})
            if alloc.mutex:  # a mutex share holds its GPU against everyone else
                held_by.update(
                    {("GPU", sh.gpu): owner for sh in alloc.gpu_shares if ("GPU", sh.gpu) not in held_by}
                )
        return cls(
            node=node,
            gpus={g.id: g for g in reversed(node.gpus)},
            nics={n.name: n for n in reversed(node.nics)},
            parent={s.id: s.parent for s in reversed(node.pcie_switches)},
            kind={s.id: s.kind for s in reversed(node.pcie_switches)},
            switch_numa={s.id: s.numa for s in reversed(node.pcie_switches)},
            nvlinks={
                pair for link in node.nvlinks for pair in ((link.gpu_a, link.gpu_b), (link.gpu_b, link.gpu_a))
            },
            held_by=held_by,
            cpu_free=node.cpu_milli - sum(a.cpu_milli for a in allocs) if node.cpu_milli else None,
            memory_free=node.memory_mib - sum(a.memory_mib for a in allocs) if node.memory_mib else None,
            shares={
                gpu: (
                    sum(sh.milli for a in allocs for sh in a.gpu_shares if sh.gpu == gpu),
                    sum(sh.memory_mib for a in allocs for sh in a.gpu_shares if sh.gpu == gpu),
                )
                for gpu in {sh.gpu for a in allocs for sh in a.gpu_shares}
            },
        )

    def chain(self, switch: str) -> list[str]:
        """The known switches from ``switch`` up to its root, nearest first (cycle-safe)."""
        chain: list[str] = []
        current = switch
        while current in self.kind and current not in chain:
            chain.append(current)
            current = self.parent[current]
        return chain

    def ancestors(self, switch: str) -> frozenset[str]:
        if switch not in self._ancestors:
            self._ancestors[switch] = frozenset(self.chain(switch))
        return self._ancestors[switch]

    def tree_numa(self, device: Device) -> int | None:
        """The NUMA node a device's PCIe tree hangs off: its root's, when the device's switch is
        known (a device can report the NUMA of the GPUs it serves while its tree is elsewhere, as
        in the A100 NV12 capture), else the device's own."""
        chain = self.chain(device.switch)
        return self.switch_numa.get(chain[-1]) if chain else device.numa

    def distance(self, a: Device, b: Device) -> Distance:
        """``_classify``, remembered per pair of device spots: a node has few distinct spots and a
        batch puts many members on the same ones."""
        key = (a.switch, a.numa, b.switch, b.numa)
        if key not in self._distances:
            self._distances[key] = self._classify(a, b)
        return self._distances[key]

    def _classify(self, a: Device, b: Device) -> Distance:
        """PCIe distance as nvidia-smi classes it: same leaf switch PIX; a common PCIe switch PXB; a
        common host bridge only PHB; trees on the same NUMA node NODE; otherwise SYS."""
        if a.switch and a.switch == b.switch:
            return Distance.PIX
        shared = self.ancestors(a.switch) & self.ancestors(b.switch)
        if any(self.kind[s] in (SwitchKind.SWITCH, SwitchKind.UNSPECIFIED) for s in shared):
            return Distance.PXB
        if shared:
            return Distance.PHB
        numa_a, numa_b = self.tree_numa(a), self.tree_numa(b)
        if numa_a is not None and numa_a == numa_b:
            return Distance.NODE
        return Distance.SYS


@dataclass(frozen=True)
class Placed:
    """One member of a placed job, with what it belongs to."""

    job: Job
    member: MemberPlacement

    @property
    def role(self) -> Role | None:
        return next((r for r in self.job.roles if r.name == self.member.role), None)

    @property
    def who(self) -> str:
        m = self.member
        return f"job {self.job.id} role {m.role} member {m.index} on {m.node}"


def requirement(value: Requirement) -> Requirement:
    return Requirement.NONE if value == Requirement.UNSPECIFIED else value


def devices_of(view: NodeView, p: Placed) -> tuple[list[Device], list[Device]]:
    gpus = [view.gpus[g] for g in dict.fromkeys(p.member.gpus)]
    nics = [view.nics[n] for n in dict.fromkeys(p.member.nics)]
    return (
        [Device(g.id, g.pcie_switch, g.numa) for g in gpus],
        [Device(n.name, n.pcie_switch, n.numa) for n in nics],
    )
