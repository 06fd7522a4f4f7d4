"""The rules of a member's place inside one node: one small function a rule, its rule in one sentence.

A member's place is found in three steps, and each step asks the rules that bind it, in this order:

1. the node (:func:`node_admits`): :func:`selector_matches`, :func:`cpu_and_memory_fit`;
2. its GPUs (:func:`gpu_sets`): per GPU :func:`of_asked_model` and :func:`gpu_fits`; per set of GPUs
   the tests in :data:`GPU_SET_RULES` (:func:`nvlink_linked`, :func:`nvlink_strongest`,
   :func:`one_numa`);
3. its NICs (:func:`choose_nics`): :func:`nics_on_rails`, :func:`nics_on_numa`, then PCIe alignment
   (:func:`gpu_nic_pairs` for a NIC per GPU, :func:`nics_within` for NICs per member), and
   :func:`rails_covered` on the NICs chosen.

Members sharing a node meet four more, which the packing search (``packing.py``) asks:
:func:`share_stacks`, :func:`kept_apart`, :func:`node_apart` and :func:`forbidden_gpus`.

A rule over GPU sets is a factory: given the node and the member's rules it returns the test one
set must pass, or None where the rule does not bind. A node with nothing to enforce then pays
nothing per set, and a test reads what it needs of the node (the link counts, say) once per node,
not once per set. Every rule function here is named by a row of ``solver.domain.rules.RULES``
(``tests/test_architecture.py`` holds the two together).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations

from solver.domain.model import MemberShape, NicMode, Requirement
from solver.reduce.normalise import (
    FreeGpu,
    NodeShape,
    alignment_distance,
    gpu_count,
    has_preferences,
    nic_demand,
    preferred,
    required,
    weighs_nvlink,
)
from solver.reduce.separation import WHOLE_NODE

GpuSetTest = Callable[[tuple[int, ...]], bool]
FAR = 99  # the distance of a NIC from a member without GPUs: farther than any PCIe distance


@dataclass(frozen=True)
class Rules:
    """The hard rules of one member shape in one variant (strict: PREFERRED treated as REQUIRED)."""

    gpus: int  # GPUs touched: whole ones, or 1 for a share
    share: tuple[int, int] | None  # (milli, MiB) of one GPU, or None for whole GPUs
    mutex: bool  # idle GPUs only, and nothing else may land on them afterwards
    nics: int
    per_gpu: bool
    models: frozenset[str]
    avoid: frozenset[str]
    selector: tuple[tuple[str, str], ...]
    align: bool
    distance: int
    numa: bool
    nvlink: bool
    cpu: int
    memory: int
    rails: frozenset[int] | None = None  # the NICs' rails must be exactly these (rail alignment)
    nvlink_best: bool = False  # strict variant of an NVLink rule: the node's strongest links only

    @staticmethod
    def of(shape: MemberShape, strict: bool, rails: frozenset[int] | None = None) -> Rules:
        def hard(rule: Requirement) -> bool:
            return required(rule) or (strict and preferred(rule))

        share = shape.gpu_share
        return Rules(
            gpus=gpu_count(shape),
            share=None if share is None else (share.milli, share.memory_mib),
            mutex=shape.mutex,
            nics=nic_demand(shape),
            per_gpu=shape.nics.mode == NicMode.PER_GPU,
            models=frozenset(shape.gpu_models),
            avoid=frozenset(shape.avoid_gpu_models),
            selector=tuple(sorted(shape.node_selector.items())),
            align=hard(shape.alignment.mode),
            distance=int(alignment_distance(shape)),
            numa=hard(shape.numa),
            nvlink=hard(shape.nvlink),
            cpu=shape.cpu_milli,
            memory=shape.memory_mib,
            rails=rails,
            nvlink_best=strict and weighs_nvlink(shape) and has_preferences(shape),
        )


# --------------------------------------------------------------------------- 1. the node


def selector_matches(node: NodeShape, rules: Rules) -> bool:
    """Node selector: a member lands only on a node carrying every label its selector names."""
    labels = dict(node.labels)
    return all(labels.get(k) == v for k, v in rules.selector)


def cpu_and_memory_fit(node: NodeShape, rules: Rules) -> bool:
    """Capacity: one member's CPU and memory fit in the node's (a node that does not say has room)."""
    if node.cpu_milli is not None and rules.cpu > node.cpu_milli:
        return False
    return not (node.memory_mib is not None and rules.memory > node.memory_mib)


def node_admits(node: NodeShape, rules: Rules) -> bool:
    """The node-level rules: labels, and enough CPU and memory for one member."""
    return selector_matches(node, rules) and cpu_and_memory_fit(node, rules)


# --------------------------------------------------------------------------- 2. the GPUs


def of_asked_model(gpu: FreeGpu, rules: Rules) -> bool:
    """Count and model: a member's GPUs are of a model it asks for (any, if it names none) and of
    none it avoids."""
    return (not rules.models or gpu.model in rules.models) and gpu.model not in rules.avoid


def gpu_fits(gpu: FreeGpu, rules: Rules) -> bool:
    """Shares: a whole-GPU or mutex member takes an idle GPU; a share takes a GPU with the compute
    and memory it asks for still free."""
    if rules.share is None or rules.mutex:
        return gpu.idle
    milli, memory = rules.share
    return gpu.milli >= milli and (gpu.memory_mib is None or gpu.memory_mib >= memory)


def nvlink_linked(node: NodeShape, rules: Rules) -> GpuSetTest | None:
    """NVLink (hard): every pair of a member's GPUs is joined by NVLink."""
    if not rules.nvlink:
        return None
    return lambda gpus: all(pair in node.nvlink for pair in combinations(gpus, 2))


