"""The TaskProlog's helper: the GPUs and NICs Slurm allocated to this job on this node, as ``export``
lines — never the plan's devices.

``taskprolog.sh`` runs this as ``python3 -I -S job_devices.py`` (standard library only, ~30 ms) on the
compute node, as the job's user, before each task. Slurm is the authority on what a job holds:

* the job's GRES on this node from ``scontrol show job -d <id>`` (``GRES=gpu:sw0:2(IDX:0-1),nic:…``),
  each IDX mapped through gres.conf's device order to a device file: ``/dev/nvidia5`` is GPU 5,
  ``/dev/infiniband/uverbs2`` is the NIC whose name sysfs gives (``/sys/class/infiniband_verbs/uverbs2/
  ibdev``) or, without sysfs, column ``NIC2`` of the node's ``nvidia-smi topo -m`` capture;
* for a step, Slurm's own ``SLURM_STEP_GPUS`` (a step may hold fewer GPUs than its job). When it
  disagrees with the job's GRES, Slurm's variable wins and the disagreement is logged.

The plan in the comment (``topoplace/v1 …``) only steered Slurm at submit. If it names other devices
than Slurm allocated, that is logged (syslog, stderr and ``TOPOPLACE_PROLOG_LOG`` when set) and the
allocation is exported. NICs are listed so that NIC k shares GPU k's switch group (gres.conf
``Type=``) where the allocation allows; ``NCCL_IB_HCA`` uses NCCL's exact-match form (``=mlx5_1``
must not also select ``mlx5_10``).

Exports: ``CUDA_VISIBLE_DEVICES`` (unless ``TOPOPLACE_KEEP_CUDA=1``: with cgroup ``ConstrainDevices``
Slurm renumbers devices from 0 and its own value is right), ``NCCL_IB_HCA``, ``TOPOPLACE_GPUS``,
``TOPOPLACE_NICS``, ``TOPOPLACE_PLAN_ID``. Never fails the task: any error is logged and nothing is
exported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script with -I -S: the package root is three levels up
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from adapters.slurm.captures import capture_for, hostlist_captures, nic_legend
from adapters.slurm.gres import (
    Device,
    NodeDevices,
    node_devices,
    parse_gres_conf,
    parse_gres_item,
    parse_index_list,
    split_outside_parens,
)
from adapters.slurm.hostlist import HostlistError, expand
from adapters.slurm.plancomment import ParsedPlan, parse_plan_comment

NODE_GRES = re.compile(r"^\s*Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)", re.MULTILINE)
SYSFS_VERBS = Path("/sys/class/infiniband_verbs")


@dataclass(frozen=True)
class Allocated:
    """What Slurm gave the job on one node: GPUs (nvidia-smi index, switch type) and NICs (name, type)."""

    gpus: tuple[tuple[int, str], ...]
    nics: tuple[tuple[str, str], ...]


def node_gres(job_text: str, node: str) -> str | None:
    """The ``GRES=`` of ``node`` in ``scontrol show job -d`` output; None when the job has no line
    for it (not allocated there, or not started)."""
    for hostlist, gres in NODE_GRES.findall(job_text):
        try:
            if node in expand(hostlist):
                return gres
        except HostlistError:
            continue
    return None


def nic_name_of(device: Device, legend: Mapping[int, str], sysfs: Path = SYSFS_VERBS) -> str | None:
    """The NIC's device name: sysfs knows it on a real node; else the capture's NIC legend."""
    ibdev = sysfs / Path(device.file).name / "ibdev"
    try:
        return ibdev.read_text().strip() or None
    except OSError:
        pass
    return legend.get(device.number) if device.number is not None else None


def allocated(gres: str, devices: NodeDevices, nic_name: Callable[[Device], str | None]) -> Allocated:
    """Map each IDX of a node's job GRES back to its device. Raises ValueError naming the IDX that
    gres.conf does not have (the prolog then exports nothing)."""
    gpus: list[tuple[int, str]] = []
    nics: list[tuple[str, str]] = []
    for item in (parse_gres_item(part) for part in split_outside_parens(gres)):
        if item.name not in ("gpu", "nic"):
            continue
        table = devices.get(item.name)
        for idx in item.indices:
            if idx >= len(table):
                raise ValueError(f"GRES {item.name} IDX {idx} is past the {len(table)} in gres.conf")
            device = table[idx]
            if item.name == "gpu":
                if device.number is None:
                    raise ValueError(f"gres.conf line {device.conf_line}: a GPU without File=")
                gpus.append((device.number, device.type))
            else:
                name = nic_name(device)
                if name is None:
                    raise ValueError(f"no name for NIC {device.file} (no sysfs entry, no capture legend)")
                nics.append((name, device.type))
    return Allocated(tuple(gpus), tuple(nics))


def paired_nics(gpus: tuple[tuple[int, str], ...], nics: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """NICs in GPU order, NIC k of GPU k's switch group where one is left; the rest after."""
    remaining = list(nics)
    ordered: list[str] = []
    for _, gtype in gpus:
        match = next((n for n in remaining if n[1] == gtype), None)
        if match is not None:
            ordered.append(match[0])
            remaining.remove(match)
    return tuple(ordered + [name for name, _ in remaining])


