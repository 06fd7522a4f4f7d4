"""Answering one cell of a what-if — one world (a variant), one policy, one seed — for a batch or a
trace.

A batch is placed in one call. A trace is replayed event by event: at each time something happens
(jobs arrive, running jobs end, running work of the base inventory departs) the queue of waiting jobs
is offered to the policy, whatever it places starts there and then and holds its devices until its
duration has passed. Nothing else changes between events, so nothing else needs to be asked.

Everything returned is checked: the solver verifies itself, and a baseline's answer goes through the
same independent verifier before it is believed. A run cut short (Ctrl-C, the caller's deadline)
raises :class:`Stopped` carrying what was computed so far, marked incomplete.
"""

from __future__ import annotations

import fnmatch
import heapq
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from solver.answer.verify import verify
from solver.domain.errors import VerificationFailed
from solver.domain.model import (
    Inventory,
    Job,
    JobResult,
    Node,
    Reason,
    ReasonCode,
    SolveRequest,
    SolveResult,
    SolveStatus,
)
from solver.search.sequence import held_allocations
from solver.whatif import metrics
from solver.whatif.policies import PlaceFn, placer
from solver.whatif.report import ClassWait, JobOutcome, Outcome, Sample, Summary
from solver.whatif.scenario import PolicySpec, TraceEntry
from solver.whatif.world import World, unfit_jobs

StopFn = Callable[[], bool]
ProgressFn = Callable[[int], None]


class Stopped(Exception):
    """The run was cut short; ``outcome`` is what was computed (``complete`` false), if anything."""

    def __init__(self, outcome: Outcome | None = None) -> None:
        super().__init__("stopped")
        self.outcome = outcome


def never() -> bool:
    return False


def job_class(job: Job) -> str:
    """The class a wait time is reported under when the trace names none: gangs vs single members by
    GPU count, the split operators ask about."""
    members = sum(r.replicas for r in job.roles)
    if members > 1:
        return "gang"
    gpus = job.roles[0].member.gpus
    return f"{gpus}-gpu" if gpus else "share" if job.roles[0].member.gpu_share else "cpu"


def job_gpus(result: JobResult) -> int:
    return sum(len(m.gpus) for m in result.members)


# --------------------------------------------------------------------------- placing


@dataclass
class Placed:
    """One policy call's answer, with what it cost."""

    result: SolveResult
    ms: float
    unfit: dict[str, str]  # job id → why no node could ever hold it (answered without the policy)


def place_checked(
    place: PlaceFn, spec: PolicySpec, inventory: Inventory, jobs: Sequence[Job], rid: str
) -> Placed:
    """Offer ``jobs`` to the policy; jobs no node could hold are answered here (see
    :func:`solver.whatif.world.unfit_jobs`), and a baseline's plan is verified like the solver's."""
    unfit_idx = unfit_jobs(SolveRequest(inventory=inventory, jobs=tuple(jobs)))
    unfit = {jobs[i].id: why for i, why in unfit_idx.items()}
    request = SolveRequest(
        request_id=rid, inventory=inventory, jobs=tuple(j for i, j in enumerate(jobs) if i not in unfit_idx)
    )
    started = time.perf_counter()
    result = place(request) if request.jobs else SolveResult(status=SolveStatus.OPTIMAL)
    ms = (time.perf_counter() - started) * 1000
    if spec.solver is None and request.jobs:
        violations = verify(request, result)
        if violations:
            raise VerificationFailed(tuple(f"baseline {spec.baseline}: {v}" for v in violations))
    return Placed(result=result, ms=ms, unfit=unfit)


def unfit_reason(message: str) -> Reason:
    return Reason(code=ReasonCode.NO_NODE_FITS, message=message, relaxation="")


def misaligned(job: Job, result: JobResult, nodes: dict[str, Node]) -> int:
    shapes = {r.name: r.member for r in job.roles}
    return sum(metrics.misaligned_pairs(nodes[m.node], shapes[m.role], m) for m in result.members)


