"""Intra-node packing, precomputed per node shape: which sets of members fit one node together.

The CP-SAT model never sees a GPU. It sees *configurations*: multisets of member shapes that fit on
one node of a given shape at the same time, each with a witness (the concrete canonical GPU and NIC
indices of every member) and the number of members of each shape that meet all their PREFERRED
rules in that witness. Configurations are downward closed, so they are enumerated by extending
feasible ones one member at a time, and they are cached per (node shape, member shapes), since a
cluster has few node shapes.

Placement of one member inside a node: its GPUs are searched exhaustively (a node has at most a
few dozen GPUs and the search is memoised on the set of used devices); its NICs are then chosen by a
closest-first matching, which keeps the search small and is exact on switch-structured servers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

from solver.model import MemberShape, NicMode, Requirement
from solver.normalise import NodeShape, alignment_distance, has_preferences, nic_demand, preferred, required

MAX_CONFIGURATIONS = 400  # per node shape: beyond it the model is restricted, never wrong


@dataclass(frozen=True)
class Slot:
    """Where one member sits on a node, in the node shape's canonical indices."""

    shape: int  # index into the batch's shape list
    gpus: tuple[int, ...]
    nics: tuple[int, ...]
    strict: bool  # meets every PREFERRED rule of its shape too


@dataclass(frozen=True)
class Configuration:
    counts: tuple[int, ...]  # members per shape
    strict: tuple[int, ...]  # of which meet every PREFERRED rule
    slots: tuple[Slot, ...]

    @property
    def empty(self) -> bool:
        return not any(self.counts)


@dataclass(frozen=True)
class Rules:
    """The hard rules of one member shape in one variant (strict: PREFERRED treated as REQUIRED)."""

    gpus: int
    nics: int
    per_gpu: bool
    models: frozenset[str]
    selector: tuple[tuple[str, str], ...]
    align: bool
    distance: int
    numa: bool
    nvlink: bool
    cpu: int
    memory: int

    @staticmethod
    def of(shape: MemberShape, strict: bool) -> Rules:
        def hard(rule: Requirement) -> bool:
            return required(rule) or (strict and preferred(rule))

        return Rules(
            gpus=shape.gpus,
            nics=nic_demand(shape),
            per_gpu=shape.nics.mode == NicMode.PER_GPU,
            models=frozenset(shape.gpu_models),
            selector=tuple(sorted(shape.node_selector.items())),
            align=hard(shape.alignment.mode),
            distance=int(alignment_distance(shape)),
            numa=hard(shape.numa),
            nvlink=hard(shape.nvlink),
            cpu=shape.cpu_milli,
            memory=shape.memory_mib,
        )


def node_admits(node: NodeShape, rules: Rules) -> bool:
    """Node-level filters: labels, and enough CPU and memory for one member."""
    labels = dict(node.labels)
    if any(labels.get(k) != v for k, v in rules.selector):
        return False
    if node.cpu_milli is not None and rules.cpu > node.cpu_milli:
        return False
    return not (node.memory_mib is not None and rules.memory > node.memory_mib)


def gpu_sets(node: NodeShape, rules: Rules) -> tuple[tuple[int, ...], ...]:
    """Every set of the node's free GPUs one member could take, before NICs are considered."""
    eligible = [i for i, g in enumerate(node.gpus) if not rules.models or g.model in rules.models]
    out = []
    for combo in combinations(eligible, rules.gpus):
        if rules.nvlink and any((a, b) not in node.nvlink for a, b in combinations(combo, 2)):
            continue
        numas = {node.gpus[i].numa for i in combo}
        if rules.numa and (None in numas or len(numas) > 1):
            continue
        out.append(combo)
    return tuple(out)


def _augment(gpu: int, cands: dict[int, list[int]], owner: dict[int, int], seen: set[int]) -> bool:
    for nic in cands[gpu]:
        if nic in seen:
            continue
        seen.add(nic)
        if nic not in owner or _augment(owner[nic], cands, owner, seen):
            owner[nic] = gpu
            return True
    return False


def choose_nics(
    node: NodeShape, rules: Rules, gpus: Sequence[int], free: Sequence[int]
) -> tuple[int, ...] | None:
    """The member's NICs among ``free``: within the alignment distance where that is a hard rule,
    closest first otherwise. None when the rules cannot be met."""
    if rules.nics == 0:
        return ()
    if rules.numa:
        numas = {node.gpus[g].numa for g in gpus}
        free = [n for n in free if node.nics[n].numa is not None and (not gpus or node.nics[n].numa in numas)]
        if not gpus and len({node.nics[n].numa for n in free}) > 1:
            # A NIC-only member on one NUMA node: take the NUMA node with the most free NICs.
            best = max(
                sorted({node.nics[n].numa for n in free}),
                key=lambda m: sum(node.nics[n].numa == m for n in free),
            )
            free = [n for n in free if node.nics[n].numa == best]
    if len(free) < rules.nics:
        return None

    def closeness(n: int) -> tuple[int, int]:
        return (min((node.nic_distance(g, n) for g in gpus), default=99), n)

    ranked = sorted(free, key=closeness)
    if rules.per_gpu and gpus:
        near = {
            g: sorted(
                (n for n in free if node.nic_distance(g, n) <= rules.distance),
                key=lambda n, g=g: (node.nic_distance(g, n), n),
            )
            for g in gpus
        }
        owner: dict[int, int] = {}
        matched = sum(_augment(g, near, owner, set()) for g in gpus)
        if rules.align and matched < len(gpus):
            return None
        chosen = sorted(owner)
        rest = [n for n in ranked if n not in owner]
        return tuple(sorted(chosen + rest[: rules.nics - len(chosen)]))
    if rules.align:
        ranked = [n for n in ranked if closeness(n)[0] <= rules.distance]
        if len(ranked) < rules.nics:
            return None
    return tuple(sorted(ranked[: rules.nics]))


