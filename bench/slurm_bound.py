"""Which of the Slurm bench's whole-node gangs no placer could start when they arrive.

In ``bench.slurm_compare`` no job ends while the stream is submitted, so a job whose members each want
a whole node (8 GPUs) can only use nodes the background left empty. Give every earlier whole-node job
its nodes (a placer that starts jobs as they come cannot refuse one that fits) and let no smaller job
take an empty node (the best any packing can do), and a gang that still finds fewer empty nodes than
it has members could not start on arrival under any placer, the hook's, Slurm's or an oracle's. Such a
gang stays pending in every configuration; the bench's "stranded" count (enough free GPUs in total)
counts it all the same.

    python -m bench.slurm_bound --nodes 64 128 --seeds 1 2 3
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
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


def background_jobs(nodes: int, seed: int) -> int:
    """The background's jobs, one per node it uses: slurmctld numbers them 1.., the stream after."""
    return len(background([f"gn{i + 1:03d}" for i in range(nodes)], seed))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
