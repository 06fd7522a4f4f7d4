"""Offline what-if queries: edit an inventory, compare policies on a batch or a replayed trace, report.

Built on the solver's public pipeline (``solver.solve.solve``) and never imported by it: the core
knows nothing of what-ifs. The public entry points:

- :func:`load_and_prepare` — a scenario file, checked and built (every problem at once, with paths);
- :func:`run_scenario` — a prepared scenario answered as a :class:`~solver.whatif.report.WhatIfReport`;
- ``solver.whatif.table.render``, ``solver.whatif.plots.write_plots``, ``solver.whatif.convert.report_json``
  — the report as a table, PNGs and JSON.
"""

from __future__ import annotations

from pathlib import Path

from solver.whatif.convert import load_scenario_file
from solver.whatif.report import WhatIfReport
from solver.whatif.run import run_prepared
from solver.whatif.scenario import Scenario
from solver.whatif.world import Prepared, prepare

__all__ = [
    "Prepared",
    "Scenario",
    "WhatIfReport",
    "load_and_prepare",
    "prepare",
    "run_scenario",
    "with_time_limit",
]


def load_and_prepare(path: Path) -> Prepared:
    """Read, check and build a scenario file; relative references are read next to it."""
    path = Path(path)
    return prepare(load_scenario_file(path), root=path.resolve().parent, source=str(path))


def run_scenario(scenario: Scenario, *, root: Path | None = None, **options: object) -> WhatIfReport:
    """Prepare and run a scenario value (e.g. built in Python); ``options`` as for ``run_prepared``."""
    return run_prepared(prepare(scenario, root=root, source=scenario.name or "scenario"), **options)  # type: ignore[arg-type]


def with_time_limit(prepared: Prepared, seconds: float) -> Prepared:
    """Every solver policy of the scenario with its time limit set to ``seconds``."""
    policies = tuple(
        p.model_copy(update={"solver": p.solver.model_copy(update={"time_limit_s": seconds})})
        if p.solver
        else p
        for p in prepared.scenario.all_policies()
    )
    scenario = prepared.scenario.model_copy(update={"policies": policies})
    return Prepared(scenario=scenario, source=prepared.source, worlds=prepared.worlds)