@dataclass(frozen=True)
class _Member:
    shape: int
    variants: tuple[tuple[Rules, tuple[tuple[int, ...], ...], bool], ...]  # (rules, gpu sets, strict)


def _best_packing(node: NodeShape, members: tuple[_Member, ...]) -> tuple[int, tuple[Slot, ...]] | None:
    """Place every member on the node maximising the number placed strict; None when they don't fit."""
    memo: dict[tuple[int, int, int], tuple[int, tuple[Slot, ...]] | None] = {}

    def place(i: int, gmask: int, nmask: int) -> tuple[int, tuple[Slot, ...]] | None:
        if i == len(members):
            return 0, ()
        key = (i, gmask, nmask)
        if key in memo:
            return memo[key]
        best: tuple[int, tuple[Slot, ...]] | None = None
        member = members[i]
        free_nics = [n for n in range(len(node.nics)) if not nmask >> n & 1]
        for rules, sets, strict in member.variants:
            for combo in sets:
                cmask = sum(1 << g for g in combo)
                if cmask & gmask:
                    continue
                nics = choose_nics(node, rules, combo, free_nics)
                if nics is None:
                    continue
                rest = place(i + 1, gmask | cmask, nmask | sum(1 << n for n in nics))
                if rest is None:
                    continue
                score = rest[0] + (1 if strict else 0)
                if best is None or score > best[0]:
                    best = (score, (Slot(member.shape, combo, nics, strict), *rest[1]))
                if best[0] == len(members) - i:
                    break  # every remaining member strict: nothing better exists
            if best is not None and best[0] == len(members) - i:
                break
        memo[key] = best
        return best

    return place(0, 0, 0)


def _member_for(node: NodeShape, index: int, shape: MemberShape) -> _Member | None:
    variants = []
    for strict in (True, False) if has_preferences(shape) else (True,):
        rules = Rules.of(shape, strict)
        if not node_admits(node, rules):
            continue
        sets = gpu_sets(node, rules)
        if sets:
            variants.append((rules, sets, strict))
    return _Member(index, tuple(variants)) if variants else None


def _order(members: list[_Member], shapes: Sequence[MemberShape]) -> tuple[_Member, ...]:
    """Hard-to-place members first: NIC rules, then more GPUs. Keeps the memoised search small."""

    def key(m: _Member) -> tuple:
        s = shapes[m.shape]
        constrained = nic_demand(s) > 0 and (s.alignment.mode >= 2 or s.numa >= 2)
        return (not constrained, -s.gpus, -nic_demand(s), m.shape)

    return tuple(sorted(members, key=key))


def _fits_totals(node: NodeShape, counts: Sequence[int], shapes: Sequence[MemberShape]) -> bool:
    gpus = sum(c * s.gpus for c, s in zip(counts, shapes, strict=True))
    nics = sum(c * nic_demand(s) for c, s in zip(counts, shapes, strict=True))
    cpu = sum(c * s.cpu_milli for c, s in zip(counts, shapes, strict=True))
    mem = sum(c * s.memory_mib for c, s in zip(counts, shapes, strict=True))
    return (
        gpus <= len(node.gpus)
        and nics <= len(node.nics)
        and (node.cpu_milli is None or cpu <= node.cpu_milli)
        and (node.memory_mib is None or mem <= node.memory_mib)
    )


def enumerate_configurations(node: NodeShape, shapes: Sequence[MemberShape]) -> tuple[Configuration, ...]:
    """Every multiset of ``shapes`` that fits on ``node`` together (the empty one first), capped at
    ``MAX_CONFIGURATIONS``. Shapes that cannot sit on this node alone never appear."""
    singles = {i: _member_for(node, i, s) for i, s in enumerate(shapes)}
    usable = [i for i, m in singles.items() if m is not None]
    empty = Configuration(counts=(0,) * len(shapes), strict=(0,) * len(shapes), slots=())
    found = [empty]
    frontier: list[tuple[int, ...]] = [()]  # members as nondecreasing shape indices
    while frontier and len(found) < MAX_CONFIGURATIONS:
        next_frontier = []
        for members in frontier:
            for i in (u for u in usable if not members or u >= members[-1]):
                grown = (*members, i)
                counts = [0] * len(shapes)
                for m in grown:
                    counts[m] += 1
                if not _fits_totals(node, counts, shapes):
                    continue
                packed = _best_packing(node, _order([singles[m] for m in grown], shapes))
                if packed is None:
                    continue
                strict = [0] * len(shapes)
                for slot in packed[1]:
                    strict[slot.shape] += slot.strict
                found.append(Configuration(tuple(counts), tuple(strict), packed[1]))
                next_frontier.append(grown)
                if len(found) >= MAX_CONFIGURATIONS:
                    break
            if len(found) >= MAX_CONFIGURATIONS:
                break
        frontier = next_frontier
    return tuple(found)


@lru_cache(maxsize=4096)
def configurations_for(node: NodeShape, shapes_json: tuple[str, ...]) -> tuple[Configuration, ...]:
    """Cached :func:`enumerate_configurations`, keyed by the shapes' JSON (shapes hold dicts)."""
    shapes = [MemberShape.model_validate_json(s) for s in shapes_json]
    return enumerate_configurations(node, shapes)
