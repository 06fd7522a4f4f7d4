"""Running a prepared scenario: every variant × policy × seed as independent cells, then the diffs.

A cell is a pure function of (world, variant, policy, seed) — :func:`run_cell` — so where it runs
cannot change its answer: in this process (default), in local worker processes (``workers > 1``), or
on a Ray cluster (``ray_address``). Outcomes are collected in cell order whichever finishes first, so
the report is the same either way, wall-clock fields aside.

Interrupting (Ctrl-C, or ``should_stop`` returning true, e.g. at the caller's deadline) keeps every
cell finished so far, and a trace cell's replay up to the last event; the report says it is
incomplete.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from solver.domain.model import ReasonCode
from solver.whatif.engine import ProgressFn, StopFn, Stopped, evaluate_batch, never, replay_trace
from solver.whatif.report import Outcome, PolicyDiff, WhatIfReport
from solver.whatif.scenario import BASE_VARIANT, PolicySpec
from solver.whatif.world import Prepared, World


@dataclass(frozen=True)
class Cell:
    variant: str
    policy: PolicySpec
    seed: int

    @property
    def label(self) -> str:
        return f"{self.variant} · {self.policy.name} · seed {self.seed}"


def cells_of(prepared: Prepared, seeds: Sequence[int] | None = None) -> list[Cell]:
    """Variant-major, then policies in scenario order, then seeds."""
    seeds = list(seeds) if seeds else [prepared.scenario.seed]
    return [
        Cell(variant, policy, seed)
        for variant in prepared.variants
        for policy in prepared.scenario.all_policies()
        for seed in seeds
    ]


def run_cell(
    world: World,
    variant: str,
    policy: PolicySpec,
    seed: int,
    progress: ProgressFn | None = None,
    should_stop: StopFn = never,
) -> Outcome:
    """One cell's answer; the same function runs in-process, in a worker process and on Ray."""
    if world.trace is not None:
        return replay_trace(world, variant, policy, seed, progress=progress, should_stop=should_stop)
    return evaluate_batch(world, variant, policy, seed)


def run_prepared(
    prepared: Prepared,
    *,
    seeds: Sequence[int] | None = None,
    workers: int = 1,
    ray_address: str | None = None,
    show_progress: bool = False,
    should_stop: StopFn = never,
) -> WhatIfReport:
    """Every cell of the scenario, then the report with its diffs."""
    cells = cells_of(prepared, seeds)
    if ray_address:
        outcomes, complete = _on_ray(prepared, cells, ray_address, show_progress)
    elif workers > 1:
        outcomes, complete = _in_processes(prepared, cells, workers, show_progress)
    else:
        outcomes, complete = _in_process(prepared, cells, show_progress, should_stop)
    return assemble(prepared, outcomes, complete=complete)


# --------------------------------------------------------------------------- executors


def _in_process(
    prepared: Prepared, cells: list[Cell], show_progress: bool, should_stop: StopFn
) -> tuple[list[Outcome], bool]:
    outcomes: list[Outcome] = []
    is_trace = prepared.scenario.is_trace
    overall = tqdm(
        total=len(cells), desc="what-if", unit="cell", disable=not show_progress or is_trace, file=sys.stderr
    )
    try:
        for cell in cells:
            if should_stop():
                return outcomes, False
            world = prepared.worlds[cell.variant]
            bar = _event_bar(world, cell, show_progress and is_trace)
            try:
                outcomes.append(
                    run_cell(world, cell.variant, cell.policy, cell.seed, bar.update, should_stop)
                )
            except Stopped as stopped:
                if stopped.outcome is not None:
                    outcomes.append(stopped.outcome)
                return outcomes, False
            except KeyboardInterrupt:
                return outcomes, False
            finally:
                bar.close()
            overall.update(1)
    finally:
        overall.close()
    return outcomes, True


def _event_bar(world: World, cell: Cell, show: bool) -> tqdm:
    """A bar over a replay's events: arrivals, departures, and the ends of jobs that have a duration."""
    trace = world.trace
    total = (
        0
        if trace is None
        else len(trace.entries) + len(trace.departures) + sum(e.duration_s > 0 for e in trace.entries)
    )
    return tqdm(total=total, desc=cell.label, unit="event", disable=not show, file=sys.stderr, leave=False)


def _run_cell_task(task: tuple[World, str, PolicySpec, int]) -> Outcome:
    world, variant, policy, seed = task
    return run_cell(world, variant, policy, seed)


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which keeps what is done and cancels the rest."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _in_processes(
    prepared: Prepared, cells: list[Cell], workers: int, show_progress: bool
) -> tuple[list[Outcome], bool]:
    done: dict[int, Outcome] = {}
    bar = tqdm(total=len(cells), desc="what-if", unit="cell", disable=not show_progress, file=sys.stderr)
    with ProcessPoolExecutor(max_workers=workers, initializer=_ignore_sigint) as pool:
        futures: list[Future[Outcome]] = [
            pool.submit(_run_cell_task, (prepared.worlds[c.variant], c.variant, c.policy, c.seed))
            for c in cells
        ]
        try:
            for k, future in enumerate(futures):
                done[k] = future.result()
                bar.update(1)
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
            for k, future in enumerate(futures):
                if future.done() and not future.cancelled() and future.exception() is None:
                    done[k] = future.result()
            bar.close()
            return [done[k] for k in sorted(done)], False
    bar.close()
    return [done[k] for k in sorted(done)], True


