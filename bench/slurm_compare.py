"""Slurm alone vs Slurm through the topoplace hook, on the same real emulated cluster and job stream.

Both runs start a fresh emulated cluster (``adapters/slurm/emulate.py``: real munged, slurmctld with
cons_tres + topology/tree, one ``slurmd -N`` per node) from the same nvidia-smi capture, whose GPU k
is *not* next to NIC k. Both lay down the same background load with the hook off (Slurm picks those
devices), then submit the same stream of GPU jobs — every job asks for GPUs and as many NICs
(``--gpus-per-node=k --gres=nic:k``) — in the same order; only the second run has the hook on.

Reported per run: jobs started, GPUs allocated, GPU↔NIC pairs not on one PCIe switch group, leaf
switches spanned per gang, NVLink pairs broken; and the hook's added ``sbatch`` latency (median of N
submits with the hook on minus the median with it off, service up).

    .venv/bin/python -m bench.slurm_compare [--nodes 64] [--latency-samples 30]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from adapters.slurm.agent import Agent, AgentConfig, serve_agent
from adapters.slurm.emulate import ClusterSpec, EmulatedCluster, missing_binaries
from adapters.slurm.gres import node_devices, parse_gres_conf, parse_gres_item, split_outside_parens
from adapters.slurm.nodetypes import load_node_type
from solver.service.server import serve

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "fixtures" / "topo" / "a100-nv12-8gpu-10nic-fixture.txt"


@dataclass(frozen=True)
class Submit:
    nodes: int
    gpus: int
    switches: bool = False

    def args(self) -> list[str]:
        # A time limit lets the backfill scheduler start jobs behind one that has to wait.
        args = [f"-N{self.nodes}", f"--gpus-per-node={self.gpus}", f"--gres=nic:{self.gpus}", "-t", "60"]
        return [*args, "--switches=1"] if self.switches else args


def job_stream(seed: int = 1) -> list[Submit]:
    jobs = (
        [Submit(1, 1)] * 12
        + [Submit(1, 2)] * 8
        + [Submit(1, 4)] * 6
        + [Submit(2, 4)] * 4
        + [Submit(4, 8)] * 4
        + [Submit(4, 8, switches=True)] * 2
    )
    rng = random.Random(seed)
    rng.shuffle(jobs)
    return jobs


def background(names: list[str]) -> list[list[str]]:
    """Every other node runs a 3-GPU job that Slurm placed itself (IDX 0-2, splitting a group)."""
    return [["-w", name, "--gres=gpu:3"] for name in names[::2]]


@dataclass
class RunResult:
    started: int = 0
    submitted: int = 0
    gpus: int = 0
    unaligned_pairs: int = 0
    pairs: int = 0
    gang_leaves: list[int] | None = None
    nvlink_broken: int = 0
    submit_ms: list[float] | None = None
    refused: list[str] = field(default_factory=list)


def _allocated(gres_conf, node: str, gres: str, nic_names: list[str]) -> tuple[list[int], list[str]]:
    devices = node_devices(gres_conf, node)
    gpus, nics = [], []
    for item in (parse_gres_item(p) for p in split_outside_parens(gres)):
        for idx in item.indices:
            device = devices.get(item.name)[idx]
            (gpus if item.name == "gpu" else nics).append(
                device.number if item.name == "gpu" else nic_names[device.number]
            )
    return gpus, nics


def _unaligned(gpus: list[int], nics: list[str], group_of: dict[str, str]) -> int:
    """GPUs that cannot each get a distinct NIC of their own switch group (a best matching)."""
    free = list(nics)
    misses = 0
    for gpu in gpus:
        match = next((n for n in free if group_of.get(n) == group_of.get(f"GPU{gpu}")), None)
        if match is None:
            misses += 1
        else:
            free.remove(match)
    return misses


def run(hook: bool, nodes: int, latency_samples: int, workdir: Path) -> RunResult:
    cluster = EmulatedCluster(
        workdir, ClusterSpec(nodes=nodes, nodes_per_leaf=8, leaves_per_spine=2, capture=CAPTURE)
    )
    cluster.write_files({"enabled": "no", "timeout": "5"})
    server = serve("127.0.0.1", 0)
    os.environ["SLURM_CONF"] = str(cluster.conf)
    os.environ["PATH"] = cluster.env()["PATH"]
    cluster.start(timeout_s=180)
    running = None
    try:
        agent = Agent(
            AgentConfig(
                solver=f"127.0.0.1:{server.port}",
                topo_dir=cluster.topo_dir,
                gres_conf=workdir / "etc" / "gres.conf",
                topology=workdir / "etc" / "topology.conf",
            )
        )
        running = serve_agent(agent)
        cluster.write_hook_conf({"agent": running.address})
        for args in background(cluster.spec.names()):
            cluster.run("sbatch", "-o", "/dev/null", *args, "--wrap", "sleep 3000")
        time.sleep(3)
        cluster.write_hook_conf({"enabled": "yes" if hook else "no"})
        agent.refresh()
        result = RunResult(submit_ms=[])
        ids = []
        for submit in job_stream():
            t0 = time.perf_counter()
            done = cluster.run(
                "sbatch", "--parsable", "-o", "/dev/null", *submit.args(), "--wrap", "sleep 3000", check=False
            )
            result.submit_ms.append((time.perf_counter() - t0) * 1000)  # type: ignore[union-attr]
            result.submitted += 1
            if done.returncode == 0:
                ids.append((done.stdout.strip(), submit))
            else:
                result.refused.append(f"{' '.join(submit.args())}: {done.stderr.strip()}")
        time.sleep(8)  # a few scheduler passes
        measure(cluster, ids, result)
        result.submit_ms = latency(cluster, latency_samples) if hook else []
        return result
    finally:
        if running:
            running.stop()
        server.stop()
        cluster.stop()


def latency(cluster: EmulatedCluster, samples: int) -> list[float]:
    """Paired sbatch timings of a 1-GPU job that cannot start (held), hook on then off."""
    on, off = [], []
    for i in range(samples):
        for enabled, bucket in (("yes", on), ("no", off)) if i % 2 == 0 else (("no", off), ("yes", on)):
            cluster.write_hook_conf({"enabled": enabled})
            t0 = time.perf_counter()
            cluster.run("sbatch", "-H", "-o", "/dev/null", "--gpus-per-node=1", "--wrap", "true")
            bucket.append((time.perf_counter() - t0) * 1000)
    return [statistics.median(on), statistics.median(off)]


def measure(cluster: EmulatedCluster, ids: list[tuple[str, Submit]], result: RunResult) -> None:
    gres_conf = parse_gres_conf((cluster.root / "etc" / "gres.conf").read_text())
    node_type = load_node_type(CAPTURE)
    nic_names = [n.name for n in node_type.node.nics]
    group_of = node_type.group_of()
    leaf_of = {}
    for line in (cluster.root / "etc" / "topology.conf").read_text().splitlines():
        if " Nodes=" in line:
            from adapters.slurm.hostlist import expand

            leaf = line.split()[0].split("=")[1]
            leaf_of.update(dict.fromkeys(expand(line.split("Nodes=")[1]), leaf))
    jobs = cluster.jobs()
    result.gang_leaves = []
    for job_id, submit in ids:
        job = jobs.get(job_id)
        if not job or job["state"] != "RUNNING":
            continue
        result.started += 1
        alloc: dict[str, str] = job["alloc"]  # type: ignore[assignment]
        for node, gres in alloc.items():
            gpus, nics = _allocated(gres_conf, node, gres, nic_names)
            result.gpus += len(gpus)
            result.pairs += len(gpus)
            result.unaligned_pairs += _unaligned(gpus, nics, group_of)
        if submit.nodes > 1:
            result.gang_leaves.append(len({leaf_of[n] for n in alloc}))


def machine() -> str:
    cpu = ""
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in lines if "model name" in line)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout
    return f"commit {commit.strip()}, {os.cpu_count()} cores, {platform.machine()}, {cpu}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--latency-samples", type=int, default=30)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "RESULTS-slurm.md")
    args = parser.parse_args()
    if missing := missing_binaries():
        print(f"Slurm not installed ({', '.join(missing)}): run scripts/install-slurm.sh")
        return 2
    results = {}
    for hook in (False, True):
        workdir = Path(tempfile.mkdtemp(prefix=f"slurm-bench-{'hook' if hook else 'alone'}-"))
        try:
            results[hook] = run(hook, args.nodes, args.latency_samples, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    report = render(results, args)
    args.output.write_text(report)
    print(report)
    return 0


def render(results: dict[bool, RunResult], args: argparse.Namespace) -> str:
    def leaves(r: RunResult) -> str:
        spans = r.gang_leaves or []
        return f"{statistics.mean(spans):.2f} (max {max(spans)})" if spans else "-"

    alone, hook = results[False], results[True]
    on, off = hook.submit_ms or [0.0, 0.0]
    rows = [
        ("jobs started", alone.started, hook.started),
        ("GPUs allocated", alone.gpus, hook.gpus),
        (
            "GPU↔NIC pairs not on one PCIe switch",
            f"{alone.unaligned_pairs} of {alone.pairs}",
            f"{hook.unaligned_pairs} of {hook.pairs}",
        ),
        ("leaf switches spanned per gang (mean)", leaves(alone), leaves(hook)),
        ("jobs refused at submit", len(alone.refused), len(hook.refused)),
        ("NVLink pairs broken", "0 (all-to-all NV12)", "0 (all-to-all NV12)"),
    ]
    lines = [
        "# Slurm alone vs Slurm + topoplace hook",
        "",
        f"Command: `.venv/bin/python -m bench.slurm_compare --nodes {args.nodes} --latency-samples "
        f"{args.latency_samples}`",
        f"Machine: {machine()}",
        "",
        f"Cluster: {args.nodes} emulated nodes (real slurmctld 22.05 + one slurmd each, cons_tres, "
        "topology/tree: 8 nodes per leaf, 2 leaves per spine), each the 8×A100 NV12 / 10-NIC capture "
        "`fixtures/topo/a100-nv12-8gpu-10nic-fixture.txt` (GPU k is not next to NIC k). Background: every "
        "other node runs a 3-GPU job Slurm placed itself. Stream: "
        f"{alone.submitted} jobs (1/2/4-GPU singles, 2×4 and 4×8 gangs, 4×8 gangs with "
        "--switches=1), each asking for as many NICs as GPUs, same order in both runs.",
        "",
        "| | Slurm alone | Slurm + hook |",
        "|---|---|---|",
        *[f"| {name} | {a} | {b} |" for name, a, b in rows],
        "",
        f"Hook latency: median `sbatch` {on:.1f} ms with the hook vs {off:.1f} ms without "
        f"(**+{on - off:.1f} ms**, {args.latency_samples} paired submits, service up, {args.nodes} nodes).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
