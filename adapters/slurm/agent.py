"""``topoplace slurm agent``: the warm half of the submit hook.

``job_submit.lua`` runs inside slurmctld, serialised across every submit, and must answer in tens of
milliseconds; a Python process that imports pydantic and gRPC takes ~400 ms just to start. So the
hook runs a stdlib-only client (:mod:`adapters.slurm.place_client`, ~30 ms) that posts the job to this
agent, which keeps the parsed site files in memory, reads live node state from ``scontrol``, asks the
topoplace gRPC service for a verified placement, and answers with the fields to set.

It also remembers the plans it handed out: a job planned a moment ago is not running yet, so its
devices are not in ``GresUsed``; plans found in pending jobs' comments (and plans issued in the last
``grace_s`` seconds, before their job is even queued) count as allocated for the next submit — but
not stale ones (:mod:`adapters.slurm.pending`: older than ``plan_ttl_s``, held or waiting for a
dependency or a begin time, or on nodes that no longer take jobs). Nodes Slurm's backfill has promised
to an earlier pending job are not planned on, and a planned job Slurm will not start soon is released
to Slurm's own choice of nodes (same module).

Answers (JSON): ``{"action": "apply", "set": {field: value}, "message": …}``, ``"pass"`` (leave the
job as submitted: not a GPU job, unsupported, no room now, or not enforceable), ``"never_fits"``
(the job cannot fit even on an empty cluster) or ``"error"`` (the service failed; the hook applies
its fail-open/closed setting).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import socket
import socketserver
import stat
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import structlog

from adapters.connections import QuietClients
from adapters.slurm.candidates import (
    Ask,
    NodeIndex,
    candidate_nodes,
    empty_candidates,
    hosts_at_most,
    room_for_members,
)
from adapters.slurm.fastplan import FAST_PLACER_S, fast_place
from adapters.slurm.fastwire import SolveCall
from adapters.slurm.gres import GresConf, parse_gres_conf
from adapters.slurm.inventory import (
    NodeCache,
    SlurmInventory,
    build_inventory,
    read_text,
    with_reservations,
)
from adapters.slurm.jobdesc import JobSpec, Unsupported, job_from_description, untyped_model_request
from adapters.slurm.later import (
    NodeViews,
    claims_ahead,
    gpus_by_type,
    later_comment,
    later_signature,
    untyped_ahead,
    waiting_demand,
)
from adapters.slurm.nodetypes import TopoDir
from adapters.slurm.pending import (
    BACKFILL_RESOLUTION_S,
    SQUEUE_FORMAT,
    PendingJob,
    awaiting_backfill,
    backfill_resolution_s,
    held_plans,
    parse_pending,
    promised_before,
    promised_nodes,
    released_comment,
    replanned_comment,
    slurm_seconds,
    to_release,
)
from adapters.slurm.place_client import peer_uid
from adapters.slurm.place_client import render as render_lines
from adapters.slurm.plan import NotEnforceable, ParsedPlan, Signature, SlurmPlan, to_slurm_plan, tres_per_node
from adapters.slurm.running import SQUEUE_RUNNING, RunningJobs, parse_running
from adapters.slurm.scontrol import SlurmNode, parse_show_node, split_fields
from adapters.slurm.topology_conf import SlurmTopology, parse_topology_conf, parse_topology_yaml
from solver.answer.verify import verify
from solver.domain.cancel import Cancel, Cancelled, cancelling
from solver.domain.errors import InvalidRequest
from solver.domain.model import (
    Allocation,
    Inventory,
    JobResult,
    Policy,
    Requirement,
    SolveRequest,
    SolveResult,
)
from solver.service.client import RemoteError

_log = structlog.get_logger("topoplace.slurm.agent")
MAX_BODY_BYTES = 1 << 20
KEPT_IDLE_S = 300.0  # a hook's connection idle this long is closed (it opens another when it asks)


@dataclass
class AgentConfig:
    solver: str  # host:port of the topoplace gRPC service
    topo_dir: Path
    gres_conf: Path | None = None
    topology: Path | None = None
    scontrol: str = "scontrol"
    squeue: str = "squeue"
    time_limit_s: float = 1.0
    alignment: Requirement = Requirement.PREFERRED
    refresh_s: float = 0.5  # how often node state is read from scontrol
    grace_s: float = 1.0  # a plan is reserved until a snapshot this much newer shows its job
    stale_s: float = 30.0  # older node state is not planned on (the answer is "error")
    plan_ttl_s: float = 120.0  # a pending job's plan older than this no longer holds its devices
    # A planned job Slurm expects to start later than this from now has its node list cleared (Slurm
    # chooses; the switch-typed GRES stay). 0 turns releasing off.
    release_after_s: float = 30.0
    command_timeout_s: float = 5.0
    # The agent answers within this many seconds of a request's arrival (slurmctld waits for the hook
    # with every other RPC blocked). A solve still running then is answered with the fast placer's
    # verified plan (adapters.slurm.fastplan); the solver's plan replaces it through `scontrol
    # update` if it arrives while the job still waits (Agent.refine). 0: always wait for the solver.
    answer_budget_s: float = 0.030
    # A one-node job is not pinned to its planned node (it keeps the plan's switch-typed GRES, and
    # Slurm chooses the node) while an earlier eligible job, submitted less than this many seconds
    # ago or passed to Slurm's queue since the last read, has no backfill reservation yet: backfill
    # may reserve the pinned node for it, and a pending job cannot be re-typed (pending.py). 0: off,
    # the default since session 18: every job the hook started fewer than typed GRES alone on the
    # real-Slurm bench (64 nodes, seeds 1-3) was such a job, its types split over switches
    # (`gpu:sw0:1,gpu:sw2:1`) fitting no node Slurm chose (off: 892 and 895 GPUs' worth of jobs
    # started in two runs, on: 862; bench/RESULTS-slurm.md); nodes backfill has promised are closed
    # to a plan anyway (`promised_before`), and a pinned job Slurm will not start soon is planned
    # again or released (`release_after_s`).
    unpin_window_s: float = 0.0
    # A pending planned job about to be released (its plan went stale, or Slurm will not start it soon
    # there) is first planned again on nodes where its GRES types are free (Agent._replan).
    replan: bool = True
    # A one-node job with a NIC per GPU and no room now is typed for a later start on a node Slurm
    # chooses (adapters.slurm.later): each GPU behind its NIC's switch. On by default since session
    # 28 chose the groups that free soonest: on the churn bench (64 nodes, seeds 1-3) 32 of 2,041
    # pairs off-switch against 234 of 2,065 untyped, for 936 jobs started in the window against 940
    # (bench/RESULTS-slurm.md). False: such a job goes to Slurm's queue untyped.
    later_types: bool = True
    # With later_types: a gang (several nodes, a NIC per GPU) is typed for a later start too.
    later_gangs: bool = False
    debug_dir: Path | None = None  # when set, every solve request is written there (for bug reports)


@dataclass(frozen=True)
class _Snapshot:
    nodes: list[SlurmNode]
    pending: list[ParsedPlan]
    taken: float
    promised: dict[str, float] = field(default_factory=dict)  # node → earliest promised start (epoch)
    # The inventory of this read with the pending plans held, built here in the refresh thread so a
    # submit only adds the plans issued since (a few nodes); or why it could not be built.
    inventory: SlurmInventory | None = None
    error: InvalidRequest | None = None
    models: tuple[str, ...] = ()  # GPU models present
    features: frozenset[str] = frozenset()
    awaiting: tuple[str, ...] = ()  # eligible pending jobs backfill has not given a start yet
    waiting: Counter[str] = field(default_factory=Counter)  # GPUs per GRES type of later-typed jobs
    # Node → GPU GRES index → when the running job holding it ends (read only with later_types).
    ends: dict[str, dict[int, float]] | None = None
    # Node → GPU GRES index → when the untyped job queued ahead that will take it ends (later.py).
    claims: dict[str, dict[int, float]] = field(default_factory=dict)
    # The inventory's nodes grouped alike, for choosing a submit's candidate nodes (candidates.py).
    index: NodeIndex | None = None


@dataclass
class _Issued:
    at: float
    nodes: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]


InFlight = Future[SolveResult] | SolveCall  # a solve call the agent did not wait for


@dataclass
class _Refining:
    """A job answered with the fast placer's plan while the solver still works on it."""

    plan: SlurmPlan  # what the hook applied
    spec: JobSpec
    inventory: SlurmInventory  # the one the solve was asked on (device maps, free devices)
    solve: InFlight
    at: float  # time.monotonic() of the answer