def step_gpus(env: Mapping[str, str]) -> tuple[int, ...] | None:
    """Slurm's own GPU list for this task's step (``SLURM_STEP_GPUS``). ``SLURM_JOB_GPUS`` is not
    used: Slurm 22.05 copies the batch host's value into steps on every other node (seen on the
    emulated cluster: a task on gn02 holding GPUs 0,1 had ``SLURM_JOB_GPUS=4,5``, gn01's)."""
    value = env.get("SLURM_STEP_GPUS", "").strip()
    if not value:
        return None
    try:
        return parse_index_list(value)
    except ValueError:
        return None


def exports(
    job_text: str, node: str, devices: NodeDevices, legend: Mapping[int, str], env: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """(``export`` lines, log lines) for this node's task."""
    log: list[str] = []
    job_id = env.get("SLURM_JOB_ID", "?")
    gres = node_gres(job_text, node)
    if gres is None:
        return [], [f"job {job_id}: scontrol shows no allocation on {node}: nothing exported"]
    got = allocated(gres, devices, lambda d: nic_name_of(d, legend))
    gpus = got.gpus
    slurm_env = step_gpus(env)
    if slurm_env is not None and sorted(slurm_env) != sorted(g for g, _ in gpus):
        kept = [g for g in gpus if g[0] in slurm_env]
        if len(kept) == len(slurm_env):
            gpus = tuple(kept)  # a step holding part of the job's GPUs
        else:
            log.append(
                f"job {job_id} on {node}: Slurm's step GPUs {list(slurm_env)} are not among the job's "
                f"GRES {[g for g, _ in got.gpus]}: exporting Slurm's step GPUs"
            )
            gpus = tuple((g, "") for g in slurm_env)
    nics = paired_nics(gpus, got.nics) if gpus or got.nics else ()
    if slurm_env is not None and len(gpus) < len(got.gpus):
        nics = nics[: len(gpus)]  # the step's share: the NICs paired with its GPUs
    plan = parse_plan_comment(job_text)
    log += plan_mismatch(plan, node, got, job_id)
    gpu_text = ",".join(str(g) for g, _ in gpus)
    lines = []
    if plan is not None:
        lines.append(f"export TOPOPLACE_PLAN_ID={plan.plan_id}")
    lines.append(f"export TOPOPLACE_GPUS={gpu_text}")
    lines.append(f"export TOPOPLACE_NICS={','.join(nics)}")
    if gpu_text and env.get("TOPOPLACE_KEEP_CUDA", "0") != "1":
        lines.append(f"export CUDA_VISIBLE_DEVICES={gpu_text}")
    if nics:
        lines.append(f"export NCCL_IB_HCA=={','.join(nics)}")
    return lines, log


def plan_mismatch(plan: ParsedPlan | None, node: str, got: Allocated, job_id: str) -> list[str]:
    if plan is None or node not in plan.nodes:
        return [] if plan is None else [f"job {job_id}: plan {plan.plan_id} has no entry for {node}"]
    planned_gpus, planned_nics = plan.nodes[node]
    held_gpus = sorted(g for g, _ in got.gpus)
    held_nics = sorted(n for n, _ in got.nics)
    if sorted(planned_gpus) == held_gpus and sorted(planned_nics) == held_nics:
        return []
    return [
        f"job {job_id} on {node}: plan {plan.plan_id} named GPUs {sorted(planned_gpus)} NICs "
        f"{sorted(planned_nics)}, Slurm allocated GPUs {held_gpus} NICs {held_nics}: exporting Slurm's"
    ]


def _log(lines: list[str], env: Mapping[str, str]) -> None:
    for line in lines:
        print(f"topoplace taskprolog: {line}", file=sys.stderr)
    path = env.get("TOPOPLACE_PROLOG_LOG")
    if path and lines:
        try:
            with open(path, "a") as out:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
                out.writelines(f"{stamp} {line}\n" for line in lines)
        except OSError:
            pass
    try:
        import syslog

        for line in lines:
            syslog.syslog(syslog.LOG_WARNING, f"topoplace taskprolog: {line}")
    except (ImportError, OSError):
        pass


def _gres_conf_path(env: Mapping[str, str]) -> Path:
    if env.get("TOPOPLACE_GRES_CONF"):
        return Path(env["TOPOPLACE_GRES_CONF"])
    conf = env.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    return Path(conf).parent / "gres.conf"  # gres.conf always sits next to slurm.conf


def _legend(env: Mapping[str, str], node: str) -> dict[int, str]:
    directory = env.get("TOPOPLACE_TOPO_DIR")
    if not directory:
        return {}
    patterns, _ = hostlist_captures(Path(directory))
    path = capture_for(Path(directory), node, patterns)
    try:
        return nic_legend(path.read_text()) if path else {}
    except OSError:
        return {}


def main(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return 0
    node = env.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    try:
        job_text = subprocess.run(
            [env.get("TOPOPLACE_SCONTROL", "scontrol"), "show", "job", "-d", job_id],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        gres_path = _gres_conf_path(env)
        conf = parse_gres_conf(gres_path.read_text(), str(gres_path))
        lines, log = exports(job_text, node, node_devices(conf, node), _legend(env, node), env)
    except Exception as err:  # never fail the task: say why nothing was exported
        _log([f"job {job_id} on {node}: nothing exported: {type(err).__name__}: {err}"], env)
        return 0
    _log(log, env)
    if lines:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
