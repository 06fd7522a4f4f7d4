"""The network fabric: switches in tiers above the nodes (1 = leaf, 2 = spine, ...).

Locality is asked in tiers ("every node of the gang under one switch of tier 2 or lower"), so the
one question the model and the reports need is: *which switch of tier at most t contains this leaf?*
— the highest ancestor-or-self whose tier does not exceed t. Two nodes are within tier t when that
switch is the same for both. Nodes without a leaf are outside the fabric: each is its own domain.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from solver.domain.model import Inventory


@dataclass(frozen=True)
class Fabric:
    tier: dict[str, int]  # switch id → tier
    parent: dict[str, str]  # switch id → parent id ("" for a root)

    @staticmethod
    def of(inventory: Inventory) -> Fabric:
        return Fabric(
            tier={s.id: s.tier for s in inventory.switches},
            parent={s.id: s.parent for s in inventory.switches},
        )

    @cached_property
    def tiers(self) -> tuple[int, ...]:
        """The tiers that exist, lowest first."""
        return tuple(sorted(set(self.tier.values())))

    @cached_property
    def _chains(self) -> dict[str, tuple[str, ...]]:
        return {}

    def ancestors(self, leaf: str) -> tuple[str, ...]:
        """``leaf`` and the switches above it, lowest first (stops on unknown ids and on cycles);
        remembered per leaf: a compile asks it once per class, rule and level."""
        known = self._chains.get(leaf)
        if known is not None:
            return known
        self._chains[leaf] = chain = self._walk(leaf)
        return chain

    def _walk(self, leaf: str) -> tuple[str, ...]:
        chain: list[str] = []
        current = leaf
        while current and current in self.tier and current not in chain:
            chain.append(current)
            current = self.parent.get(current, "")
        return tuple(chain)

    def domain(self, leaf: str, highest_tier: int) -> str | None:
        """The switch of tier ≤ ``highest_tier`` that contains ``leaf`` and is highest such; None if
        the leaf is unknown or already above that tier."""
        inside = [s for s in self.ancestors(leaf) if self.tier[s] <= highest_tier]
        return inside[-1] if inside else None

    def common_tier(self, leaves: Iterable[str]) -> int | None:
        """Tier of the lowest switch above every leaf given; None if they share none (or a leaf is
        outside the fabric)."""
        chains = [self.ancestors(leaf) for leaf in set(leaves)]
        if not chains or any(not c for c in chains):
            return None
        shared = set(chains[0]).intersection(*map(set, chains[1:]))
        return min((self.tier[s] for s in shared), default=None)
