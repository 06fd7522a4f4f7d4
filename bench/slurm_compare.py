"""Slurm alone vs typed GRES alone vs typed GRES + the topoplace hook, on a real Slurm, side by side.

Every run starts a fresh emulated cluster (``adapters/slurm/emulate.py``: real munged, slurmctld 22.05
with cons_tres + topology/tree, one ``slurmd -N`` per node on loopback) of four node types, each 8 GPUs
in two NVLink halves (NV18 inside a half, NV2 across) and 8 NICs, 2 GPUs + 2 NICs per PCIe switch
group, which differ in how GPUs, NICs and halves meet (``BENCH_KINDS``: aligned, rotated NICs, reversed
NICs, halves across the NUMA nodes). The captures are synthetic ``nvidia-smi topo -m`` text written
by :func:`halves_capture`. The configurations (same seed → same background and same job stream):

* ``slurm``  — Slurm alone: ``Gres=gpu:8,nic:8``, gres.conf with ``Cores=`` and ``Links=``, no types;
* ``typed``  — GRES typed per switch group (``gpu:sw0:2,…``, the README's install step 2), no hook;
* ``hook``   — typed GRES + job_submit.lua + agent + solver (the agent's defaults);
* ``hook-later`` — the same with ``--later-types`` said explicitly: a one-node job with a NIC per GPU
  and no room at submit is typed for a later start (adapters/slurm/later.py; the agent's default
  since session 28, opt-in before);
* ``hook-untyped`` — the same with ``--no-later-types``: such a job goes to Slurm's queue untyped
  (the default before session 28). Session 27's raw files call this one ``hook-pass`` and
  ``hook-later`` ``hook``;
* ``hook-later-gangs`` — gangs with a NIC per GPU and no room at submit typed for later too
  (``AgentConfig.later_gangs``, session 29's trial).

The TaskProlog (``adapters/slurm/taskprolog.sh``) runs in all of them. Background: Slurm places ~40 %
of the GPUs itself (``-w node --gres=gpu:k``, hook off). Stream (:func:`job_stream`): 1–8-GPU jobs and
2–4-node gangs, about a third GPU-only, the rest asking one NIC per GPU (``--gres=nic:k``).

Measured per run, on what Slurm allocated (``scontrol show job -d``, IDX through gres.conf):
jobs started; GPU↔NIC pairs not on one PCIe switch group; NICs held by GPU-only jobs; 2- and
4-GPU allocations whose GPUs straddle the two NVLink halves ("broken NVLink islands"); jobs whose task
environment (``CUDA_VISIBLE_DEVICES``, ``NCCL_IB_HCA``, printed by ``srun`` on every node) names
devices Slurm did not give them; gangs stranded (pending although enough GPUs are free in total);
``sbatch`` time; and for the hook the agent's answers.

    .venv/bin/python -m bench.slurm_compare --nodes 64 --seeds 1 2 3 [--output bench/RESULTS-slurm.md]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from adapters.slurm.agent import Agent, AgentConfig, serve_agent
from adapters.slurm.emulate import ClusterSpec, EmulatedCluster, missing_binaries, parse_jobs
from adapters.slurm.gres import (
    node_devices,
    parse_gres_conf,
    parse_gres_item,
    parse_gres_string,
    split_outside_parens,
)
from adapters.slurm.gresconf import gres_string
from adapters.slurm.later import LATER_TAG
from adapters.slurm.nodetypes import load_node_type
from adapters.slurm.pending import SQUEUE_FORMAT

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("slurm", "typed", "hook", "hook-later", "hook-untyped", "hook-later-gangs")
# The agent's later-start settings per hook configuration (others: the agent's defaults).
LATER_TYPES: dict[str, dict[str, bool]] = {
    "hook-later": {"later_types": True},
    "hook-untyped": {"later_types": False},
    "hook-later-gangs": {"later_types": True, "later_gangs": True},
}
STRONG, WEAK = 18, 2

# Per kind: the GPUs and the NICs of each of the four PCIe switch groups (groups 0-1 on NUMA 0), and
# the two NVLink halves (NV18 inside a half, NV2 across).
HALVES = ((0, 1, 2, 3), (4, 5, 6, 7))
KINDS: dict[str, tuple[tuple[tuple[tuple[int, ...], tuple[int, ...]], ...], tuple[tuple[int, ...], ...]]] = {
    "aligned": ((((0, 1), (0, 1)), ((2, 3), (2, 3)), ((4, 5), (4, 5)), ((6, 7), (6, 7))), HALVES),
    "rotated": ((((0, 1), (2, 3)), ((2, 3), (4, 5)), ((4, 5), (6, 7)), ((6, 7), (0, 1))), HALVES),
    "reversed": ((((0, 1), (7, 6)), ((2, 3), (5, 4)), ((4, 5), (3, 2)), ((6, 7), (1, 0))), HALVES),
    # halves across the NUMA nodes: a 2-GPU job on one switch is fine, a 4-GPU one must span NUMA
    "crossed": (
        (((0, 1), (0, 1)), ((2, 3), (2, 3)), ((4, 5), (4, 5)), ((6, 7), (6, 7))),
        ((0, 1, 4, 5), (2, 3, 6, 7)),
    ),
    # switch groups straddling the halves (GPU0 with GPU4): Slurm 22.05 cannot type these (see
    # docs/slurm.md); tests use it to show why, the bench does not.
    "straddling": ((((0, 4), (0, 1)), ((1, 5), (2, 3)), ((2, 6), (4, 5)), ((3, 7), (6, 7))), HALVES),
}
BENCH_KINDS = ("aligned", "rotated", "reversed", "crossed")


def halves_capture(kind: str) -> str:
    """``nvidia-smi topo -m`` text of one node kind (synthetic: no such capture is public)."""
    groups, halves = KINDS[kind]
    half = {g: h for h, members in enumerate(halves) for g in members}
    group_of: dict[str, int] = {}
    for g, (gpus, nics) in enumerate(groups):
        group_of.update({f"GPU{i}": g for i in gpus})
        group_of.update({f"NIC{i}": g for i in nics})
    devices = [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(8)]

    def cell(a: str, b: str) -> str:
        if a == b:
            return "X "
        if a.startswith("GPU") and b.startswith("GPU"):
            return f"NV{STRONG if half[int(a[3:])] == half[int(b[3:])] else WEAK}"
        if group_of[a] == group_of[b]:
            return "PIX" if a.startswith("NIC") and b.startswith("NIC") else "PXB"
        return "NODE" if group_of[a] // 2 == group_of[b] // 2 else "SYS"

    lines = [
        f"# synthetic 8-GPU node, kind {kind}: NVLink halves {halves} (NV{STRONG} inside, "
        f"NV{WEAK} across), 2 GPUs + 2 NICs per PCIe switch group",
        "# topoplace: gpu_model=H100-SXM5-80GB gpu_memory_mib=81920",
        "\t" + "\t".join(devices) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
    ]
    for a in devices:
        row = [a, *(cell(a, b) for b in devices)]
        if a.startswith("GPU"):
            numa = group_of[a] // 2
            row += [f"{numa * 8}-{numa * 8 + 7}", str(numa), "N/A"]
        lines.append("\t".join(row))
    lines += ["", "NIC Legend:", ""] + [f"  NIC{i}: mlx5_{i}" for i in range(8)]
    return "\n".join(lines) + "\n"


def _write_captures(directory: Path) -> list[Path]:
    directory.mkdir(parents=True)
    paths = []
    for kind in BENCH_KINDS:
        path = directory / f"{kind}.txt"
        path.write_text(halves_capture(kind))
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Submit:
    nodes: int
    gpus: int
    nics: bool
    seconds: int = 0  # how long the job runs (0: until the run ends)
    at_s: float = 0.0  # when it is submitted, from the stream's start (--churn)

    def args(self) -> list[str]:
        # A time limit lets backfill start jobs behind one that has to wait; with a run time, the
        # limit a user would give (the next whole minute past it), so backfill's start times are real.
        gres = [f"--gres=nic:{self.gpus}"] if self.nics else []
        minutes = -(-(self.seconds + 30) // 60) if self.seconds else 60
        return [f"-N{self.nodes}", f"--gpus-per-node={self.gpus}", *gres, "-t", str(minutes)]


def job_stream(nodes: int, seed: int) -> list[Submit]:
    """Per 8 nodes 12 small jobs (1/2/4 GPUs, one 2×4 gang), per 16 nodes an 8-GPU job, a 2×8 and
    a 4×4 gang: ~1.3× the GPUs the background leaves free, so packing decides what starts."""
    rng = random.Random(seed)
    small = [(1, 1)] * 5 + [(1, 2)] * 4 + [(1, 4)] * 2 + [(2, 4)]
    large = [(1, 8), (2, 8), (4, 4)]
    shapes = small * max(1, nodes // 8) + large * max(1, nodes // 16)
    jobs = [Submit(n, g, rng.random() < 0.65) for n, g in shapes]
    rng.shuffle(jobs)
    return jobs


def churn_stream(nodes: int, seed: int, window_s: float) -> list[Submit]:
    """Jobs that end, arriving over time, for a cluster where jobs wait for room (the usual case):
    three rounds of :func:`job_stream` (~4× the free GPUs), each job running 40-160 s, arriving at
    random over the first 55 % of the window, so most jobs start after others have ended."""
    rng = random.Random(seed * 104729)
    shapes = [job for r in range(3) for job in job_stream(nodes, seed + 1000 * r)]
    gap = 0.55 * window_s / len(shapes)
    at, out = 0.0, []
    for job in shapes:
        out.append(Submit(job.nodes, job.gpus, job.nics, seconds=rng.randint(40, 160), at_s=round(at, 2)))
        at += rng.expovariate(1 / gap)
    return out


def background(names: list[str], seed: int) -> list[list[str]]:
    """~40 % of the GPUs, placed by Slurm itself: per node 0-6 GPUs (mean 3.2), half with NICs."""
    rng = random.Random(seed * 7919)
    out = []
    for name in names:
        k = rng.choice((0, 1, 2, 3, 4, 5, 6, 2, 3, 6))
        if k:
            gres = f"--gres=gpu:{k},nic:{k // 2}" if rng.random() < 0.5 and k // 2 else f"--gres=gpu:{k}"
            out.append(["-w", name, gres])
    return out


# --------------------------------------------------------------------------- one run


@dataclass
class RunResult:
    config: str
    seed: int
    nodes: int
    submitted: int = 0
    started: int = 0
    gpus_started: int = 0
    pairs: int = 0
    off_switch: int = 0
    gpu_only_with_nics: int = 0
    nvlink_jobs: int = 0  # running jobs with 2 or 4 GPUs on some node
    nvlink_broken: int = 0
    env_checked: int = 0
    env_wrong: int = 0
    env_wrong_examples: list[str] = field(default_factory=list)
    gangs_pending: int = 0
    gangs_stranded: int = 0  # pending, enough free GPUs in the cluster in total
    gangs_fit_now: int = 0  # pending, enough nodes each with the member's GPUs (and NICs) free now
    pending_reasons: dict[str, int] = field(default_factory=dict)  # "planned:Resources" → jobs
    churn_s: float = 0.0  # --churn: the window jobs ran and ended in (0: jobs never end)
    started_unplanned: int = 0  # started without a plan of the hook's (no room at submit, …)
    pairs_unplanned: int = 0
    off_switch_unplanned: int = 0
    started_later: int = 0  # typed by the hook for a later start (no room at submit: later.py)
    pairs_later: int = 0
    off_switch_later: int = 0
    waits_s: list[float] = field(default_factory=list)  # start - submit, per started job
    submit_ms: list[float] = field(default_factory=list)
    answers: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    refinements: dict[str, int] = field(default_factory=dict)  # what became of the fast plans
    replans: dict[str, int] = field(default_factory=dict)  # pending plans made again (Agent._replan)
    seconds: float = 0.0


class CountingAgent(Agent):
    """The real agent, counting its answers for the report."""

    def place(self, desc: dict[str, Any]) -> dict[str, Any]:
        answer = super().place(desc)
        self.last = answer
        self.counts = getattr(self, "counts", Counter())
        self.counts[answer["action"]] += 1
        if answer.get("unpinned"):
            self.counts["apply: node left to Slurm"] += 1
        if answer.get("later"):
            self.counts["apply: typed for a later start"] += 1
        if answer["action"] != "apply":
            reason = re.sub(r"\d+", "N", answer.get("message", ""))[:110]
            self.why = getattr(self, "why", Counter())
            self.why[reason] += 1
        return answer


def _outcome_kind(outcome: str) -> str:
    """A refinement's outcome without its job ids and node names (for counting)."""
    return re.sub(r"gn[\[\]\d,\-]+|\d+", "N", outcome.split(" (")[0])[:80]


