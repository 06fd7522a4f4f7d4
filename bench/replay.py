"""Replay of the Alibaba openb trace as FGD's simulator does it (../shared/data/openb/SOURCE.md).

Procedure, per seed (42..51 in the published runs):

1. Go ``math/rand`` seeded with the seed; one draw is consumed (the simulator logs ``rand.Int()``).
2. The pods, sorted by name, are shuffled (Go ``Rand.Shuffle``). The list is then *inflated*: pods drawn
   uniformly (``Intn``) from the name-sorted originals are appended as copies until the next draw would
   push the requested milli-GPU past ``ratio`` (1.3) x the cluster's GPU capacity. (The simulator's test
   adds the drawn pod's per-GPU ``gpu_milli`` once, while its running total adds ``num_gpu x gpu_milli``;
   reproduced as is.) A pod list already above the target is thinned by random removals instead.
3. Node ranks for breaking score ties: the nodes, sorted by name, get ``Rand.Perm`` ranks; ties go to the
   lowest rank (the simulator prefixes node names with the rank and picks the smallest name).
4. Pods arrive one at a time and never leave; a pod that fits nowhere is dropped, and its GPU request
   still counts as arrived.
5. After every pod: arrived milli-GPU and allocated milli-GPU. The curve at each whole arrival percent is
   the mean allocation % of the events whose arrival % rounds to it (or lies within one point of it);
   the headline figure is the 130 % point, averaged over seeds.

Policies are objects with ``choose(state, pod)`` (the greedy baselines, run on the fast state) or any
``place(request) -> SolveResult`` callable (the solver included), which sees the cluster as an
``Inventory`` whose ``Allocation`` records are kept in step with the fast state, one pod per request or
windows of W pods per request. As in the simulator, where FGD is a Score plugin run on the nodes its
Filter stage passed, the solver's requests hold only the nodes some pod of the request fits
(``--whole-inventory`` hands it every node: the same choices, several times slower).

CLI::

    python -m bench.replay --policies random,bestfit,gpupacking,fgd --seeds 42-51 \
        --out bench/results/replay-results.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from bench import openb
from solver.baselines.fgd import FGD, TIES
from solver.baselines.fragmentation import SATISFIED, TypicalPod, Workload, fragment_of
from solver.baselines.gorand import GoRand, load_cooked
from solver.baselines.gpupacking import GpuPacking
from solver.baselines.random_fit import RandomFit
from solver.baselines.sharebestfit import BestFitShare
from solver.baselines.sharing import MILLI, Choice, ClusterState, PodPlacer, PodSpec
from solver.domain.model import Allocation, BatchOrder, GpuShare, Inventory, Node, SolveRequest, SolveResult
from solver.domain.model import Policy as SolvePolicy

TARGET_RATIO = 1.3
HEADLINE_PERCENT = 130
PUBLISHED = {"random": 87.47, "gpupacking": 92.00, "bestfit": 93.08, "fgd": 95.39}  # FGD's artifact, 10 seeds
# FGD's published means on the other pod lists (../shared/data/openb/SOURCE.md), by variant name.
PUBLISHED_FGD = {"multigpu50": 97.18, "gpuspec33": 94.55, "gpushare100": 86.90, "cpu250": 93.41}
SIMULATOR_TIE_DRAWS = 10  # values FGD's simulator draws before rand.Perm of the nodes (--simulator-ties)

PlaceFn = Callable[[SolveRequest], SolveResult]
BEST_OF_ORDERS_LIMIT_S = 60.0  # a solver-bestofN window's time limit (see make_policy)


# --------------------------------------------------------------------------- the arrival sequence


@dataclass
class Arrivals:
    pods: list[openb.PodRow]  # in arrival order
    ranks: list[int]  # tie-break rank of each node, in node-list order
    rng: GoRand  # the stream, positioned where the simulator's scheduling starts drawing


def arrivals(
    pods: Sequence[openb.PodRow],
    nodes: Sequence[openb.NodeRow],
    seed: int,
    *,
    ratio: float = TARGET_RATIO,
    cooked: tuple[int, ...] | None = None,
    tie_draws: int = 0,
) -> Arrivals:
    """The seeded arrival order and node ranks of one run (steps 1-3 of the module docstring).

    ``tie_draws``: values taken from the seeded source between the inflation and ``rand.Perm`` of the
    nodes. FGD's simulator takes 10 there in its published runs (SIMULATOR_TIE_DRAWS), which is what
    its per-seed figures depend on; the ten-seed means do not (../shared/data/openb/SOURCE.md)."""
    rng = GoRand(seed, cooked)
    rng.int63()
    ordered = sorted(pods, key=lambda p: p.name)
    shuffled = list(ordered)

    def swap(i: int, j: int) -> None:
        shuffled[i], shuffled[j] = shuffled[j], shuffled[i]

    rng.shuffle(len(shuffled), swap)
    capacity = sum(n.gpus for n in nodes) * MILLI
    total = sum(p.total_milli for p in shuffled)
    target = ratio * float(capacity)
    if float(total) < target:
        for i in range(1 << 30):
            drawn = ordered[rng.intn(len(ordered))]
            if float(total + drawn.gpu_milli) > target:
                break
            total += drawn.total_milli
            shuffled.append(drawn.renamed(f"{drawn.name}-tuned-{i}"))
    else:
        while float(total) > target and shuffled:
            total -= shuffled.pop(rng.intn(len(shuffled))).total_milli
    for _ in range(tie_draws):
        rng.int63()
    by_name = sorted(range(len(nodes)), key=lambda i: nodes[i].name)
    perm = rng.perm(len(nodes))
    ranks = [0] * len(nodes)
    for position, i in enumerate(by_name):
        ranks[i] = perm[position]
    return Arrivals(shuffled, ranks, rng)


# --------------------------------------------------------------------------- policies


def window_nodes(state: ClusterState, specs: Sequence[PodSpec], *, pruned: bool) -> list[int]:
    """The nodes a window's request holds: those some pod of it fits as the cluster stands, and with
    ``pruned``, of nodes whose free capacity is the same GPU by GPU (model, free milli of each GPU,
    free CPU and memory), only the first ``len(specs)`` by node rank.

    Why that changes no answer of a tier list that sees a node only through its free capacity and its
    rank (placed work, fragmentation, node order; not FILL packing, which counts a node's total): a
    window of W pods uses at most W nodes of such a class, and a plan on a later-ranked copy while an
    earlier one stays unused is beaten by the same plan moved to the earlier one. A window's request
    then holds ~240 nodes instead of ~990 early in a run (multigpu50 seed 42, pod 1,000), fewer to
    normalise and compile each step; late in a run, with few identical nodes left, about as many."""
    fits = np.flatnonzero(np.logical_or.reduce([state.feasible(spec) for spec in specs])).tolist()
    if not pruned:
        return fits
    seen: Counter[tuple] = Counter()
    kept = []
    for i in sorted(fits, key=lambda i: state.rank[i]):
        key = (state.key(i), int(state.mem_left[i]))
        if seen[key] < len(specs):
            seen[key] += 1
            kept.append(i)
    return sorted(kept)


class RequestPolicy:
    """Any ``place(request)`` as a replay policy: W pods per request, the cluster as an Inventory.

    With ``filtered``, a request holds only the nodes some pod of it fits as the cluster stands (the
    simulator's Filter stage, which runs before any Score plugin such as FGD's; Volcano likewise hands
    its extender the nodes its predicates passed), and the policy's ``node_order`` only those nodes.
    """

    def __init__(
        self,
        name: str,
        place: PlaceFn,
        window: int = 1,
        *,
        filtered: bool = False,
        endgame: int = 0,
        before_endgame: PodPlacer | None = None,
        pruned: bool = False,
    ) -> None:
        self.name = name
        self.place = place
        self.window = window
        self.filtered = filtered
        self.pruned = pruned  # identical nodes beyond the window's pods left out (``window_nodes``)
        self.endgame = endgame  # once a GPU pod has failed: windows of this many pods (0: no change)
        # A greedy that makes this policy's own choices before the endgame, to measure the endgame
        # alone faster (``fgd/tight-gpu`` is the solver online, pod for pod: RESULTS-replay.md).
        self.before_endgame = before_endgame

    def window_now(self, failed: bool) -> int:
        return self.endgame if failed and self.endgame else self.window


class SortedWindows:
    """A greedy policy over windows of W pods, each window's pods taken largest GPU request first (a
    batch's freedom of order, as ``solver-sortedN`` uses it)."""

    def __init__(self, name: str, policy: PodPlacer | RequestPolicy, window: int) -> None:
        if isinstance(policy, RequestPolicy | SortedWindows):
            raise ValueError(
                f"{name!r}: only a greedy policy takes -sortedN here (the solver: solver-sortedN)"
            )
        self.name, self.policy, self.window = name, policy, window


class BestOfOrders:
    """A greedy policy over windows of W pods, each window placed in the orders the solver's
    ``BatchOrder.BEST_OF_ORDERS`` tries (``solver.search.sequence.candidate_orders``), keeping the plan that
    places the most work, then leaves the least fragmentation, then comes first.

    Judged as the solver judges (``solver.answer.measures.fragmentation_change``): the change the
    plan makes to fragmentation, node by node over the nodes it touches, unrounded and summed in
    the request's node order, so that near-ties go the same way. (Until session 11 both compared the
    total over the request's nodes rounded to a milli-GPU, and which untouched nodes a request held
    could flip a near-tie.)"""

    def __init__(
        self, name: str, policy: FGD, window: int, judge: FGD | None = None, *, pruned: bool = False
    ) -> None:
        self.name, self.policy, self.window = name, policy, window
        self.judge = judge or policy
        self.pruned = pruned  # the solver's request holds ``window_nodes(..., pruned=True)``

    def decide(self, state: ClusterState, batch: Sequence[openb.PodRow], seed: int) -> list[Choice | None]:
        from solver.search.sequence import candidate_orders

        specs = [pod.spec() for pod in batch]
        # The pods the solver orders: its request sets aside, before any order is drawn, a pod no
        # node of the request could hold even empty (solver.domain.validate.unfit_jobs); ordering
        # it too drew other shuffles, and the twin parted from the solver (gpuspec33 seed 42, pod
        # 3,264, session 19). Such a pod fits no node now, so it stays unplaced either way.
        arrival = self._orderable(state, specs)
        plans = [self._plan(state, specs, arrival)]
        left_out = [pos for pos, k in enumerate(arrival) if plans[0][2][k] is None]
        sizes = [(0, specs[k].total_milli) for k in arrival]
        shuffles = SolvePolicy().order_shuffles  # the solver's default
        for order in candidate_orders(sizes, left_out, f"{seed}/replay-{batch[0].name}", shuffles):
            plans.append(self._plan(state, specs, [arrival[pos] for pos in order]))
        best = max(range(len(plans)), key=lambda k: (plans[k][0], -plans[k][1], -k))
        return plans[best][2]

    def _orderable(self, state: ClusterState, specs: Sequence[PodSpec]) -> list[int]:
        """The window's pods but those no node of the solver's request (``window_nodes``) could hold
        even empty, each resource asked of the largest node on its own, as ``unfit_jobs`` asks it
        (a share asks no whole GPU there). An empty request sets none aside."""
        nodes = window_nodes(state, specs, pruned=self.pruned)
        if not nodes or not isinstance(state, openb.ReplayState):
            return list(range(len(specs)))
        gpus = state.gpu_count[nodes]
        most_cpu, most_memory = int(state.cpu_total[nodes].max()), int(state.memory_total[nodes].max())

        def held(spec: PodSpec) -> bool:
            whole = 0 if spec.is_share else spec.gpus
            of_model = int((gpus * state.model_mask(spec.models)[nodes]).max()) if spec.models else whole
            return (
                whole <= int(gpus.max())
                and whole <= of_model
                and spec.cpu <= most_cpu
                and spec.memory <= most_memory
            )

        return [k for k, spec in enumerate(specs) if held(spec)]

    def _fragmentation(self, state: ClusterState, i: int) -> float:
        return self.judge.fragmentation(int(state.cpu_left[i]), state.free_of(i), state.models[i])

    def _plan(
        self, state: ClusterState, specs: list, order: list[int]
    ) -> tuple[int, float, list[Choice | None]]:
        """(work placed as the solver counts it, the change to fragmentation in milli-GPU over the
        nodes the plan touches, choices)."""
        with placed_in_order(self.policy, state, specs, order) as chosen:
            touched = sorted({c[0] for c in chosen if c is not None})
            after = [self._fragmentation(state, i) for i in touched]
        change = 0.0
        for i, frag in zip(touched, after, strict=True):
            change += frag - self._fragmentation(state, i)
        work = sum(spec.total_milli or 1 for spec, c in zip(specs, chosen, strict=True) if c is not None)
        return work, round(change, 6), chosen  # as the solver rounds it


class UnfedFGD(FGD):
    """FGD with the solver's fragmentation measure: FGD's, plus the GPU milli the node's free CPU
    cannot feed, the larger of two estimates (``solver.domain.fragmentation``'s docstring):

    - typical by typical: for each typical GPU pod that fits the node, copies by CPU (free CPU over
      its CPU, not rounded) below copies by GPU (its idle GPUs, or for a share the shares each GPU
      still holds) lose usable milli x (1 - CPU copies / GPU copies); popularity-weighted sum;
    - the mix: the node's free milli beyond its free CPU over the workload's mean CPU per milli-GPU
      (FGD's ``strand`` at weight 1).

    Written here from that definition, not with the solver's code, and summed per typical in profile
    order, as the solver sums. The twin of the solver's policies.

    Study knobs (bench/RESULTS-replay.md, sessions 9 and 11): ``combine`` "typical" keeps the first
    estimate alone (the measure of sessions 9-10), "sum" adds the two; ``weight`` scales the first,
    ``whole_only`` counts it for whole-GPU typicals alone, ``rounded`` takes whole CPU copies."""

    def __init__(
        self,
        workload: Workload,
        *,
        weight: float = 1.0,
        whole_only: bool = False,
        rounded: bool = False,
        combine: str = "max",
        **options: Any,
    ) -> None:
        super().__init__(workload, **options)
        self.weight, self.whole_only, self.rounded = weight, whole_only, rounded
        if combine not in ("max", "sum", "typical"):
            raise ValueError(f"combine {combine!r}: max, sum or typical")
        self.combine = combine

    def fragmentation(self, cpu_free: int, free: Sequence[int], model: str) -> float:
        key = (cpu_free, model, tuple(sorted(free)))
        value = self._frag.get(key)
        if value is None:
            value = unfed = 0.0
            for m in self.workload:
                category, milli = fragment_of(free, cpu_free, m, model)
                value += m.popularity * milli
                if category == SATISFIED:
                    unfed += m.popularity * self.weight * self.unfed(free, cpu_free, m)
            mix = self.mix_unfed(free, cpu_free) if self.combine != "typical" else 0.0
            value += unfed + mix if self.combine == "sum" else max(unfed, mix)
            self._frag[key] = value
        return value

    def mix_unfed(self, free: Sequence[int], cpu_free: int) -> float:
        """The node's free milli beyond what its free CPU feeds at the workload's CPU per milli-GPU."""
        return max(0.0, sum(free) - cpu_free / self.cpu_per_milli) if self.cpu_per_milli else 0.0

    def unfed(self, free: Sequence[int], cpu_free: int, m: TypicalPod) -> float:
        """The GPU milli typical ``m`` could use on the node that its free CPU cannot feed."""
        if not m.cpu or (self.whole_only and m.milli < MILLI):
            return 0.0
        usable = [f for f in free if f >= m.milli]
        by_gpu = len(usable) // m.gpus if m.milli >= MILLI else sum(f // m.milli for f in usable)
        by_cpu = cpu_free // m.cpu if self.rounded else cpu_free / m.cpu
        return sum(usable) * (1.0 - by_cpu / by_gpu) if by_cpu < by_gpu else 0.0


@contextmanager
def placed_in_order(
    policy: PodPlacer, state: ClusterState, specs: Sequence[PodSpec], order: Sequence[int]
) -> Iterator[list[Choice | None]]:
    """The greedy's choices for the pods taken in ``order`` (listed by pod), each bound for the next
    while the block runs and undone after it: the caller binds what it keeps, in arrival order."""
    chosen: dict[int, Choice | None] = {}
    try:
        for k in order:
            chosen[k] = policy.choose(state, specs[k])
            if chosen[k] is not None:
                state.bind(chosen[k][0], specs[k], chosen[k][1])
        yield [chosen.get(k) for k in range(len(specs))]
    finally:
        for k, choice in chosen.items():
            if choice is not None:
                state.unbind(choice[0], specs[k], choice[1])


def make_policy(
    name: str, workload: Workload, rng: GoRand, order: Sequence[str] = (), *, filtered: bool = True
) -> PodPlacer | RequestPolicy | SortedWindows | BestOfOrders:
    """A fresh policy object by CLI name; ``order`` is the node names in the run's tie-break order;
    ``filtered``: the solver's requests hold only the nodes that pass the filter stage."""
    if name == "random":
        return RandomFit(rng)
    if name == "bestfit":
        return BestFitShare()
    if name == "gpupacking":
        return GpuPacking()
    if "-bestof" in name and not name.startswith("solver"):
        # e.g. fgd-bestof16: a greedy over the orders the solver's BEST_OF_ORDERS tries
        base, window = name.rsplit("-bestof", 1)
        window, _, judge = window.partition("+")
        greedy = make_policy(base, workload, rng, order)
        if not isinstance(greedy, FGD):
            raise ValueError(f"{name!r}: only FGD and its variants take -bestofN")
        if judge not in ("", "unfed"):
            _unknown(name)
        # The solver prunes its requests' identical nodes unless FILL packing sees their totals.
        pruned = "fill" not in base
        return BestOfOrders(name, greedy, int(window), UnfedFGD(workload) if judge else None, pruned=pruned)
    if "-sorted" in name and not name.startswith("solver"):  # e.g. fgd-sorted16: a greedy over sorted windows
        base, window = name.rsplit("-sorted", 1)
        return SortedWindows(name, make_policy(base, workload, rng, order), int(window))
    if name == "fgd" or name.startswith("fgd/"):  # fgd/<tie> or fgd/points<N>: the tie-break study
        variant = name.partition("/")[2] or "rank"
        # <variant>+unfed: the solver's measure (UnfedFGD); +fed[whole][round][W]: its study knobs
        variant, _, measure = variant.partition("+")
        made: Callable[..., FGD] = FGD
        if measure == "unfed":
            made = UnfedFGD
        elif measure in ("unfedtypical", "unfedsum"):  # session 11's study: the two estimates
            made = partial(UnfedFGD, combine=measure.removeprefix("unfed"))
        elif measure.startswith("fed"):
            knobs = measure.removeprefix("fed")
            whole_only, rounded = "whole" in knobs, "round" in knobs
            weight = float(knobs.replace("whole", "").replace("round", "") or 1)
            made = partial(UnfedFGD, weight=weight, whole_only=whole_only, rounded=rounded, combine="typical")
        elif measure.startswith("strand"):  # CPU stranding at the workload's CPU per GPU, e.g. +strand0.5
            made = partial(FGD, strand=float(measure.removeprefix("strand")))
        elif measure:
            _unknown(name)
        if variant == "exact":  # the drop itself: no ties at all
            return made(workload, points=0)
        if variant.startswith("points"):
            return made(workload, points=int(variant.removeprefix("points")))
        if variant == "tight-gpu":  # a share to the fullest of the node's best-scored GPUs
            return made(workload, tight_gpu=True)
        if variant.startswith("tight-gpu-") and variant.removeprefix("tight-gpu-") in TIES:  # e.g. -fill
            return made(workload, tie=variant.removeprefix("tight-gpu-"), tight_gpu=True)
        return made(workload, tie=variant) if variant in TIES else _unknown(name)
    if name.startswith("place:"):  # any in-project baseline through its place(request), e.g. place:fgd:16
        from solver.baselines import placer

        _, baseline, *window = name.split(":")
        return RequestPolicy(name, placer(baseline), int(window[0]) if window else 1)
    if name.startswith("solver"):  # solver[-windowN|-sortedN|-endgameN][/fill]
        from solver.solve import solve  # the solver is optional for the baseline-only replay

        head, _, tie = name.partition("/")
        if tie not in ("", "fill"):
            _unknown(name)
        window, batch_order, endgame = 1, BatchOrder.JOINT, 0
        if head.startswith("solver-window"):
            window = int(head.removeprefix("solver-window"))
        elif head.startswith("solver-endgame"):  # one pod a request until a GPU pod fails, then windows
            endgame = int(head.removeprefix("solver-endgame").removesuffix("-fast"))
        elif head.startswith("solver-sorted"):  # the window as one LARGEST_FIRST request
            window, batch_order = int(head.removeprefix("solver-sorted")), BatchOrder.LARGEST_FIRST
        elif head.startswith("solver-bestof"):  # the window as one BEST_OF_ORDERS request
            window, batch_order = int(head.removeprefix("solver-bestof")), BatchOrder.BEST_OF_ORDERS
        elif head != "solver":
            _unknown(name)
        policy = solver_policy(workload, order, fill=tie == "fill").model_copy(
            update={"batch_order": batch_order}
        )
        if batch_order == BatchOrder.BEST_OF_ORDERS:
            # The request's limit is shared by about six orders of N one-pod solves: at 5 s, late
            # CPU-only pods' searches were cut short and the run parted from its greedy twin (seed 42:
            # 95.67 against 95.82). A limit is a cap: proven steps take milliseconds whatever it is.
            policy = policy.model_copy(update={"time_limit_s": BEST_OF_ORDERS_LIMIT_S})

        def place(request: SolveRequest) -> SolveResult:
            present = {n.name for n in request.inventory.nodes}
            # The run's seed stays (BEST_OF_ORDERS shuffles by it, as its greedy twin does).
            ranked = policy.model_copy(
                update={"node_order": tuple(n for n in order if n in present), "seed": request.policy.seed}
            )
            return solve(request.model_copy(update={"policy": ranked}))

        fast = UnfedFGD(workload, tight_gpu=True) if head.endswith("-fast") and endgame else None
        return RequestPolicy(
            name,
            place,
            window,
            filtered=filtered,
            endgame=endgame,
            before_endgame=fast,
            pruned=filtered and tie != "fill",
        )
    return _unknown(name)


def twin_of(name: str) -> str:
    """The greedy that makes a solver policy's choices (FGD with the solver's share rule and its
    fragmentation measure, over the same windows and orders; tests/test_replay.py checks them pod for
    pod on a slice)."""
    head, _, tie = name.partition("/")
    base = "fgd/tight-gpu-fill+unfed" if tie == "fill" else "fgd/tight-gpu+unfed"
    for kind in ("-bestof", "-sorted"):
        if head.startswith("solver" + kind):
            return base + kind + head.removeprefix("solver" + kind)
    if head == "solver":
        return base
    raise ValueError(f"{name!r} has no greedy twin (solver, solver-bestofN, solver-sortedN do)")


def _unknown(name: str) -> NoReturn:
    raise ValueError(
        f"unknown policy {name!r}; known: random, bestfit, gpupacking, fgd, fgd/<tie> (tie: "
        f"{', '.join(TIES)}), fgd/pointsN, fgd/exact, fgd/tight-gpu, any greedy as <name>-sortedN, solver, "
        "solver-windowN, solver-sortedN, solver-bestofN, solver-endgameN, FGD over the solver's orders as "
        "fgd-bestofN, each solver one with /fill for FILL packing above "
        "the node order"
    )


def solver_policy(workload: Workload, order: Sequence[str] = (), *, fill: bool = False) -> SolvePolicy:
    """The solver as FGD is measured: placed work first, then FGD's fragmentation against the same
    workload profile FGD uses (CPU, GPU models and CPU-only shapes included), then FILL packing
    (``fill``; without it the solver makes FGD's own choices), then the run's node order (the
    simulator's seeded node ranks: first fit over a fixed order)."""
    from solver.domain.model import ObjectiveTier, Packing, WorkloadShape

    shapes = tuple(
        WorkloadShape(
            gpus=p.gpus if p.milli >= MILLI else 0,
            milli=p.milli if 0 < p.milli < MILLI else 0,
            cpu_milli=p.cpu,
            gpu_models=p.models,
            popularity=p.popularity,
        )
        for p in workload
        if p.popularity > 0
    )
    tiers = (ObjectiveTier.PLACED_WORK, ObjectiveTier.FRAGMENTATION, ObjectiveTier.NODE_ORDER)
    if fill:
        tiers = (*tiers[:2], ObjectiveTier.PACKING, tiers[2])
    # One CP-SAT worker: a replay's requests are one pod, or one pod a step, proven in milliseconds,
    # and a second worker thread only competes with the other runs for the cores.
    return SolvePolicy(
        objective=tiers,
        packing=Packing.FILL,
        workload=shapes,
        node_order=tuple(order),
        time_limit_s=5.0,
        workers=1,
    )


class InventoryMirror:
    """Domain nodes kept in step with the fast state: one ``Allocation`` per bound pod."""

    def __init__(self, nodes: Sequence[openb.NodeRow]) -> None:
        self.nodes: list[Node] = [openb.domain_node(n) for n in nodes]
        self.index = {n.name: i for i, n in enumerate(self.nodes)}

    def bind(self, i: int, pod: openb.PodRow, gpus: Sequence[int]) -> None:
        spec = pod.spec()
        ids = tuple(f"GPU{g}" for g in gpus)
        if spec.is_share:
            alloc = Allocation(
                owner=pod.name,
                cpu_milli=pod.cpu_milli,
                memory_mib=pod.memory_mib,
                gpu_shares=(GpuShare(gpu=ids[0], milli=spec.milli),),
            )
        else:
            alloc = Allocation(owner=pod.name, gpus=ids, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib)
        node = self.nodes[i]
        self.nodes[i] = node.model_copy(update={"allocations": (*node.allocations, alloc)})

    def request(
        self, pods: Sequence[openb.PodRow], seed: int, nodes: Sequence[int] | None = None
    ) -> SolveRequest:
        """The pods as jobs on the cluster as it stands (only ``nodes``, by index, if given)."""
        held = self.nodes if nodes is None else [self.nodes[i] for i in nodes]
        return SolveRequest(
            request_id=f"replay-{pods[0].name}",
            inventory=Inventory.model_construct(nodes=tuple(held), switches=()),
            jobs=tuple(openb.job(p) for p in pods),
            policy=SolvePolicy(seed=seed),
        )


def gpus_from_result(result: SolveResult, job_id: str) -> tuple[str, tuple[int, ...]] | None:
    """(node name, GPU indices) of a one-member job in a result, or None if it was not placed."""
    for jr in result.jobs:
        if jr.job_id == job_id and jr.placed and jr.members:
            m = jr.members[0]
            ids = [s.gpu for s in m.gpu_shares] or list(m.gpus)
            return m.node, tuple(int(g.removeprefix("GPU")) for g in ids)
    return None


# --------------------------------------------------------------------------- one run


class PlacementRefused(RuntimeError):
    """A policy chose a place the pod does not fit (the replay's own check, :func:`misfit`)."""


@dataclass
class RunResult:
    policy: str
    seed: int
    pods: int
    placed: int
    failed: int
    seconds: float
    capacity_milli: int
    curve: dict[int, float] = field(default_factory=dict)

    @property
    def headline(self) -> float | None:
        return self.curve.get(HEADLINE_PERCENT)


def curve_of(events: Sequence[tuple[int, int]], gpus: int) -> dict[int, float]:
    """Allocation % per whole arrival %, as the published analysis reduces a run: per event, arrival % is
    rounded to a whole number and allocation % to two decimals; each point is the mean over the events
    rounding to it (or, if none, those within one point), rounded to two decimals."""
    by_percent: dict[int, list[float]] = defaultdict(list)
    for arrived, used in events:
        by_percent[round(arrived / gpus / 10)].append(round(used / gpus / 10, 2))
    out: dict[int, float] = {}
    for percent in range(0, HEADLINE_PERCENT + 1):
        values = by_percent.get(percent) or [
            v for p in (percent - 1, percent, percent + 1) for v in by_percent.get(p, ())
        ]
        if values:
            out[percent] = round(sum(values) / len(values), 2)
    return out


def run(
    policy_name: str,
    nodes: Sequence[openb.NodeRow],
    pods: Sequence[openb.PodRow],
    seed: int,
    *,
    progress: Callable[[str], None] | None = None,
    filtered: bool = True,
    observe: Callable[[openb.PodRow, Choice | None, ClusterState], None] | None = None,
    retry: bool = True,
    tie_draws: int = 0,
    span: tuple[int, int] | None = None,
) -> RunResult:
    """One policy, one seed: the whole arrival sequence, events recorded after every pod; ``observe``
    sees each pod, its choice (None: dropped) and the state once the choice is bound.

    A window's choices are bound in arrival order, and with ``retry`` no pod that fits at its turn is
    dropped: a pod the window's plan left out that fits the cluster as it stands when its turn comes
    (the plan put later pods first) is placed there and then by the same policy alone, and a later
    pod whose planned place that took is placed again the same way (``_at_its_turn``). Online, a pod
    is dropped only when it fits nowhere; the simulator counts that, so windows must not do worse.

    ``span`` (first, end): only the windows starting at arrival positions first..end-1 are the
    policy's own; the others are made by its greedy twin (``twin_of``), which makes its choices up to
    float noise (bench/RESULTS-replay.md) many times faster. A stretch of a long run, such as where a
    window once failed, is so replayed by the solver itself from the state the run reaches there."""
    started = time.perf_counter()
    seq = arrivals(pods, nodes, seed, tie_draws=tie_draws)
    state = openb.cluster_state(nodes, seq.ranks)
    order = [nodes[i].name for i in sorted(range(len(nodes)), key=lambda i: seq.ranks[i])]
    policy = make_policy(policy_name, openb.workload(pods), seq.rng, order, filtered=filtered)
    mirror = InventoryMirror(nodes) if isinstance(policy, RequestPolicy) else None
    twin = make_policy(twin_of(policy_name), openb.workload(pods), seq.rng, order) if span else None
    events: list[tuple[int, int]] = []
    arrived = placed = 0
    step = policy.window if isinstance(policy, RequestPolicy | SortedWindows | BestOfOrders) else 1
    start = requests = 0  # pods handed over so far, and in how many requests
    failed = False  # has a GPU pod failed yet (the endgame of a run)
    while start < len(seq.pods):
        if isinstance(policy, RequestPolicy):
            step = policy.window_now(failed)
        batch = seq.pods[start : start + step]
        if twin is not None and span is not None and not span[0] <= start < span[1]:
            choices = _decide(twin, state, mirror, batch, seed)
        elif isinstance(policy, RequestPolicy) and policy.before_endgame is not None and not failed:
            choices = _decide(policy.before_endgame, state, mirror, batch, seed)
        else:
            choices = _decide(policy, state, mirror, batch, seed)
        for k, (pod, choice) in enumerate(zip(batch, choices, strict=True)):
            arrived += pod.total_milli
            if retry and len(batch) > 1:
                choice = _at_its_turn(policy, state, mirror, pod, choice, seed)
            if choice is not None:
                node, gpus = choice
                wrong = misfit(state, choice, pod.spec())
                if wrong is not None:  # a policy's bug, never a figure: stop the run, say where
                    where = f"{policy_name} seed {seed}, pod {pod.name} (#{start + k})"
                    raise PlacementRefused(f"{where}: {wrong}")
                state.bind(node, pod.spec(), gpus)
                if mirror is not None:
                    mirror.bind(node, pod, gpus)
                placed += 1
            else:
                failed = failed or pod.total_milli > 0
            if observe is not None:
                observe(pod, choice, state)
            events.append((arrived, state.allocated_milli))
        if progress and requests % max(1, 2000 // step) == 0 and start:
            progress(f"{policy_name} seed {seed}: {start}/{len(seq.pods)} pods")
        start, requests = start + len(batch), requests + 1
    gpus = sum(n.gpus for n in nodes)
    return RunResult(
        policy=policy_name,
        seed=seed,
        pods=len(seq.pods),
        placed=placed,
        failed=len(seq.pods) - placed,
        seconds=round(time.perf_counter() - started, 2),
        capacity_milli=gpus * MILLI,
        curve=curve_of(events, gpus),
    )


def misfit(state: ClusterState, choice: Choice, spec: PodSpec) -> str | None:
    """Why node ``choice[0]`` cannot take the pod on GPUs ``choice[1]`` as the replay's own state
    stands (None: it can): the GPU count, model, CPU, memory and each GPU's free milli, checked
    here on the fast state and not by any policy's code — the replay's independent check of every
    placement, the solver's included."""
    i, gpus = choice
    if not 0 <= i < len(state):
        return f"node index {i} is not a node of the cluster"
    name = state.names[i]
    if len(set(gpus)) != len(gpus) or len(gpus) != (1 if spec.is_share else spec.gpus):
        return f"GPUs {list(gpus)} on {name} for a pod asking {spec.gpus} GPU(s) of {spec.milli} milli"
    if any(not 0 <= g < state.gpu_count[i] for g in gpus):
        return f"GPUs {list(gpus)}: {name} has {state.gpu_count[i]} GPUs"
    if gpus and spec.models and state.models[i] not in spec.models:
        return f"{name} has {state.models[i]} GPUs; the pod asks for {', '.join(spec.models)}"
    if state.cpu_left[i] < spec.cpu or state.mem_left[i] < spec.memory:
        return (
            f"{name} has {state.cpu_left[i]} milli-CPU and {state.mem_left[i]} MiB free; the pod asks "
            f"{spec.cpu} and {spec.memory}"
        )
    need = MILLI if spec.exclusive or not spec.is_share else max(spec.milli, 1)
    short = [g for g in gpus if state.gpu_left[i, g] < need]
    if short:
        return f"GPU {short[0]} of {name} has {state.gpu_left[i, short[0]]} milli free; the pod needs {need}"
    return None


def still_fits(state: ClusterState, choice: Choice, spec: PodSpec) -> bool:
    """Can node ``choice[0]`` still take the pod on GPUs ``choice[1]`` (see :func:`misfit`)?"""
    return misfit(state, choice, spec) is None


def _at_its_turn(
    policy: PodPlacer | RequestPolicy | SortedWindows | BestOfOrders,
    state: ClusterState,
    mirror: InventoryMirror | None,
    pod: openb.PodRow,
    planned: Choice | None,
    seed: int,
) -> Choice | None:
    """The pod's place when its turn comes in arrival order: the window's plan where it still fits,
    else (left out, or its planned place taken by a pod placed at its own turn) the policy's choice
    for the pod alone on the cluster as it stands, if any node fits it now."""
    spec = pod.spec()
    if planned is not None and still_fits(state, planned, spec):
        return planned
    if not state.feasible(spec).any():
        return None
    if isinstance(policy, SortedWindows | BestOfOrders):
        return policy.policy.choose(state, spec)
    if isinstance(policy, RequestPolicy):
        return _decide(policy, state, mirror, [pod], seed)[0]
    return policy.choose(state, spec)


def _decide(
    policy: PodPlacer | RequestPolicy | SortedWindows | BestOfOrders,
    state: ClusterState,
    mirror: InventoryMirror | None,
    batch: Sequence[openb.PodRow],
    seed: int,
) -> list[Choice | None]:
    """Choices for a batch of pods: the greedy policies one by one on the fast state (each choice is
    bound before the next is made, by the caller, so batches are of one pod); sorted greedy windows
    largest first, each choice bound for the next and undone again for the caller (as the solver's
    ``BatchOrder.LARGEST_FIRST`` does inside one request); request policies in one request per
    window."""
    if isinstance(policy, BestOfOrders):
        return policy.decide(state, batch, seed)
    if isinstance(policy, SortedWindows):
        specs = [pod.spec() for pod in batch]
        with placed_in_order(
            policy.policy, state, specs, sorted(range(len(batch)), key=lambda k: -specs[k].total_milli)
        ) as chosen:
            return chosen
    if not isinstance(policy, RequestPolicy):
        return [policy.choose(state, pod.spec()) for pod in batch]
    assert mirror is not None
    nodes = None
    if policy.filtered:
        # A node no pod of the batch fits now fits none later either: nothing ever leaves.
        nodes = window_nodes(state, [pod.spec() for pod in batch], pruned=policy.pruned)
    result = policy.place(mirror.request(batch, seed, nodes))
    out = []
    for pod in batch:
        found = gpus_from_result(result, pod.name)
        out.append(None if found is None else (mirror.index[found[0]], found[1]))
    return out


# --------------------------------------------------------------------------- CLI


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            seeds.extend(range(int(lo), int(hi) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


_DATA: dict[tuple[str, str, int | None, int | None], tuple] = {}


def _load(nodes_path: str, pods_path: str, limit_nodes: int | None, limit_pods: int | None) -> tuple:
    key = (nodes_path, pods_path, limit_nodes, limit_pods)
    if key not in _DATA:
        nodes = openb.load_nodes(Path(nodes_path))[:limit_nodes]
        pods = openb.load_pods(Path(pods_path))[:limit_pods]
        _DATA[key] = (nodes, pods)
    return _DATA[key]


def _job(args: tuple) -> RunResult:
    """One (policy, seed) in a worker process."""
    policy, seed, nodes_path, pods_path, limit_nodes, limit_pods, filtered, retry, tie_draws, span = args
    nodes, pods = _load(nodes_path, pods_path, limit_nodes, limit_pods)
    report = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    return run(
        policy,
        nodes,
        pods,
        seed,
        progress=report,
        filtered=filtered,
        retry=retry,
        tie_draws=tie_draws,
        span=span,
    )


def published(policy: str, pods: str) -> float | None:
    """FGD's artifact's ten-seed mean for a policy on the pod list at ``pods``, where one exists."""
    name = Path(pods).stem.removeprefix("openb_pod_list_")
    if name == "default":
        return PUBLISHED.get(policy)
    return PUBLISHED_FGD.get(name) if policy == "fgd" else None


def table(results: Sequence[RunResult], pods: str = str(openb.DEFAULT_PODS)) -> str:
    """Allocation % at 130 % arrived, per policy: mean, min, max over seeds, the published mean on the
    pod list at ``pods``, and seed by seed against FGD where FGD ran on the same seeds."""
    by_policy: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        by_policy[r.policy].append(r)
    # Against FGD seed by seed, where FGD ran on the same seeds: (mean difference, better, worse).
    fgd = {r.seed: r.headline for r in by_policy.get("fgd", ()) if r.headline is not None}
    lines = [
        f"{'policy':<18} {'seeds':>5} {'alloc@130% mean':>16} {'min':>7} {'max':>7} {'published':>9} "
        f"{'failed pods':>11} {'s/run':>6} {'vs fgd: mean, better/worse':>27}"
    ]
    for policy, runs in by_policy.items():
        values = [r.headline for r in runs if r.headline is not None]
        if not values:
            continue
        mean_published = published(policy, pods)
        paired = [(r.headline, fgd[r.seed]) for r in runs if r.headline is not None and r.seed in fgd]
        versus = "-"
        if paired and policy != "fgd":
            gain = sum(a - b for a, b in paired) / len(paired)
            better, worse = sum(a > b for a, b in paired), sum(a < b for a, b in paired)
            versus = f"{gain:+.2f}, {better}/{worse} of {len(paired)}"
        lines.append(
            f"{policy:<18} {len(values):>5} {sum(values) / len(values):>16.2f} {min(values):>7.2f} "
            f"{max(values):>7.2f} {mean_published if mean_published is not None else '-':>9} "
            f"{sum(r.failed for r in runs) / len(runs):>11.0f} "
            f"{sum(r.seconds for r in runs) / len(runs):>6.1f} {versus:>27}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default=str(openb.DEFAULT_NODES), help="node list CSV")
    parser.add_argument(
        "--pods",
        default=str(openb.DEFAULT_PODS),
        help=f"pod list CSV, or a published variant by name: {', '.join(openb.VARIANTS)}",
    )
    parser.add_argument("--policies", default="random,bestfit,gpupacking,fgd")
    parser.add_argument("--seeds", default="42-51", help="e.g. 42-51 or 42,45")
    parser.add_argument("--limit-nodes", type=int, default=None, help="use the first N nodes of the list")
    parser.add_argument("--limit-pods", type=int, default=None, help="use the first N pods of the list")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--out", default=None, help="write every run (curves included) as JSON")
    parser.add_argument(
        "--whole-inventory",
        action="store_true",
        help="hand the solver every node, not only those the filter stage passes (same choices, slower)",
    )
    parser.add_argument(
        "--no-retry",
        action="store_true",
        help="windows drop the pods their plan left out even where one fits at its turn (as before)",
    )
    parser.add_argument(
        "--simulator-ties",
        action="store_true",
        help=f"draw {SIMULATOR_TIE_DRAWS} values before the node ranks, as FGD's simulator does: its "
        "per-seed tie-break stream (the ten-seed means do not depend on it)",
    )
    parser.add_argument(
        "--table",
        nargs="+",
        metavar="JSON",
        help="print the table of runs written by --out (several files: their runs together), run nothing",
    )
    parser.add_argument(
        "--span",
        metavar="FIRST:END",
        help="a solver policy makes only the windows starting at pods FIRST..END-1, its greedy twin the rest",
    )
    args = parser.parse_args(argv)
    if args.table:
        files = [json.loads(Path(path).read_text()) for path in args.table]
        if len({f["pods"] for f in files}) > 1:
            parser.error("--table: these files replay different pod lists; give one pod list's files")
        runs = [
            RunResult(
                **{k: v for k, v in r.items() if k != "curve"},
                curve={int(p): v for p, v in r["curve"].items()},
            )
            for f in files
            for r in f["runs"]
        ]
        print(table(runs, files[0]["pods"]))
        return 0
    args.pods = str(openb.VARIANTS.get(args.pods, args.pods))
    tie_draws = SIMULATOR_TIE_DRAWS if args.simulator_ties else 0
    span = None
    if args.span:
        first, _, end = args.span.partition(":")
        try:
            span = (int(first), int(end))
        except ValueError:
            parser.error(f"--span {args.span!r}: expected FIRST:END, two pod positions")

    try:  # fail early, with the path, if Go's table or the trace is missing
        load_cooked()
        _load(args.nodes, args.pods, args.limit_nodes, args.limit_pods)
    except (OSError, ValueError) as exc:
        parser.error(f"{exc} (the trace is looked for in {openb.DATA}; TOPOPLACE_OPENB sets the folder)")
    work = [
        (
            p,
            s,
            args.nodes,
            args.pods,
            args.limit_nodes,
            args.limit_pods,
            not args.whole_inventory,
            not args.no_retry,
            tie_draws,
            span,
        )
        for p in args.policies.split(",")
        for s in parse_seeds(args.seeds)
    ]
    for policy in {w[0] for w in work}:
        try:  # unknown names fail before any work starts
            make_policy(policy, (), GoRand(0, (0,) * 607))
            if span:
                twin_of(policy)
        except ValueError as exc:
            parser.error(str(exc))
    started = time.perf_counter()
    results: list[RunResult] = []
    interrupted = False
    try:
        if args.jobs <= 1:
            for w in work:
                results.append(_job(w))
                _report(results[-1])
        else:
            # A fresh process per run: the caches one seed's run builds (node states, shapes, scores)
            # are no use to the next seed and made later runs 8-10 % slower (bench/RESULTS-replay.md).
            with multiprocessing.Pool(args.jobs, initializer=_ignore_sigint, maxtasksperchild=1) as pool:
                try:
                    pending = pool.imap_unordered(_job, work)
                    while len(results) < len(work):
                        try:  # a short wait keeps Ctrl-C prompt in the parent
                            results.append(pending.next(timeout=0.5))
                        except multiprocessing.TimeoutError:
                            continue
                        _report(results[-1])
                finally:
                    pool.terminate()  # workers ignore Ctrl-C; stop them rather than wait for their runs
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: results so far", file=sys.stderr)
    wall = time.perf_counter() - started
    order = {(w[0], w[1]): k for k, w in enumerate(work)}
    results.sort(key=lambda r: order[r.policy, r.seed])
    print(table(results, args.pods))
    print(f"wall time {wall:.0f} s for {len(results)} of {len(work)} runs")
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "nodes": args.nodes,
                    "pods": args.pods,
                    "limit_nodes": args.limit_nodes,
                    "limit_pods": args.limit_pods,
                    "retry": not args.no_retry,
                    "tie_draws": tie_draws,
                    "wall_seconds": round(wall, 1),
                    "complete": not interrupted and len(results) == len(work),
                    "runs": [asdict(r) for r in results],
                },
                indent=1,
            )
        )
    return 130 if interrupted else 0


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops the pool and prints what is done."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _report(r: RunResult) -> None:
    print(
        f"done {r.policy} seed {r.seed}: {r.headline}% at 130% ({r.failed} pods failed, {r.seconds} s)",
        file=sys.stderr,
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
