"""Which one-node jobs of a Slurm bench run did not go to a fullest node that could take them.

Reads runs saved by ``python -m bench.slurm_compare --keep DIR`` (each ``DIR/<config>-<nodes>-<seed>``:
``jobs.txt`` from ``scontrol show job -d``, ``nodes.txt`` from ``scontrol -o show node -d``,
``submitted.txt``) and replays the running jobs' allocations in job order on empty nodes. Before
each one-node job of the stream it finds the fullest node (fewest free GPUs) that could have taken
the job — its GPUs, and as many NICs behind the same switch groups when it asked NICs — and compares
the node the job got. A job on a node with more free GPUs than that left a fuller node's room
unused, which best fit would not have: the measure that found, in session 26, that the hook's late
fast plans took nodes in name order (issue 20).

Gangs are left out (they take the leaf that holds them whole first: locality before packing). The
replay is approximate in two ways, both making it count a miss that was not one: it sees the jobs in
job order, not in the order they started; and it does not know which nodes backfill had promised to
an earlier pending job (the hook does not plan on those, by design).

    python -m bench.slurm_packing DIR/hook-128-1 [DIR/typed-128-1 ...]
    python -m bench.slurm_packing bench/results/slurm-keep-s26/*    # session 26's, gzipped
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from adapters.slurm.gres import parse_gres_string
from adapters.slurm.hostlist import expand

Devices = Counter[tuple[str, str]]  # (gpu | nic, switch type) → count


@dataclass(frozen=True)
class Miss:
    job: int
    gpus: int
    nics: bool
    got: int  # free GPUs of the node it got, before it
    fullest: int  # free GPUs of the fullest node that could have taken it


@dataclass(frozen=True)
class Packing:
    checked: int  # one-node jobs of the stream that run
    misses: tuple[Miss, ...]


def node_totals(nodes_txt: str) -> dict[str, Devices]:
    """Each node's GPUs and NICs per switch type, from ``scontrol -o show node -d`` lines."""
    totals = {}
    for line in nodes_txt.splitlines():
        name, gres = re.search(r"NodeName=(\S+)", line), re.search(r"\bGres=(\S+)", line)
        if name and gres:
            totals[name.group(1)] = _devices(gres.group(1))
    return totals


def running_allocations(jobs_txt: str) -> dict[int, dict[str, Devices]]:
    """Each running job's devices per node, from ``scontrol show job -d``."""
    out: dict[int, dict[str, Devices]] = {}
    for block in re.split(r"\n(?=JobId=)", jobs_txt):
        job, state = re.search(r"JobId=(\d+)", block), re.search(r"JobState=(\S+)", block)
        if not job or not state or state.group(1) != "RUNNING":
            continue
        per_node = out.setdefault(int(job.group(1)), {})
        for nodes, gres in re.findall(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)", block):
            for node in expand(nodes):
                per_node[node] = _devices(gres)
    return out


def _devices(gres: str) -> Devices:
    held: Devices = Counter()
    for item in parse_gres_string(gres):
        if item.name in ("gpu", "nic"):
            held[(item.name, item.type)] += item.count
    return held


def _free_gpus(free: Devices) -> int:
    return sum(n for (name, _), n in free.items() if name == "gpu")


def _takes(free: Devices, gpus: int, nics: bool) -> bool:
    if not nics:
        return _free_gpus(free) >= gpus
    paired = sum(min(n, free[("nic", t)]) for (name, t), n in free.items() if name == "gpu")
    return paired >= gpus


def _read(run: Path, name: str) -> str:
    """``run/name``, or ``run/name.gz`` as the bench's results keep it."""
    plain = run / name
    if plain.exists():
        return plain.read_text()
    return gzip.decompress((run / f"{name}.gz").read_bytes()).decode()


def replay(run: Path) -> Packing:
    """The one-node stream jobs of the run saved in ``run`` that ran, and those of them that did not
    get a fullest node that could take them (see the module docstring)."""
    free = node_totals(_read(run, "nodes.txt"))
    asked = {}
    for line in _read(run, "submitted.txt").splitlines():
        job, _, args = line.partition(" ")
        nodes, gpus = re.search(r"-N(\d+)", args), re.search(r"--gpus-per-node=(\d+)", args)
        if nodes and gpus and nodes.group(1) == "1":
            asked[int(job)] = (int(gpus.group(1)), "--gres=nic:" in args)
    checked, misses = 0, []
    for job, per_node in sorted(running_allocations(_read(run, "jobs.txt")).items()):
        if job in asked and len(per_node) == 1:
            gpus, nics = asked[job]
            (node,) = per_node
            fits = [_free_gpus(f) for f in free.values() if _takes(f, gpus, nics)]
            got = _free_gpus(free[node])
            checked += 1
            if fits and got > min(fits):
                misses.append(Miss(job, gpus, nics, got, min(fits)))
        for node, held in per_node.items():
            free[node] -= held  # Counter subtraction keeps positive counts only
    return Packing(checked, tuple(misses))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="directories written by slurm_compare --keep")
    args = parser.parse_args()
    for run in args.runs:
        packing = replay(run)
        print(
            f"{run.name}: {len(packing.misses)} of {packing.checked} one-node jobs not on a fullest "
            "node that could take them"
        )
        for miss in packing.misses:
            nics = " + NICs" if miss.nics else ""
            print(f"  job {miss.job} ({miss.gpus} GPUs{nics}): {miss.got} free GPUs, fullest {miss.fullest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