class Cluster:
    """The inventory during a replay: nodes by name (inventory order kept), allocations added and
    released as jobs start and end."""

    def __init__(self, inventory: Inventory) -> None:
        self.nodes: dict[str, Node] = {n.name: n for n in inventory.nodes}
        self.switches = inventory.switches
        self.where: dict[str, set[str]] = defaultdict(set)  # owner → nodes it holds something on

    def inventory(self) -> Inventory:
        return Inventory.model_construct(nodes=tuple(self.nodes.values()), switches=self.switches)

    def hold(self, job: Job, result: JobResult) -> None:
        for name, allocs in held_allocations(job, result).items():
            node = self.nodes[name]
            self.nodes[name] = node.model_copy(update={"allocations": (*node.allocations, *allocs)})
            self.where[job.id].add(name)

    def release(self, owner: str) -> None:
        for name in sorted(self.where.pop(owner, ())):
            node = self.nodes[name]
            keep = tuple(a for a in node.allocations if a.owner != owner)
            self.nodes[name] = node.model_copy(update={"allocations": keep})

    def release_matching(self, pattern: str) -> int:
        """Release base-inventory work whose owner matches a glob; how many allocations went."""
        gone = 0
        for name, node in self.nodes.items():
            keep = tuple(a for a in node.allocations if not fnmatch.fnmatchcase(a.owner, pattern))
            if len(keep) != len(node.allocations):
                gone += len(node.allocations) - len(keep)
                self.nodes[name] = node.model_copy(update={"allocations": keep})
        return gone


# --------------------------------------------------------------------------- a batch


def evaluate_batch(world: World, variant: str, spec: PolicySpec, seed: int) -> Outcome:
    """Place the batch once; measure before and after."""
    place = placer(spec, seed)
    jobs = world.jobs
    shapes = metrics.workload(jobs)
    placed = place_checked(place, spec, world.inventory, jobs, f"{variant}/{spec.name}")
    by_id = {jr.job_id: jr for jr in placed.result.jobs}
    cluster = Cluster(world.inventory)
    outcomes = []
    for job in jobs:
        jr = by_id.get(job.id)
        if jr is None or not jr.placed:
            why = unfit_reason(placed.unfit[job.id]) if job.id in placed.unfit else jr.reason if jr else None
            outcomes.append(JobOutcome(job_id=job.id, placed=False, reason=why, job_class=job_class(job)))
            continue
        cluster.hold(job, jr)
        outcomes.append(_placed_outcome(job, jr, world.inventory, 0.0))
    after = cluster.inventory()
    before_use, after_use = metrics.usage(world.inventory, shapes), metrics.usage(after, shapes)
    summary = Summary(
        jobs_total=len(jobs),
        jobs_placed=sum(o.placed for o in outcomes),
        gpus_total=before_use.gpus_total,
        gpus_used_before=before_use.gpus_used,
        gpus_used_after=after_use.gpus_used,
        stranded_gpus_before=before_use.stranded,
        stranded_gpus_after=after_use.stranded,
        fragmentation_before=before_use.fragmentation,
        fragmentation_after=after_use.fragmentation,
        locality_tiers=metrics.tier_counts([o.locality_tier for o in outcomes if o.placed]),
        misaligned_pairs=sum(o.misaligned_pairs for o in outcomes),
        solves=1,
        solve_ms_total=round(placed.ms, 3),
        solve_ms_max=round(placed.ms, 3),
        worst_status=placed.result.status,
    )
    return Outcome(
        variant=variant,
        policy=spec.name,
        seed=seed,
        summary=summary,
        jobs=tuple(outcomes),
        before=metrics.node_use(world.inventory),
        after=metrics.node_use(after),
    )


def _placed_outcome(job: Job, jr: JobResult, inventory: Inventory | dict[str, Node], t: float) -> JobOutcome:
    nodes = inventory if isinstance(inventory, dict) else {n.name: n for n in inventory.nodes}
    return JobOutcome(
        job_id=job.id,
        placed=True,
        job_class=job_class(job),
        gpus=job_gpus(jr),
        locality_tier=jr.locality_tier,
        leaves_spanned=jr.leaves_spanned,
        misaligned_pairs=misaligned(job, jr, nodes),
        arrival_s=t,
        start_s=t,
    )


# --------------------------------------------------------------------------- a trace


