"""The packing search: which multisets of members fit one node shape together, with a witness.

It knows no rule of its own: what one member may take is ``member.py``'s, and so are the rules
between members sharing a node (shares stacking on a GPU, kept apart). Configurations are downward
closed, so they are enumerated by extending feasible ones one member at a time; each is checked by
a memoised search over the members' GPU sets, and they are cached per (node shape, member shapes),
since a cluster has few node shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from solver.domain.model import MemberShape, Scope
from solver.reduce.intranode.member import (
    Rules,
    choose_nics,
    forbidden_gpus,
    gpu_fits,
    gpu_sets,
    kept_apart,
    node_admits,
    node_apart,
    of_asked_model,
    share_stacks,
)
from solver.reduce.normalise import NodeShape, has_preferences, nic_demand

MAX_CONFIGURATIONS = 400  # per node shape: beyond it the model is restricted, never wrong


@dataclass(frozen=True)
class Slot:
    """Where one member sits on a node, in the node shape's canonical indices."""

    shape: int  # index into the batch's shape list
    gpus: tuple[int, ...]
    nics: tuple[int, ...]
    strict: bool  # meets every PREFERRED rule of its shape too
    share: tuple[int, int] | None = None  # (milli, MiB) taken of its one GPU, for a share member
    whole: bool = True  # its GPUs are held entirely (whole-GPU or mutex members): nothing else lands


@dataclass(frozen=True)
class Configuration:
    counts: tuple[int, ...]  # members per shape
    strict: tuple[int, ...]  # of which meet every PREFERRED rule
    slots: tuple[Slot, ...]
    elsewhere: bool = False  # a lone share on another kind of GPU than its witness's (_share_elsewhere)

    @property
    def empty(self) -> bool:
        return not any(self.counts)


@dataclass(frozen=True)
class _Member:
    shape: int
    variants: tuple[tuple[Rules, tuple[tuple[int, ...], ...], bool], ...]  # (rules, gpu sets, strict)


LOCKED = 1_000_000  # load of a GPU taken whole or by a mutex member: nothing else may land on it


def _best_packing(
    node: NodeShape,
    members: tuple[_Member, ...],
    spread_shares: bool = False,
    near: dict[int, tuple[frozenset[int], frozenset[int]]] | None = None,
) -> tuple[int, tuple[Slot, ...]] | None:
    """Place every member on the node maximising the number placed strict; None when they don't fit.

    The state is what the members so far took: per GPU the compute (milli, or LOCKED) and memory,
    and the NICs. Shares go to the fullest GPU that still takes them (best fit), so the witness
    leaves whole GPUs whole. Consecutive identical share members take GPUs in index order (they
    are interchangeable), which keeps the search from trying every permutation.
    """
    memo: dict[tuple, tuple[int, tuple[Slot, ...]] | None] = {}
    n_gpus = len(node.gpus)
    near = near or {}  # shape → (shapes it may not share a GPU with, nor a PCIe switch)

    def mark(shape: int, combo: tuple[int, ...], marks: tuple[frozenset[int], ...]) -> tuple:
        if not near:
            return marks
        return tuple(m | {shape} if g in combo else m for g, m in enumerate(marks))

    def candidates(
        member: _Member, rules: Rules, sets: tuple, load: tuple, memory: tuple, floor: int
    ) -> list:
        if rules.share is None:
            return [c for c in sets if all(load[g] == 0 for g in c)]
        ok = [c for c in sets if c[0] >= floor and share_stacks(node, c[0], rules, load, memory)]
        sign = -1 if spread_shares else 1
        return sorted(ok, key=lambda c: (sign * (node.gpus[c[0]].milli - load[c[0]]), c[0]))

    def take(rules: Rules, combo: tuple[int, ...], load: tuple, memory: tuple) -> tuple[tuple, tuple]:
        load_l, memory_l = list(load), list(memory)
        for g in combo:
            if rules.share is None or rules.mutex:
                load_l[g] = LOCKED
            else:
                load_l[g] += rules.share[0]
                memory_l[g] += rules.share[1]
        return tuple(load_l), tuple(memory_l)

    def place(
        i: int, load: tuple, memory: tuple, nmask: int, floor: int, marks: tuple
    ) -> tuple[int, tuple[Slot, ...]] | None:
        if i == len(members):
            return 0, ()
        key = (i, load, memory, nmask, floor, marks)
        if key in memo:
            return memo[key]
        best: tuple[int, tuple[Slot, ...]] | None = None
        member = members[i]
        free_nics = [n for n in range(len(node.nics)) if not nmask >> n & 1]
        for rules, sets, strict in member.variants:
            for combo in candidates(member, rules, sets, load, memory, floor):
                if not kept_apart(node, near.get(member.shape), combo, marks):
                    continue
                nics = choose_nics(node, rules, combo, free_nics)
                if nics is None:
                    continue
                nxt = members[i + 1] if i + 1 < len(members) else None
                same = nxt is not None and nxt.shape == member.shape and len(member.variants) == 1
                next_floor = combo[0] if same and rules.share is not None else 0
                new_load, new_memory = take(rules, combo, load, memory)
                new_marks = mark(member.shape, combo, marks)
                rest = place(
                    i + 1, new_load, new_memory, nmask | sum(1 << n for n in nics), next_floor, new_marks
                )
                if rest is None:
                    continue
                score = rest[0] + (1 if strict else 0)
                if best is None or score > best[0]:
                    slot = Slot(
                        member.shape, combo, nics, strict, rules.share, rules.share is None or rules.mutex
                    )
                    best = (score, (slot, *rest[1]))
                if best[0] == len(members) - i:
                    break  # every remaining member strict: nothing better exists
            if best is not None and best[0] == len(members) - i:
                break
        memo[key] = best
        return best

    return place(0, (0,) * n_gpus, (0,) * n_gpus, 0, 0, (frozenset(),) * n_gpus)


