"""Where the free GPU capacity sits at the end of a replay, and why none of the pods that were dropped
could use it.

A replay ends with some GPU capacity free and some pods dropped. How much a better placement rule
could still win is bounded by what that free capacity is. Every free milli-GPU is put in one of three
parts, judged against the pods the run dropped (no pod ever leaves, so a dropped pod that fits
nowhere at its arrival fits nowhere at the end either):

- **fragmented** — no dropped pod fits it by GPUs alone (model, a share's milli, a pod's count of
  idle GPUs on one node): slivers beside shares, or too few idle GPUs together;
- **blocked** — some dropped pod fits it by GPUs, but not the node's free CPU or memory;
- **usable** — some dropped pod fits it whole. A greedy online run leaves none (the pod would have
  been placed); a batch policy may, where it left a pod out for a plan that placed more work.

The fragmented part is also listed by what holds its GPUs (e.g. a lone 810-milli share leaving
190), which says what kind of pairing a placement rule would have to find.

    python -m bench.endstate --policy fgd/tight-gpu --seed 42
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import openb, replay
from solver.baselines.sharing import MILLI, Choice, ClusterState, PodSpec

Holders = dict[tuple[int, int], list[int]]  # (node, GPU) -> milli of each share on it


@dataclass(frozen=True)
class EndState:
    """The free capacity at the end of a run, in GPUs, split as the module docstring says."""

    allocated_percent: float
    free: float
    fragmented: float
    blocked: float
    usable: float
    idle_gpus: int
    dropped: int
    # (shares holding a GPU, GPUs so held, free GPUs' worth on them) for the fragmented part
    slivers: tuple[tuple[tuple[int, ...], int, float], ...]


def classify(state: ClusterState, dropped: Sequence[PodSpec], holders: Holders, top: int = 8) -> EndState:
    """Split the state's free capacity against the ``dropped`` pods."""
    fits_gpu = np.zeros(state.gpu_left.shape, dtype=bool)  # some dropped pod fits here by GPUs
    fits_all = np.zeros(state.gpu_left.shape, dtype=bool)  # ... and by the node's CPU and memory too
    for pod in {p for p in dropped if p.gpus}:
        gpus = state.gpu_fits(pod) & state.model_mask(pod.models)[:, None]
        on_node = gpus & (gpus.sum(axis=1) >= pod.gpus)[:, None]
        resources = (state.cpu_left >= pod.cpu) & (state.mem_left >= pod.memory)
        fits_gpu |= on_node
        fits_all |= on_node & resources[:, None]
    left = state.gpu_left
    usable = int(left[fits_all].sum())
    blocked = int(left[fits_gpu & ~fits_all].sum())
    fragmented_at = (~fits_gpu) & (left > 0)
    slivers: dict[tuple[int, ...], list[int]] = defaultdict(lambda: [0, 0])
    for node, gpu in zip(*np.nonzero(fragmented_at), strict=True):
        held = tuple(sorted(holders.get((int(node), int(gpu)), ())))
        slivers[held][0] += 1
        slivers[held][1] += int(left[node, gpu])
    ranked = sorted(slivers.items(), key=lambda kv: -kv[1][1])[:top]
    return EndState(
        allocated_percent=round(100 * state.allocated_milli / state.capacity_milli, 2),
        free=int(left.sum()) / MILLI,
        fragmented=int(left[fragmented_at].sum()) / MILLI,
        blocked=blocked / MILLI,
        usable=usable / MILLI,
        idle_gpus=int((left == MILLI).sum()),
        dropped=len(dropped),
        slivers=tuple((held, count, free / MILLI) for held, (count, free) in ranked),
    )


def end_state(
    policy: str, nodes: Sequence[openb.NodeRow], pods: Sequence[openb.PodRow], seed: int
) -> EndState:
    """One replay (``bench.replay.run``), its end state classified."""
    dropped: list[PodSpec] = []
    holders: Holders = defaultdict(list)
    last: list[ClusterState] = []

    def observe(pod: openb.PodRow, choice: Choice | None, state: ClusterState) -> None:
        spec = pod.spec()
        if choice is None:
            dropped.append(spec)
        elif spec.is_share:
            holders[choice[0], choice[1][0]].append(spec.milli)
        if not last:
            last.append(state)

    replay.run(policy, nodes, pods, seed, observe=observe)
    return classify(last[0], dropped, holders)


def report(e: EndState) -> str:
    lines = [
        f"allocated {e.allocated_percent:.2f} %; free {e.free:.1f} GPUs' worth; {e.dropped} pods dropped",
        f"  fragmented (no dropped pod fits it by GPUs): {e.fragmented:.1f}",
        f"  blocked (a dropped pod fits it by GPUs, not by CPU or memory): {e.blocked:.1f}",
        f"  usable (a dropped pod fits it): {e.usable:.1f}",
        f"  idle GPUs: {e.idle_gpus}",
        "  fragmented, by the shares holding the GPU (milli):",
    ]
    for held, count, free in e.slivers:
        lines.append(f"    {' + '.join(map(str, held)) or 'nothing'}: {count} GPUs, {free:.1f} free")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.endstate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="fgd", help="any policy name bench.replay knows")
    parser.add_argument("--seeds", default="42", help="e.g. 42-51 or 42,45")
    parser.add_argument("--nodes", default=str(openb.DEFAULT_NODES), help="node list CSV")
    parser.add_argument(
        "--pods", default=str(openb.DEFAULT_PODS), help="pod list CSV, or a published variant by name"
    )
    args = parser.parse_args(argv)
    pods_csv = openb.VARIANTS.get(args.pods, Path(args.pods))
    nodes, pods = openb.load_nodes(Path(args.nodes)), openb.load_pods(pods_csv)
    totals: Counter[str] = Counter()
    seeds = replay.parse_seeds(args.seeds)
    for seed in seeds:
        e = end_state(args.policy, nodes, pods, seed)
        print(f"{args.policy} seed {seed}: {report(e)}")
        totals.update({"fragmented": e.fragmented, "blocked": e.blocked, "usable": e.usable, "free": e.free})
    if len(seeds) > 1:
        print("mean GPUs' worth:", {k: round(v / len(seeds), 1) for k, v in totals.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
