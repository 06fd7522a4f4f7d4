"""What one pod costs the solver in the openb replay, at several points of a run, and how two commits
compare side by side.

The cluster is brought to the state FGD's greedy reaches after ``--at`` pods of the seed's arrival
sequence (FGD and the solver make the same choices, ``bench/RESULTS-replay.md``), and the solver then
places the next ``--pods`` pods one request each, exactly as ``bench.replay`` does (filter stage on).
Reported: CPU milliseconds a pod (process time, which another process on the machine disturbs less
than wall time does).

With ``--compare REV``, each revision (this checkout and REV, checked out in a temporary git worktree)
is timed in its own process, alternating, ``--rounds`` times; the table gives each one's median and
the ratio of the medians. Noise on a shared machine moves single rounds by 20 % or more; the medians
of alternating rounds are what to quote.

    python -m bench.pod_cost --at 0,5000,8000 --pods 300 --compare HEAD~3 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(at: int, pods: int, seed: int, nodes_csv: Path, pods_csv: Path) -> float:
    """CPU milliseconds a pod for the solver on pods ``at`` .. ``at + pods`` of the seed's run."""
    from bench import openb, replay

    nodes, trace = openb.load_nodes(nodes_csv), openb.load_pods(pods_csv)
    seq = replay.arrivals(trace, nodes, seed)
    state = openb.cluster_state(nodes, seq.ranks)
    order = [nodes[i].name for i in sorted(range(len(nodes)), key=lambda i: seq.ranks[i])]
    workload = openb.workload(trace)
    fgd = replay.make_policy("fgd", workload, seq.rng, order)
    mirror = replay.InventoryMirror(nodes)

    def bind(choice: replay.Choice | None, pod: openb.PodRow) -> None:
        if choice is not None:
            state.bind(choice[0], pod.spec(), choice[1])
            mirror.bind(choice[0], pod, choice[1])

    for pod in seq.pods[:at]:
        bind(fgd.choose(state, pod.spec()), pod)  # type: ignore[union-attr]
    solver = replay.make_policy("solver", workload, seq.rng, order)
    started = time.process_time()
    for pod in seq.pods[at : at + pods]:
        bind(replay._decide(solver, state, mirror, [pod], seed)[0], pod)
    return (time.process_time() - started) / pods * 1000


def timed_in(root: Path, at: int, pods: int, seed: int) -> float:
    """:func:`measure` run in a process of its own on the code at ``root`` (this file itself need not
    be there: an older revision is timed by this one's harness), on this checkout's trace."""
    from bench import openb

    data = ["--nodes", str(openb.DEFAULT_NODES), "--pods-csv", str(openb.DEFAULT_PODS)]
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            "--at",
            str(at),
            "--pods",
            str(pods),
            "--seed",
            str(seed),
            *data,
        ],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise SystemExit(f"timing at {root} failed:\n{out.stderr}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["ms"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pod_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--at", default="0,5000,8000", help="pods placed (by FGD) before the timed ones")
    parser.add_argument("--pods", type=int, default=300, help="pods timed at each point")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--compare", default=None, help="a git revision to time against this checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pods-csv", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    points = [int(a) for a in args.at.split(",")]
    if args.worker:
        print(json.dumps({"ms": measure(points[0], args.pods, args.seed, args.nodes, args.pods_csv)}))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"this checkout": ROOT}
        if args.compare:
            worktree = Path(tmp) / "compare"
            # The trace and Go's table are found beside the repository, as for this checkout.
            (Path(tmp) / "shared").symlink_to(ROOT.parent / "shared")
            subprocess.run(
                ["git", "worktree", "add", "--detach", "-q", str(worktree), args.compare],
                cwd=ROOT,
                check=True,
            )
            roots[args.compare] = worktree
        try:
            print(f"{'pods before':>11}  " + "  ".join(f"{name:>24}" for name in roots) + "  ratio")
            for at in points:
                ms: dict[str, list[float]] = {name: [] for name in roots}
                for _ in range(args.rounds):
                    for name, root in roots.items():
                        ms[name].append(timed_in(root, at, args.pods, args.seed))
                cells = [
                    f"{statistics.median(v):8.1f} ({', '.join(f'{x:.1f}' for x in v)})" for v in ms.values()
                ]
                medians = [statistics.median(v) for v in ms.values()]
                ratio = f"{medians[1] / medians[0]:.2f}x" if len(medians) == 2 else ""
                print(f"{at:>11}  " + "  ".join(f"{c:>24}" for c in cells) + f"  {ratio}", flush=True)
        finally:
            if args.compare:
                subprocess.run(["git", "worktree", "remove", "--force", str(roots[args.compare])], cwd=ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