def counting_agent(cluster: EmulatedCluster, port: int, **config: Any) -> CountingAgent:
    """The agent of ``cluster``'s configuration, solving on the local server at ``port``."""
    etc = cluster.root / "etc"
    return CountingAgent(
        AgentConfig(
            solver=f"127.0.0.1:{port}",
            topo_dir=cluster.topo_dir,
            gres_conf=etc / "gres.conf",
            topology=etc / "topology.conf",
            **config,
        )
    )


class SolverProcess:
    """``topoplace serve`` in a process of its own, as a site runs it next to the agent (in the bench's
    own process, its Python work would share one interpreter lock with the agent's answers)."""

    def __init__(self, log: Path | None = None) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "solver.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab") if log is not None else subprocess.DEVNULL,
        )
        import grpc

        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        try:
            grpc.channel_ready_future(channel).result(timeout=60)
        except grpc.FutureTimeoutError:
            self.stop()
            raise RuntimeError(f"topoplace serve did not listen on port {self.port} within 60 s") from None
        finally:
            channel.close()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def run(
    config: str, nodes: int, seed: int, workdir: Path, keep: Path | None = None, churn_s: float = 0.0
) -> RunResult:
    """One configuration on a fresh cluster. ``churn_s`` > 0: the :func:`churn_stream`, jobs ending
    as they go, measured on what each job was given when it started (it writes ``scontrol show job
    -d`` of itself first: an ended job leaves ``scontrol``), everything pending at the window's end."""
    started_at = time.monotonic()
    paths = _write_captures(workdir / "captures")
    cluster = EmulatedCluster(
        workdir / "cluster",
        ClusterSpec(
            nodes=nodes, nodes_per_leaf=8, leaves_per_spine=2, captures=tuple(paths), typed=config != "slurm"
        ),
    )
    cluster.write_files({"enabled": "no", "timeout": "2"})
    server = SolverProcess(workdir / "solver.log") if config.startswith("hook") else None
    os.environ["SLURM_CONF"] = str(cluster.conf)
    os.environ["PATH"] = cluster.env()["PATH"]
    result = RunResult(config=config, seed=seed, nodes=nodes, churn_s=churn_s)
    running = None
    agent = None
    cluster.start(timeout_s=300)
    try:
        for args in background(cluster.spec.names(), seed):
            cluster.run("sbatch", "-o", "/dev/null", *args, "--wrap", "sleep 3000")
        _settle(cluster, 60)
        if server is not None:
            later = LATER_TYPES.get(config, {})
            agent = counting_agent(cluster, server.port, **later)
            # The documented form: a unix socket, which job_submit.lua asks itself (luaposix) when
            # installed — no client process per submit (runs before session 10's end used TCP).
            running = serve_agent(agent, unix=workdir / "agent.sock")
            cluster.write_hook_conf({"agent": running.address, "enabled": "yes"})
            agent.refresh()
        ids = []
        out = cluster.root / "out"
        task = "echo TP $SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES hca=$NCCL_IB_HCA"
        stream = churn_stream(nodes, seed, churn_s) if churn_s else job_stream(nodes, seed)
        began = time.monotonic()
        for submit in stream:
            time.sleep(max(0.0, began + submit.at_s - time.monotonic()))
            record = f"scontrol show job -d $SLURM_JOB_ID > {out}/$SLURM_JOB_ID.alloc; " if churn_s else ""
            t0 = time.perf_counter()
            done = cluster.run(
                "sbatch",
                "--parsable",
                "-o",
                str(out / "%j.out"),
                *submit.args(),
                "--wrap",
                f"{record}srun -l sh -c '{task}'; sleep {submit.seconds or 3000}",
                check=False,
            )
            result.submit_ms.append((time.perf_counter() - t0) * 1000)
            result.submitted += 1
            if done.returncode == 0:
                ids.append((done.stdout.strip(), submit))
            else:
                result.refused.append(f"{' '.join(submit.args())}: {done.stderr.strip()[:200]}")
        if churn_s:
            time.sleep(max(0.0, began + churn_s - time.monotonic()))
        else:
            _settle(cluster, 90)
        time.sleep(5)  # the srun steps of the last jobs print their environment
        measure(cluster, ids, result, _started_records(out) if churn_s else None)
        if keep is not None:
            _keep(cluster, ids, keep / f"{config}-{nodes}-{seed}")
        if agent is not None:
            result.answers = dict(getattr(agent, "counts", {}))
            result.reasons = dict(getattr(agent, "why", {}))
            result.refinements = dict(Counter(_outcome_kind(r["outcome"]) for r in agent.refinements))
            result.replans = dict(Counter(_outcome_kind(r["outcome"]) for r in agent.replans))
    finally:
        if running:
            running.stop()
        if server is not None:
            server.stop()
        cluster.stop()
    result.seconds = round(time.monotonic() - started_at, 1)
    return result


