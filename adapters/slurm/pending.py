"""Pending jobs as the agent reads them from ``squeue``, and what they mean for the next plan.

Three questions, all about jobs that wait:

* :func:`held_plans` — which plans of pending jobs still hold their devices (the job will start on
  them soon), so the next submit is not planned onto the same GPUs;
* :func:`promised_nodes` — which nodes Slurm's backfill scheduler has promised to an earlier pending
  job (its ``SchedNodeList`` and expected start): a lower-priority job is started there only if it ends
  before that start, so a plan pinning a job there makes it wait although Slurm would have started
  it elsewhere (seen on the real Slurm: three jobs of one bench run pinned to nodes reserved for
  earlier gangs, all three started elsewhere without the hook);
* :func:`to_release` — which planned jobs Slurm expects to start only later: their plan no longer
  steers anything useful, so their node list is cleared and Slurm chooses (their switch-typed GRES
  stay, and with them GPU↔NIC alignment).

The lines are ``squeue -h -t PD -o "%i|%V|%r|%S|%Y|%D|%b|%l|%k"``: job id, submit time, pending
reason, expected start, scheduled nodes, node count, GRES a node (``TresPerNode``), time limit, comment
(last: a comment may hold anything, "|" included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import structlog

from adapters.slurm.hostlist import HostlistError, expand
from adapters.slurm.plancomment import PLAN_TAG, ParsedPlan, parse_plan_comment
from adapters.slurm.scontrol import SlurmNode

_log = structlog.get_logger("topoplace.slurm.pending")

SQUEUE_FORMAT = "%i|%V|%r|%S|%Y|%D|%b|%l|%k"
_FIELDS = SQUEUE_FORMAT.count("|") + 1
RELEASED_TAG = "topoplace/released"  # what a released plan's tag becomes in the comment
# Pending reasons that mean "cannot start now whatever is free": such a job's plan holds nothing.
NOT_ELIGIBLE = ("JobHeld", "Dependency", "BeginTime", "DependencyNeverSatisfied", "PartitionDown")


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    submitted: float | None  # epoch seconds; None: unreadable
    reason: str
    start: float | None  # Slurm's expected start (epoch), None: not computed yet ("N/A", "Unknown")
    sched_nodes: tuple[str, ...]  # backfill's planned nodes for it ("SchedNodeList")
    comment: str
    plan: ParsedPlan | None
    nodes: int = 1  # nodes asked (squeue's %D: the minimum while pending)
    tres_per_node: str = ""  # e.g. ``gres:gpu:8,gres:nic:8``; "" when none (``N/A``)
    time_limit_s: float = math.inf  # UNLIMITED or unreadable: inf

    @property
    def eligible(self) -> bool:
        return not self.reason.startswith(NOT_ELIGIBLE)

    @property
    def gpus_per_node(self) -> int | None:
        """GPUs a node when the job asks them untyped (``gres:gpu:N``): the request Slurm fills
        with a node's lowest free indices. None: no GPUs a node, a typed or unreadable ask."""
        counts = []
        for text in self.tres_per_node.split(","):
            name, _, rest = text.removeprefix("gres:").removeprefix("gres/").partition(":")
            if name == "gpu":
                if not rest.isdigit():
                    return None  # typed (gpu:sw0:2) or a count with a suffix: not guessed
                counts.append(int(rest))
        return sum(counts) or None


