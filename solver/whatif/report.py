"""The what-if answer: per variant and policy, what was placed, what it cost, and how it went over time.

Immutable values named as in ``proto/topoplace/v1/whatif.proto`` (``WhatIfReport`` and below), so the
RPC, ``--json`` and the terminal table show one thing. Wall-clock fields (solve times) are the only
part that differs between two runs of the same scenario; :func:`without_timings` drops them so that
determinism and local-vs-Ray equality can be asserted on everything else.
"""

from __future__ import annotations

from pydantic import Field

from solver.domain.model import Frozen, Reason, SolveStatus


class TierCount(Frozen):
    tier: int = Field(ge=0)
    jobs: int = Field(ge=0)


class Summary(Frozen):
    jobs_total: int = 0
    jobs_placed: int = 0
    gpus_total: int = 0
    gpus_used_before: int = 0
    gpus_used_after: int = 0
    stranded_gpus_before: float = 0.0
    stranded_gpus_after: float = 0.0
    fragmentation_before: float = 0.0
    fragmentation_after: float = 0.0
    locality_tiers: tuple[TierCount, ...] = ()
    misaligned_pairs: int = 0
    solves: int = 0
    solve_ms_total: float = 0.0
    solve_ms_max: float = 0.0
    worst_status: SolveStatus = SolveStatus.UNSPECIFIED
    mean_utilisation: float = 0.0
    end_s: float = 0.0


class JobOutcome(Frozen):
    job_id: str
    placed: bool
    reason: Reason | None = None
    job_class: str = ""
    gpus: int = 0
    locality_tier: int = 0
    leaves_spanned: int = 0
    misaligned_pairs: int = 0
    arrival_s: float = 0.0
    start_s: float | None = None
    end_s: float | None = None


class Sample(Frozen):
    t_s: float
    gpus_used: int
    gpus_total: int
    queue_length: int
    running_jobs: int
    fragmentation: float
    stranded_gpus: float

    @property
    def utilisation(self) -> float:
        return self.gpus_used / self.gpus_total if self.gpus_total else 0.0


class ClassWait(Frozen):
    job_class: str
    jobs: int = 0
    started: int = 0
    mean_wait_s: float = 0.0
    p95_wait_s: float = 0.0
    max_wait_s: float = 0.0


class NodeUse(Frozen):
    node: str
    leaf: str = ""
    gpus: int = 0
    used: int = 0
    unhealthy: int = 0
    schedulable: bool = True


class Outcome(Frozen):
    variant: str
    policy: str
    seed: int = 0
    complete: bool = True
    summary: Summary = Summary()
    jobs: tuple[JobOutcome, ...] = ()
    timeline: tuple[Sample, ...] = ()
    waits: tuple[ClassWait, ...] = ()
    before: tuple[NodeUse, ...] = ()
    after: tuple[NodeUse, ...] = ()

    def placed_ids(self) -> frozenset[str]:
        return frozenset(j.job_id for j in self.jobs if j.placed)


class PolicyDiff(Frozen):
    variant: str
    policy_a: str
    policy_b: str
    only_a: tuple[str, ...] = ()
    only_b: tuple[str, ...] = ()
    gpus_a: int = 0
    gpus_b: int = 0
    seed: int = 0
    unsupported_b: tuple[str, ...] = ()  # jobs policy_b cannot express: not counted in only_a
    unsupported_a: tuple[str, ...] = ()


class WhatIfReport(Frozen):
    scenario: str = ""
    complete: bool = True
    outcomes: tuple[Outcome, ...] = ()
    diffs: tuple[PolicyDiff, ...] = ()
    notes: tuple[str, ...] = ()

    def outcome(self, variant: str, policy: str) -> Outcome:
        """The outcome of one cell; KeyError names what is missing."""
        for o in self.outcomes:
            if o.variant == variant and o.policy == policy:
                return o
        raise KeyError(f"no outcome for variant {variant!r} and policy {policy!r}")


def outcome_without_timings(outcome: Outcome) -> Outcome:
    summary = outcome.summary.model_copy(update={"solve_ms_total": 0.0, "solve_ms_max": 0.0})
    return outcome.model_copy(update={"summary": summary})


def without_timings(report: WhatIfReport) -> WhatIfReport:
    """The report with every wall-clock field zeroed: what must be equal between equal runs."""
    return report.model_copy(update={"outcomes": tuple(outcome_without_timings(o) for o in report.outcomes)})