@dataclass
class _Replay:
    """Everything a replay accumulates, so an interrupted one can still be reported."""

    entries: tuple[TraceEntry, ...]
    cluster: Cluster
    shapes: dict[metrics.Shape, float]
    queue: list[int] = field(default_factory=list)  # entry indexes waiting, in arrival order
    started: dict[int, JobOutcome] = field(default_factory=dict)
    last_reason: dict[int, Reason] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    solves: int = 0
    ms: list[float] = field(default_factory=list)
    worst: SolveStatus = SolveStatus.UNSPECIFIED
    arrived: set[int] = field(default_factory=set)
    now: float = 0.0


def replay_trace(
    world: World,
    variant: str,
    spec: PolicySpec,
    seed: int,
    *,
    progress: ProgressFn | None = None,
    should_stop: StopFn = never,
) -> Outcome:
    """Replay the trace under one policy (see the module docstring); Ctrl-C or ``should_stop``
    raises :class:`Stopped` with the outcome so far."""
    assert world.trace is not None
    trace = world.trace
    place = placer(spec, seed)
    state = _Replay(
        entries=trace.entries, cluster=Cluster(world.inventory), shapes=metrics.workload(world.all_jobs)
    )
    before = metrics.node_use(world.inventory)
    arrivals = sorted(range(len(trace.entries)), key=lambda i: (trace.entries[i].arrival_s, i))
    departures = sorted(trace.departures, key=lambda d: (d.at_s, d.owner))
    ends: list[tuple[float, int]] = []  # (end time, entry index) of running jobs
    a = d = 0
    try:
        while True:
            upcoming = [
                *([trace.entries[arrivals[a]].arrival_s] if a < len(arrivals) else []),
                *([departures[d].at_s] if d < len(departures) else []),
                *([ends[0][0]] if ends else []),
            ]
            if not upcoming or (trace.horizon_s and min(upcoming) > trace.horizon_s):
                break
            if should_stop():
                raise KeyboardInterrupt
            t = state.now = min(upcoming)
            events = 0
            while ends and ends[0][0] <= t:
                _, i = heapq.heappop(ends)
                state.cluster.release(state.entries[i].job.id)
                state.started[i] = state.started[i].model_copy(update={"end_s": t})
                events += 1
            while d < len(departures) and departures[d].at_s <= t:
                state.cluster.release_matching(departures[d].owner)
                d += 1
                events += 1
            while a < len(arrivals) and trace.entries[arrivals[a]].arrival_s <= t:
                state.queue.append(arrivals[a])
                state.arrived.add(arrivals[a])
                a += 1
                events += 1
            if state.queue:
                for i in _cycle(state, place, spec, f"{variant}/{spec.name}@{t:g}"):
                    if trace.entries[i].duration_s > 0:
                        heapq.heappush(ends, (t + trace.entries[i].duration_s, i))
            _sample(state, t)
            if progress is not None:
                progress(events)
    except KeyboardInterrupt:
        raise Stopped(_trace_outcome(state, variant, spec, seed, before, complete=False)) from None
    return _trace_outcome(state, variant, spec, seed, before, complete=True)


def _cycle(state: _Replay, place: PlaceFn, spec: PolicySpec, rid: str) -> list[int]:
    """Offer the queue to the policy; start what it places. Returns the entries started."""
    jobs = [state.entries[i].job for i in state.queue]
    inventory = state.cluster.inventory()
    placed = place_checked(place, spec, inventory, jobs, rid)
    state.solves += 1
    state.ms.append(placed.ms)
    state.worst = max(state.worst, placed.result.status)
    by_id = {jr.job_id: jr for jr in placed.result.jobs}
    nodes = dict(state.cluster.nodes)
    started = []
    for i in state.queue:
        entry = state.entries[i]
        jr = by_id.get(entry.job.id)
        if jr is not None and jr.placed:
            outcome = _placed_outcome(entry.job, jr, nodes, state.now)
            state.started[i] = outcome.model_copy(
                update={"arrival_s": entry.arrival_s, "job_class": entry.job_class or outcome.job_class}
            )
            state.cluster.hold(entry.job, jr)
            started.append(i)
        elif entry.job.id in placed.unfit:
            state.last_reason[i] = unfit_reason(placed.unfit[entry.job.id])
        elif jr is not None and jr.reason is not None:
            state.last_reason[i] = jr.reason
    state.queue = [i for i in state.queue if i not in state.started]
    return started


