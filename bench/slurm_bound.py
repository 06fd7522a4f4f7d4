"""Which of the Slurm bench's whole-node gangs no placer could start when they arrive.

In ``bench.slurm_compare`` no job ends while the stream is submitted, so a job whose members each want
a whole node (8 GPUs) can only use nodes the background left empty. Give every earlier whole-node job
its nodes (a placer that starts jobs as they come cannot refuse one that fits) and let no smaller job
take an empty node (the best any packing can do), and a gang that still finds fewer empty nodes than
it has members could not start on arrival under any placer, the hook's, Slurm's or an oracle's. Such a
gang stays pending in every configuration; the bench's "stranded" count (enough free GPUs in total)
counts it all the same.

    python -m bench.slurm_bound --nodes 64 128 --seeds 1 2 3

``--packers`` also places the stream in arrival order on GPU counts alone (no NICs, CPUs or node
types, which only take room away), each job on arrival or never (no job ends), with first fit (the
nodes in name order, as Slurm's own choice) and with best fit (the fullest nodes, the packing that
keeps empty nodes longest), and lists the gangs each leaves pending: what packing alone can do for
the bench's "stranded gangs" target (issue 20).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.slurm_compare import Submit, background, job_stream

GPUS_PER_NODE = 8  # every bench node type (bench.slurm_compare.KINDS)


@dataclass(frozen=True)
class WholeNodeGang:
    index: int  # in the stream
    nodes: int
    empty_at_arrival: int  # at best: empty nodes at start minus earlier whole-node members

    @property
    def can_start(self) -> bool:
        return self.empty_at_arrival >= self.nodes


def whole_node_gangs(empty_at_start: int, stream: Sequence[Submit]) -> list[WholeNodeGang]:
    """Each multi-node job of ``stream`` whose members want whole nodes, with the most empty nodes
    any arrival-order placer could leave it (see the module docstring)."""
    empty, gangs = empty_at_start, []
    for index, submit in enumerate(stream):
        if submit.gpus < GPUS_PER_NODE:
            continue
        if submit.nodes > 1:
            gangs.append(WholeNodeGang(index, submit.nodes, empty))
        if empty >= submit.nodes:
            empty -= submit.nodes
    return gangs


Packer = Callable[[list[str], dict[str, int]], list[str]]


def first_fit(fits: list[str], free: dict[str, int]) -> list[str]:
    """The nodes that fit, in name order: Slurm's own choice among equal nodes."""
    return fits


def best_fit(fits: list[str], free: dict[str, int]) -> list[str]:
    """The nodes that fit, fullest first (ties in name order): empty nodes are taken last."""
    return sorted(fits, key=lambda name: (free[name], name))


@dataclass(frozen=True)
class Packed:
    started: int
    pending_gangs: tuple[str, ...]  # "<nodes>x<gpus>@<index in the stream>"
    free_gpus: int  # left when the stream ends


def arrival_order(free: dict[str, int], stream: Sequence[Submit], packer: Packer) -> Packed:
    """``stream`` placed job by job as it arrives on ``free`` (GPUs free per node, name order), each
    member of a job on its own node, the job started whole when ``packer`` finds it nodes, else never."""
    free = dict(free)
    started, pending = 0, []
    for index, submit in enumerate(stream):
        fits = [name for name, gpus in free.items() if gpus >= submit.gpus]
        if len(fits) < submit.nodes:
            if submit.nodes > 1:
                pending.append(f"{submit.nodes}x{submit.gpus}@{index}")
            continue
        for name in packer(fits, free)[: submit.nodes]:
            free[name] -= submit.gpus
        started += 1
    return Packed(started, tuple(pending), sum(free.values()))


def background_free(nodes: int, seed: int) -> dict[str, int]:
    """GPUs free per node once the bench's background runs (``bench.slurm_compare.background``)."""
    names = [f"gn{i + 1:03d}" for i in range(nodes)]
    free = dict.fromkeys(names, GPUS_PER_NODE)
    for job in background(names, seed):
        free[job[1]] -= int(job[2].split("gpu:")[1].split(",")[0])
    return free


def background_jobs(nodes: int, seed: int) -> int:
    """The background's jobs, one per node it uses: slurmctld numbers them 1.., the stream after."""
    return len(background([f"gn{i + 1:03d}" for i in range(nodes)], seed))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--packers", action="store_true", help="also first fit and best fit, in arrival order"
    )
    args = parser.parse_args()
    for nodes in args.nodes:
        for seed in args.seeds:
            held = background_jobs(nodes, seed)
            empty = nodes - held
            gangs = whole_node_gangs(empty, job_stream(nodes, seed))
            never = [g for g in gangs if not g.can_start]
            print(
                f"{nodes} nodes, seed {seed}: {empty} empty nodes at start; {len(gangs)} whole-node "
                f"gangs, {len(never)} of which no placer can start on arrival: "
                + ", ".join(
                    f"job {held + 1 + g.index} ({g.nodes}x8, ≤{g.empty_at_arrival} empty)" for g in never
                )
            )
            if args.packers:
                for name, packer in (("first fit", first_fit), ("best fit", best_fit)):
                    packed = arrival_order(background_free(nodes, seed), job_stream(nodes, seed), packer)
                    print(
                        f"  {name}: {packed.started} jobs started, {packed.free_gpus} GPUs left free, "
                        f"{len(packed.pending_gangs)} gangs pending: {', '.join(packed.pending_gangs)}"
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