def _member_for(
    node: NodeShape, index: int, shape: MemberShape, rails: frozenset[int] | None = None
) -> _Member | None:
    forbidden = forbidden_gpus(node, index)
    if forbidden is None:
        return None
    variants = []
    for strict in (True, False) if has_preferences(shape) else (True,):
        rules = Rules.of(shape, strict, rails)
        if not node_admits(node, rules):
            continue
        sets = tuple(c for c in gpu_sets(node, rules) if not forbidden.intersection(c))
        if sets:
            variants.append((rules, sets, strict))
    return _Member(index, tuple(variants)) if variants else None


def _order(members: list[_Member], shapes: Sequence[MemberShape]) -> tuple[_Member, ...]:
    """Hard-to-place members first: NIC rules, then more GPUs. Keeps the memoised search small."""

    def key(m: _Member) -> tuple:
        s = shapes[m.shape]
        constrained = nic_demand(s) > 0 and (s.alignment.mode >= 2 or s.numa >= 2)
        share = s.gpu_share.milli if s.gpu_share is not None else 0
        return (not constrained, -s.gpus, -share, -nic_demand(s), m.shape)

    return tuple(sorted(members, key=key))


def _fits_totals(node: NodeShape, counts: Sequence[int], shapes: Sequence[MemberShape]) -> bool:
    """Cheap necessary conditions before the search: GPUs, GPU compute, NICs, CPU, memory."""
    pairs = list(zip(counts, shapes, strict=True))
    whole = sum(c * s.gpus for c, s in pairs if s.gpu_share is None) + sum(
        c for c, s in pairs if s.mutex and s.gpu_share
    )
    milli = 1000 * whole + sum(
        c * s.gpu_share.milli for c, s in pairs if s.gpu_share is not None and not s.mutex
    )
    nics = sum(c * nic_demand(s) for c, s in pairs)
    cpu = sum(c * s.cpu_milli for c, s in pairs)
    mem = sum(c * s.memory_mib for c, s in pairs)
    return (
        whole <= sum(g.idle for g in node.gpus)
        and milli <= sum(g.milli for g in node.gpus)
        and nics <= len(node.nics)
        and (node.cpu_milli is None or cpu <= node.cpu_milli)
        and (node.memory_mib is None or mem <= node.memory_mib)
    )