# The share of the answer budget the solver has alone; after it the fast placer's plan is made while
# the solver goes on (most solves at 1,024 nodes answer in 10-20 ms of the 30).
FAST_HEAD_START = 0.5
# How often the agent's refresh loop runs a full garbage collection over what it has frozen.
GC_FULL_S = 600.0
MAX_REPLANS = 3  # per job: a job re-planned this often goes to Slurm's choice (no churn)
# A job just planned again is left alone this long: Slurm's start estimate (squeue) is the old one until
# backfill's next pass, and judged on it the new plan was released again at the next read (real Slurm).
REPLAN_SETTLE_S = 30.0


def typed_signature(tres_per_node: str) -> tuple[tuple[str, str, int], ...] | None:
    """``gres:gpu:sw2:2,gres:nic:sw2:2`` (a job's ``TresPerNode``) → its GRES signature, as
    :mod:`adapters.slurm.plan` makes them; None when a GPU or NIC item has no type (not ours)."""
    items = []
    for item in filter(None, tres_per_node.split(",")):
        parts = item.removeprefix("gres:").removeprefix("gres/").split(":")
        if parts[0] not in ("gpu", "nic"):
            continue
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        items.append((parts[0], parts[1], int(parts[2])))
    return tuple(sorted(items)) or None


def untyped_tres(signature: tuple[tuple[str, str, int], ...]) -> str:
    """The signature's counts per GRES name, untyped (``gres:gpu:4,gres:nic:4``): the job to plan."""
    totals: Counter[str] = Counter()
    for name, _gtype, count in signature:
        totals[name] += count
    return ",".join(f"gres:{name}:{totals[name]}" for name in ("gpu", "nic") if totals[name])


def only_types(inventory: SlurmInventory, types: set[str], plan_id: str) -> SlurmInventory:
    """``inventory`` in which only devices of GRES ``types`` are free (the others marked held) and the
    reservation of plan ``plan_id`` itself is gone: what a job holding those types can be given."""
    nodes = []
    for node in inventory.inventory.nodes:
        device_map = inventory.device_maps.get(node.name)
        kept = tuple(a for a in node.allocations if not a.owner.endswith(plan_id))
        if device_map is not None:
            held = {d for a in kept for d in (*a.gpus, *a.nics)}
            other = Allocation(
                owner="other-gres-types",
                gpus=tuple(
                    g.id for g in node.gpus if device_map.type_of.get(g.id) not in types and g.id not in held
                ),
                nics=tuple(
                    n.name
                    for n in node.nics
                    if device_map.type_of.get(n.name) not in types and n.name not in held
                ),
            )
            if other.gpus or other.nics:
                kept += (other,)
        nodes.append(node.model_copy(update={"allocations": kept}))
    return SlurmInventory(
        inventory=inventory.inventory.model_copy(update={"nodes": tuple(nodes)}),
        device_maps=inventory.device_maps,
        node_types=inventory.node_types,
    )


# A fast plan whose job is not seen pending this long after the answer is taken as started (or gone).
REFINE_FIND_S = 3.0


class _Files:
    """Site files parsed once per change of their mtime."""

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[int, Any]] = {}

    def get(self, path: Path, parse: Any) -> Any:
        mtime = path.stat().st_mtime_ns
        hit = self._cache.get(path)
        if hit is None or hit[0] != mtime:
            hit = (mtime, parse(read_text(path), str(path)))
            self._cache[path] = hit
        return hit[1]