def _on_ray(
    prepared: Prepared, cells: list[Cell], address: str, show_progress: bool
) -> tuple[list[Outcome], bool]:
    """The same cells as Ray tasks; each world is put in the object store once."""
    try:
        import ray
    except ImportError:
        from solver.domain.errors import InvalidRequest, Problem

        message = "Ray is not installed: pip install 'topoplace[ray]'"
        raise InvalidRequest([Problem(path="--ray", message=message)]) from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address=None if address == "local" else address,
            runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(import_roots())}},
            include_dashboard=False,
            log_to_driver=False,
        )
    remote = ray.remote(num_cpus=1)(run_cell)
    worlds = {name: ray.put(world) for name, world in prepared.worlds.items()}
    refs = [remote.remote(worlds[c.variant], c.variant, c.policy, c.seed) for c in cells]
    outcomes: list[Outcome] = []
    bar = tqdm(
        total=len(cells), desc="what-if (ray)", unit="cell", disable=not show_progress, file=sys.stderr
    )
    try:
        for ref in refs:
            outcomes.append(ray.get(ref))
            bar.update(1)
    except KeyboardInterrupt:
        for ref in refs[len(outcomes) :]:
            ray.cancel(ref)
        return outcomes, False
    finally:
        bar.close()
        if started_here:
            ray.shutdown()
    return outcomes, True


def import_roots() -> list[str]:
    """Folders Ray workers need on their path: the current PYTHONPATH (the package itself, baselines
    included, is installed where the workers run)."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


# --------------------------------------------------------------------------- the report


def assemble(prepared: Prepared, outcomes: Sequence[Outcome], *, complete: bool) -> WhatIfReport:
    notes = []
    expected = len(prepared.variants) * len(prepared.scenario.all_policies())
    if not complete:
        notes.append("stopped before the end: outcomes hold what was computed (see complete per outcome)")
    elif len(outcomes) < expected:
        notes.append(f"{expected - len(outcomes)} cell(s) missing")
    return WhatIfReport(
        scenario=prepared.scenario.name or Path(prepared.source).stem,
        complete=complete and all(o.complete for o in outcomes),
        outcomes=tuple(outcomes),
        diffs=diffs(outcomes, [p.name for p in prepared.scenario.all_policies()]),
        notes=tuple(notes),
    )


def diffs(outcomes: Sequence[Outcome], policies: Sequence[str]) -> tuple[PolicyDiff, ...]:
    """Against the first policy on each variant and seed; and each policy's base against each variant."""
    cell = {(o.variant, o.policy, o.seed): o for o in outcomes}
    variants = list(dict.fromkeys(o.variant for o in outcomes))
    seeds = list(dict.fromkeys(o.seed for o in outcomes))
    out = []
    for seed in seeds:
        for variant in variants:
            ref = cell.get((variant, policies[0], seed))
            for other in policies[1:]:
                b = cell.get((variant, other, seed))
                if ref is not None and b is not None:
                    out.append(_diff(variant, ref, b, seed))
        for policy in policies:
            base = cell.get((BASE_VARIANT, policy, seed))
            for variant in variants:
                edited = cell.get((variant, policy, seed))
                if variant != BASE_VARIANT and base is not None and edited is not None:
                    out.append(_diff(f"{BASE_VARIANT}→{variant}", base, edited, seed))
    return tuple(out)


def _unsupported(outcome: Outcome) -> frozenset[str]:
    return frozenset(
        j.job_id for j in outcome.jobs if j.reason is not None and j.reason.code == ReasonCode.UNSUPPORTED
    )


def _diff(variant: str, a: Outcome, b: Outcome, seed: int) -> PolicyDiff:
    placed_a, placed_b = a.placed_ids(), b.placed_ids()
    # A job one side could not express was never tried there: it is no win for the other side.
    unsupported_a, unsupported_b = _unsupported(a), _unsupported(b)
    order = [j.job_id for j in a.jobs] + [j.job_id for j in b.jobs if j.job_id not in placed_a]
    order = list(dict.fromkeys(order))
    return PolicyDiff(
        variant=variant,
        policy_a=a.policy,
        policy_b=b.policy,
        only_a=tuple(j for j in order if j in placed_a and j not in placed_b and j not in unsupported_b),
        only_b=tuple(j for j in order if j in placed_b and j not in placed_a and j not in unsupported_a),
        unsupported_a=tuple(j for j in order if j in unsupported_a),
        unsupported_b=tuple(j for j in order if j in unsupported_b),
        gpus_a=a.summary.gpus_used_after,
        gpus_b=b.summary.gpus_used_after,
        seed=seed,
    )