def nvlink_strongest(node: NodeShape, rules: Rules) -> GpuSetTest | None:
    """NVLink link counts (the strict variant of an NVLink rule): the weakest pair of a member's
    GPUs has as many links as the weakest pair of the node's best-linked set of that size (NV18
    over NV2)."""
    if not rules.nvlink_best or rules.gpus >= len(node.nvlink_best) or not node.nvlink_best[rules.gpus]:
        return None
    floor = node.nvlink_best[rules.gpus]
    links = {(a, b): n for a, b, n in node.nvlink_links}
    return lambda gpus: all(links.get(pair, 0) >= floor for pair in combinations(gpus, 2))


def one_numa(node: NodeShape, rules: Rules) -> GpuSetTest | None:
    """NUMA (hard): a member's GPUs sit on one NUMA node, and a known one."""
    if not rules.numa:
        return None

    def test(gpus: tuple[int, ...]) -> bool:
        numas = {node.gpus[i].numa for i in gpus}
        return None not in numas and len(numas) <= 1

    return test


GPU_SET_RULES: tuple[Callable[[NodeShape, Rules], GpuSetTest | None], ...] = (
    nvlink_linked,
    nvlink_strongest,
    one_numa,
)


def gpu_sets(node: NodeShape, rules: Rules) -> tuple[tuple[int, ...], ...]:
    """Every set of the node's free GPUs one member could take, before NICs are considered."""
    eligible = [i for i, g in enumerate(node.gpus) if of_asked_model(g, rules) and gpu_fits(g, rules)]
    tests = [test for rule in GPU_SET_RULES if (test := rule(node, rules)) is not None]
    combos = combinations(eligible, rules.gpus)
    if not tests:  # the common case: no rule over sets binds, so every set stands
        return tuple(combos)
    return tuple(c for c in combos if all(test(c) for test in tests))


# --------------------------------------------------------------------------- 3. the NICs


def nics_on_rails(node: NodeShape, rules: Rules, gpus: Sequence[int], free: Sequence[int]) -> Sequence[int]:
    """Rails: a member of a rail variant takes NICs on the variant's rails only."""
    if rules.rails is None:
        return free
    return [n for n in free if node.nics[n].rail in rules.rails]


def rails_covered(node: NodeShape, rules: Rules, chosen: Sequence[int]) -> bool:
    """Rails: a member of a rail variant has a NIC on every rail of the variant, so every member of
    the role uses the same rails."""
    return rules.rails is None or {node.nics[n].rail for n in chosen} == rules.rails


def nics_on_numa(node: NodeShape, rules: Rules, gpus: Sequence[int], free: Sequence[int]) -> Sequence[int]:
    """NUMA (hard): a member's NICs sit on its GPUs' NUMA node; a member without GPUs takes the one
    NUMA node with the most free NICs."""
    if not rules.numa:
        return free
    numas = {node.gpus[g].numa for g in gpus}
    free = [n for n in free if node.nics[n].numa is not None and (not gpus or node.nics[n].numa in numas)]
    if not gpus and len({node.nics[n].numa for n in free}) > 1:
        best = max(
            sorted({node.nics[n].numa for n in free}),
            key=lambda m: sum(node.nics[n].numa == m for n in free),
        )
        free = [n for n in free if node.nics[n].numa == best]
    return free


