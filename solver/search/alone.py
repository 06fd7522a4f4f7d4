"""Would one job be placed on the free cluster with nothing else of its batch placed?

Explanations ask this of an unplaced job and of each relaxed copy of it (a wider PCIe distance, one
tier more, a smaller gang minimum ...): the answer comes from the same normalise and compile stages
as a Solve, with the one job forced placed and no objective — a feasibility search, so a relaxation
is only ever suggested when the solver itself places the job under it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from solver.compile import compile_model
from solver.domain import cancel as cancellation
from solver.domain.cancel import OutOfBudget, bounded
from solver.domain.model import Job, ObjectiveTier, SolveRequest
from solver.domain.validate import validate
from solver.reduce.intranode import hosts_some_member
from solver.reduce.normalise import normalise
from solver.reduce.rails import expand_rails
from solver.search.single import enumerable, fits_now

# One feasibility search of one job: the model is small (one job's shapes on the free cluster's
# classes), and a search that needs longer than this is not worth an explanation's time.
PROBE_SECONDS = 0.5
# What the first question is judged to cost before any was asked: normalising the one job's request
# walks every node (50 ms at 4,096 nodes, warm, session 12). Without it the first question was
# asked with any time left, and a cold 4,096-node call's explanations ran past its deadline.
PROBE_S_PER_NODE = 1.2e-5
PROBE_LATE = "the explanations' time ran out during this question"


@dataclass
class AloneProbe:
    """Answers "does this job fit alone?" for copies of jobs of ``request`` (the batch's request after
    its policy chains), within ``budget_s`` seconds for all questions together; past the budget every
    answer is ``None`` (unknown) and explanations fall back to what they can say without a search."""

    request: SolveRequest
    budget_s: float
    deterministic: bool = True
    asked: int = 0
    _deadline: float = field(init=False)
    _memo: dict[str, bool] = field(init=False, default_factory=dict)
    _last_cost: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._deadline = time.perf_counter() + self.budget_s
        self._last_cost = PROBE_S_PER_NODE * len(self.request.inventory.nodes)

    def __call__(self, job: Job) -> bool | None:
        key = job.model_dump_json()
        if key in self._memo:
            return self._memo[key]
        started = time.perf_counter()
        left = self._deadline - started
        # Building the model is not interruptible: a question is only asked when the time left
        # covers what the last one cost, so the budget (and the caller's deadline) holds.
        if left <= self._last_cost:
            return None
        self.asked += 1
        seconds = min(PROBE_SECONDS, left - self._last_cost)
        try:
            # Normalising and compiling the job's request walk every node: bounded by the
            # explanations' budget, so one question costing more than the last cannot overrun it
            # (a cold 16,384-node call's explanations took 3.2 s of a 2 s budget, session 13).
            with bounded(self._deadline, PROBE_LATE):
                answer = places_alone(self.request, job, seconds, self.deterministic)
        except OutOfBudget:
            answer = None
        self._last_cost = time.perf_counter() - started
        if answer is not None:
            self._memo[key] = answer
        return answer


def places_alone(request: SolveRequest, job: Job, seconds: float, deterministic: bool = True) -> bool | None:
    """True when ``job`` can be placed on ``request.inventory`` as it stands (running allocations
    kept, no other job of the batch placed), False when it cannot, None when the search ran out of
    time before knowing."""
    policy = request.policy.model_copy(update={"objective": (ObjectiveTier.PLACED_WORK,)})
    alone = request.model_copy(update={"jobs": (job,), "policy": policy})
    if validate(alone):  # a relaxation that makes the job invalid places nothing
        return False
    lone = request.model_copy(update={"jobs": (job,)})
    if enumerable(lone):  # one pod the enumerator can place: no model, and the step's caches warm
        return fits_now(lone)
    problem = expand_rails(normalise(alone, hosts_some_member))
    groups = problem.groups()
    compiled = compile_model(problem, policy)
    hosted = compiled.hosted
    if any(not hosted.intersection(variants) for variants in groups.values()):
        return False  # some role has no node that could take one member: nothing to search
    compiled.model.add(compiled.placed[0] == 1)
    compiled.model.clear_objective()
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    if deterministic:
        solver.parameters.max_deterministic_time = max(0.01, seconds)
    with cancellation.stopping(solver.stop_search):  # a cancelled call stops the probe at once
        status = solver.solve(compiled.model)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return True
    if status == cp_model.INFEASIBLE:
        return False
    return None
