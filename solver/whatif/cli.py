"""``topoplace whatif SCENARIO.yaml [...]``: the command, contributed through the ``topoplace.commands``
entry point so the core CLI never imports it by name.

One or more scenarios (several scenarios × ``--seeds`` make a sweep), each answered as a table (or
JSON with ``--json``), and with ``--out DIR`` the JSON report and PNG plots written per scenario.
Cells run here by default, in local processes with ``--workers N``, or on Ray with ``--ray ADDRESS``
(``--ray local`` starts a Ray instance on this machine). Ctrl-C keeps what was computed: the report
and plots are still written, marked incomplete, and the exit code is 130.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from solver.domain.errors import InvalidRequest, Problem

EXIT_OK, EXIT_INTERRUPTED = 0, 130

# What a person reads first in `topoplace whatif --help`: what the command answers and one example.
WHATIF_HELP = """\
Ask what-if questions about a cluster without touching it: add or drain nodes, fail GPUs, let jobs
finish, change a job, or replay an hour of arrivals; each variant is solved by topoplace and by
greedy baselines (Volcano-like, best fit, FGD, ...) and compared side by side.

example:
  topoplace whatif fixtures/whatif/dgx4-grow.yaml             # table: placed, GPUs used, reasons
  topoplace whatif fixtures/whatif/dgx4-grow.yaml --out /tmp/w # also JSON and PNG plots

The scenario format and two worked examples: docs/whatif.md."""


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``whatif`` on the core CLI's subcommands."""
    p = subparsers.add_parser(
        "whatif",
        help="offline what-if: edits to an inventory, policies compared, traces replayed",
        description=WHATIF_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenarios", nargs="+", type=Path, metavar="SCENARIO", help="a scenario as YAML or JSON")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    p.add_argument("--out", type=Path, metavar="DIR", help="write <scenario>.json and PNG plots here")
    p.add_argument("--seeds", metavar="LIST", help="e.g. 0-3 or 1,5: run every cell once per seed")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="local worker processes (default 1)")
    p.add_argument("--ray", metavar="ADDRESS", help="run cells on a Ray cluster ('local' starts one here)")
    p.add_argument("--time-limit", type=float, metavar="S", help="override every solver policy's time limit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(run=run_whatif)


def parse_seeds(text: str | None) -> list[int] | None:
    """``"0-3,7"`` → ``[0, 1, 2, 3, 7]``."""
    if not text:
        return None
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            seeds.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise InvalidRequest(
            [Problem(path="--seeds", message=f"expected e.g. 0-3 or 1,5, got {text!r}")]
        ) from None
    return seeds


def run_whatif(args: argparse.Namespace) -> int:
    from solver.whatif import load_and_prepare, with_time_limit
    from solver.whatif.convert import report_json
    from solver.whatif.plots import write_plots
    from solver.whatif.run import run_prepared
    from solver.whatif.table import render

    seeds = parse_seeds(args.seeds)
    prepared = [load_and_prepare(path) for path in args.scenarios]  # every scenario checked before any runs
    if args.time_limit is not None:
        prepared = [with_time_limit(p, args.time_limit) for p in prepared]
    status = EXIT_OK
    for path, scenario in zip(args.scenarios, prepared, strict=True):
        report = run_prepared(
            scenario,
            seeds=seeds,
            workers=args.workers,
            ray_address=args.ray,
            show_progress=not args.no_progress and sys.stderr.isatty(),
        )
        text = report_json(report)
        print(text if args.json else render(report))
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{path.stem}.json").write_text(text + "\n")
            for written in write_plots(report, args.out, path.stem):
                print(f"wrote {written}", file=sys.stderr)
        if not report.complete:
            status = EXIT_INTERRUPTED
            break
    return status