def enumerate_configurations(
    node: NodeShape,
    shapes: Sequence[MemberShape],
    spread_shares: bool = False,
    conflicts: Sequence[tuple[int, int, int]] = (),
    rails: Sequence[frozenset[int] | None] = (),
    limits: Sequence[int] = (),
    share_choice: bool = False,
) -> tuple[Configuration, ...]:
    """Every multiset of ``shapes`` that fits on ``node`` together (the empty one first), capped at
    ``MAX_CONFIGURATIONS``, with at most ``limits[i]`` members of shape i where limits are given
    (the batch's supply: a configuration holding more members than the batch has is never used,
    and without the cap a small CPU-only pod alone opens hundreds). Shapes that cannot sit on this
    node alone never appear. With ``share_choice`` a lone share also comes on every other kind of
    GPU that takes it (:func:`_share_elsewhere`)."""
    singles = {i: _member_for(node, i, s, rails[i] if rails else None) for i, s in enumerate(shapes)}
    same_node = frozenset((a, b) for a, b, scope in conflicts if scope == Scope.NODE)
    near = {
        a: (
            frozenset(b for x, b, scope in conflicts if x == a and scope == Scope.GPU),
            frozenset(b for x, b, scope in conflicts if x == a and scope == Scope.PCIE_SWITCH),
        )
        for a in {a for a, _, scope in conflicts if scope in (Scope.GPU, Scope.PCIE_SWITCH)}
    }
    usable = [i for i, m in singles.items() if m is not None]
    empty = Configuration(counts=(0,) * len(shapes), strict=(0,) * len(shapes), slots=())
    found = [empty]
    extra = 0  # a lone share's other GPUs (_share_elsewhere): not counted against the cap
    frontier: list[tuple[int, ...]] = [()]  # members as nondecreasing shape indices
    while frontier and len(found) - extra < MAX_CONFIGURATIONS:
        next_frontier = []
        for members in frontier:
            for i in (u for u in usable if not members or u >= members[-1]):
                if not node_apart(same_node, i, members):
                    continue
                grown = (*members, i)
                counts = [0] * len(shapes)
                for m in grown:
                    counts[m] += 1
                if limits and counts[i] > limits[i]:
                    continue
                if not _fits_totals(node, counts, shapes):
                    continue
                packed = _best_packing(node, _order([singles[m] for m in grown], shapes), spread_shares, near)
                if packed is None:
                    continue
                strict = [0] * len(shapes)
                for slot in packed[1]:
                    strict[slot.shape] += slot.strict
                found.append(Configuration(tuple(counts), tuple(strict), packed[1]))
                if share_choice and len(grown) == 1:
                    alternatives = _share_elsewhere(node, singles[i], packed[1][0], spread_shares)
                    found.extend(
                        Configuration(tuple(counts), tuple(strict), (s,), True) for s in alternatives
                    )
                    extra += len(alternatives)
                next_frontier.append(grown)
                if len(found) - extra >= MAX_CONFIGURATIONS:
                    break
            if len(found) - extra >= MAX_CONFIGURATIONS:
                break
        frontier = next_frontier
    return tuple(found)


def _share_elsewhere(
    node: NodeShape, member: _Member, witness: Slot, spread_shares: bool
) -> tuple[Slot, ...]:
    """A lone share member on each other kind of GPU that takes it, fullest first (emptiest first
    when shares spread): one slot per distinct (model, free milli, free memory) after the witness's.

    The witness puts a share on the fullest GPU, and the model values a configuration by its
    witness alone; but where a share leaves the least fragmentation depends on the workload, which
    the configurations do not know (session 18: a 470-milli share on GPUs free [890, 1000] was
    valued on the 890 only, 2 FGD points worse). So the model gets the choice, per kind of GPU:
    GPUs alike are interchangeable, and the fullest stays first so that equal values keep best fit.
    Only a lone member: a replay's step and a window's node taking one pod; with several members
    the witness's packing stands."""
    if witness.share is None or witness.whole:  # whole GPUs or a mutex share: nothing to choose
        return ()
    variant = next(((r, sets) for r, sets, strict in member.variants if strict == witness.strict), None)
    if variant is None:
        return ()
    rules, sets = variant
    zeros = (0,) * len(node.gpus)
    every_nic = list(range(len(node.nics)))

    def kind(g: int) -> tuple:
        gpu = node.gpus[g]
        return gpu.model, gpu.milli, gpu.memory_mib

    sign = -1 if spread_shares else 1
    ranked = sorted(
        (c for c in sets if share_stacks(node, c[0], rules, zeros, zeros)),
        key=lambda c: (sign * node.gpus[c[0]].milli, c[0]),
    )
    seen = {kind(witness.gpus[0])}
    slots = []
    for combo in ranked:
        if kind(combo[0]) in seen:
            continue
        nics = choose_nics(node, rules, combo, every_nic)
        if nics is None:
            continue
        seen.add(kind(combo[0]))
        slots.append(Slot(witness.shape, combo, nics, witness.strict, witness.share, False))
    return tuple(slots)