@dataclass
class Agent:
    config: AgentConfig
    solve_fn: Any = None  # (request, timeout_s) -> SolveResult; default: the gRPC service
    _issued: dict[str, _Issued] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _files: _Files = field(default_factory=_Files)
    _snapshot: _Snapshot | None = None
    _type_keys: dict[str, str] = field(default_factory=dict)
    _type_keys_of: object = None  # the node_types mapping _type_keys was made from
    _never_fits_cache: dict[tuple[str, int, str, bool], bool] = field(default_factory=dict)  # by job shape
    _models: tuple[str, ...] = ()  # GPU models of the last inventory
    decisions: dict[str, tuple[SolveResult, SlurmPlan]] = field(default_factory=dict)  # by plan id
    # Where the last answer's time went (ms per stage: inventory, solve, never_fits …), for the log
    # and the bench: the hook's budget is tens of ms, so the split says what to make cheaper.
    _stages: dict[str, float] = field(default_factory=dict)
    _node_cache: NodeCache = field(default_factory=NodeCache)
    _topo: tuple[int, TopoDir] | None = None
    _refresh_lock: threading.Lock = field(default_factory=threading.Lock)
    _solves: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=2, thread_name_prefix="topoplace-solve")
    )
    _refining: dict[str, _Refining] = field(default_factory=dict)  # plan id → fast plan being refined
    _started: float = 0.0  # time.perf_counter() at the current request's arrival
    _ahead: tuple[str, Signature | None] | None = None  # the current job's later-start type, chosen early
    _passed_at: float = -1e18  # time.monotonic() of the last job passed to Slurm's queue unplanned
    # Later-typed answers (plan id → when, GPUs per type) not yet in a snapshot's pending comments.
    _later: dict[str, tuple[float, Counter[str]]] = field(default_factory=dict)
    _running: RunningJobs = field(default_factory=RunningJobs)  # read only with later_types
    _views: NodeViews = field(default_factory=NodeViews)  # later_types: each node's free times, kept
    refinements: list[dict[str, Any]] = field(default_factory=list)  # what became of each fast plan
    replans: list[dict[str, Any]] = field(default_factory=list)  # each re-plan tried (Agent._replan)
    _replans: Counter[str] = field(default_factory=Counter)  # by job id
    _replanned_at: dict[str, float] = field(default_factory=dict)  # job id → time.monotonic()
    _following: Future[None] | None = None  # the current read's follow-up (Agent._follow_up)
    _handling: set[str] = field(default_factory=set)  # job ids it re-plans or releases
    _resolution_s: float | None = None  # Slurm's bf_resolution, read once (Agent._backfill_resolution)

    # ----------------------------------------------------------------- inputs

    def _run(self, argv: list[str]) -> str:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=self.config.command_timeout_s, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()[:300]}")
        return done.stdout

    def _read_resolution(self) -> None:
        """Slurm's backfill time resolution, read from ``scontrol show config`` once, on the refresh
        thread (never from a submit: slurmctld holds its locks while the hook runs); Slurm's default
        if it cannot be read. slurmctld reads SchedulerParameters only at start and reconfigure."""
        if self._resolution_s is None:
            try:
                self._resolution_s = backfill_resolution_s(
                    self._run([self.config.scontrol, "show", "config"])
                )
            except (RuntimeError, OSError, subprocess.SubprocessError) as err:
                _log.warning("bf_resolution not read; Slurm's default assumed", error=str(err)[:300])
                self._resolution_s = BACKFILL_RESOLUTION_S

    def _fabric(self) -> SlurmTopology | None:
        path = self.config.topology
        if path is None:
            return None
        parse = parse_topology_yaml if path.suffix in (".yaml", ".yml") else parse_topology_conf
        return self._files.get(path, parse)

    def _gres_conf(self) -> GresConf | None:
        path = self.config.gres_conf
        return self._files.get(path, parse_gres_conf) if path else None

    def refresh(self) -> None:
        """Read node state and pending plans from Slurm now (the background loop calls this).

        Never called while a submit waits: slurmctld holds its node write lock during job_submit,
        so an ``scontrol show node`` issued from the hook's path would wait for the hook itself.
        """
        # The snapshot is as old as its first read: a plan issued after that moment may be in
        # neither read, so it stays reserved until a snapshot *started* grace_s after it.
        self._read_resolution()
        taken = time.monotonic()
        # Pending jobs before nodes: a planned job that starts between the two reads is then seen
        # pending, or holding its devices, or both — never neither (which would free its devices
        # for the next plan, and leave that job pinned to devices in use).
        # Submit time and pending reason first: a comment may hold anything, "|" included.
        pending = parse_pending(self._run([self.config.squeue, "-h", "-t", "PD", "-o", SQUEUE_FORMAT]))
        nodes = parse_show_node(self._run([self.config.scontrol, "-o", "show", "node", "-d"]))
        ends = self._read_running() if self.config.later_types else None
        now = time.time()
        kept, work = self._follow_up_work(pending, now, nodes)
        held = held_plans(kept, nodes, now, self.config.plan_ttl_s)
        with self._refresh_lock:  # the node cache is not for two builders at once
            inventory, error = self._base_inventory(nodes, held)
        self._snapshot = _Snapshot(
            nodes=nodes,
            pending=held,
            taken=taken,
            promised=promised_nodes(pending),
            inventory=inventory,
            error=error,
            models=tuple(
                sorted({g.model for n in inventory.inventory.nodes for g in n.gpus if g.model})
                if inventory
                else ()
            ),
            features=frozenset(f for n in nodes for f in n.features),
            awaiting=tuple(awaiting_backfill(kept, now, self.config.unpin_window_s)),
            waiting=waiting_demand(job.comment for job in pending),
            ends=ends,
            claims=claims_ahead(inventory, ends, untyped_ahead(pending), now)
            if ends is not None and inventory
            else {},
            index=NodeIndex(
                inventory.inventory.nodes, {name: t.source for name, t in inventory.node_types.items()}
            )
            if inventory
            else None,
        )
        if ends is not None and inventory:
            self._views.warm(inventory, ends, now, self._snapshot.claims)
        if work is not None:  # after the snapshot: the follow-up plans on this read
            down = frozenset(n.name for n in nodes if not n.schedulable)
            self._following = self._solves.submit(self._follow, work, down, kept)

    def _read_running(self) -> dict[str, dict[int, float]]:
        """When each GPU in use frees (:mod:`adapters.slurm.running`): the running jobs' ends each
        read, a job's GPUs once (when first seen). ``scontrol`` refuses a job that ended between the
        two reads: then the one-job call fails, and the job, gone from the next ``squeue``, is never
        asked again."""

        def show(ids: list[str]) -> str | None:
            try:
                return self._run([self.config.scontrol, "-d", "show", "job", *ids])
            except (RuntimeError, OSError, subprocess.SubprocessError) as err:
                _log.warning("running jobs not read", jobs=ids[:5], error=str(err)[:300])
                return None

        self._running.read(parse_running(self._run([self.config.squeue, *SQUEUE_RUNNING])), show)
        return self._running.ends()

    def warm(self) -> None:
        """What the first submit would otherwise pay (~0.5 s on a loaded host): each node type's
        wire template and the channel to the solver."""
        snapshot = self._snapshot
        if snapshot is None or snapshot.inventory is None or self.solve_fn is not None:
            return
        import grpc

        from adapters.slurm.fastwire import channel_for, request_message

        types = {name: t.source for name, t in snapshot.inventory.node_types.items()}
        one_each = {types[n.name]: n for n in snapshot.inventory.inventory.nodes if n.name in types}
        request_message(SolveRequest(inventory=Inventory(nodes=tuple(one_each.values()))), types)
        # The fast placer's and the verifier's first call cost 70-80 ms more than the next ones
        # (the first answer of every hook-cost run was the slowest): paid here, not by a submit.
        spec = job_from_description(
            {"min_nodes": 1, "tres_per_node": "gres:gpu:1"},
            plan_id="warm",
            max_gpus_per_node=max(len(n.gpus) for n in one_each.values()),
            alignment=self.config.alignment,
        )
        if spec is not None:
            request = SolveRequest(inventory=Inventory(nodes=tuple(one_each.values())), jobs=(spec.job,))
            verify(request, fast_place(request))
        with contextlib.suppress(grpc.FutureTimeoutError):
            grpc.channel_ready_future(channel_for(self.config.solver)).result(timeout=2)

    def _topo_dir(self) -> TopoDir:
        """One TopoDir while the directory's listing is unchanged (it remembers each node's file)."""
        mtime = self.config.topo_dir.stat().st_mtime_ns
        if self._topo is None or self._topo[0] != mtime:
            self._topo = (mtime, TopoDir(self.config.topo_dir))
        return self._topo[1]

    def _base_inventory(
        self, nodes: list[SlurmNode], held: list[ParsedPlan]
    ) -> tuple[SlurmInventory | None, InvalidRequest | None]:
        try:
            return (
                build_inventory(
                    nodes,
                    topo_dir=self._topo_dir(),
                    gres_conf=self._gres_conf(),
                    fabric=self._fabric(),
                    extra=_plan_allocations(held),
                    cache=self._node_cache,
                ),
                None,
            )
        except InvalidRequest as err:
            return None, err  # said at the next submit ("bad site data"), as the files are read

    def _follow_up_work(
        self, pending: list[PendingJob], now: float, nodes: list[SlurmNode]
    ) -> tuple[list[PendingJob], list[tuple[PendingJob, str]] | None]:
        """This read's slow work — re-planning or releasing stale plans (:meth:`_release`), and
        applying the solver's plans over fast ones (:meth:`refine`) — goes to the solve pool once the
        read's snapshot is made (:meth:`refresh`), so the refresh never waits for a solve or an
        ``scontrol update`` (a re-plan held it up to 1 s, and with it the node state every answer
        plans on). One follow-up at a time: while one runs, a read hands over nothing new (None).
        Also returns the pending jobs whose plans still hold devices: all but those being
        re-planned or released (a new plan is in :attr:`_issued` as soon as it is made; a released
        plan holds nothing)."""
        running = self._following
        if running is not None and not running.done():
            return [job for job in pending if job.job_id not in self._handling], None
        work = self._to_release(pending, now, nodes)
        self._handling = {job.job_id for job, _ in work}
        kept = [job for job in pending if job.job_id not in self._handling]
        return kept, work if work or self._refining else None

    def _follow(
        self, work: list[tuple[PendingJob, str]], down: frozenset[str], kept: list[PendingJob]
    ) -> None:
        """The follow-up of one read, in a pool thread (a failure is logged: nothing else sees it)."""
        try:
            self._release(work, down)
            self.refine(kept)
        except Exception as err:
            _log.error(
                "follow-up failed", traceback="".join(traceback.format_exception(err, limit=8))[-4000:]
            )

    def wait_follow_up(self, timeout_s: float = 30.0) -> None:
        """Until the last read's follow-up has ended (tests and the bench: what it did is then seen)."""
        running = self._following
        if running is not None:
            running.result(timeout=timeout_s)

    def _to_release(
        self, pending: list[PendingJob], now: float, nodes: list[SlurmNode]
    ) -> list[tuple[PendingJob, str]]:
        """Planned jobs whose pin no longer helps (:func:`to_release`), with why, except those
        just planned again."""
        if self.config.release_after_s <= 0:
            return []
        return [
            (job, why)
            for job, why in to_release(pending, now, self.config.release_after_s, nodes)
            # A new plan stands until Slurm has estimated its start again.
            if time.monotonic() - self._replanned_at.get(job.job_id, -1e18) >= REPLAN_SETTLE_S
        ]

    def _release(self, work: list[tuple[PendingJob, str]], down: frozenset[str]) -> set[str]:
        """Plan each job of ``work`` again (:meth:`_replan`), or clear its node list: the plan only
        steers while its nodes are free; after that Slurm's own choice is as good or better. Its
        comment's plan tag is renamed in the same update, so the plan stops holding devices and the
        TaskProlog stops comparing against it. Returns the ids of the jobs re-planned or released."""
        released = set()
        for job, why in work:
            replanned = self._replan(job, why, down)
            if replanned:
                released.add(job.job_id)  # its old plan holds nothing; the new one is issued
                continue
            try:
                self._run(
                    [
                        self.config.scontrol,
                        "update",
                        f"JobId={job.job_id}",
                        "ReqNodeList=",
                        f"Comment={released_comment(job.comment)}",
                    ]
                )
            except (RuntimeError, OSError, subprocess.SubprocessError) as err:
                _log.warning("plan not released", job_id=job.job_id, error=str(err)[:300])
                continue
            released.add(job.job_id)
            _log.info(
                "plan released: Slurm chooses the nodes",
                job_id=job.job_id,
                plan_id=job.plan.plan_id if job.plan else "",
                nodes=sorted(job.plan.nodes) if job.plan else [],
                reason=job.reason,
                why=why,
            )
        return released

    def _replan(self, job: PendingJob, why: str, down: frozenset[str] = frozenset()) -> bool:
        """Plan a pending job again with topoplace instead of releasing it (``why``: its nodes left,
        filled, or Slurm will not start it soon there): on the nodes where the GRES types it already
        holds are free — a pending job cannot be re-typed on Slurm 22.05 — and not promised to an
        earlier job. Applied through ``scontrol update JobId=… ReqNodeList=… Comment=…``; False (then
        it is released) when no such plan exists, it is the same nodes, or after MAX_REPLANS."""
        if not self.config.replan or job.plan is None or self._replans[job.job_id] >= MAX_REPLANS:
            return False
        self._replans[job.job_id] += 1
        try:
            outcome, plan = self._new_plan(job, down)
            taken, before = self._claim(plan) if plan is not None else ("", None)
            if taken:
                outcome, plan = f"its new devices were planned for another job meanwhile ({taken})", None
            if plan is not None:
                try:
                    self._run(
                        [
                            self.config.scontrol,
                            "update",
                            f"JobId={job.job_id}",
                            f"ReqNodeList={plan.req_nodes}",
                            f"Comment={replanned_comment(job.comment, plan.comment())}",
                        ]
                    )
                except (RuntimeError, OSError, subprocess.SubprocessError):
                    self._unclaim(plan.plan_id, before)
                    raise
                self._replanned_at[job.job_id] = time.monotonic()
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as err:
            outcome, plan = f"{type(err).__name__}: {err}"[:300], None
        except (InvalidRequest, NotEnforceable, RemoteError, Unsupported) as err:
            outcome, plan = f"{type(err).__name__}: {err}"[:300], None
        self.replans.append({"job_id": job.job_id, "why": why, "outcome": outcome})
        _log.info(
            "plan re-made" if plan is not None else "plan not re-made",
            job_id=job.job_id,
            plan_id=job.plan.plan_id,
            why=why,
            outcome=outcome,
        )
        return plan is not None

    def _new_plan(self, job: PendingJob, down: frozenset[str]) -> tuple[str, SlurmPlan | None]:
        """(what happened, the plan to apply or None) for :meth:`_replan`; ``down``: nodes this read
        of Slurm found not taking jobs (the inventory planned on is the previous read's)."""
        assert job.plan is not None
        shown = self._run([self.config.scontrol, "-o", "show", "job", job.job_id]).strip()
        fields = split_fields(shown.splitlines()[0]) if shown else {}
        typed = typed_signature(fields.get("TresPerNode", ""))
        if typed is None:
            return f"its GRES are not typed per switch ({fields.get('TresPerNode', '')})", None
        count = int(fields.get("NumNodes", "1").split("-")[0])
        desc: dict[str, Any] = {"min_nodes": count, "max_nodes": count, "tres_per_node": untyped_tres(typed)}
        if (limit_s := slurm_seconds(fields.get("TimeLimit", ""))) < math.inf:  # UNLIMITED, Partition_Limit…
            desc["time_limit"] = math.ceil(limit_s / 60)  # a started minute counted
        inventory = only_types(self.inventory(), {gtype for _, gtype, _ in typed}, job.plan.plan_id)
        spec = job_from_description(
            desc,
            plan_id=job.plan.plan_id,
            max_gpus_per_node=max((len(t.node.gpus) for t in inventory.node_types.values()), default=0),
            alignment=self.config.alignment,
        )
        if spec is None:
            return "no GPUs asked", None
        result = self._call_solver(self._request(inventory.inventory, spec, down))
        placed = result.jobs[0] if result.jobs else None
        if placed is None or not placed.placed:
            return "no nodes where its GRES types are free now", None
        plan = to_slurm_plan(placed, spec, inventory)
        if plan.signature != typed:
            return f"the new plan needs {plan.tres_per_node}", None
        if {p.node for p in plan.nodes} == set(job.plan.nodes):
            return "the same nodes again", None
        return f"re-planned on {plan.req_nodes}", plan

    def refresh_forever(self, stop: threading.Event) -> None:
        full_at = time.monotonic()
        while not stop.is_set():
            try:
                self.refresh()
            except Exception as err:
                _log.warning("refresh failed", error=str(err))
            # What a read leaves alive (node cache, snapshot) is moved out of the collector's sight:
            # at 1,024 nodes a full collection scanned ~10^5 such objects for 90-150 ms with the
            # interpreter lock held, three times in a 108-submit run, and those were the hook's p99
            # (s13 bench/RESULTS-slurm.md). Cyclic garbage frozen with them is collected by the full
            # collection every GC_FULL_S, on this thread, between reads.
            if time.monotonic() - full_at >= GC_FULL_S:
                gc.unfreeze()
                gc.collect()
                full_at = time.monotonic()
            gc.freeze()
            stop.wait(self.config.refresh_s)

    def _issued_since(self, snapshot: _Snapshot) -> dict[str, list[Allocation]]:
        """Devices of plans issued after the snapshot was read (their jobs may not be queued yet, or
        not visible in it); plans the snapshot already shows pending are in its inventory."""
        extra: dict[str, list[Allocation]] = {}
        seen = {plan.plan_id for plan in snapshot.pending}
        for plan_id, issued in list(self._issued.items()):
            if snapshot.taken - issued.at > self.config.grace_s:
                del self._issued[plan_id]  # the snapshot is newer: the job is pending or running in it
            elif plan_id not in seen:
                for node, (gpus, nics) in issued.nodes.items():
                    extra.setdefault(node, []).append(
                        Allocation(owner=f"planned:{plan_id}", gpus=gpus, nics=nics)
                    )
        return extra

    def inventory(self) -> SlurmInventory:
        snapshot = self._snapshot
        if snapshot is None:
            raise RuntimeError("no node state read from Slurm yet")
        if time.monotonic() - snapshot.taken > self.config.stale_s:
            raise RuntimeError(
                f"node state is {time.monotonic() - snapshot.taken:.0f} s old (scontrol failing?)"
            )
        if snapshot.error is not None:
            raise snapshot.error
        assert snapshot.inventory is not None
        return with_reservations(snapshot.inventory, self._issued_since(snapshot))

    # ----------------------------------------------------------------- solving

    def _call_solver(self, request: SolveRequest) -> SolveResult:
        """The solver's answer (no stage timing: this may run in a solve thread, after the answer)."""
        if self.solve_fn is not None:
            return self.solve_fn(request, self.config.time_limit_s + 1.0)
        from adapters.slurm.fastwire import request_message, solve_message

        message = request_message(request, self._type_keys)
        return solve_message(self.config.solver, message, timeout_s=self.config.time_limit_s + 1.0)

    def _budget_left(self) -> float | None:
        """Seconds left of the answer budget for the current request (None: no budget)."""
        if self.config.answer_budget_s <= 0:
            return None
        return max(0.0, self._started + self.config.answer_budget_s - time.perf_counter())

    def _solve_within(
        self,
        request: SolveRequest,
        stage: str = "solve",
        share: float = 1.0,
        meanwhile: Callable[[], None] | None = None,
    ) -> InFlight | SolveResult:
        """The solver's answer if it comes within ``share`` of the budget left, else the call still
        in flight. Timed as ``<stage>`` (the wait). ``meanwhile`` runs once the call is sent, before
        the wait (its own stages are its own)."""
        mark = time.perf_counter()
        left = self._budget_left()
        if left is None:
            result = self._call_solver(request)
            self._stage(stage, mark)
            if meanwhile is not None:
                meanwhile()
            return result
        call: InFlight
        if self.solve_fn is not None:
            call = self._solves.submit(self._call_solver, request)
        else:
            from adapters.slurm.fastwire import SolveCall, request_message

            message = request_message(request, self._type_keys)
            call = SolveCall(self.config.solver, message, self.config.time_limit_s + 1.0)
        self._stage(stage, mark)
        if meanwhile is not None:
            meanwhile()
        return self._wait(call, stage, share)

    def _wait(self, call: InFlight, stage: str, share: float = 1.0) -> InFlight | SolveResult:
        """``call``'s answer if it comes within ``share`` of the budget left, else ``call``."""
        mark = time.perf_counter()
        try:
            return call.result(timeout=(self._budget_left() or 0.0) * share)
        except FutureTimeout:
            return call
        finally:
            self._stage(stage, mark)

    def _request(
        self, inventory: Inventory, spec: JobSpec, also_closed: frozenset[str] = frozenset()
    ) -> SolveRequest:
        """The solve request for one job: only the nodes worth sending (:func:`candidate_nodes`).
        Excluded nodes (``-x``) and nodes backfill has promised to an earlier pending job before this
        one would end are not planned on: pinned there, the job would wait for that job."""
        closed = set(spec.excluded) | self._promised_ahead(spec) | also_closed
        index = self._snapshot.index if self._snapshot else None
        if index is not None and index.type_keys == self._type_keys:
            nodes = index.candidates(inventory.nodes, Ask.of(spec.job), closed)
        else:
            nodes = candidate_nodes(inventory.nodes, spec.job, closed, self._type_keys)
        policy = Policy(time_limit_s=self.config.time_limit_s)
        return SolveRequest(
            request_id=spec.job.id,
            inventory=inventory.model_copy(update={"nodes": nodes}),
            jobs=(spec.job,),
            policy=policy,
        )

    def _promised_ahead(self, spec: JobSpec) -> set[str]:
        """Nodes backfill has promised to an earlier pending job that starts before this one would end."""
        promised = self._snapshot.promised if self._snapshot else {}
        ends = time.time() + spec.time_limit_s if spec.time_limit_s is not None else float("inf")
        return promised_before(promised, ends, self._resolution_s or BACKFILL_RESOLUTION_S)

    def _hosts_at_most(self, inventory: Inventory, spec: JobSpec) -> int:
        """Nodes that could hold one member on an empty cluster (GPU count and labels only). Members
        must sit on distinct nodes, which the solver does not know yet; this catches the plain case."""
        member = spec.job.roles[0].member
        index = self._snapshot.index if self._snapshot else None
        if index is not None and len(index.nodes) == len(inventory.nodes):
            return index.hosts_at_most(member.gpus, member.node_selector)  # counted once per read
        return hosts_at_most(inventory.nodes, member.gpus, member.node_selector)

    def _never_fits(self, request: SolveRequest, inventory: Inventory, spec: JobSpec) -> bool | None:
        """Unplaced now; would it fit on the same cluster with nothing running and every node up?
        Asked once per job shape while the cluster's nodes and types stay the same. None: not known
        within the answer budget (the answer is kept for the next job of this shape)."""
        job = spec.job
        shape = (
            job.roles[0].member.model_dump_json(),
            job.roles[0].replicas,
            job.locality.model_dump_json(),
            bool(job.anti_affinity),
        )
        cached = self._never_fits_cache.get(shape)
        if cached is not None:
            return cached
        mark = time.perf_counter()
        nodes = empty_candidates(inventory.nodes, spec.job, self._type_keys)
        self._stage("never_fits", mark)
        again = self._solve_within(
            request.model_copy(update={"inventory": request.inventory.model_copy(update={"nodes": nodes})}),
            stage="never_fits",
        )
        if not isinstance(again, SolveResult):
            cache = self._never_fits_cache

            def remember(done: InFlight) -> None:
                if done.exception() is None:
                    cache[shape] = not any(j.placed for j in done.result().jobs)

            again.add_done_callback(remember)  # type: ignore[arg-type]
            return None
        answer = not any(j.placed for j in again.jobs)
        self._never_fits_cache[shape] = answer
        return answer

    # ----------------------------------------------------------------- the answer

    def place(self, desc: dict[str, Any]) -> dict[str, Any]:
        """The answer for one job description (never raises: errors become ``"error"``)."""
        started = time.perf_counter()
        plan_id = uuid.uuid4().hex[:12]
        try:
            with self._lock:
                self._started = started
                self._stages = {}
                self._ahead = None
                answer = self._place_locked(desc, plan_id)
        except Unsupported as err:
            answer = {"action": "pass", "message": f"topoplace: not planned: {err}"}
        except InvalidRequest as err:
            answer = {"action": "error", "message": f"topoplace: bad site data: {err}"}
        except (RemoteError, RuntimeError, OSError, subprocess.SubprocessError) as err:
            # Expected failures (solver down or slow, no node state yet): one line, no traceback —
            # rendering one cost seconds on a loaded host while slurmctld waited for the answer.
            _log.warning("place failed", error=f"{type(err).__name__}: {err}"[:300])
            answer = {"action": "error", "message": f"topoplace: {type(err).__name__}: {err}"[:500]}
        except Exception as err:
            # The plain traceback as text: structlog's pretty exception rendering took 36 s on a
            # loaded host (an unexpected error then also missed the hook's timeout).
            _log.error("place failed", traceback="".join(traceback.format_exception(err, limit=8))[-4000:])
            answer = {"action": "error", "message": f"topoplace: {type(err).__name__}: {err}"[:500]}
        if answer["action"] != "apply":
            self._keep_model_requests_working(desc, answer)
            if answer["action"] == "pass" and "no room now" in answer.get("message", ""):
                self._passed_at = time.monotonic()
        answer["ms"] = round((time.perf_counter() - started) * 1000, 1)
        answer["stages_ms"] = {k: round(v, 1) for k, v in self._stages.items()}
        _log.info(
            "place",
            plan_id=plan_id,
            action=answer["action"],
            ms=answer["ms"],
            stages_ms=answer["stages_ms"],
            message=answer.get("message", ""),
        )
        return answer

    def _keep_model_requests_working(self, desc: dict[str, Any], answer: dict[str, Any]) -> None:
        """A job left to Slurm that names a GPU model (``gpu:h100:2``) would match no GRES type once
        they are typed per switch: rewrite it to untyped GPUs + the model's node feature, say so."""
        snapshot = self._snapshot
        if snapshot is None:
            return
        fields, note = untyped_model_request(desc, snapshot.features, tuple(self._models))
        if fields:
            answer["set"] = {**answer.get("set", {}), **fields}
        if note:
            answer["message"] = f"{answer.get('message', '')}; {note}".lstrip("; ")
            answer["notice"] = answer["message"]

    def _stage(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self._stages[name] = self._stages.get(name, 0.0) + (now - since) * 1000
        return now

    def _place_locked(self, desc: dict[str, Any], plan_id: str) -> dict[str, Any]:
        mark = time.perf_counter()
        inventory = self.inventory()
        mark = self._stage("inventory", mark)
        snapshot = self._snapshot
        assert snapshot is not None  # inventory() raised otherwise
        if self._type_keys_of is not inventory.node_types:
            type_keys = {name: t.source for name, t in inventory.node_types.items()}
            if type_keys != self._type_keys:
                self._never_fits_cache.clear()  # other nodes or node types: ask again
            self._type_keys = type_keys
            self._type_keys_of = inventory.node_types
        self._models = snapshot.models
        spec = job_from_description(
            desc,
            plan_id=plan_id,
            max_gpus_per_node=max((len(t.node.gpus) for t in inventory.node_types.values()), default=0),
            known_models=snapshot.models,
            known_features=snapshot.features,
            alignment=self.config.alignment,
        )
        if spec is None:
            return {"action": "pass", "message": "topoplace: no GPUs asked: left to Slurm"}
        hosts = self._hosts_at_most(inventory.inventory, spec)
        if hosts < spec.nodes:
            return {
                "action": "never_fits",
                "message": "topoplace: this job can never fit this cluster: it needs "
                f"{spec.nodes} distinct nodes with {spec.gpus_per_node} GPUs each, and only {hosts} exist",
            }
        request = self._request(inventory.inventory, spec)
        self._stage("job", mark)
        if self.config.debug_dir is not None:
            from solver.ingest.files import dump_request_json

            (self.config.debug_dir / f"{plan_id}.request.json").write_text(dump_request_json(request))
        try:
            result = self._solve_within(
                request, share=FAST_HEAD_START, meanwhile=self._later_ahead(spec, inventory, request)
            )
            if not isinstance(result, SolveResult):
                # The fast plan is made while the solver works, not after the budget ran out: a
                # fast answer then costs the budget, not the budget plus the fast placer (at 1,024
                # nodes 3-10 ms, up to 80 ms for the first one; s13 bench/RESULTS-slurm.md).
                mark = time.perf_counter()
                made = self._fast_meanwhile(result, request)
                self._stage("fast", mark)
                late = self._wait(result, "solve")
                if not isinstance(late, SolveResult):
                    assert made is not None  # the fast placer stops only once the call is done
                    return self._fast_answer(desc, spec, inventory, request, late, *made)
                result = late
        except InvalidRequest as err:
            if all(p.path.startswith("jobs") for p in err.problems):  # the job itself, not the site
                return {
                    "action": "never_fits",
                    "message": f"topoplace: this job can never fit this cluster: {err}",
                }
            raise
        job = result.jobs[0]
        if not job.placed:
            reason = _why_unplaced(request, inventory.inventory, job)
            never = self._never_fits(request, inventory.inventory, spec)
            if never:
                return {
                    "action": "never_fits",
                    "message": f"topoplace: this job can never fit this cluster: {reason}",
                }
            checking = "" if never is not None else "; whether it can ever fit is checked for the next job"
            return self._later_answer(desc, spec, inventory, f"no room now ({reason})", checking)
        try:
            plan = to_slurm_plan(job, spec, inventory)
        except NotEnforceable as err:
            return {"action": "pass", "message": f"topoplace: plan not enforceable: {err}"}
        self.decisions[plan_id] = (result, plan)
        self._issued[plan_id] = _Issued(time.monotonic(), {p.node: (p.gpus, p.nics) for p in plan.nodes})
        return self._apply(desc, spec, plan, result, unpinned=self._unpin_why(spec, snapshot))

    def _fast_meanwhile(
        self, call: InFlight, request: SolveRequest
    ) -> tuple[SolveResult, Sequence[str]] | None:
        """The fast placer's plan and what verifying it found, made while the solver works; None if
        the solver answered first. Its answer trips a token the fast placer checks at every
        candidate node: finishing a plan nobody needs held the solver's answer back by the fast
        placer's 10-20 ms on a loaded host (two thirds of the hook's slowest 1 %, session 31) while
        taking the CPU the solver answered with. Its scoring passes get what is left of the
        budget (at most FAST_PLACER_S), not a fixed 20 ms after it: out of time, its best-fit pass
        still answers typed, so the budget bounds the answer (the p99 of s13: budget + fast placer)."""
        answered = Cancel()
        call.add_done_callback(lambda _call: answered.trip("the solver answered"))
        left = self._budget_left()
        try:
            with cancelling(answered):  # verifying looks at the token too
                fast = fast_place(request, FAST_PLACER_S if left is None else min(FAST_PLACER_S, left))
                return fast, verify(request, fast)
        except Cancelled:
            return None

    def _later_ahead(
        self, spec: JobSpec, inventory: SlurmInventory, request: SolveRequest
    ) -> Callable[[], None] | None:
        """When no node sent can take one member now — a plan needs one per member, so the answer
        will be "no room now" — the later-start type, chosen while the solver works rather than
        after it answers: at 1,024 nodes it was the slowest part of those answers, 10-40 ms after
        the solve on a loaded host (bench/RESULTS-slurm.md, session 30). None: the solve decides."""
        if not self.config.later_types:
            return None
        if room_for_members(request.inventory.nodes, Ask.of(spec.job)) >= spec.nodes:
            return None

        def choose() -> None:
            self._ahead = (spec.job.id, self._later_signature(spec, inventory))

        return choose

    def _later_signature(self, spec: JobSpec, inventory: SlurmInventory) -> Signature | None:
        """The later-start type of :mod:`adapters.slurm.later` for this job (timed as ``later``)."""
        mark = time.perf_counter()
        signature = (
            later_signature(
                spec,
                inventory,
                self._waiting(),
                self._snapshot.ends if self._snapshot is not None else None,
                time.time(),
                frozenset(self._promised_ahead(spec)),
                self._views,
                gangs=self.config.later_gangs,
                claims=self._snapshot.claims if self._snapshot is not None else None,
            )
            if self.config.later_types and not spec.gpu_type
            else None
        )
        self._stage("later", mark)
        return signature

    def _later_answer(
        self, desc: dict[str, Any], spec: JobSpec, inventory: SlurmInventory, why: str, note: str = ""
    ) -> dict[str, Any]:
        """A job with no room now: typed for a later start on whichever node Slurm picks
        (:mod:`adapters.slurm.later`), or passed on as submitted when no signature keeps it together
        (or a GPU model is named: its type is the model's, the node feature rewrite keeps it)."""
        ahead = self._ahead
        if ahead is not None and ahead[0] == spec.job.id:
            signature = ahead[1]
        else:
            signature = self._later_signature(spec, inventory)
        if signature is None:
            return {"action": "pass", "message": f"topoplace: {why}; left to Slurm's queue{note}"}
        tres = tres_per_node(signature, spec)
        tag = later_comment(spec.job.id, spec.nodes, signature)
        comment = desc.get("comment")
        fields: dict[str, Any] = {
            "min_nodes": spec.nodes,
            "max_nodes": spec.nodes,
            "tres_per_node": tres,
            "comment": f"{comment} {tag}" if isinstance(comment, str) and comment else tag,
        }
        for key in ("tres_per_job", "tres_per_task"):
            if isinstance(desc.get(key), str) and desc[key]:
                fields[key] = ""
        self._later[spec.job.id] = (time.monotonic(), gpus_by_type(signature, spec.nodes))
        return {
            "action": "apply",
            "set": fields,
            "setenv": {
                "SLURM_GPUS_PER_NODE": _gpus_of(signature),
                "SLURM_GPUS": "",
                "SLURM_GPUS_PER_TASK": "",
            },
            "plan_id": spec.job.id,
            "later": True,
            "message": f"topoplace: {why}; typed {tres} for a later start on a node Slurm chooses{note}",
        }

    def _waiting(self) -> Counter[str]:
        """GPUs per GRES type asked by later-typed jobs: those pending in the snapshot, and those
        answered since it was read (kept until a snapshot ``grace_s`` newer shows them)."""
        snapshot = self._snapshot
        waiting = Counter(snapshot.waiting) if snapshot is not None else Counter()
        taken = snapshot.taken if snapshot is not None else -1e18
        for plan_id, (at, gpus) in list(self._later.items()):
            if taken - at > self.config.grace_s:
                del self._later[plan_id]
            else:
                waiting.update(gpus)
        return waiting

    def _unpin_why(self, spec: JobSpec, snapshot: _Snapshot) -> str:
        """Why a one-node job is left unpinned (AgentConfig.unpin_window_s), or ""."""
        if self.config.unpin_window_s <= 0 or spec.nodes != 1:
            return ""
        if snapshot.awaiting:
            return f"job {snapshot.awaiting[0]} waits for backfill's reservation"
        if self._passed_at > snapshot.taken:
            return "a job just left to Slurm's queue waits for backfill's reservation"
        return ""

    def _fast_answer(
        self,
        desc: dict[str, Any],
        spec: JobSpec,
        inventory: SlurmInventory,
        request: SolveRequest,
        solve: InFlight,
        fast: SolveResult,
        problems: Sequence[str],
    ) -> dict[str, Any]:
        """The answer when the solver has not answered within the budget: the fast placer's plan
        (``fast``, with what verification found), said as such to the user and the log; the
        solver's plan may replace it while the job waits (:meth:`refine`). If the fast placer found
        no room, Slurm's queue decides."""
        waited = round(self.config.answer_budget_s * 1000)
        job = fast.jobs[0]
        if not problems and not job.placed:
            why = _why_unplaced(request, inventory.inventory, job)
            return self._later_answer(
                desc,
                spec,
                inventory,
                f"the solver had not answered within {waited} ms and the fast placer found no plan ({why})",
            )
        if problems:
            why = "; ".join(problems)[:300]
            _log.warning("fast plan failed verification", plan_id=spec.job.id, problems=why)
            return {
                "action": "pass",
                "message": f"topoplace: the solver had not answered within {waited} ms and the fast placer "
                f"found no plan ({why}); left to Slurm",
            }
        try:
            plan = to_slurm_plan(job, spec, inventory)
        except NotEnforceable as err:
            return {
                "action": "pass",
                "message": f"topoplace: fast plan not enforceable: {err}; left to Slurm",
            }
        self.decisions[plan.plan_id] = (fast, plan)
        self._issued[plan.plan_id] = _Issued(time.monotonic(), {p.node: (p.gpus, p.nics) for p in plan.nodes})
        # A copy: the solve pool's follow-up removes refinements while answers are made (list() of a
        # dict view runs without a thread switch; iterating the view itself could fail mid-way).
        if any(not r.solve.done() for r in list(self._refining.values())):
            # One refining solve at a time: each one more took CPU from the answers after it, so
            # more of them missed the budget in turn (seen at 1,024 nodes: 54 of 108 fast plans).
            solve.cancel()
            self._refined("kept: not refined, another refinement was running", plan.plan_id, plan, None, None)
        else:
            self._refining[plan.plan_id] = _Refining(plan, spec, inventory, solve, time.monotonic())
        answer = self._apply(desc, spec, plan, fast)
        answer["message"] = (
            f"topoplace: planned {plan.req_nodes} {plan.tres_per_node} by the fast placer (the solver had "
            f"not answered within {waited} ms; its plan replaces this one if it comes while the job waits)"
        )
        return answer

    def refine(self, pending: list[PendingJob]) -> None:
        """Fast plans whose solve has ended: the solver's plan replaces the fast one through
        ``scontrol update`` (node list and plan comment) while the job is pending, if it differs, asks
        for the same GRES types (Slurm 22.05 cannot re-type a pending job: the s9 report) and its
        devices are still free. Each outcome goes to the log and to :attr:`refinements`."""
        by_plan = {job.plan.plan_id: job for job in pending if job.plan is not None}
        for plan_id, refining in list(self._refining.items()):
            job = by_plan.get(plan_id)
            if job is None and time.monotonic() - refining.at < REFINE_FIND_S:
                continue  # not queued yet, or not in this squeue read
            if job is None and not refining.solve.done():
                refining.solve.cancel()  # its answer can no longer be used: spare the CPU
                del self._refining[plan_id]
                self._refined(
                    "kept: cancelled, the job started (or left) on the fast plan", plan_id, refining.plan
                )
                continue
            if not refining.solve.done():
                continue
            del self._refining[plan_id]
            outcome, better = self._refined_plan(refining, job)
            taken, before = self._claim(better) if better is not None and job is not None else ("", None)
            if taken:
                outcome, better = f"kept: the solver's devices were taken since ({taken})", None
            if better is not None and job is not None:
                try:
                    self._run(
                        [
                            self.config.scontrol,
                            "update",
                            f"JobId={job.job_id}",
                            f"ReqNodeList={better.req_nodes}",
                            f"Comment={replanned_comment(job.comment, better.comment())}",
                        ]
                    )
                except (RuntimeError, OSError, subprocess.SubprocessError) as err:
                    outcome = f"not applied: {err}"[:300]
                    self._unclaim(plan_id, before)
                else:
                    with self._lock:
                        self.decisions[plan_id] = (refining.solve.result(), better)
            self._refined(outcome, plan_id, refining.plan, job, better)

    def _refined(
        self,
        outcome: str,
        plan_id: str,
        fast: SlurmPlan,
        job: PendingJob | None = None,
        better: SlurmPlan | None = None,
    ) -> None:
        self.refinements.append({"plan_id": plan_id, "outcome": outcome})
        _log.info(
            "fast plan refined" if outcome.startswith("applied") else "fast plan kept",
            plan_id=plan_id,
            job_id=job.job_id if job else "",
            fast=fast.req_nodes,
            solver=better.req_nodes if better else "",
            outcome=outcome,
        )

    def _refined_plan(self, refining: _Refining, job: PendingJob | None) -> tuple[str, SlurmPlan | None]:
        """(what becomes of the fast plan, the solver's plan to apply or None)."""
        try:
            result = refining.solve.result()
        except Exception as err:
            return f"kept: the solve failed ({type(err).__name__}: {err})"[:300], None
        placed = result.jobs[0] if result.jobs else None
        if placed is None or not placed.placed:
            return "kept: the solver found no room for the job", None
        try:
            better = to_slurm_plan(placed, refining.spec, refining.inventory)
        except NotEnforceable as err:
            return f"kept: the solver's plan is not enforceable ({err})", None
        if better.nodes == refining.plan.nodes:
            return "kept: the solver chose the same devices", None
        if better.signature != refining.plan.signature:
            return "kept: the solver's plan needs other GRES types (a pending job cannot be re-typed)", None
        if job is None:
            return "kept: too late, the job started (or left) before the solver answered", None
        taken = self._taken_by_others(better, refining.plan.plan_id)
        if taken:
            return f"kept: the solver's devices were taken since ({taken})", None
        return f"applied: {refining.plan.req_nodes} -> {better.req_nodes}", better

    def _claim(self, plan: SlurmPlan) -> tuple[str, _Issued | None]:
        """Reserve ``plan``'s devices before the ``scontrol update`` that applies it (a re-plan or a
        refinement, made in the solve pool while answers go on): under the answers' lock, the first
        of its devices another job holds or was planned on since, or "" — then they are in
        :attr:`_issued` at once, so an answer made meanwhile does not plan on them too (seen on the
        real Slurm, seed 3: a re-plan and a new job's plan took GPUs 4-5 of gn39 in the same ms). Also
        returns what the plan id held before, for :meth:`_unclaim` if the update fails."""
        with self._lock:
            taken = self._taken_by_others(plan, plan.plan_id, locked=True)
            before = self._issued.get(plan.plan_id)
            if not taken:
                self._issued[plan.plan_id] = _Issued(
                    time.monotonic(), {p.node: (p.gpus, p.nics) for p in plan.nodes}
                )
        return taken, before

    def _unclaim(self, plan_id: str, before: _Issued | None) -> None:
        with self._lock:
            if before is None:
                self._issued.pop(plan_id, None)
            else:
                self._issued[plan_id] = before

    def _taken_by_others(self, plan: SlurmPlan, plan_id: str, locked: bool = False) -> str:
        """The first of ``plan``'s devices another job holds or was planned on now, or ""
        (``locked``: the caller holds the answers' lock)."""
        snapshot = self._snapshot
        if snapshot is None or snapshot.inventory is None:
            return "no current node state"
        if locked:
            issued = self._issued_since(snapshot)
        else:
            with self._lock:
                issued = self._issued_since(snapshot)
        wanted_nodes = {p.node for p in plan.nodes}
        nodes = {n.name: n for n in snapshot.inventory.inventory.nodes if n.name in wanted_nodes}
        for wanted in plan.nodes:
            node = nodes.get(wanted.node)
            if node is None or not node.schedulable:
                return f"{wanted.node} takes no jobs"
            for held in (*node.allocations, *issued.get(wanted.node, ())):
                if held.owner.endswith(plan_id):
                    continue
                clash = (set(held.gpus) & set(wanted.gpus)) | (set(held.nics) & set(wanted.nics))
                if clash:
                    return f"{wanted.node} {','.join(sorted(clash))}"
        return ""

    @staticmethod
    def _apply(
        desc: dict[str, Any], spec: JobSpec, plan: SlurmPlan, result: SolveResult, unpinned: str = ""
    ) -> dict[str, Any]:
        """The fields that make Slurm follow ``plan``. ``unpinned`` (why): no node list — the GRES
        types keep each GPU behind the same switch as its NIC, Slurm chooses the node — and the plan
        goes to the comment as released, so it neither holds devices nor is compared by the TaskProlog."""
        tag = released_comment(plan.comment()) if unpinned else plan.comment()
        comment = desc.get("comment")
        comment = f"{comment} {tag}" if isinstance(comment, str) and comment else tag
        fields: dict[str, Any] = {
            "min_nodes": len(plan.nodes),
            "max_nodes": len(plan.nodes),
            "tres_per_node": plan.tres_per_node,
            "comment": comment,
        }
        if not unpinned:
            fields["req_nodes"] = plan.req_nodes
        for key in ("tres_per_job", "tres_per_task"):
            if isinstance(desc.get(key), str) and desc[key]:
                fields[key] = ""
        tier = result.jobs[0].locality_tier
        gpus = _gpus_of(plan.signature)
        if unpinned:
            return {
                "action": "apply",
                "set": fields,
                "setenv": {"SLURM_GPUS_PER_NODE": gpus, "SLURM_GPUS": "", "SLURM_GPUS_PER_TASK": ""},
                "plan_id": plan.plan_id,
                "unpinned": True,
                "message": f"topoplace: {plan.tres_per_node}, node left to Slurm ({unpinned}; planned "
                f"{plan.req_nodes}, locality tier {tier})",
            }
        return {
            "action": "apply",
            "set": fields,
            # sbatch exported the GPU options for srun; left as submitted, every step would ask for
            # untyped GPUs that Slurm 22.05 refuses to take from typed job GRES.
            "setenv": {"SLURM_GPUS_PER_NODE": gpus, "SLURM_GPUS": "", "SLURM_GPUS_PER_TASK": ""},
            "plan_id": plan.plan_id,
            "message": f"topoplace: planned {plan.req_nodes} {plan.tres_per_node} (locality tier {tier}, "
            f"{result.status.name.lower()}{', devices rewritten to Slurm order' if plan.rewritten else ''})",
        }


def _why_unplaced(request: SolveRequest, inventory: Inventory, job: JobResult) -> str:
    """The solver's reason, unless the request held no schedulable node while the cluster has some:
    the candidates leave out the nodes closed to this job, so every one was excluded (``-x``) or
    promised by backfill to a job queued ahead — not "the cluster has no schedulable node"."""
    sent = request.inventory.nodes
    if not any(n.schedulable for n in sent) and any(n.schedulable for n in inventory.nodes):
        return "every node that could take it is excluded or promised by backfill to a job queued ahead"
    return job.reason.message if job.reason else "not placed"


def _gpus_of(signature: Signature) -> str:
    """``SLURM_GPUS_PER_NODE`` for steps of a job typed with ``signature`` (``sw2:1,sw3:1``)."""
    return ",".join(f"{gtype}:{count}" for name, gtype, count in signature if name == "gpu")


def _plan_allocations(plans: list[ParsedPlan]) -> dict[str, list[Allocation]]:
    """Devices of pending jobs' plans, per node, as allocations the next plan must avoid."""
    extra: dict[str, list[Allocation]] = {}
    for plan in plans:
        for node, (gpus, nics) in plan.nodes.items():
            extra.setdefault(node, []).append(
                Allocation(owner=f"pending:{plan.plan_id}", gpus=tuple(f"GPU{g}" for g in gpus), nics=nics)
            )
    return extra


# --------------------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    agent: Agent  # set on the subclass made by serve_agent
    allowed_uids: frozenset[int]
    # job_submit.lua keeps one connection for every submit (HTTP/1.1); an HTTP/1.0 caller
    # (place_client.py) still gets one answer and the close. A kept connection idle this long is
    # closed; the hook opens another on its next submit.
    protocol_version = "HTTP/1.1"
    timeout = KEPT_IDLE_S
    connections: _Connections  # set on the subclass made by serve_agent

    def setup(self) -> None:
        super().setup()
        self.connections.add(self.connection)

    def finish(self) -> None:
        self.connections.discard(self.connection)
        super().finish()

    def do_GET(self) -> None:
        self._reply(200, {"status": "ok"} if self.path == "/health" else {"error": "not found"})

    def _peer_allowed(self) -> bool:
        """Only the hook (run by slurmctld as SlurmUser), root or configured uids may ask: a plan
        carries req_nodes the hook applies, and job descriptions are not for other users to read."""
        uid = peer_uid(self.connection)
        if uid is not None and uid in self.allowed_uids:
            return True
        _log.warning("refused a caller", uid=uid, allowed=sorted(self.allowed_uids))
        self._reply(403, {"action": "error", "message": f"topoplace: caller uid {uid} not allowed"})
        return False

    def do_POST(self) -> None:
        if not self._peer_allowed():
            return
        if self.path != "/place":
            self._reply(404, {"error": "not found"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY_BYTES:
            self.close_connection = True  # the body left unread must not be read as the next request
            self._reply(400, {"action": "error", "message": "topoplace: bad request body"})
            return
        try:
            desc = json.loads(self.rfile.read(length))
        except (ValueError, UnicodeDecodeError):
            self._reply(400, {"action": "error", "message": "topoplace: the job description is not JSON"})
            return
        if not isinstance(desc, dict):
            self._reply(
                400, {"action": "error", "message": "topoplace: the job description is not an object"}
            )
            return
        self._reply(200, self.agent.place(desc))

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        # job_submit.lua talking to the socket itself asks for the client's line format, so that
        # slurmctld's Lua needs no JSON parser (place_client.render is the one writer of that format).
        lines = "text/plain" in (self.headers.get("Accept") or "") if self.headers else False
        data = render_lines(body).encode() if lines else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if lines else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return  # structlog has the useful line already

    def address_string(self) -> str:
        return str(self.client_address or "unix")


class _UnixServer(QuietClients, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _TcpServer(QuietClients, ThreadingHTTPServer):
    daemon_threads = True


class _Connections:
    """The connections being served, so that stopping the agent also ends the ones a hook keeps
    open between submits (their threads would otherwise wait out ``KEPT_IDLE_S``)."""

    def __init__(self) -> None:
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def add(self, connection: socket.socket) -> None:
        with self._lock:
            self._open.add(connection)

    def discard(self, connection: socket.socket) -> None:
        with self._lock:
            self._open.discard(connection)

    def end_all(self) -> None:
        with self._lock:
            ending = list(self._open)
        for connection in ending:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)  # the handler's read sees the end and returns


class RunningAgent:
    def __init__(
        self,
        server: socketserver.BaseServer,
        thread: threading.Thread,
        stop: threading.Event,
        agent: Agent | None = None,
        connections: _Connections | None = None,
    ) -> None:
        self.server = server
        self.thread = thread
        self._stop = stop
        self._agent = agent
        self._connections = connections

    @property
    def address(self) -> str:
        """What the hook's ``agent =`` takes: ``HOST:PORT`` or ``unix:/path``."""
        address = self.server.server_address
        if isinstance(address, str | bytes):
            return f"unix:{address.decode() if isinstance(address, bytes) else address}"
        host, port = address[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        if self._connections is not None:
            self._connections.end_all()
        if isinstance(self.server, _UnixServer):
            with contextlib.suppress(OSError):
                os.unlink(self.server.server_address)  # type: ignore[arg-type]
        self.thread.join(timeout=5)
        if self._agent is not None:  # solves still running for fast plans are not waited for
            self._agent._solves.shutdown(wait=False, cancel_futures=True)
        gc.unfreeze()  # what the agent froze (refresh_forever) goes back to the collector


class SocketRefused(ValueError):
    """The unix socket cannot be made safely (the message says why and what to fix)."""


def _unix_server(path: Path, handler: type, mode: int) -> _UnixServer:
    """A unix socket only its owner (and ``mode``'s group) can connect to, in a directory no other
    user can write (else one could replace the socket). A stale socket of ours is removed; a live
    one (another agent) or any other file is refused."""
    directory = path.parent
    info = directory.stat()
    if info.st_mode & 0o022 and not (info.st_mode & 0o1000 and info.st_uid in (0, os.geteuid())):
        raise SocketRefused(
            f"{directory} is writable by other users: put the agent's socket in a directory only its "
            "user can write (e.g. /run/topoplace, mode 0755, owned by the SlurmUser)"
        )
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode) or path.lstat().st_uid != os.geteuid():
            raise SocketRefused(f"{path} exists and is not a socket of this user: refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale: nobody listens
        else:
            raise SocketRefused(f"{path}: another agent is listening there")
        finally:
            probe.close()
    old_umask = os.umask(0o177)  # never world-connectable, not even between bind and chmod
    try:
        server = _UnixServer(str(path), handler)
    finally:
        os.umask(old_umask)
    os.chmod(path, mode)
    return server


def serve_agent(
    agent: Agent,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    unix: Path | None = None,
    socket_mode: int = 0o600,
    allow_uids: tuple[int, ...] = (),
) -> RunningAgent:
    """Serve in a background thread: on ``unix`` (a socket path) or on ``host:port`` (port 0 → a
    free port; see ``.address``). Callers other than this process's user, root and ``allow_uids``
    are refused with 403."""
    # The refresh thread's Python work (reading every node every 0.5 s) and the answers share one
    # interpreter lock: a waiting answer gets it back within 1 ms instead of 5 (at 1,024 nodes the
    # hook's p95 went from 138 to 76 ms on the bench's stream, budget 30 ms).
    sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
    allowed = frozenset({os.geteuid(), 0, *allow_uids})
    connections = _Connections()
    handler = type(
        "Handler", (_Handler,), {"agent": agent, "allowed_uids": allowed, "connections": connections}
    )
    server: socketserver.BaseServer
    if unix is not None:
        server = _unix_server(unix, handler, socket_mode)
    else:
        server = _TcpServer((host, port), handler)
    stop = threading.Event()
    try:
        agent.refresh()  # the first snapshot before the first submit can arrive
        agent.warm()
        gc.collect()  # the full collection the first submits would otherwise wait for (refresh_forever)
        gc.freeze()
    except Exception as err:
        _log.warning("first refresh failed", error=str(err))
    threading.Thread(
        target=agent.refresh_forever, args=(stop,), name="topoplace-slurm-refresh", daemon=True
    ).start()
    thread = threading.Thread(target=server.serve_forever, name="topoplace-slurm-agent", daemon=True)
    thread.start()
    return RunningAgent(server, thread, stop, agent, connections)


def parse_listen(text: str) -> tuple[Path | None, str, int]:
    """``unix:/path`` or ``HOST:PORT`` → (socket path, host, port); ValueError naming the form."""
    if text.startswith("unix:"):
        path = Path(text[5:])
        if not path.is_absolute():
            raise ValueError(f"--listen {text!r}: a unix socket needs an absolute path (unix:/run/x.sock)")
        return path, "", 0
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT or unix:/path")
    return None, host or "127.0.0.1", int(port)