def _keep(cluster: EmulatedCluster, ids: list[tuple[str, Any]], into: Path) -> None:
    """For explaining a run afterwards: the end state of every job and node, what was submitted, and
    slurmctld's log (the hook's log lines are there)."""
    into.mkdir(parents=True, exist_ok=True)
    (into / "jobs.txt").write_text(cluster.run("scontrol", "show", "job", "-d", check=False).stdout)
    (into / "nodes.txt").write_text(cluster.run("scontrol", "-o", "show", "node", "-d", check=False).stdout)
    (into / "submitted.txt").write_text("".join(f"{i} {' '.join(s.args())}\n" for i, s in ids))
    log = cluster.root / "log" / "slurmctld.log"
    if log.exists():
        shutil.copy(log, into / "slurmctld.log")


def _settle(cluster: EmulatedCluster, timeout_s: float) -> None:
    """Until the set of running jobs stops changing for 6 s (scheduler and backfill passes done)."""
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = cluster.run("squeue", "-h", "-t", "R", "-o", "%i", check=False).stdout.split()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > 6:
            return
        time.sleep(1)


# --------------------------------------------------------------------------- measuring


def _started_records(out: Path) -> dict[str, dict[str, object]]:
    """Each started job as it wrote itself down at its start (``<id>.alloc``), running."""
    jobs: dict[str, dict[str, object]] = {}
    for path in out.glob("*.alloc"):
        for job_id, job in parse_jobs(path.read_text()).items():
            if job["alloc"]:  # written by the job itself, so it had started
                jobs[job_id] = job | {"state": "RUNNING"}
    return jobs


