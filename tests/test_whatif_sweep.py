"""Sweeps beyond one process: local worker processes and a local Ray instance give the same answers
as one process (wall-clock fields aside).

Kept apart from the RPC tests: Ray starts its own servers by forking, which gRPC's fork handlers
refuse while a gRPC server of the same process is still running.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from solver.domain.model import Job, NicMode, Requirement
from solver.whatif import load_and_prepare
from solver.whatif.report import without_timings
from solver.whatif.run import run_prepared
from solver.whatif.scenario import Scenario
from solver.whatif.world import prepare
from tests import kit

ROOT = Path(__file__).resolve().parent.parent
JOBS: tuple[Job, ...] = (
    kit.job("big", 8, 3, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
    kit.job("a", 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
    kit.job("b", 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED, priority=2),
)


def sweep_scenario() -> Scenario:
    s = kit.scenario([{"drain_nodes": {"select": {"switch": "leaf1"}}}], JOBS)
    return s.model_copy(update={"policies": (kit.SOLVER, kit.BESTFIT)})


def test_sweep_in_local_processes_equals_one_process() -> None:
    prepared = prepare(sweep_scenario(), root=None)
    one = run_prepared(prepared, seeds=[0, 1])
    many = run_prepared(prepared, seeds=[0, 1], workers=2)
    assert len(one.outcomes) == 8 and {o.seed for o in one.outcomes} == {0, 1}
    assert without_timings(many) == without_timings(one)


def start_local_ray(ray: object, attempts: int = 3) -> None:
    """A local Ray on this machine. Ray gives its raylet a fixed 30 s to register; on a loaded
    2-core machine the first start after an install can miss that, so try again (the cause is the
    machine, not the code under test; a real failure fails every attempt)."""
    for attempt in range(attempts):
        try:
            ray.init(  # type: ignore[attr-defined]
                num_cpus=2,
                include_dashboard=False,
                log_to_driver=False,
                object_store_memory=100 * 1024 * 1024,
                runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
            )
            return
        except Exception:
            ray.shutdown()  # type: ignore[attr-defined]
            if attempt == attempts - 1:
                raise


def test_sweep_on_local_ray_equals_local_processes() -> None:
    ray = pytest.importorskip("ray")
    prepared = prepare(sweep_scenario(), root=None)
    local = run_prepared(prepared, seeds=[0, 1], workers=2)
    start_local_ray(ray)
    try:
        remote = run_prepared(prepared, seeds=[0, 1], ray_address="local")
    finally:
        ray.shutdown()
    assert without_timings(remote) == without_timings(local)


def test_sweep_over_a_committed_trace_fixture_in_processes() -> None:
    """The docs' trace example, two seeds, in worker processes: every cell complete."""
    prepared = load_and_prepare(ROOT / "fixtures" / "whatif" / "hgx16-trace.yaml")
    small = prepared.scenario.model_copy(update={"policies": (kit.BESTFIT,)})
    prepared = type(prepared)(scenario=small, source=prepared.source, worlds=prepared.worlds)
    report = run_prepared(prepared, seeds=[0, 1], workers=2)
    assert report.complete and len(report.outcomes) == 4
    assert all(o.timeline and o.summary.jobs_placed == 48 for o in report.outcomes)
