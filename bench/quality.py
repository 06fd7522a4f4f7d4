"""Quality benchmark (issue 18): topoplace against the greedy placers it sits beside, side by side.

Fat trees of HGX H100 nodes (32 a leaf, 4 leaves a spine, spines under a core; 8 GPUs and 8 NICs a
node, GPU k *not* on NIC k's PCIe switch), loaded to ``--load``, and a queue of ``--jobs`` pending
jobs: 70 % single pods of 1–8 GPUs (GPU↔NIC alignment PREFERRED) and 30 % gangs of 2–32 eight-GPU
members (alignment REQUIRED), of which 40 % have a hard HyperNode tier (leaf for ≤ 16 nodes, spine
above), 40 % a soft one, priorities 0–3. Per seed, each placer on the same request:

- ``volcano``: Volcano-like (binpack + network-topology-aware HyperNodes, gang rollback, first free
  GPUs and NICs) in queue order; ``volcano-best10``: the best of the queue order and 10 seeded
  shuffles of it (jobs are still taken by priority), judged like the solver's first tier (then jobs);
- ``bestfit``: Slurm-like best fit, first aligned GPUs;
- ``topoplace-Ns``: the solver with an N-second limit.

Columns: GPUs placed, jobs placed, off-switch
GPU↔NIC pairs, mean lowest-common-switch tier and leaves spanned of the gangs placed, stranded GPUs
after, wall seconds end to end, the gap reported; then, per seed, how the placer compares with the
best of the greedy's orders as STRICT priority (the solver's default) compares plans: GPUs placed
level by level, highest priority first, then jobs (+ better, = level, - worse); how many seeds the
solver *proved* its placed-work tiers optimal on (no placer can place more, level by level); peak
RSS of the cell's process (and of its largest child, the orders forked ahead of the model's
build). Every placement is checked by the verifier. Each (size, seed) cell runs in a fresh process.

    python -m bench.quality --nodes 1024 --load 0.5 --jobs 200 --seeds 1-3 --limits 1,2,5,15
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from bench.provenance import commit, machine
from bench.scenario import cluster
from solver.answer.verify import verify
from solver.baselines import bestfit, volcano
from solver.compile.objective import is_placed_work
from solver.domain.model import (
    Alignment,
    Distance,
    Job,
    Locality,
    MemberShape,
    NicMode,
    NicRequest,
    Policy,
    PriorityMode,
    Requirement,
    Role,
    SolveRequest,
    SolveResult,
)

LEAVES_PER_SPINE = 4
GANG_SIZES = (2, 2, 3, 4, 4, 6, 8, 8, 12, 16, 24, 32)


def member(gpus: int, aligned: Requirement) -> MemberShape:
    return MemberShape(
        gpus=gpus,
        nics=NicRequest(mode=NicMode.PER_GPU),
        alignment=Alignment(mode=aligned, distance=Distance.PIX),
        nvlink=Requirement.REQUIRED if gpus > 1 else Requirement.NONE,
        cpu_milli=16_000 * gpus,
        memory_mib=160_000 * gpus,
    )


def queue(n_jobs: int, seed: int) -> tuple[Job, ...]:
    """The pending jobs described in the module docstring, seeded."""
    rng = random.Random(seed * 7919 + 17)
    jobs = []
    for j in range(n_jobs):
        priority = rng.choice((0, 0, 1, 2, 3))
        if rng.random() < 0.7:
            gpus = rng.choice((1, 1, 2, 2, 4, 8))
            role = Role(name="worker", replicas=1, member=member(gpus, Requirement.PREFERRED))
            jobs.append(Job(id=f"pod-{j:04d}", priority=priority, roles=(role,)))
            continue
        size = rng.choice(GANG_SIZES)
        role = Role(name="worker", replicas=size, member=member(8, Requirement.REQUIRED))
        r = rng.random()
        if r < 0.4:
            locality = Locality(mode=Requirement.REQUIRED, highest_tier=1 if size <= 16 else 2)
        elif r < 0.8:
            locality = Locality(mode=Requirement.PREFERRED, highest_tier=1)
        else:
            locality = Locality()
        jobs.append(Job(id=f"gang-{j:04d}", priority=priority, roles=(role,), locality=locality))
    return tuple(jobs)


def request(n_nodes: int, load: float, n_jobs: int, seed: int, time_limit_s: float = 10.0) -> SolveRequest:
    inventory = cluster(n_nodes, load=load, seed=seed, leaves_per_spine=LEAVES_PER_SPINE, core=True)
    return SolveRequest(
        request_id=f"quality-{n_nodes}n-{int(load * 100)}pc-{n_jobs}j-s{seed}",
        inventory=inventory,
        jobs=queue(n_jobs, seed),
        policy=Policy(time_limit_s=time_limit_s, seed=seed),
    )


# --------------------------------------------------------------------------- measures


def request_arguments(parser: argparse.ArgumentParser, *, nodes: int, seed: int, limit: float) -> None:
    """The arguments that name one cell's request (:func:`request`) and one call's time limit: the
    tools that ask about one call of this bench (``bench.cold``, ``bench.locality_proof``)."""
    parser.add_argument("--nodes", type=int, default=nodes)
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--limit", type=float, default=limit, help="the call's time limit, seconds")


def measures(req: SolveRequest, result: SolveResult) -> dict[str, float]:
    jobs = {j.id: j for j in req.jobs}
    placed = [jr for jr in result.jobs if jr.placed]
    gangs = [jr for jr in placed if len(jr.members) > 1]
    weighted = sum((jobs[jr.job_id].priority + 1) * len(m.gpus) for jr in placed for m in jr.members)
    levels = sorted({j.priority for j in req.jobs}, reverse=True)
    by_priority = [
        sum(len(m.gpus) for jr in placed if jobs[jr.job_id].priority == p for m in jr.members) for p in levels
    ]
    placed_work = [v for v in result.objectives if is_placed_work(v.name)]
    off_switch = sum(len(m.gpus) for jr in placed for m in jr.members if m.nics and not m.aligned)
    return {
        # GPUs placed at each priority level, highest first: what STRICT priority compares, in order.
        "by_priority": by_priority,
        # The solver proved every placed-work tier optimal (no placer can place more, level by level).
        "proven": all(v.optimal for v in placed_work) if placed_work else None,  # None: a greedy
        "weighted_gpus": weighted,
        "jobs": len(placed),
        "gpus": sum(len(m.gpus) for jr in placed for m in jr.members),
        "off_switch": off_switch,
        "gang_tier": statistics.mean(jr.locality_tier for jr in gangs) if gangs else 0.0,
        # Per gang placed, its lowest common switch tier: placers that place different gangs are
        # compared on the gangs both place (``common_tiers``).
        "gang_tiers": {jr.job_id: jr.locality_tier for jr in gangs},
        # ... and its GPUs: the solver's locality tier weighs each gang by its GPUs (a 32-node gang
        # across the spines costs more all-reduce than a 2-node one), so the column says both.
        "gang_gpus": {jr.job_id: sum(len(m.gpus) for m in jr.members) for jr in gangs},
        "gang_leaves": statistics.mean(jr.leaves_spanned for jr in gangs) if gangs else 0.0,
        "stranded": result.metrics.stranded_gpus_after if result.metrics else 0.0,
        "gap": result.gap,
        "status": result.status.name,
    }


def first_tier(req: SolveRequest, result: SolveResult) -> tuple[tuple[int, ...], float]:
    """What the solver's first tiers compare under STRICT priority: GPUs placed level by level,
    highest priority first, then jobs placed."""
    m = measures(req, result)
    return tuple(m["by_priority"]), m["jobs"]


def best_of_shuffles(place: Callable[[SolveRequest], SolveResult], req: SolveRequest, n: int) -> SolveResult:
    """The best of the queue order and ``n`` seeded shuffles of it, by :func:`first_tier`."""
    best: tuple[tuple[tuple[int, ...], float], SolveResult] | None = None
    for k in range(n + 1):
        jobs = list(req.jobs)
        if k:
            random.Random(k).shuffle(jobs)
        out = place(req.model_copy(update={"jobs": tuple(jobs)}))
        key = first_tier(req, out)
        if best is None or key > best[0]:
            best = (key, out)
    assert best is not None
    return best[1]


def run_cell(
    n_nodes: int,
    load: float,
    n_jobs: int,
    seed: int,
    limits: list[float],
    orders: int = 10,
    weighted: list[float] = (),
) -> list[dict]:
    from solver.solve import solve

    base = request(n_nodes, load, n_jobs, seed)
    placers: list[tuple[str, Callable[[], SolveResult]]] = [
        ("volcano", lambda: volcano.place(base)),
        (f"volcano-best{orders}", lambda: best_of_shuffles(volcano.place, base, orders)),
        ("bestfit", lambda: bestfit.place(base)),
    ]
    for limit in limits:
        timed = base.model_copy(update={"policy": base.policy.model_copy(update={"time_limit_s": limit})})
        placers.append((f"topoplace-{limit:g}s", lambda r=timed: solve(r)))
    for limit in weighted:
        # The solver under WEIGHTED priority: one placed-work tier, which CP-SAT often proves optimal
        # where the STRICT levels are not; its bound caps what any placer can place, weighted.
        update = {"time_limit_s": limit, "priority_mode": PriorityMode.WEIGHTED}
        timed = base.model_copy(update={"policy": base.policy.model_copy(update=update)})
        placers.append((f"topoplace-{limit:g}s-weighted", lambda r=timed: solve(r)))
    rows = []
    for name, run in placers:
        t0 = time.perf_counter()
        result = run()
        wall = time.perf_counter() - t0
        violations = verify(base, result)
        rows.append(
            {
                "nodes": n_nodes,
                "load": load,
                "jobs_asked": n_jobs,
                "seed": seed,
                "placer": name,
                "wall_s": round(wall, 2),
                "verified": not violations,
                **measures(base, result),
            }
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # The largest child's: the fallback's orders forked ahead of the model's build (solver.fallback)
    # live beside the cell's process, on memory of their own once they write to it.
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    for row in rows:
        row["cell_peak_rss_mb"] = round(rss)
        row["cell_peak_child_rss_mb"] = round(child)
    return rows


# --------------------------------------------------------------------------- the report


COLUMNS = (
    ("placer", "placer"),
    ("gpus", "GPUs placed"),
    ("weighted_gpus", "prio-weighted GPUs"),
    ("jobs", "jobs placed"),
    ("off_switch", "off-switch pairs"),
    ("gang_tier", "gang tier"),
    ("gang_leaves", "gang leaves"),
    ("stranded", "stranded GPUs"),
    ("wall_s", "wall s"),
    ("gap", "gap"),
)


def table(rows: list[dict]) -> str:
    """Medians over seeds per (size, placer), and each seed against the greedy's best order."""
    out = []
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for row in rows:
        groups.setdefault((row["nodes"], row["load"], row["jobs_asked"]), {}).setdefault(
            row["placer"], []
        ).append(row)
    for (nodes, load, jobs), by_placer in groups.items():
        seeds = sorted({r["seed"] for rs in by_placer.values() for r in rs})
        out.append(f"\n**{nodes:,} nodes, {load:.0%} busy, {jobs} jobs** — medians over seeds {seeds}\n")
        out.append(
            "| "
            + " | ".join(h for _, h in COLUMNS)
            + " | vs greedy's best order, by seed | gang tier on gangs both place, this / best order, by seed"
            + " | proven | peak RSS MB | verified |"
        )
        out.append("|" + "---|" * (len(COLUMNS) + 5))
        best10 = next((rs for p, rs in by_placer.items() if p.startswith("volcano-best")), [])
        ref = {r["seed"]: (r["by_priority"], r["jobs"]) for r in best10}
        ref_tiers = {r["seed"]: r.get("gang_tiers", {}) for r in best10}
        for placer, rs in by_placer.items():
            cells = [placer]
            for key, _ in COLUMNS[1:]:
                values = [r[key] for r in rs]
                med = statistics.median(values)
                whole = key in ("gpus", "weighted_gpus")
                cells.append(f"{med:,.2f}" if isinstance(med, float) and not whole else f"{med:,.0f}")
            # Per seed, against the best of the greedy's orders, as STRICT priority compares: GPUs
            # level by level, then jobs (+ better, = level, - worse).
            cells.append(
                " ".join(
                    compare((r["by_priority"], r["jobs"]), ref[r["seed"]]) for r in rs if r["seed"] in ref
                )
            )
            cells.append(
                " · ".join(
                    common_tiers(r.get("gang_tiers", {}), ref_tiers[r["seed"]], r.get("gang_gpus", {}))
                    for r in rs
                    if r["seed"] in ref
                )
            )
            proven = [r.get("proven") for r in rs if r.get("proven") is not None]
            cells.append(f"{sum(proven)}/{len(proven)}" if proven else "-")
            peak = f"{max(r['cell_peak_rss_mb'] for r in rs):,}"
            child = max(r.get("cell_peak_child_rss_mb", 0) for r in rs)
            cells.append(f"{peak} (+{child:,} child)" if child else peak)
            cells.append("all" if all(r["verified"] for r in rs) else "NO")
            out.append("| " + " | ".join(cells) + " |")
        per_seed = []
        for s in seeds:
            rows_s = {p: next((r for r in rs if r["seed"] == s), None) for p, rs in by_placer.items()}
            parts = [
                f"{p} {'/'.join(map(str, r['by_priority']))} · {r['jobs']}" for p, r in rows_s.items() if r
            ]
            per_seed.append(f"- seed {s}: " + " · ".join(parts))
        out.append("\nPer seed, GPUs placed by priority (highest first) · jobs placed:\n")
        out += per_seed
    return "\n".join(out)


