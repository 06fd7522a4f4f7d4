"""``topoplace slurm agent``: the warm half of the submit hook.

``job_submit.lua`` runs inside slurmctld, serialised across every submit, and must answer in tens of
milliseconds; a Python process that imports pydantic and gRPC takes ~400 ms just to start. So the
hook runs a stdlib-only client (:mod:`adapters.slurm.place_client`, ~30 ms) that posts the job to this
agent, which keeps the parsed site files in memory, reads live node state from ``scontrol``, asks the
topoplace gRPC service for a verified placement, and answers with the fields to set.

It also remembers the plans it handed out: a job planned a moment ago is not running yet, so its
devices are not in ``GresUsed``; plans found in pending jobs' comments (and plans issued in the last
``grace_s`` seconds, before their job is even queued) count as allocated for the next submit.

Answers (JSON): ``{"action": "apply", "set": {field: value}, "message": …}``, ``"pass"`` (leave the
job as submitted: not a GPU job, unsupported, no room now, or not enforceable), ``"never_fits"``
(the job cannot fit even on an empty cluster) or ``"error"`` (the service failed; the hook applies
its fail-open/closed setting).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import structlog

from adapters.slurm.gres import GresConf, parse_gres_conf
from adapters.slurm.inventory import SlurmInventory, build_inventory, read_text
from adapters.slurm.jobdesc import JobSpec, Unsupported, job_from_description
from adapters.slurm.nodetypes import TopoDir
from adapters.slurm.plan import NotEnforceable, ParsedPlan, SlurmPlan, parse_plan_comment, to_slurm_plan
from adapters.slurm.scontrol import SlurmNode, parse_show_node
from adapters.slurm.topology_conf import SlurmTopology, parse_topology_conf, parse_topology_yaml
from solver.domain.errors import InvalidRequest
from solver.domain.model import Allocation, Inventory, Policy, Requirement, SolveRequest, SolveResult

_log = structlog.get_logger("topoplace.slurm.agent")
MAX_BODY_BYTES = 1 << 20


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
    command_timeout_s: float = 5.0
    debug_dir: Path | None = None  # when set, every solve request is written there (for bug reports)


@dataclass(frozen=True)
class _Snapshot:
    nodes: list[SlurmNode]
    pending: list[ParsedPlan]
    taken: float


@dataclass
class _Issued:
    at: float
    nodes: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]


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
    decisions: dict[str, tuple[SolveResult, SlurmPlan]] = field(default_factory=dict)  # by plan id

    # ----------------------------------------------------------------- inputs

    def _run(self, argv: list[str]) -> str:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=self.config.command_timeout_s, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()[:300]}")
        return done.stdout

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
        nodes = parse_show_node(self._run([self.config.scontrol, "-o", "show", "node", "-d"]))
        pending = self._run([self.config.squeue, "-h", "-t", "PD", "-o", "%k"])
        plans = [p for p in (parse_plan_comment(line) for line in pending.splitlines()) if p is not None]
        self._snapshot = _Snapshot(nodes=nodes, pending=plans, taken=time.monotonic())

    def refresh_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.refresh()
            except Exception as err:
                _log.warning("refresh failed", error=str(err))
            stop.wait(self.config.refresh_s)

    def _reservations(self, snapshot: _Snapshot) -> dict[str, list[Allocation]]:
        """Devices of planned jobs pending in Slurm, and of plans issued after the snapshot was read
        (their jobs may not be queued yet, or not visible in it)."""
        extra: dict[str, list[Allocation]] = {}
        seen = set()
        for plan in snapshot.pending:
            seen.add(plan.plan_id)
            for node, (gpus, nics) in plan.nodes.items():
                extra.setdefault(node, []).append(
                    Allocation(
                        owner=f"pending:{plan.plan_id}", gpus=tuple(f"GPU{g}" for g in gpus), nics=nics
                    )
                )
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
        return build_inventory(
            snapshot.nodes,
            topo_dir=TopoDir(self.config.topo_dir),
            gres_conf=self._gres_conf(),
            fabric=self._fabric(),
            extra=self._reservations(snapshot),
        )

    # ----------------------------------------------------------------- solving

    def _solve(self, request: SolveRequest) -> SolveResult:
        if self.solve_fn is not None:
            return self.solve_fn(request, self.config.time_limit_s + 1.0)
        from adapters.slurm.fastwire import request_message, solve_message

        message = request_message(request, self._type_keys)
        return solve_message(self.config.solver, message, timeout_s=self.config.time_limit_s + 1.0)

    def _request(self, inventory: Inventory, spec: JobSpec) -> SolveRequest:
        nodes = tuple(
            n.model_copy(update={"schedulable": False}) if n.name in spec.excluded else n
            for n in inventory.nodes
        )
        policy = Policy(time_limit_s=self.config.time_limit_s)
        return SolveRequest(
            request_id=spec.job.id,
            inventory=inventory.model_copy(update={"nodes": nodes}),
            jobs=(spec.job,),
            policy=policy,
        )

    @staticmethod
    def _hosts_at_most(inventory: Inventory, spec: JobSpec) -> int:
        """Nodes that could hold one member on an empty cluster (GPU count and labels only). Members
        must sit on distinct nodes, which the solver does not know yet; this catches the plain case."""
        member = spec.job.roles[0].member
        return sum(
            1
            for n in inventory.nodes
            if len(n.gpus) >= member.gpus
            and all(n.labels.get(k) == v for k, v in member.node_selector.items())
        )

    def _never_fits(self, request: SolveRequest) -> bool:
        """Unplaced now; would it fit on the same cluster with nothing running and every node up?"""
        empty = tuple(
            n.model_copy(update={"allocations": (), "schedulable": True}) for n in request.inventory.nodes
        )
        again = self._solve(
            request.model_copy(update={"inventory": request.inventory.model_copy(update={"nodes": empty})})
        )
        return not any(j.placed for j in again.jobs)

    # ----------------------------------------------------------------- the answer

    def place(self, desc: dict[str, Any]) -> dict[str, Any]:
        """The answer for one job description (never raises: errors become ``"error"``)."""
        started = time.perf_counter()
        plan_id = uuid.uuid4().hex[:12]
        try:
            with self._lock:
                answer = self._place_locked(desc, plan_id)
        except Unsupported as err:
            answer = {"action": "pass", "message": f"topoplace: not planned: {err}"}
        except InvalidRequest as err:
            answer = {"action": "error", "message": f"topoplace: bad site data: {err}"}
        except Exception as err:
            _log.exception("place failed")
            answer = {"action": "error", "message": f"topoplace: {type(err).__name__}: {err}"[:500]}
        answer["ms"] = round((time.perf_counter() - started) * 1000, 1)
        _log.info(
            "place",
            plan_id=plan_id,
            action=answer["action"],
            ms=answer["ms"],
            message=answer.get("message", ""),
        )
        return answer

    def _place_locked(self, desc: dict[str, Any], plan_id: str) -> dict[str, Any]:
        inventory = self.inventory()
        self._type_keys = {name: t.source for name, t in inventory.node_types.items()}
        gpus = [len(n.gpus) for n in inventory.inventory.nodes]
        models = tuple(sorted({g.model for n in inventory.inventory.nodes for g in n.gpus if g.model}))
        spec = job_from_description(
            desc,
            plan_id=plan_id,
            max_gpus_per_node=max(gpus, default=0),
            known_models=models,
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
        if self.config.debug_dir is not None:
            from solver.ingest.files import dump_request_json

            (self.config.debug_dir / f"{plan_id}.request.json").write_text(dump_request_json(request))
        try:
            result = self._solve(request)
        except InvalidRequest as err:
            if all(p.path.startswith("jobs") for p in err.problems):  # the job itself, not the site
                return {
                    "action": "never_fits",
                    "message": f"topoplace: this job can never fit this cluster: {err}",
                }
            raise
        job = result.jobs[0]
        if not job.placed:
            reason = job.reason.message if job.reason else "not placed"
            if self._never_fits(request):
                return {
                    "action": "never_fits",
                    "message": f"topoplace: this job can never fit this cluster: {reason}",
                }
            return {"action": "pass", "message": f"topoplace: no room now ({reason}); left to Slurm's queue"}
        try:
            plan = to_slurm_plan(job, spec, inventory)
        except NotEnforceable as err:
            return {"action": "pass", "message": f"topoplace: plan not enforceable: {err}"}
        self.decisions[plan_id] = (result, plan)
        self._issued[plan_id] = _Issued(time.monotonic(), {p.node: (p.gpus, p.nics) for p in plan.nodes})
        return self._apply(desc, spec, plan, result)

    @staticmethod
    def _apply(desc: dict[str, Any], spec: JobSpec, plan: SlurmPlan, result: SolveResult) -> dict[str, Any]:
        comment = desc.get("comment")
        comment = f"{comment} {plan.comment()}" if isinstance(comment, str) and comment else plan.comment()
        fields: dict[str, Any] = {
            "req_nodes": plan.req_nodes,
            "min_nodes": len(plan.nodes),
            "max_nodes": len(plan.nodes),
            "tres_per_node": plan.tres_per_node,
            "comment": comment,
        }
        for key in ("tres_per_job", "tres_per_task"):
            if isinstance(desc.get(key), str) and desc[key]:
                fields[key] = ""
        tier = result.jobs[0].locality_tier
        gpus = ",".join(f"{gtype}:{count}" for name, gtype, count in plan.signature if name == "gpu")
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


# --------------------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    agent: Agent  # set on the subclass made by make_server

    def do_GET(self) -> None:
        self._reply(200, {"status": "ok"} if self.path == "/health" else {"error": "not found"})

    def do_POST(self) -> None:
        if self.path != "/place":
            self._reply(404, {"error": "not found"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY_BYTES:
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
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return  # structlog has the useful line already


class RunningAgent:
    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread, stop: threading.Event) -> None:
        self.server = server
        self.thread = thread
        self._stop = stop

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_agent(agent: Agent, host: str = "127.0.0.1", port: int = 0) -> RunningAgent:
    """Serve in a background thread (port 0 → a free port; see ``.address``)."""
    handler = type("Handler", (_Handler,), {"agent": agent})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    stop = threading.Event()
    try:
        agent.refresh()  # the first snapshot before the first submit can arrive
    except Exception as err:
        _log.warning("first refresh failed", error=str(err))
    threading.Thread(
        target=agent.refresh_forever, args=(stop,), name="topoplace-slurm-refresh", daemon=True
    ).start()
    thread = threading.Thread(target=server.serve_forever, name="topoplace-slurm-agent", daemon=True)
    thread.start()
    return RunningAgent(server, thread, stop)