def _seconds_between(submitted: object, started: object) -> float | None:
    try:
        return (datetime.fromisoformat(str(started)) - datetime.fromisoformat(str(submitted))).total_seconds()
    except ValueError:
        return None


def measure(
    cluster: EmulatedCluster,
    ids: list[tuple[str, Any]],
    result: RunResult,
    started: dict[str, dict[str, object]] | None = None,
) -> None:
    """Every submitted job as it stands now, or, for the ids in ``started``, as it was at its start."""
    gres_conf = parse_gres_conf((cluster.root / "etc" / "gres.conf").read_text())
    types = {}
    for path, names in cluster.spec.node_types().items():
        node_type = load_node_type(path)
        for name in names:
            types[name] = node_type
    jobs = cluster.jobs() | (started or {})
    node_states: str | None = None
    for job_id, submit in ids:
        job = jobs.get(job_id)
        if not job:
            continue
        if job["state"] != "RUNNING":
            kind = (
                "planned" if job["plan"] else "later" if LATER_TAG in str(job.get("comment")) else "unplanned"
            )
            key = f"{kind}:{job.get('reason', '')}"
            result.pending_reasons[key] = result.pending_reasons.get(key, 0) + 1
            if submit.nodes > 1:
                result.gangs_pending += 1
                if node_states is None:  # read once, for every pending gang
                    node_states = cluster.run("scontrol", "-o", "show", "node", "-d", check=False).stdout
                in_total, on_nodes = _stranded(node_states, submit)
                result.gangs_stranded += in_total
                result.gangs_fit_now += on_nodes
            continue
        result.started += 1
        later = LATER_TAG in str(job.get("comment", ""))
        unplanned = not job["plan"] and not later
        result.started_unplanned += unplanned
        result.started_later += later
        if (wait := _seconds_between(job.get("submitted"), job.get("started"))) is not None:
            result.waits_s.append(wait)
        alloc: dict[str, str] = job["alloc"]  # type: ignore[assignment]
        broken = False
        held: dict[str, tuple[list[int], list[str]]] = {}
        for node, gres in alloc.items():
            node_type = types[node]
            nic_names = [n.name for n in node_type.node.nics]
            group_of = node_type.group_of()
            gpus, nics = _allocated(gres_conf, node, gres, nic_names)
            held[node] = (sorted(gpus), sorted(nics))
            result.gpus_started += len(gpus)
            if submit.nics:
                off = _unaligned(gpus, nics, group_of)
                result.pairs += len(gpus)
                result.off_switch += off
                if unplanned:
                    result.pairs_unplanned += len(gpus)
                    result.off_switch_unplanned += off
                if later:
                    result.pairs_later += len(gpus)
                    result.off_switch_later += off
            elif nics:
                result.gpu_only_with_nics += 1
            if len(gpus) in (2, 4) and _straddles(node_type, gpus):
                broken = True
        if submit.gpus in (2, 4):
            result.nvlink_jobs += 1
            result.nvlink_broken += broken
        _check_environment(cluster, job_id, held, result)


def _straddles(node_type: Any, gpus: list[int]) -> bool:
    """Some pair of the GPUs has fewer links than the node's strong pairs (crosses the halves)."""
    links = {(lk.gpu_a, lk.gpu_b): lk.links for lk in node_type.node.nvlinks}
    ids = [f"GPU{g}" for g in gpus]
    return any(
        links.get((a, b), links.get((b, a), 0)) < STRONG for i, a in enumerate(ids) for b in ids[i + 1 :]
    )


def _check_environment(
    cluster: EmulatedCluster, job_id: str, held: dict[str, tuple[list[int], list[str]]], result: RunResult
) -> None:
    path = cluster.root / "out" / f"{job_id}.out"
    lines = [ln for ln in (path.read_text().splitlines() if path.exists() else []) if " TP " in ln]
    if len(lines) < len(held):
        return  # the step has not printed yet: not counted either way
    result.env_checked += 1
    for line in lines:
        match = re.search(r"TP (\S+) gpus=(\S*) hca=(\S*)", line)
        if not match or match.group(1) not in held:
            result.env_wrong += 1
            result.env_wrong_examples.append(f"{job_id}: {line}")
            return
        node, gpus, hca = match.groups()
        want_gpus, want_nics = held[node]
        seen_gpus = sorted(int(g) for g in gpus.split(",") if g.isdigit())
        seen_nics = sorted(n for n in hca.removeprefix("=").split(",") if n)
        if seen_gpus != want_gpus or (seen_nics and seen_nics != want_nics):
            result.env_wrong += 1
            result.env_wrong_examples.append(
                f"{job_id} {node}: env {gpus} {hca}; Slurm {want_gpus} {want_nics}"
            )
            return