def _sample(state: _Replay, t: float) -> None:
    use = metrics.usage(state.cluster.inventory(), state.shapes)
    running = sum(1 for o in state.started.values() if o.end_s is None)
    state.samples.append(
        Sample(
            t_s=t,
            gpus_used=use.gpus_used,
            gpus_total=use.gpus_total,
            queue_length=len(state.queue),
            running_jobs=running,
            fragmentation=use.fragmentation,
            stranded_gpus=use.stranded,
        )
    )


def _trace_outcome(
    state: _Replay, variant: str, spec: PolicySpec, seed: int, before: tuple, *, complete: bool
) -> Outcome:
    jobs = []
    for i, entry in enumerate(state.entries):
        if i in state.started:
            jobs.append(state.started[i])
        else:
            jobs.append(
                JobOutcome(
                    job_id=entry.job.id,
                    placed=False,
                    reason=state.last_reason.get(i),
                    job_class=entry.job_class or job_class(entry.job),
                    arrival_s=entry.arrival_s,
                )
            )
    samples = tuple(state.samples)
    first = samples[0] if samples else None
    last = samples[-1] if samples else None
    end_use = metrics.usage(state.cluster.inventory(), state.shapes)
    summary = Summary(
        jobs_total=len(state.entries),
        jobs_placed=len(state.started),
        gpus_total=end_use.gpus_total,
        gpus_used_before=first.gpus_used if first else 0,
        gpus_used_after=end_use.gpus_used,
        stranded_gpus_before=first.stranded_gpus if first else 0.0,
        stranded_gpus_after=end_use.stranded,
        fragmentation_before=first.fragmentation if first else 0.0,
        fragmentation_after=end_use.fragmentation,
        locality_tiers=metrics.tier_counts([o.locality_tier for o in state.started.values()]),
        misaligned_pairs=sum(o.misaligned_pairs for o in state.started.values()),
        solves=state.solves,
        solve_ms_total=round(sum(state.ms), 3),
        solve_ms_max=round(max(state.ms, default=0.0), 3),
        worst_status=state.worst,
        mean_utilisation=round(mean_utilisation(samples), 6),
        end_s=last.t_s if last else 0.0,
    )
    return Outcome(
        variant=variant,
        policy=spec.name,
        seed=seed,
        complete=complete,
        summary=summary,
        jobs=tuple(jobs),
        timeline=samples,
        waits=class_waits(jobs),
        before=before,
        after=metrics.node_use(state.cluster.inventory()),
    )


def mean_utilisation(samples: Sequence[Sample]) -> float:
    """Time-weighted: each sample holds until the next one."""
    if not samples:
        return 0.0
    if len(samples) == 1 or samples[-1].t_s == samples[0].t_s:
        return samples[-1].utilisation
    span = samples[-1].t_s - samples[0].t_s
    return sum(s.utilisation * (n.t_s - s.t_s) for s, n in pairwise(samples)) / span


def class_waits(jobs: Sequence[JobOutcome]) -> tuple[ClassWait, ...]:
    """Wait from arrival to start per job class; jobs never started count in ``jobs`` only."""
    by_class: dict[str, list[JobOutcome]] = defaultdict(list)
    for j in jobs:
        by_class[j.job_class].append(j)
    out = []
    for name in sorted(by_class):
        waits = sorted(j.start_s - j.arrival_s for j in by_class[name] if j.start_s is not None)
        out.append(
            ClassWait(
                job_class=name,
                jobs=len(by_class[name]),
                started=len(waits),
                mean_wait_s=round(sum(waits) / len(waits), 6) if waits else 0.0,
                p95_wait_s=round(percentile(waits, 0.95), 6),
                max_wait_s=round(max(waits, default=0.0), 6),
            )
        )
    return tuple(out)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(0, min(len(sorted_values) - 1, round(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]
