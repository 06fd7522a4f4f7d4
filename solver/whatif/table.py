"""The terminal view of a what-if report: one row per variant × policy (× seed), then what differs
between policies and between the base and each variant, then why jobs were left out.

Plain text with fixed columns, no colour: it must read the same in a terminal, a CI log and a file.
"""

from __future__ import annotations

from collections.abc import Sequence

from solver.whatif.report import Outcome, PolicyDiff, WhatIfReport

MAX_REASONS_PER_CELL = 8


def render(report: WhatIfReport) -> str:
    state = "complete" if report.complete else "INCOMPLETE (stopped early)"
    lines = [f"what-if {report.scenario!r} · {state}", ""]
    lines += _grid(_summary_rows(report.outcomes))
    waits = _wait_rows(report.outcomes)
    if len(waits) > 1:
        lines += ["", "wait per job class (traces):"]
        lines += _grid(waits)
    lines += _diff_lines(report.diffs)
    lines += _reason_lines(report.outcomes)
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def _grid(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _summary_rows(outcomes: Sequence[Outcome]) -> list[tuple[str, ...]]:
    seeds = len({o.seed for o in outcomes}) > 1
    trace = any(o.timeline for o in outcomes)
    head = ["VARIANT", "POLICY", *(["SEED"] if seeds else []), "PLACED", "GPUS USED", "STRANDED", "FRAG",
            "TIERS", "MISALIGNED", "SOLVES", "SOLVE MS"]  # fmt: skip
    if trace:
        head += ["MEAN UTIL", "END S"]
    rows: list[tuple[str, ...]] = [tuple(head)]
    for o in outcomes:
        s = o.summary
        tiers = " ".join(f"t{t.tier}:{t.jobs}" for t in s.locality_tiers) or "-"
        row = [
            o.variant + ("" if o.complete else " (partial)"),
            o.policy,
            *([str(o.seed)] if seeds else []),
            f"{s.jobs_placed}/{s.jobs_total}",
            f"{s.gpus_used_before}→{s.gpus_used_after}/{s.gpus_total}",
            f"{s.stranded_gpus_before:g}→{s.stranded_gpus_after:g}",
            f"{s.fragmentation_before:.2f}→{s.fragmentation_after:.2f}",
            tiers,
            str(s.misaligned_pairs),
            str(s.solves),
            f"{s.solve_ms_total:.0f}",
        ]
        if trace:
            row += [f"{s.mean_utilisation:.1%}", f"{s.end_s:g}"]
        rows.append(tuple(row))
    return rows


def _wait_rows(outcomes: Sequence[Outcome]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [("VARIANT", "POLICY", "CLASS", "STARTED", "MEAN WAIT S", "P95 S", "MAX S")]
    for o in outcomes:
        for w in o.waits:
            rows.append(
                (o.variant, o.policy, w.job_class, f"{w.started}/{w.jobs}", f"{w.mean_wait_s:.1f}",
                 f"{w.p95_wait_s:.1f}", f"{w.max_wait_s:.1f}")
            )  # fmt: skip
    return rows


def _diff_lines(diffs: Sequence[PolicyDiff]) -> list[str]:
    lines: list[str] = []
    for d in diffs:
        if not d.only_a and not d.only_b and not d.unsupported_a and not d.unsupported_b:
            continue
        if d.policy_a == d.policy_b:
            head = f"{d.policy_a}, {d.variant}"
            parts = [f"newly placed: {', '.join(d.only_b)}" if d.only_b else "",
                     f"no longer placed: {', '.join(d.only_a)}" if d.only_a else ""]  # fmt: skip
        else:
            head = f"{d.variant}: {d.policy_a} vs {d.policy_b}"
            parts = [f"only {d.policy_a}: {', '.join(d.only_a)}" if d.only_a else "",
                     f"only {d.policy_b}: {', '.join(d.only_b)}" if d.only_b else ""]  # fmt: skip
            # jobs a policy could not express are no one's win: named apart
            sides = ((d.policy_a, d.unsupported_a), (d.policy_b, d.unsupported_b))
            parts += [f"unsupported by {policy}: {', '.join(jobs)}" for policy, jobs in sides if jobs]
        if any(parts):
            lines.append(f"  {head} (seed {d.seed}) · " + " · ".join(p for p in parts if p))
    return (
        ["", "differences:", *lines]
        if lines
        else ["", "differences: none (every policy places the same jobs)"]
    )


def _reason_lines(outcomes: Sequence[Outcome]) -> list[str]:
    lines: list[str] = []
    for o in outcomes:
        unplaced = [j for j in o.jobs if not j.placed]
        if not unplaced:
            continue
        lines.append(f"  {o.variant} · {o.policy}:")
        for j in unplaced[:MAX_REASONS_PER_CELL]:
            if j.reason is None:
                lines.append(f"    {j.job_id}: not placed (still waiting)")
                continue
            lines.append(f"    {j.job_id}: {j.reason.code.name}: {j.reason.message}")
            if j.reason.relaxation:
                lines.append(f"      would place it: {j.reason.relaxation}")
        if len(unplaced) > MAX_REASONS_PER_CELL:
            lines.append(f"    ... {len(unplaced) - MAX_REASONS_PER_CELL} more (see --json)")
    return ["", "not placed:", *lines] if lines else []