def _stranded(node_states: str, submit: Any) -> tuple[bool, bool]:
    """Whether a pending gang has, by ``scontrol -o show node -d``'s lines (enough free GPUs in the
    cluster in total — spread out, as the issue first measured it; enough nodes that each have a
    member's GPUs, and NICs when it asks for them, free now — room it could start in, which only a
    reservation or a race keeps it from)."""
    free_gpus, rooms = 0, 0
    for line in node_states.splitlines():
        total, used = re.search(r"\bGres=(\S*)", line), re.search(r"\bGresUsed=(\S*)", line)
        gpus = _gres_count(total, "gpu") - _gres_count(used, "gpu")
        nics = _gres_count(total, "nic") - _gres_count(used, "nic")
        free_gpus += gpus
        rooms += gpus >= submit.gpus and (not submit.nics or nics >= submit.gpus)
    return free_gpus >= submit.nodes * submit.gpus, rooms >= submit.nodes


def _gres_count(match: re.Match[str] | None, name: str) -> int:
    if match is None:
        return 0
    return sum(item.count for item in parse_gres_string(match.group(1)) if item.name == name)


def _allocated(gres_conf, node: str, gres: str, nic_names: list[str]) -> tuple[list[int], list[str]]:
    devices = node_devices(gres_conf, node)
    gpus, nics = [], []
    for item in (parse_gres_item(p) for p in split_outside_parens(gres)):
        for idx in item.indices:
            device = devices.get(item.name)[idx]
            if item.name == "gpu":
                gpus.append(device.number)
            elif item.name == "nic":
                nics.append(nic_names[device.number])
    return gpus, nics


def _unaligned(gpus: list[int], nics: list[str], group_of: dict[str, str]) -> int:
    """GPUs that cannot each get a distinct NIC of their own switch group (a greedy matching, exact
    here: a group's devices are interchangeable)."""
    free = list(nics)
    misses = 0
    for gpu in gpus:
        match = next((n for n in free if group_of.get(n) == group_of.get(f"GPU{gpu}")), None)
        if match is None:
            misses += 1
        else:
            free.remove(match)
    return misses


# --------------------------------------------------------------------------- the hook's cost alone


def show_node_line(name: str, gres: str, used_gpus: int, used_nics: int, cpus: int) -> str:
    """One ``scontrol -o show node -d`` line as Slurm 22.05 prints it (the fields the agent reads),
    the first ``used_gpus`` GPUs and ``used_nics`` NICs taken in IDX order (as Slurm fills a node)."""
    used = {"gpu": used_gpus, "nic": used_nics}
    offset = {"gpu": 0, "nic": 0}
    parts = []
    for item in gres.split(","):
        kind, gtype, count = item.split(":")
        start, n = offset[kind], int(count)
        take = max(0, min(n, used[kind] - start))
        idx = "N/A" if not take else (f"{start}" if take == 1 else f"{start}-{start + take - 1}")
        parts.append(f"{kind}:{gtype}:{take}(IDX:{idx})")
        offset[kind] += n
    state = "MIXED" if used_gpus else "IDLE"
    return (
        f"NodeName={name} Arch=x86_64 CoresPerSocket={cpus // 2} CPUAlloc={used_gpus} CPUEfctv={cpus} "
        f"CPUTot={cpus} AvailableFeatures=(null) ActiveFeatures=(null) Gres={gres} GresDrain=N/A "
        f"GresUsed={','.join(parts)} NodeAddr=127.0.0.1 RealMemory=512000 AllocMem=0 Sockets=2 "
        f"State={state} Partitions=gpu"
    )


def _job_description(submit: Submit) -> dict[str, Any]:
    """What job_submit.lua sends for ``sbatch -N n --gpus-per-node=k [--gres=nic:k]``."""
    tres = f"gres:gpu:{submit.gpus}" + (f",gres:nic:{submit.gpus}" if submit.nics else "")
    return {"submit_uid": 0, "min_nodes": submit.nodes, "max_nodes": submit.nodes, "tres_per_node": tres}


def _pending_line(number: int, submit: Submit, comment: str) -> str:
    """The job as ``squeue -t PD -o SQUEUE_FORMAT`` prints it while it waits (field by field, so the
    stand-in follows the agent's format): an hour's limit, no start estimate yet."""
    fields = {
        "%i": str(number),
        "%V": datetime.now().isoformat(timespec="seconds"),
        "%r": "Priority",
        "%S": "N/A",
        "%Y": "(null)",
        "%D": str(submit.nodes),
        "%b": _job_description(submit)["tres_per_node"],
        "%l": "1:00:00",
        "%k": comment,
    }
    return "|".join(fields[code] for code in SQUEUE_FORMAT.split("|"))


def _lua_job_line(submit: Submit) -> str:
    """One job for bench/slurm_hook_harness.lua: the job_desc fields sbatch -N n --gpus-per-node=k sets."""
    return " ".join(f"{k}={v}" for k, v in _job_description(submit).items() if k != "submit_uid") + "\n"