@lru_cache(maxsize=65_536)  # node shapes x member shapes seen; a replay's steady state fits
def configurations_for(
    node: NodeShape,
    shapes_json: tuple[str, ...],
    spread_shares: bool = False,
    conflicts: tuple[tuple[int, int, int], ...] = (),
    rails: tuple[frozenset[int] | None, ...] = (),
    limits: tuple[int, ...] = (),
    share_choice: bool = False,
) -> tuple[Configuration, ...]:
    """Cached :func:`enumerate_configurations`, keyed by the shapes' JSON (shapes hold dicts). A node
    no shape may sit on (:func:`_may_host`: most nodes late in a replay, for each new pod) gets the
    empty configuration alone without parsing a shape or building its rules."""
    shapes, loosest = _parsed(shapes_json)
    if not any(_may_host(node, rules) for rules in loosest):
        return (Configuration(counts=(0,) * len(shapes), strict=(0,) * len(shapes), slots=()),)
    return enumerate_configurations(node, shapes, spread_shares, conflicts, rails, limits, share_choice)


@lru_cache(maxsize=4_096)
def _parsed(shapes_json: tuple[str, ...]) -> tuple[tuple[MemberShape, ...], tuple[Rules, ...]]:
    """The shapes of a JSON key and their loosest rules: a step asks them of every node class."""
    shapes = tuple(MemberShape.model_validate_json(s) for s in shapes_json)
    return shapes, tuple(Rules.of(shape, strict=False) for shape in shapes)


def free_after(node: NodeShape, config: Configuration) -> list[int]:
    """Free milli of each of the node's GPUs once ``config``'s members sit on it."""
    free = [g.milli for g in node.gpus]
    for slot in config.slots:
        for g in slot.gpus:
            free[g] = 0 if slot.whole or slot.share is None else free[g] - slot.share[0]
    return free


def hosts_some_member(shapes: Sequence[MemberShape]) -> Callable[[NodeShape], bool]:
    """The ``fit_test`` of :func:`solver.reduce.normalise.normalise`: could some member of ``shapes`` sit on
    a node of this shape alone, as it stands? A necessary test (the member's own rules, not its
    NICs' matching), so no node that could take part is lost."""
    shapes_json = tuple(m.model_dump_json() for m in shapes)
    return lambda node: _hosts_any(node, shapes_json, _parsed(shapes_json)[1])


_HOSTS: dict[tuple[NodeShape, tuple[str, ...]], bool] = {}


def _hosts_any(node: NodeShape, shapes_json: tuple[str, ...], loosest: Sequence[Rules]) -> bool:
    """Could some member shape sit on the node alone? Remembered by node shape and the shapes'
    JSON: a scheduler's stream of similar pods asks it of the same node states again and again.
    Each pod's CPU and memory make its shapes new, though, so a new question is first put to
    :func:`_may_host`, which turns most nodes of a full cluster away without the full search."""
    key = (node, shapes_json)
    hit = _HOSTS.get(key)
    if hit is None:
        if len(_HOSTS) >= 1 << 18:
            _HOSTS.clear()
        hit = any(_may_host(node, rules) for rules in loosest)
        if hit:
            shapes = _parsed(shapes_json)[0]
            hit = any(_member_for(node, i, s) is not None for i, s in enumerate(shapes))
        _HOSTS[key] = hit
    return hit


def _may_host(node: NodeShape, rules: Rules) -> bool:
    """A necessary condition for :func:`_member_for` under its loosest rules: the node admits the
    member and has enough GPUs of an accepted model that could take the member's part."""
    if not node_admits(node, rules):
        return False
    eligible = sum(1 for g in node.gpus if of_asked_model(g, rules) and gpu_fits(g, rules))
    return eligible >= rules.gpus
