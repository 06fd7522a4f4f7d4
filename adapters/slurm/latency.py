"""How long the solver has lately taken to answer a submit, so that the hook stops waiting for an
answer that will not come within its budget.

The hook gives the solver a head start of its answer budget, makes the fast placer's plan, and
waits for the solver to the end of the budget (``adapters.slurm.agent``). Where the solver keeps
missing the budget — a loaded machine, a large cluster — each wait costs the whole budget for
nothing: under two busy loops at 1,024 nodes the hook's answers sat at 30-38 ms, the budget, and
its p99 at 53 ms (session 16, bench/RESULTS-slurm.md). Once most of the recent answers came late,
the fast placer answers at once; the solver's answer still refines the plan while the job waits,
and its time is still observed, so waiting resumes when the solver is fast again.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque

# The answers looked at: the last few, within the last minute (load comes and goes).
RECENT = 16
RECENT_S = 60.0
# Fewer observations than this say nothing: the hook waits as usual.
AT_LEAST = 4


class SolverLatency:
    """Seconds from a submit's solve call to its answer, the recent ones; thread-safe (answers are
    observed on gRPC and pool threads)."""

    def __init__(self, recent: int = RECENT, recent_s: float = RECENT_S) -> None:
        self._seen: deque[tuple[float, float]] = deque(maxlen=recent)  # (time.monotonic(), seconds)
        self._recent_s = recent_s
        self._lock = threading.Lock()

    def observe(self, seconds: float, at: float | None = None) -> None:
        """One answer came ``seconds`` after its call (not a call the agent cancelled: that says
        only how long it was wanted)."""
        with self._lock:
            self._seen.append((time.monotonic() if at is None else at, seconds))

    def median_s(self, now: float | None = None) -> float | None:
        """The median of the recent answers' times; None with fewer than :data:`AT_LEAST`."""
        now = time.monotonic() if now is None else now
        with self._lock:
            recent = [s for at, s in self._seen if now - at <= self._recent_s]
        return statistics.median(recent) if len(recent) >= AT_LEAST else None

    def expects_late(self, budget_s: float, now: float | None = None) -> bool:
        """Whether the recent answers say the next one will miss ``budget_s``: their median did."""
        median = self.median_s(now)
        return median is not None and median > budget_s