def hook_cost(
    nodes: int,
    seed: int,
    workdir: Path,
    submits: int | None = None,
    client_kind: str = "python",
    budget_ms: float | None = None,
    config: str = "hook",
) -> dict[str, Any]:
    """The hook's path without slurmctld: the stdlib client (``python3 -I -S place_client.py``, as
    job_submit.lua runs it) → the agent on a unix socket → the gRPC solver, for the bench's job stream
    on ``nodes`` nodes whose state is Slurm's text format (the bench background, 40 % of the GPUs).
    Planned jobs are shown to the agent as pending jobs carrying their plan (its ``squeue``), so the
    cluster fills as it would. Per submit: the client's wall time and the agent's stages.

    ``client_kind`` "lua": job_submit.lua itself in one long-lived Lua 5.1 interpreter (as slurmctld
    keeps it), talking to the agent's socket through luaposix; the time is slurm_job_submit's own.
    ``budget_ms``: the agent's answer budget (0: wait for the solver, as before session 11; None:
    the agent's default). ``config``: a hook configuration of :data:`CONFIGS` (``hook-untyped``: no
    later-start typing). The whole stream (``submits`` None) fills the cluster, so its last third
    finds no room and takes the later-start path (later.py); its answers are counted apart.
    No job runs here: the running jobs' read (``squeue -t R``) finds none, so every GPU in use counts
    as freeing in ``later.UNKNOWN_END_S`` — the same walk over the nodes, ends or not."""
    paths = _write_captures(workdir / "captures")
    spec = ClusterSpec(
        nodes=nodes, nodes_per_leaf=8, leaves_per_spine=2, captures=tuple(paths), type_run=max(1, nodes // 64)
    )
    cluster = EmulatedCluster(workdir / "cluster", spec)
    cluster.write_files()
    gres = {}
    for path, names in spec.node_types().items():
        gres.update(dict.fromkeys(names, gres_string(load_node_type(path.resolve()), typed=True)))
    busy = {
        args[1]: int(re.search(r"gpu:(\d+)", args[2]).group(1)) for args in background(spec.names(), seed)
    }
    show = workdir / "show-node.txt"
    show.write_text(
        "\n".join(
            show_node_line(n, gres[n], busy.get(n, 0), 0, spec.sockets * spec.cores_per_socket)
            for n in spec.names()
        )
        + "\n"
    )
    pending = workdir / "pending.txt"
    pending.write_text("")
    scontrol, squeue = workdir / "scontrol", workdir / "squeue"
    scontrol.write_text(f"#!/bin/sh\ncat {show}\n")
    # squeue -t R (the running jobs' read): none; any other squeue: the pending jobs.
    squeue.write_text(f'#!/bin/sh\ncase " $* " in *" -t R "*) exit 0;; esac\ncat {pending}\n')
    for script in (scontrol, squeue):
        script.chmod(0o755)
    server = SolverProcess(workdir / "solver.log")
    budget = {} if budget_ms is None else {"answer_budget_s": budget_ms / 1000}
    later = LATER_TYPES.get(config, {})
    stubs = {"scontrol": str(scontrol), "squeue": str(squeue)}
    agent = counting_agent(cluster, server.port, **stubs, **budget, **later)
    running = serve_agent(agent, unix=workdir / "agent.sock")
    client = ROOT / "adapters" / "slurm" / "place_client.py"
    out: dict[str, Any] = {
        "nodes": nodes,
        "seed": seed,
        "config": config,
        "later_types": agent.config.later_types,
        "client": client_kind,
        "budget_ms": agent.config.answer_budget_s * 1000,
        "client_ms": [],
        "agent_ms": [],
        "stages": [],
        "messages": [],
    }
    lua = None
    if client_kind == "lua":
        hook = workdir / "job_submit.lua"
        shutil.copy(ROOT / "adapters" / "slurm" / "job_submit.lua", hook)
        (workdir / "job_submit_topoplace.conf").write_text(f"agent = {running.address}\ntimeout = 2\n")
        lua = subprocess.Popen(
            ["lua5.1", str(ROOT / "bench" / "slurm_hook_harness.lua"), str(hook)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
    try:
        for submit in job_stream(nodes, seed)[:submits]:
            agent.last = {"ms": None, "stages_ms": {}}  # stays so when the client gave up first
            if lua is not None:
                assert lua.stdin is not None and lua.stdout is not None
                lua.stdin.write(_lua_job_line(submit))
                lua.stdin.flush()
                ms, _rc, _req, comment = re.match(
                    r"(\S+) (\S+) (\S*) \| ?(.*)", lua.stdout.readline()
                ).groups()
                out["client_ms"].append(float(ms))
                comment = comment if comment.startswith("topoplace/") else ""
            else:
                t0 = time.perf_counter()
                done = subprocess.run(
                    [
                        "/usr/bin/python3",
                        "-I",
                        "-S",
                        str(client),
                        "--agent",
                        running.address,
                        "--timeout",
                        "2",
                    ],
                    input=json.dumps(_job_description(submit)),
                    capture_output=True,
                    text=True,
                    check=False,
                )
                out["client_ms"].append((time.perf_counter() - t0) * 1000)
                comment = next(
                    (ln[12:] for ln in done.stdout.splitlines() if ln.startswith("set comment ")), ""
                )
            answer = agent.last
            out["messages"].append(answer.get("message", ""))
            out["agent_ms"].append(answer.get("ms") or out["client_ms"][-1])  # gave up: at least that
            out["stages"].append(answer.get("stages_ms", {}))
            # Queued, not started yet: planned or typed (a comment), or passed on as submitted (no
            # room now: Slurm queues it untyped). squeue shows each (adapters/slurm/pending.py).
            if comment or answer.get("action") == "pass":
                with pending.open("a") as file:
                    file.write(_pending_line(len(out["client_ms"]), submit, comment) + "\n")
    finally:
        if lua is not None:
            lua.kill()
            lua.wait()
        running.stop()
        server.stop()
    out["answers"] = dict(agent.counts)
    # Answered by the fast placer (its plan, or "found no plan"): since session 13 the fast plan is made
    # during the solver's wait, so the stage alone no longer says the answer was the fast one.
    out["fast"] = sum(1 for message in out["messages"] if "fast placer" in message)
    out["refinements"] = dict(Counter(_outcome_kind(r["outcome"]) for r in agent.refinements))
    return out


def render_cost(runs: list[dict[str, Any]]) -> str:
    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else math.nan

    out = [
        "| nodes | config | client | budget ms | submits | hook ms median / p99 | agent ms median / p99 "
        "| no room now: submits, hook ms median / p99 (typed for later) | fast plans "
        "| agent stages, median ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        keys = sorted({k for st in r["stages"] for k in st})
        stages = ", ".join(
            f"{k} {statistics.median([st.get(k, 0.0) for st in r['stages']]):.1f}" for k in keys
        )
        # The answers that found no room (the later-start path when on, left to Slurm's queue when off).
        no_room = [ms for ms, m in zip(r["client_ms"], r["messages"], strict=True) if "no room now" in m]
        typed = sum("for a later start" in m for m in r["messages"])
        later = (
            f"{len(no_room)}, {statistics.median(no_room):.0f} / {pct(no_room, 0.99):.0f} ({typed})"
            if no_room
            else "0"
        )
        out.append(
            f"| {r['nodes']} | {r.get('config', 'hook')} | {r.get('client', 'python')} | "
            f"{r.get('budget_ms', 0):g} | {len(r['client_ms'])} | "
            f"{statistics.median(r['client_ms']):.0f} / "
            f"{pct(r['client_ms'], 0.99):.0f} | {statistics.median(r['agent_ms']):.0f} / "
            f"{pct(r['agent_ms'], 0.99):.0f} | {later} | {r.get('fast', 0)} | {stages} |"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------- report


def machine() -> str:
    cpu = ""
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in lines if "model name" in line)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout
    load = os.getloadavg()[0]
    return f"commit {commit.strip()}, {os.cpu_count()} cores, {platform.machine()}, {cpu}, load {load:.1f}"


def render(results: list[RunResult], command: str) -> str:
    def cell(r: RunResult, key: str) -> str:
        if key == "pairs":
            return f"{r.off_switch} / {r.pairs}"
        if key == "nvlink":
            return f"{r.nvlink_broken} / {r.nvlink_jobs}"
        if key == "env":
            return f"{r.env_wrong} / {r.env_checked}"
        if key == "gangs":
            return f"{r.gangs_stranded} / {r.gangs_pending}"
        if key == "gangs_fit":
            return f"{r.gangs_fit_now} / {r.gangs_pending}"
        if key == "unplanned":
            return f"{r.started_unplanned} ({r.off_switch_unplanned} / {r.pairs_unplanned})"
        if key == "later":
            return f"{r.started_later} ({r.off_switch_later} / {r.pairs_later})"
        if key == "waits":
            return f"{statistics.median(r.waits_s):.0f} / {max(r.waits_s):.0f}" if r.waits_s else "-"
        if key == "submit":
            p95 = sorted(r.submit_ms)[int(0.95 * len(r.submit_ms))]
            return f"{statistics.median(r.submit_ms):.0f} / {p95:.0f}"
        return str(getattr(r, key))

    rows = [
        ("jobs started (of submitted)", "started"),
        ("GPUs of started jobs", "gpus_started"),
        ("GPU↔NIC pairs off-switch / pairs asked", "pairs"),
        ("GPU-only job-nodes holding NICs", "gpu_only_with_nics"),
        ("2/4-GPU jobs straddling NVLink halves / running", "nvlink"),
        ("jobs whose env names devices Slurm did not give / checked", "env"),
        ("gangs stranded (enough free GPUs in total) / pending", "gangs"),
        ("gangs that fit now (enough nodes with a member's GPUs free) / pending", "gangs_fit"),
        ("sbatch ms median / p95", "submit"),
    ]
    if any(r.churn_s for r in results):
        rows[1:1] = [
            ("started without a hook plan (their off-switch pairs / pairs)", "unplanned"),
            ("started typed for a later start (their off-switch pairs / pairs)", "later"),
            ("wait from submit to start, s, median / max", "waits"),
        ]
    by_key = {(r.nodes, r.seed, r.config): r for r in results}
    out = [f"Command: `{command}`", f"Machine: {machine()}", ""]
    for nodes, seed in sorted({(r.nodes, r.seed) for r in results}):
        runs = [by_key.get((nodes, seed, c)) for c in CONFIGS]
        present = [(c, r) for c, r in zip(CONFIGS, runs, strict=True) if r is not None]
        churn = f", jobs ending, {present[0][1].churn_s:.0f} s window" if present[0][1].churn_s else ""
        out += [
            f"### {nodes} nodes, seed {seed} ({present[0][1].submitted} jobs submitted{churn})",
            "",
            "| | " + " | ".join(c for c, _ in present) + " |",
            "|---|" + "---|" * len(present),
        ]
        out += [f"| {name} | " + " | ".join(cell(r, key) for _, r in present) + " |" for name, key in rows]
        out += [
            "",
            "Pending at the end: " + "; ".join(f"{c} {json.dumps(r.pending_reasons)}" for c, r in present),
        ]
        for name in ("hook", *LATER_TYPES):
            if (hook := by_key.get((nodes, seed, name))) is not None:
                out += [
                    "",
                    f"{name} answers: {json.dumps(hook.answers)}; not applied: {json.dumps(hook.reasons)}",
                ]
        examples = [e for _, r in present for e in r.env_wrong_examples[:2]]
        if examples:
            out += ["", "Environment mismatches: " + "; ".join(examples)]
        out.append("")
    return "\n".join(out)


def _summary_row(runs: dict[str, list[RunResult]], present: list[str], name: str, value: Any) -> str:
    cells = []
    for c in present:
        per = [value(r) for r in runs[c]]
        total = tuple(sum(x) for x in zip(*per, strict=True)) if isinstance(per[0], tuple) else sum(per)
        fmt = (lambda v: " / ".join(map(str, v))) if isinstance(total, tuple) else str
        cells.append(f"{fmt(total)} ({', '.join(fmt(v) for v in per)})")
    return f"| {name} | " + " | ".join(cells) + " |"


def summary(results: list[RunResult]) -> str:
    """Per node count and configuration, over the seeds: totals (and per-seed figures in brackets)."""
    out = []
    for nodes in sorted({r.nodes for r in results}):
        runs = {
            c: sorted((r for r in results if r.nodes == nodes and r.config == c), key=lambda r: r.seed)
            for c in CONFIGS
        }
        present = [c for c in CONFIGS if runs[c]]
        seeds = sorted({r.seed for r in results if r.nodes == nodes})
        out += [
            f"### {nodes} nodes, seeds {', '.join(map(str, seeds))}: totals (per seed)",
            "",
            "| | " + " | ".join(present) + " |",
            "|---|" + "---|" * len(present),
        ]

        out += [
            _summary_row(runs, present, "jobs started", lambda r: r.started),
            _summary_row(runs, present, "GPUs of started jobs", lambda r: r.gpus_started),
            _summary_row(
                runs,
                present,
                "started without a hook plan: jobs / their off-switch pairs / pairs",
                lambda r: (r.started_unplanned, r.off_switch_unplanned, r.pairs_unplanned),
            ),
            _summary_row(
                runs,
                present,
                "started typed for later: jobs / their off-switch pairs / pairs",
                lambda r: (r.started_later, r.off_switch_later, r.pairs_later),
            ),
            _summary_row(
                runs, present, "GPU↔NIC pairs off-switch / asked", lambda r: (r.off_switch, r.pairs)
            ),
            _summary_row(runs, present, "GPU-only job-nodes holding NICs", lambda r: r.gpu_only_with_nics),
            _summary_row(
                runs,
                present,
                "2/4-GPU jobs across NVLink halves / running",
                lambda r: (r.nvlink_broken, r.nvlink_jobs),
            ),
            _summary_row(
                runs,
                present,
                "env names devices Slurm did not give / checked",
                lambda r: (r.env_wrong, r.env_checked),
            ),
            _summary_row(
                runs, present, "gangs stranded / pending", lambda r: (r.gangs_stranded, r.gangs_pending)
            ),
            _summary_row(
                runs, present, "gangs that fit now / pending", lambda r: (r.gangs_fit_now, r.gangs_pending)
            ),
        ]
        medians = [
            f"{statistics.median([m for r in runs[c] for m in r.submit_ms]):.0f}" for c in present if runs[c]
        ]
        out += ["| sbatch ms, median of all submits | " + " | ".join(medians) + " |", ""]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[64])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--configs", nargs="+", default=["slurm", "typed", "hook"], choices=CONFIGS)
    parser.add_argument("--json", type=Path, help="append each run's figures here as it finishes")
    parser.add_argument("--output", type=Path, help="write the Markdown tables here")
    parser.add_argument("--keep", type=Path, help="save each run's end state and slurmctld log here")
    parser.add_argument(
        "--churn",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="jobs that end: the churn stream arrives and runs over this window (e.g. 420)",
    )
    parser.add_argument(
        "--hook-cost", action="store_true", help="only the hook's path (client → agent → solver), no Slurm"
    )
    parser.add_argument("--submits", type=int, help="--hook-cost: only the first N jobs of the stream")
    parser.add_argument(
        "--client",
        nargs="+",
        default=["python"],
        choices=["python", "lua"],
        help="--hook-cost: python = place_client.py per submit; lua = job_submit.lua on the socket",
    )
    parser.add_argument(
        "--budget-ms",
        type=float,
        nargs="+",
        default=[None],
        help="--hook-cost: the agent's answer budget(s), side by side (0: wait for the solver)",
    )
    parser.add_argument("--summarise", type=Path, nargs="+", help="only render these --json files")
    args = parser.parse_args()
    if args.summarise:
        rows = [json.loads(line) for path in args.summarise for line in path.read_text().splitlines()]
        costs = [row for row in rows if "client_ms" in row]  # --hook-cost runs
        if costs:
            print(render_cost(costs))
        if runs := [RunResult(**row) for row in rows if "client_ms" not in row]:
            print(summary(runs))
        return 0
    if args.hook_cost:
        costs = []
        for nodes in args.nodes:
            hooks = [c for c in args.configs if c.startswith("hook")] or ["hook"]
            runs = (
                (s, c, k, b) for s in args.seeds for c in hooks for k in args.client for b in args.budget_ms
            )
            for seed, config, kind, budget in runs:
                workdir = Path(tempfile.mkdtemp(prefix="slurm-hook-cost-"))
                try:
                    costs.append(hook_cost(nodes, seed, workdir, args.submits, kind, budget, config))
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
                print(json.dumps(costs[-1] | {"stages": None, "messages": None}), flush=True)
                if args.json:
                    with args.json.open("a") as out:
                        out.write(json.dumps(costs[-1]) + "\n")
        print(f"Machine: {machine()}\n\n" + render_cost(costs))
        return 0
    if missing := missing_binaries():
        print(f"Slurm not installed ({', '.join(missing)}): run scripts/install-slurm.sh")
        return 2
    results = []
    for nodes in args.nodes:
        for seed in args.seeds:
            for config in args.configs:  # side by side: the three configurations back to back
                workdir = Path(tempfile.mkdtemp(prefix=f"slurm-bench-{config}-"))
                try:
                    result = run(config, nodes, seed, workdir, args.keep, args.churn)
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
                results.append(result)
                print(json.dumps(asdict(result) | {"submit_ms": None}), flush=True)
                if args.json:
                    with args.json.open("a") as out:
                        out.write(json.dumps(asdict(result)) + "\n")
    command = (
        "python -m bench.slurm_compare "
        + " ".join(
            f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in (("nodes", args.nodes), ("seeds", args.seeds), ("configs", args.configs))
        )
        + (f" --churn {args.churn:g}" if args.churn else "")
    )
    report = render(results, command)
    if args.output:
        args.output.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
