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
project's development machine (2 cores, idle: load average 0.5) at commit 469d9ea with
``bench.quality``'s generator (HGX nodes, 32 a leaf; one-member pods and 8-GPU gangs), 256 to
16,384 nodes x 50 to 500 jobs, cold and warm caches, the slower of the two: every point within
-27 % / +26 % of its measure. Requests whose nodes offer many more configurations per class (many
small member shapes on large nodes) build slower than predicted; a loaded machine too.
"""

from __future__ import annotations

from dataclasses import dataclass

from solver.reduce.normalise import Normalised

# compile + one floor pass ~ BUILD_S + BUILD_S_PER_CLASS x classes + BUILD_S_PER_CLASS_ROLE x
# classes x roles (see the module docstring for where these come from). Measured, in seconds:
# 339 classes x 72 roles 0.44 (predicted 0.32), 1,327 x 167 1.53 (1.70), 5,460 x 167 8.1 (6.9).
BUILD_S, BUILD_S_PER_CLASS, BUILD_S_PER_CLASS_ROLE = 0.04, 5.1e-4, 4.4e-6
# The fit is scaled up by its worst under-prediction before it is compared with the time left: a
# model built when it should not have been is an answer after the promise, while one not built
# when it could have been is a greedy answer in time. Re-measured at 0f61531 (the lead's compile
# changes): 1,024 x 200 0.35 s, 4,096 x 500 1.6-1.9 s, 16,384 x 500 6.9-8.9 s against 0.32, 1.70,
# 6.9 predicted before this factor.
SAFETY = 1.25
# Decode, verify, the measures and the answer's tier values walk every node or every variable
# (explain takes what time is left, solver.solve): 0.06-0.1 s at 1,024 nodes x 200 jobs, 0.8-1.1 s
# at 16,384 x 500 (bench/deadlines.py's stage timings, same machine, commit 0f61531).
ANSWER_S_PER_NODE = 8e-5
# A model predicted to build in less than this is built whatever the clock says: it is answered
# at most this late, and a small model is proven optimal where a greedy plan is not.
SMALL_BUILD_S = 0.1


@dataclass(frozen=True)
class Estimate:
    """The predicted cost, in seconds, of the stages a model-built answer cannot skip."""

    build_s: float  # compile and one floor pass
    answer_s: float  # decode, explain, measures and verify

    def fits(self, left_s: float) -> bool:
        """Whether the model can be built and its plan answered in ``left_s``."""
        return self.build_s <= SMALL_BUILD_S or self.build_s + self.answer_s <= left_s

    def why(self, left_s: float) -> str:
        """The decision in words, for the answer and the log."""
        return (
            f"building the model was predicted to take {self.build_s:.2f} s and answering "
            f"{self.answer_s:.2f} s, and {max(0.0, left_s):.2f} s were left"
        )


def answer_s(nodes: int) -> float:
    """What decode, explain, measures and verify cost on ``nodes`` nodes, predicted."""
    return ANSWER_S_PER_NODE * nodes


def estimate(problem: Normalised) -> Estimate:
    """The cost of compiling ``problem`` and running one floor pass over it, and of answering."""
    classes, roles = len(problem.classes), len(problem.roles)
    return Estimate(
        build_s=SAFETY * (BUILD_S + BUILD_S_PER_CLASS * classes + BUILD_S_PER_CLASS_ROLE * classes * roles),
        answer_s=answer_s(len(problem.request.inventory.nodes)),
    )
