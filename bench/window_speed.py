"""One stretch of a replay, timed window by window: the solver's windowed policy beside its greedy twin.

The twin replays the trace up to pod FIRST (the state a full run would reach there), then each of
COUNT windows is decided by both — the twin's choices are bound, so both always start from the same
state — and the wall time of each decision is summed. ``--profile`` runs the solver's windows under
cProfile and prints where the time goes. Usage (``TOPOPLACE_OPENB`` set, see bench/replay.py)::

    python -m bench.window_speed --pods cpu250 --seed 42 --first 1000 --count 2 [--profile] [--unpruned]

``--unpruned`` also times the solver on requests that hold every node some pod fits (before
session 11 each request did; now identical nodes beyond the window's pod count are left out,
``bench.replay.window_nodes``).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

from bench import openb, replay


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.window_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="default", help="a published variant by name")
    parser.add_argument("--policy", default="solver-bestof16", help="a windowed solver policy")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--first", type=int, default=1000, help="the first pod of the timed stretch")
    parser.add_argument("--count", type=int, default=2, help="windows timed")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--unpruned", action="store_true", help="also time the solver on requests holding every fitting node"
    )
    args = parser.parse_args(argv)
    nodes = openb.load_nodes()
    pods = openb.load_pods(openb.VARIANTS[args.pods])
    seq = replay.arrivals(pods, nodes, args.seed)
    state = openb.cluster_state(nodes, seq.ranks)
    order = [nodes[i].name for i in sorted(range(len(nodes)), key=lambda i: seq.ranks[i])]
    workload = openb.workload(pods)
    twin = replay.make_policy(replay.twin_of(args.policy), workload, seq.rng, order)
    solver = replay.make_policy(args.policy, workload, seq.rng, order)
    unpruned = replay.make_policy(args.policy, workload, seq.rng, order)
    if isinstance(unpruned, replay.RequestPolicy):
        unpruned.pruned = False  # every node some pod fits, as before session 11
    width = getattr(solver, "window", 1)  # the pods one decision takes
    mirror = replay.InventoryMirror(nodes)

    def bind(batch: list, choices: list) -> None:
        for pod, choice in zip(batch, choices, strict=True):
            choice = replay._at_its_turn(twin, state, mirror, pod, choice, args.seed)
            if choice is not None:
                state.bind(choice[0], pod.spec(), choice[1])
                mirror.bind(choice[0], pod, choice[1])

    for start in range(0, args.first, width):
        batch = seq.pods[start : start + width]
        bind(batch, replay._decide(twin, state, mirror, batch, args.seed))
    profiler = cProfile.Profile()
    by_twin = by_solver = by_unpruned = 0.0
    twin_ms: list[float] = []  # per window, for the medians (a loaded machine's outliers stay out)
    solver_ms: list[float] = []
    same = same_unpruned = 0
    for k in range(args.count):
        batch = seq.pods[args.first + width * k : args.first + width * (k + 1)]
        t = time.perf_counter()
        expected = replay._decide(twin, state, mirror, batch, args.seed)
        twin_ms.append((time.perf_counter() - t) * 1000)
        by_twin += time.perf_counter() - t
        if args.profile:
            profiler.enable()
        t = time.perf_counter()
        got = replay._decide(solver, state, mirror, batch, args.seed)
        solver_ms.append((time.perf_counter() - t) * 1000)
        by_solver += time.perf_counter() - t
        if args.profile:
            profiler.disable()
        same += got == expected
        if args.unpruned:
            t = time.perf_counter()
            same_unpruned += replay._decide(unpruned, state, mirror, batch, args.seed) == expected
            by_unpruned += time.perf_counter() - t
        bind(batch, expected)
    print(
        f"{args.pods} seed {args.seed}, {args.count} windows of {width} from pod {args.first}: "
        f"twin {by_twin / args.count * 1000:.0f} ms a window, "
        f"{args.policy} {by_solver / args.count * 1000:.0f} ms "
        f"({by_solver / by_twin:.1f}x); same choices in {same}/{args.count} windows"
    )
    twin_median, solver_median = statistics.median(twin_ms), statistics.median(solver_ms)
    print(
        f"  medians: twin {twin_median:.1f} ms, {args.policy} {solver_median:.0f} ms "
        f"({solver_median / twin_median:.0f}x); {args.policy} per window (ms): "
        + " ".join(f"{ms:.0f}" for ms in solver_ms)
    )
    if args.unpruned:
        print(
            f"  unpruned requests: {by_unpruned / args.count * 1000:.0f} ms a window "
            f"({by_unpruned / by_twin:.1f}x the twin); same choices in {same_unpruned}/{args.count} windows"
        )
    if args.profile:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