def _epoch(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def slurm_seconds(text: str) -> float:
    """A Slurm duration as squeue prints it (``[D-][[H:]M:]S``, or minutes alone) in seconds; inf for
    UNLIMITED, NOT_SET, INVALID or anything else unreadable (held for good: the safe side)."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if (days and not days.isdigit()) or not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return math.inf
    numbers = [int(p) for p in parts]
    if len(numbers) == 1:
        numbers = [numbers[0], 0]  # minutes alone, as Slurm reads a bare number
    seconds = sum(n * 60**i for i, n in enumerate(reversed(numbers)))
    return float(int(days or 0) * 86400 + seconds)


def parse_pending(text: str) -> list[PendingJob]:
    """Lines of :data:`SQUEUE_FORMAT`; a line that does not have its fields is skipped (logged)."""
    jobs = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split("|", _FIELDS - 1)
        if len(fields) != _FIELDS or not fields[0].strip():
            if line.strip():
                _log.warning("squeue line not understood", line=number, text=line[:200])
            continue
        job_id, submitted, reason, start, sched, count, tres, limit, comment = fields
        try:
            nodes = tuple(expand(sched)) if sched and sched not in ("(null)", "N/A") else ()
        except HostlistError:
            nodes = ()
        jobs.append(
            PendingJob(
                job_id=job_id.strip(),
                submitted=_epoch(submitted),
                reason=reason,
                start=_epoch(start),
                sched_nodes=nodes,
                comment=comment,
                plan=parse_plan_comment(comment),
                nodes=int(count) if count.strip().isdigit() else 1,
                tres_per_node="" if tres.strip() in ("N/A", "(null)") else tres.strip(),
                time_limit_s=slurm_seconds(limit),
            )
        )
    return jobs


def held_plans(jobs: list[PendingJob], nodes: list[SlurmNode], now: float, ttl_s: float) -> list[ParsedPlan]:
    """The plans of pending jobs that still reserve their devices: not older than ``ttl_s`` (a job
    that has not started by then will not start on its plan soon), eligible to run (not held, not
    waiting for a dependency or a begin time), and on nodes that still take jobs."""
    up = {n.name for n in nodes if n.schedulable}
    kept = []
    for job in jobs:
        if job.plan is None:
            continue
        age = now - job.submitted if job.submitted is not None else 0.0  # unreadable: keep (safe side)
        if age > ttl_s or not job.eligible or not set(job.plan.nodes) <= up:
            _log.info(
                "pending plan not reserved", plan_id=job.plan.plan_id, reason=job.reason, age_s=round(age)
            )
            continue
        kept.append(job.plan)
    return kept


def promised_nodes(jobs: list[PendingJob]) -> dict[str, float]:
    """Node → the earliest expected start of an eligible pending job that backfill will start there.
    Backfill keeps such a node for that job: a later job may use it only if it ends before then."""
    promised: dict[str, float] = {}
    for job in jobs:
        if not job.eligible or job.start is None:
            continue
        for node in job.sched_nodes:
            promised[node] = min(job.start, promised.get(node, job.start))
    return promised


# Slurm's default bf_resolution (seconds): backfill rounds the times of its plan to this grid.
BACKFILL_RESOLUTION_S = 60.0


def backfill_resolution_s(show_config: str) -> float:
    """``bf_resolution`` from ``scontrol show config`` (its ``SchedulerParameters`` line), or Slurm's
    default when it is not set there."""
    for line in show_config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SchedulerParameters":
            for item in value.strip().split(","):
                name, _, number = item.partition("=")
                if name.strip() == "bf_resolution" and number.strip().isdigit():
                    return float(number)
    return BACKFILL_RESOLUTION_S


def promised_before(promised: dict[str, float], ends: float, resolution_s: float) -> set[str]:
    """The nodes of ``promised`` a job ending at ``ends`` (epoch) would keep from the earlier job
    promised there. Backfill rounds the promised start down to its resolution and tests whole
    steps of it, so a job ending within one step before the promise still collides. Seen on the real
    Slurm (64 nodes, seed 2, session 17): a 60-minute job pinned while a gang waited for nodes due
    free in an hour did not start in the next backfill passes, was released, and its switch-typed
    GRES then fitted nowhere; without the hook it started at once."""
    return {node for node, start in promised.items() if start < ends + resolution_s}


def awaiting_backfill(jobs: list[PendingJob], now: float, window_s: float) -> list[str]:
    """Eligible pending jobs submitted in the last ``window_s`` seconds that Slurm has given no start
    estimate yet (``StartTime`` N/A or Unknown): backfill has not reserved their nodes yet, and a
    later job pinned to one node now may find that node reserved for one of them at the next pass,
    where Slurm alone would have started it on another node (seen on the real Slurm: bench seed 1).

    A job pinned to one node by a live plan does not count: backfill can only place it on that node,
    whose devices its plan already holds. On the bench every job waits for backfill's next pass (up
    to 1 s), so such a job was nearly always one of ours about to start there: it unpinned 19 of 108
    answers (real Slurm, seed 3, session 13), and one unpinned 4-GPU job, placed by Slurm on the only
    empty node the agent did not know it had taken, cost the 8-GPU job planned there next its start."""
    return [
        job.job_id
        for job in jobs
        if job.eligible
        and job.start is None
        and job.submitted is not None
        and now - job.submitted <= window_s
        and (job.plan is None or len(job.plan.nodes) > 1)
    ]


def _free_gpus(node: SlurmNode) -> int:
    total = sum(g.count for g in node.gres if g.name == "gpu")
    return total - sum(g.count for g in node.gres_used if g.name == "gpu")


# A job seen pending in squeue may have started before scontrol's node read: its own GPUs then look
# "taken". Only a job pending longer than this is judged filled out of its plan.
FILLED_AFTER_S = 10.0


def stale_reason(job: PendingJob, nodes: dict[str, SlurmNode], now: float) -> str | None:
    """Why a pending job's plan can no longer come true where it is pinned, or None: a planned node
    left (drained, down, gone from Slurm), or — for an eligible job — a planned node now has fewer
    free GPUs than the plan puts there (others filled it while the job waited or was held). Held
    jobs are only checked for nodes that left: what is free when they are released is not known yet."""
    if job.plan is None:
        return None
    for name, (gpus, _nics) in sorted(job.plan.nodes.items()):
        node = nodes.get(name)
        if node is None or not node.schedulable:
            return f"planned node {name} is {'/'.join(node.state).lower() if node else 'gone'}"
        waited = now - job.submitted if job.submitted is not None else 0.0
        if job.eligible and waited > FILLED_AFTER_S and _free_gpus(node) < len(gpus):
            return f"planned node {name} has {_free_gpus(node)} free GPUs, the plan needs {len(gpus)}"
    return None


def to_release(
    jobs: list[PendingJob], now: float, after_s: float, nodes: list[SlurmNode] | None = None
) -> list[tuple[PendingJob, str]]:
    """Planned pending jobs whose pin no longer helps, with the reason: eligible ones Slurm expects to
    start more than ``after_s`` from now (the planned nodes are busy or promised to earlier jobs, and
    without the pin Slurm might start them elsewhere sooner), and — given ``nodes`` — any whose plan
    went stale (:func:`stale_reason`): those at once, without waiting for Slurm's start estimate, so a
    job held or waiting on a dependency is not released onto a drained node or a full one. Eligible
    jobs whose start Slurm has not computed yet and that are not stale are left alone."""
    by_name = {n.name: n for n in nodes or []}
    out = []
    for job in jobs:
        if job.plan is None:
            continue
        stale = stale_reason(job, by_name, now) if nodes is not None else None
        if stale is not None:
            out.append((job, stale))
        elif job.eligible and job.start is not None and job.start - now > after_s:
            out.append((job, f"Slurm expects it to start in {round(job.start - now)} s"))
    return out


def released_comment(comment: str) -> str:
    """The comment with its (last) plan tag renamed: the plan no longer holds devices (held_plans)
    and the TaskProlog no longer compares the allocation with it; its id stays for the logs."""
    at = comment.rindex(PLAN_TAG)
    return comment[:at] + RELEASED_TAG + comment[at + len(PLAN_TAG) :]


def replanned_comment(comment: str, tag: str) -> str:
    """The comment with its (last) plan tag and what follows it replaced by ``tag`` (a new plan's
    :meth:`SlurmPlan.comment`): the user's own words before it stay."""
    at = comment.rfind(PLAN_TAG)
    return tag if at < 0 else comment[:at] + tag