def _augment(gpu: int, cands: dict[int, list[int]], owner: dict[int, int], seen: set[int]) -> bool:
    for nic in cands[gpu]:
        if nic in seen:
            continue
        seen.add(nic)
        if nic not in owner or _augment(owner[nic], cands, owner, seen):
            owner[nic] = gpu
            return True
    return False


def gpu_nic_pairs(
    node: NodeShape, rules: Rules, gpus: Sequence[int], free: Sequence[int]
) -> dict[int, int] | None:
    """PCIe alignment, a NIC per GPU: each GPU gets a NIC of its own within the asked PCIe distance
    (a matching, closest first). Returns NIC → GPU; None where the rule is hard and a GPU is left
    without one (a soft rule keeps the pairs it found)."""
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
    return owner


def nics_within(node: NodeShape, rules: Rules, gpus: Sequence[int], ranked: Sequence[int]) -> Sequence[int]:
    """PCIe alignment, NICs per member (hard): each NIC is within the asked PCIe distance of one of
    the member's GPUs; a member without GPUs has nothing to align to (as decode and verify say)."""
    if not (rules.align and gpus):
        return ranked
    near = closeness(node, gpus)
    return [n for n in ranked if near(n)[0] <= rules.distance]


def closeness(node: NodeShape, gpus: Sequence[int]) -> Callable[[int], tuple[int, int]]:
    """How far a NIC is from the nearest of ``gpus``, then its index: the order NICs are taken in."""
    return lambda nic: (min((node.nic_distance(g, nic) for g in gpus), default=FAR), nic)


def choose_nics(
    node: NodeShape, rules: Rules, gpus: Sequence[int], free: Sequence[int]
) -> tuple[int, ...] | None:
    """The member's NICs among ``free`` under the NIC rules, closest first; None when the rules
    cannot be met. Closest-first matching keeps the search small and is exact on
    switch-structured servers."""
    if rules.nics == 0:
        return ()
    free = nics_on_numa(node, rules, gpus, nics_on_rails(node, rules, gpus, free))
    if len(free) < rules.nics:
        return None
    ranked = sorted(free, key=closeness(node, gpus))
    if rules.per_gpu and gpus:
        pairs = gpu_nic_pairs(node, rules, gpus, free)
        if pairs is None:
            return None
        rest = [n for n in ranked if n not in pairs]
        chosen = tuple(sorted([*pairs, *rest[: rules.nics - len(pairs)]]))
    else:
        ranked = nics_within(node, rules, gpus, ranked)
        if len(ranked) < rules.nics:
            return None
        chosen = tuple(sorted(ranked[: rules.nics]))
    return chosen if rules.rails is None or rails_covered(node, rules, chosen) else None


# --------------------------------------------------------------------------- members together


def share_stacks(node: NodeShape, gpu: int, rules: Rules, load: Sequence[int], memory: Sequence[int]) -> bool:
    """Shares: a share lands on a GPU only while the shares on it stay within its milli and its
    memory; a mutex member only on a GPU nobody holds."""
    if rules.mutex:
        return load[gpu] == 0
    milli, mib = rules.share or (0, 0)
    free_gpu = node.gpus[gpu]  # its compute and memory free before this node's members
    return load[gpu] + milli <= free_gpu.milli and (
        free_gpu.memory_mib is None or memory[gpu] + mib <= free_gpu.memory_mib
    )


def kept_apart(
    node: NodeShape,
    near: tuple[frozenset[int], frozenset[int]] | None,
    gpus: tuple[int, ...],
    marks: Sequence[frozenset[int]],
) -> bool:
    """Anti-affinity and mutex (GPU and PCIe-switch scope): no shape a member must keep away from
    sits on its GPUs (``near[0]``) or under their PCIe switches (``near[1]``). ``marks`` holds per
    GPU the shapes already on it."""
    if near is None:
        return True
    same_gpu, same_switch = near
    for g in gpus:
        if marks[g] & same_gpu:
            return False
        if same_switch and any(
            marks[h] & same_switch for h in range(len(node.gpus)) if node.gpu_group[h] == node.gpu_group[g]
        ):
            return False
    return True


def node_apart(same_node: frozenset[tuple[int, int]], shape: int, members: Sequence[int]) -> bool:
    """Anti-affinity (node scope): a member shares no node with a shape it must keep away from."""
    return not any((shape, m) in same_node for m in members)


def forbidden_gpus(node: NodeShape, shape: int) -> frozenset[int] | None:
    """Anti-affinity with running work: a member keeps off the GPUs that work it must avoid already
    holds; None where that work forbids the whole node."""
    if (shape, WHOLE_NODE) in node.taboo:
        return None
    return frozenset(g for s, g in node.taboo if s == shape)