def common_tiers(ours: dict[str, int], theirs: dict[str, int], gpus: dict[str, int] | None = None) -> str:
    """Mean lowest switch tier of the gangs both placers placed, ours / theirs (their count), and,
    given each gang's GPUs (the same whoever places the gang), the mean weighted by GPUs."""
    both = sorted(set(ours) & set(theirs))
    if not both:
        return "-"
    a, b = (statistics.mean(t[g] for g in both) for t in (ours, theirs))
    out = f"{a:.2f}/{b:.2f} ({len(both)})"
    if gpus and all(g in gpus for g in both):
        total = sum(gpus[g] for g in both)
        wa, wb = (sum(t[g] * gpus[g] for g in both) / total for t in (ours, theirs))
        out += f", by GPUs {wa:.2f}/{wb:.2f}"
    return out


def compare(ours: tuple, theirs: tuple) -> str:
    return "+" if ours > theirs else "=" if ours == theirs else "-"


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def merged_rows(paths: list[str]) -> list[dict]:
    """The rows of runs saved with ``--out``, a later file's replacing an earlier one's of the same
    cell and placer. A greedy row that differs between the files is an error: the greedy is seeded
    and untimed, so it differing means the runs did not place the same requests."""
    kept: dict[tuple, dict] = {}
    for path in paths:
        with open(path) as f:
            for row in json.load(f):
                key = (row["nodes"], row["load"], row["jobs_asked"], row["seed"], row["placer"])
                before = kept.get(key)
                if before is not None and not row["placer"].startswith("topoplace"):
                    same = all(before[k] == row[k] for k in ("by_priority", "jobs", "gang_tiers"))
                    if not same:
                        raise SystemExit(
                            f"{path}: {row['placer']} seed {row['seed']} differs from the run before"
                        )
                kept[key] = row
    return list(kept.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1024")
    parser.add_argument("--load", default="0.5")
    parser.add_argument("--jobs", default="200")
    parser.add_argument("--seeds", default="1-3")
    parser.add_argument("--limits", default="1,2,5,15")
    parser.add_argument("--orders", type=int, default=10, help="seeded shuffles of the greedy's queue")
    parser.add_argument(
        "--weighted", default="", help="also the solver under WEIGHTED priority at these limits"
    )
    parser.add_argument("--out", help="write every row as JSON here")
    parser.add_argument(
        "--table",
        nargs="+",
        metavar="ROWS.json",
        help="run nothing: the table of rows saved with --out, a later file's rows replacing an "
        "earlier one's of the same size, seed and placer (the greedy's best of 11 orders from one "
        "run beside topoplace from a later one: the greedy is seeded and untimed)",
    )
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell, print JSON rows
    args = parser.parse_args()
    if args.table:
        print(table(merged_rows(args.table)))
        return
    limits = [float(x) for x in args.limits.split(",")]
    if args.cell:
        nodes, load, jobs, seed = args.cell.split(":")
        weighted = [float(x) for x in args.weighted.split(",") if x]
        print(
            json.dumps(run_cell(int(nodes), float(load), int(jobs), int(seed), limits, args.orders, weighted))
        )
        return
    rows: list[dict] = []
    for nodes in (int(x) for x in args.nodes.split(",")):
        for load in (float(x) for x in args.load.split(",")):
            for jobs in (int(x) for x in args.jobs.split(",")):
                for seed in seeds_of(args.seeds):
                    cell = f"{nodes}:{load}:{jobs}:{seed}"
                    done = subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "bench.quality",
                            "--cell",
                            cell,
                            "--limits",
                            args.limits,
                            "--orders",
                            str(args.orders),
                            "--weighted",
                            args.weighted,
                        ],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    rows += json.loads(done.stdout.strip().splitlines()[-1])
                    print(f"cell {cell} done", file=sys.stderr)
    print(f"commit {commit()} · {machine()}")
    print(table(rows))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
