"""What-if benchmark: every policy side by side, in one run, on two workloads (issue 8).

1. **Fabric, 1,024 nodes**: ``bench.scenario`` HGX H100 nodes (32 per leaf, 8 leaves per spine, loaded
   around 60 %), a queue of gang and single-node jobs, and three variants — as is, leaf003 drained for
   maintenance, and 32 nodes added on a new leaf — each answered by the solver (binpack, spread, and
   with the fragmentation tier) and by every in-project greedy baseline, through ``solver.whatif``.
2. **openb** (Alibaba cluster-trace-gpu-v2023, FGD's evaluation): the arrival replay of
   ``bench.replay`` for the GPU-sharing baselines; and its whole-GPU pods (sharing pods left out)
   replayed through the same code for the whole-GPU placers and the solver, windows of pods per solve.

    python -m bench.whatif_compare [--workers 2] [--time-limit 10] [--out bench/whatif-out]

Prints Markdown tables (the ones in bench/RESULTS-whatif.md) with the commit and the machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import openb, replay
from bench.provenance import commit, machine
from bench.scenario import batch, cluster
from solver.domain.errors import InvalidRequest
from solver.domain.model import ObjectiveTier, Packing
from solver.whatif import Prepared, prepare
from solver.whatif.plots import write_plots
from solver.whatif.report import WhatIfReport
from solver.whatif.run import run_prepared
from solver.whatif.scenario import (
    AddNodes,
    BaseInventory,
    DrainNodes,
    Edit,
    NodeSelector,
    NodeTemplate,
    PolicySpec,
    Scenario,
    SolverPolicy,
    Variant,
)

BASELINES = ("volcano", "bestfit", "fgd", "gpupacking", "bestfit-share", "random")
SHARING = ("random", "bestfit", "gpupacking", "fgd")


def policies(time_limit_s: float) -> tuple[PolicySpec, ...]:
    tiers = (ObjectiveTier.PLACED_WORK, ObjectiveTier.TOPOLOGY, ObjectiveTier.FRAGMENTATION)
    return (
        PolicySpec(name="solver", solver=SolverPolicy(time_limit_s=time_limit_s)),
        PolicySpec(
            name="solver-spread", solver=SolverPolicy(time_limit_s=time_limit_s, packing=Packing.SPREAD)
        ),
        PolicySpec(name="solver-frag", solver=SolverPolicy(time_limit_s=time_limit_s, objective=tiers)),
        *(PolicySpec(name=b, baseline=b) for b in BASELINES),
    )


def fabric_scenario(nodes: int, jobs: int, time_limit_s: float, seed: int) -> Prepared:
    inventory = cluster(nodes, load=0.6, seed=seed)
    spine = max(s.id for s in inventory.switches if s.tier == 2)
    leaves = sorted(s.id for s in inventory.switches if s.tier == 1)
    drained = leaves[min(3, len(leaves) - 1)]
    scenario = Scenario(
        name=f"fabric-{nodes}",
        base=BaseInventory(inventory=inventory),
        templates=(NodeTemplate(name="hgx", like=inventory.nodes[0].name),),
        jobs=batch(jobs, seed=seed),
        variants=(
            Variant(
                name=f"drain {drained}",
                edits=(Edit(drain_nodes=DrainNodes(select=NodeSelector(switch=drained))),),
            ),
            Variant(
                name="add 32 nodes",
                edits=(Edit(add_nodes=AddNodes(count=32, template="hgx", leaf="leaf-new", parent=spine)),),
            ),
        ),
        policies=policies(time_limit_s),
        seed=seed,
    )
    return prepare(scenario, root=None, source=scenario.name)


def fabric_table(report: WhatIfReport) -> str:
    lines = [
        "| variant | policy | jobs placed | GPUs used after | stranded GPUs | fragmentation "
        "| locality tiers (jobs) | misaligned GPU↔NIC | solve s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for o in report.outcomes:
        s = o.summary
        tiers = ", ".join(f"t{t.tier}: {t.jobs}" for t in s.locality_tiers) or "-"
        lines.append(
            f"| {o.variant} | {o.policy} | {s.jobs_placed}/{s.jobs_total} "
            f"| {s.gpus_used_after}/{s.gpus_total} | {s.stranded_gpus_after:g} "
            f"| {s.fragmentation_after:.3f} | {tiers} | {s.misaligned_pairs} "
            f"| {s.solve_ms_total / 1000:.2f} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- openb


def whole_gpu(pods: Sequence[openb.PodRow]) -> list[openb.PodRow]:
    """The pods a whole-GPU placer can take: no GPU share."""
    return [p for p in pods if p.num_gpu == 0 or p.gpu_milli >= 1000]


def openb_rows(
    label: str, names: Sequence[str], pods: Sequence[openb.PodRow], nodes: Sequence[openb.NodeRow], seed: int
) -> list[str]:
    rows = []
    for name in names:
        started = time.perf_counter()
        try:
            r = replay.run(name, nodes, pods, seed)
        except InvalidRequest as exc:
            reason = exc.problems[0].message if exc.problems else str(exc)
            rows.append(f"| {label} | {name} | refused: {reason} | | | |")
            continue
        except KeyboardInterrupt:
            rows.append(f"| {label} | {name} | interrupted | | | |")
            break
        wall = time.perf_counter() - started
        rows.append(
            f"| {label} | {name} | {r.headline if r.headline is not None else '-'} | {r.placed}/{r.pods} "
            f"| {r.failed} | {wall:.1f} |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def sharing_probe(pods: Sequence[openb.PodRow], nodes: Sequence[openb.NodeRow]) -> str:
    """Whether this solver takes GPU shares at all: one share pod on the idle cluster."""
    from solver.domain.model import SolveRequest
    from solver.solve import solve

    share = next(p for p in pods if 0 < p.gpu_milli < 1000)
    try:
        solve(SolveRequest(inventory=openb.inventory(nodes), jobs=(openb.job(share),)))
    except InvalidRequest as exc:
        return "refused: " + (exc.problems[0].message if exc.problems else str(exc))
    return "takes shares: run python -m bench.replay --policies solver-window64"


def openb_table(seed: int, solver_window: int, whole_nodes: int, skip_sharing: bool = False) -> str:
    nodes, pods = openb.load_nodes(), openb.load_pods()
    lines = [
        "| pods | policy | GPU allocation % at 130 % arrived | pods placed | pods failed | wall s |",
        "|---|---|---|---|---|---|",
    ]
    if not skip_sharing:
        lines += openb_rows("all (sharing)", SHARING, pods, nodes, seed)
        lines.append(f"| all (sharing) | solver | {sharing_probe(pods, nodes)} | | | |")
    # Request policies rebuild the inventory per call, so they replay on a slice of the nodes (the
    # replay inflates the pod list to 130 % of whatever capacity it is given).
    whole, few = whole_gpu(pods), nodes[:whole_nodes]
    names = (
        *(f"place:{b}" for b in ("volcano", "bestfit")),
        "bestfit",
        "fgd",
        f"solver-window{solver_window}",
    )
    lines += openb_rows(f"whole-GPU pods, first {len(few)} nodes", names, whole, few, seed)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.whatif_compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--jobs", type=int, default=64)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--openb-seed", type=int, default=42)
    parser.add_argument("--solver-window", type=int, default=256, help="openb pods per solver call")
    parser.add_argument("--openb-nodes", type=int, default=96, help="nodes for the whole-GPU openb replay")
    parser.add_argument("--skip-openb", action="store_true")
    parser.add_argument("--skip-fabric", action="store_true")
    parser.add_argument("--skip-sharing", action="store_true", help="openb: only the whole-GPU replay")
    parser.add_argument("--out", type=Path, help="write the fabric report's JSON and PNGs here")
    args = parser.parse_args(argv)

    print(
        f"commit {commit()} · {machine()} · time limit {args.time_limit} s · "
        f"{args.workers} worker processes\n"
    )
    if not args.skip_fabric:
        fabric(args)
    if not args.skip_openb:
        print(f"## openb (seed {args.openb_seed})\n")
        print(openb_table(args.openb_seed, args.solver_window, args.openb_nodes, args.skip_sharing))
    return 0


def fabric(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    prepared = fabric_scenario(args.nodes, args.jobs, args.time_limit, args.seed)
    report = run_prepared(prepared, workers=args.workers, show_progress=sys.stderr.isatty())
    print(f"## Fabric: {args.nodes} HGX nodes, {args.jobs} jobs (seed {args.seed})\n")
    print(fabric_table(report))
    print(f"\nwall {time.perf_counter() - started:.0f} s for {len(report.outcomes)} cells\n")
    if args.out:
        from solver.whatif.convert import report_json

        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fabric.json").write_text(report_json(report) + "\n")
        for path in write_plots(report, args.out, "fabric"):
            print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
