"""What building the model will cost, predicted before it is built (issue 18 item 4, issue 23 item 2).

Compile and the floor's first pass run before any search, and nothing can be answered until they
end: a call whose time is shorter than they take used to build the model anyway and answer late
(1,024 nodes x 200 jobs under a 0.5 s deadline: 0.57 s in process, 1.63 s over gRPC; 16,384 nodes
x 500 jobs: 4.8 s of compile and 3.3 s of one floor pass, cold). Their cost follows the model's
member variables, one per role and node class a member fits, so it is predicted from node classes
and roles, which normalise knows before compile starts. ``solver.solve`` compares the prediction
with the time left and, when it does not fit, answers with a plan that needs no model
(``solver.fallback``) instead of a late one.

The prediction is only as good as its calibration: the constants below were fitted on this
project's development machine (2 cores, idle: load average 0.5) with ``bench.quality``'s
generator (HGX nodes, 32 a leaf; one-member pods and 8-GPU gangs), 1,024 to 16,384 nodes x 200 to
500 jobs, first at 469d9ea and again in session 12 (the constants' comments say what each saw).
Requests whose nodes offer many more configurations per class (many small member shapes on large
nodes) build slower than predicted, and a loaded machine too: compile is timed against its part of
the prediction, and :data:`PACE` scales every later prediction by what it measured.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from dataclasses import dataclass

from solver.reduce.normalise import Normalised

# compile + one floor pass ~ BUILD_S + BUILD_S_PER_CLASS x classes + BUILD_S_PER_CLASS_ROLE x
# classes x roles (see the module docstring for where these come from). Refitted in session 12 at
# 14d19a2 (the floor's indexes and compile's once-computed weights had halved both; load 0.5-0.7),
# CPU seconds, measured (predicted): 339 classes x 72 roles 0.16 (0.16), 1,124 x 167 0.63-0.73
# (0.72), 4,557 x 167 2.80-3.05 (2.86). Session 10's fit predicted twice these, and a warm 5 s call
# at 16,384 nodes answered with the first-fit greedy (289-335 jobs) where the model's floor
# places 355 (bench/RESULTS.md, session 12).
BUILD_S, BUILD_S_PER_CLASS, BUILD_S_PER_CLASS_ROLE = 0.02, 2.55e-4, 2.2e-6
# Compile's part of that prediction: 0.66-0.69 of the build at all three sizes. Compile is timed
# against it, so the process's pace (:data:`PACE`) follows the load through the model path as well.
COMPILE_SHARE = 2 / 3
# The fit is scaled up by its worst under-prediction before it is compared with the time left: a
# model built when it should not have been is an answer after the promise, while one not built
# when it could have been is a greedy answer in time. At 1.15, warm 5 s calls at 16,384 nodes took
# the model and answered late over gRPC at load 1 (bench/RESULTS.md, session 12).
SAFETY = 1.25
# Decode, verify, the measures and the answer's tier values walk every node or every variable
# (explain takes what time is left, solver.solve): at 16,384 nodes x 500 jobs decode 0.21 s, the
# measures 0.33 s cold (0.03 warm), verify 0.34 s cold (0.14 warm), 0.9 s in all cold (session 12,
# load 0.5); session 10's 8e-5 a node (1.3 s) sent 5 s calls there to the greedy.
ANSWER_S_PER_NODE = 5.5e-5
# The least time a search of the model is started with (solver.search.tiers.least_search_s, which
# counts the model's variables) as a share of the build predicted here, so that it is known before
# the model is: 0.51-0.64 measured on bench.quality's requests, 1,024 to 16,384 nodes x 200 to 500
# jobs (0.55 at 4,096 x 500; session 21, load ~0.5).
LEAST_SEARCH_OF_BUILD = 0.55
# A model predicted to build in less than this is built whatever the clock says: it is answered
# at most this late, and a small model is proven optimal where a greedy plan is not.
SMALL_BUILD_S = 0.1


# Before a request is converted, all that is known for free is what the wire says: how many nodes and
# jobs. What converting, validating and normalising a node the server has never seen costs, per
# node. Session 10's cold calls took about 1 s at 1,024 nodes and 5 s at 16,384 (load 1-2) for the
# three; the split below was measured in session 11 with bench.quality's nodes at load 3-20 (no
# idle machine was to be had: 0.25-0.9 ms a node converted, 0.12-0.14 ms validated, 0.28 ms
# normalised) and taken at its fast end. :class:`Pace` scales them by what the process measures.
CONVERT_S_PER_NODE = 3e-4  # the wire's node into the domain's (solver.service.wire): pydantic
WARM_CONVERT_S_PER_NODE = 1.5e-5  # the same node found in the wire's node cache (its bytes hashed)
# A node never seen whose devices were converted for a node built alike (the wire's DEVICES_CACHE):
# its own fields and its GPUs' UUIDs validated. First cold call of a fresh process, 16,384 nodes of
# bench.quality, server's collector regime (session 29, load ~2): 119-140 us a node where the plain
# conversion took 292-302 (CONVERT_S_PER_NODE's 3e-4); taken at its fast end, as that one.
ALIKE_CONVERT_S_PER_NODE = 1.2e-4
VALIDATE_S_PER_NODE = 1.2e-4  # solver.domain.validate, cold, a node of a kind not validated before
# Validating a node never seen of a kind validated already: solver.domain.validate checks each
# node_key once, so such a node costs its key and its share of the rules across nodes. Fitted in
# session 31 on bench.quality's cold inventories, idle, fresh processes (per node = known + share of
# new kinds x extra): 33 us a node at 16,384 nodes (9 % new kinds), 38 at 4,096 (16 %), 47 at 1,024
# (26 %) give 25 us known and 83 us more a new kind; taken at 3e-5, with a new kind at the full cost.
VALIDATE_KNOWN_S_PER_NODE = 3e-5
# The wire's kind of a node never seen (solver.service.wire._kind), found as it is read: a copy of its
# message with the naming fields cleared, serialised. 11.5-19.8 us a node in the same runs.
KIND_S_PER_NODE = 1.2e-5
NORMALISE_S_PER_NODE = 2.5e-4  # solver.reduce.normalise's shape of a node, cold


class Pace:
    """How much slower than its calibration this process runs now: the median ratio of measured to
    predicted seconds over the last :attr:`KEPT` stages that were timed against a prediction.

    Every constant of this module was fitted idle; on a loaded machine (another engineer's search
    on both cores, load average 10-13) the same stages took 1.5-3x as long and the estimate sent
    answers late (bench/RESULTS.md, session 10). Scaling each prediction by what this process has
    just measured needs no guess at the load: the stages report what they cost. The ratio never
    goes below 1 (a fast spell must not talk the estimate into a model that misses on the next
    slow one) and is capped at :attr:`MOST` (one stage stalled by a swap is not the machine's pace).
    """

    KEPT = 9
    MOST = 8.0
    # A stage shorter than this measures the clock and the scheduler more than the stage's work.
    SHORTEST_S = 0.02

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ratios: deque[float] = deque(maxlen=self.KEPT)

    def observe(self, predicted_s: float, measured_s: float) -> None:
        """A stage predicted (idle) at ``predicted_s`` that took ``measured_s``."""
        if predicted_s < self.SHORTEST_S or measured_s < 0:
            return
        with self._lock:
            self._ratios.append(measured_s / predicted_s)

    def ratio(self) -> float:
        with self._lock:
            ratios = list(self._ratios)
        if not ratios:
            return 1.0
        return min(self.MOST, max(1.0, statistics.median(ratios)))

    def forget(self) -> None:
        with self._lock:
            self._ratios.clear()


# This process's pace, shared by every call (the cores are too).
PACE = Pace()


@dataclass(frozen=True)
class Estimate:
    """The predicted cost, in seconds, of the stages a model-built answer cannot skip."""

    build_s: float  # compile and one floor pass
    answer_s: float  # decode, explain, measures and verify
    pace: float = 1.0  # what both were scaled by (Pace): a small model is judged by its idle size

    @property
    def compile_idle_s(self) -> float:
        """Compile's part of the build, as the fit predicts it idle: what compile is timed against."""
        return COMPILE_SHARE * self.build_s / (SAFETY * self.pace)

    @property
    def floor_s(self) -> float:
        """The floor's first pass: the build after compile."""
        return (1 - COMPILE_SHARE) * self.build_s

    @property
    def small(self) -> bool:
        """A model built whatever the clock says: it is answered at most :data:`SMALL_BUILD_S` late,
        and a small model is proven optimal where a greedy plan is not."""
        return self.build_s <= SMALL_BUILD_S * self.pace

    @property
    def least_search_s(self) -> float:
        """The least search the model would be started with: below it, the model's answer is one of
        its floor's placers, searched by nothing (:data:`LEAST_SEARCH_OF_BUILD`)."""
        return LEAST_SEARCH_OF_BUILD * self.build_s

    def fits(self, left_s: float) -> bool:
        """Whether the model can be built and its plan answered in ``left_s``."""
        return self.small or self.build_s + self.answer_s <= left_s

    def fits_built(self, left_s: float) -> bool:
        """Whether a model already built (solver.compile.shelf) can run its floor's first pass and
        have its plan answered in ``left_s``."""
        return self.small or self.floor_s + self.answer_s <= left_s

    def why_unsearched(self, search_s: float, least_s: float) -> str:
        """Why the model was not built (or not used) though it fits: the search it would get,
        ``search_s``, is less than the least a search of it is started with, ``least_s``."""
        return (
            "building the model and its first plan was predicted to leave its search "
            f"{max(0.0, search_s):.2f} s, less than the {least_s:.2f} s a search of a model "
            "this size starts with"
        )

    def why(self, left_s: float) -> str:
        """The decision in words, for the answer and the log."""
        return (
            f"building the model was predicted to take {self.build_s:.2f} s and answering "
            f"{self.answer_s:.2f} s, and {max(0.0, left_s):.2f} s were left"
        )


def answer_s(nodes: int, pace: float | None = None) -> float:
    """What decode, explain, measures and verify cost on ``nodes`` nodes, predicted at ``pace``
    (:data:`PACE`'s ratio unless given)."""
    return ANSWER_S_PER_NODE * nodes * (PACE.ratio() if pace is None else pace)


def estimate(problem: Normalised, pace: float | None = None) -> Estimate:
    """The cost of compiling ``problem`` and running one floor pass over it, and of answering, at
    ``pace`` (:data:`PACE`'s ratio unless given: the machine's recent speed against the fit's)."""
    pace = PACE.ratio() if pace is None else pace
    classes, roles = len(problem.classes), len(problem.roles)
    idle = BUILD_S + BUILD_S_PER_CLASS * classes + BUILD_S_PER_CLASS_ROLE * classes * roles
    return Estimate(
        build_s=SAFETY * idle * pace,
        answer_s=answer_s(len(problem.request.inventory.nodes), pace),
        pace=pace,
    )


def before_model_s(nodes: int, pace: float | None = None) -> float:
    """What converting, validating and normalising ``nodes`` nodes never seen before costs, at
    ``pace``: an upper bound from the node count alone (seen nodes cost a few percent of it)."""
    pace = PACE.ratio() if pace is None else pace
    return (CONVERT_S_PER_NODE + VALIDATE_S_PER_NODE + NORMALISE_S_PER_NODE) * nodes * pace
