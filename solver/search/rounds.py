"""Neighbourhoods of the floor's best plan searched for more jobs, then closer gangs, in the search's place.

At 8,192 nodes and more the plan that answers is the fallback's orders' (``solver.fallback``), its
gangs brought closer (``solver.search.closer``): the search of the whole model there improves on
nothing in its time, and its own neighbourhoods (``solver.search.neighbourhood``) start from its
own plan, which places fewer jobs. Searched again with everything above the jobs held
(``bench.locality_proof``, session 35), a neighbourhood of that plan — every job in the spines one
spread gang uses, and every job the plan left out — places more: at 8,192 nodes x 500 jobs, seed 3,
three such rounds of about a second took the 15 s answer from 336 jobs to 342 and seed 1 from 331 to
334, at the same work at every priority level: the greedy's first fit leaves room inside a spine
that a re-packing of the spine's jobs turns into room for one more job.

At 16,384 nodes the orders need all their time (``solver.solve.ROUNDS_BELOW_NODES``). Below it
the rounds run on the search's own core, in the whole-model search's place (``solver.solve``), from
the orders' plan once it is brought closer and again from any plan that ranks above their own (an
exchange of it, on the spare core), while time lasts: one round per gang spread over leaves, fewest
spines first, then rounds of two regions drawn at random; each fixes every member variable but
those and the left-out jobs' (narrowed domains, :func:`solver.search.neighbourhood.narrowed`), holds
every tier down to the jobs at the plan's values and maximises jobs placed, then the locality tier,
in one sum where one job outweighs every locality term; a plan that scores higher is kept and the
next round starts from it. The rounds work on a copy of the model made before the search starts
(the model stays the one ``solver.compile.shelf`` keeps). How many rounds run depends on the clock,
as the orders before them do.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from solver.compile import Compiled, Tier
from solver.compile.objective import JOBS_TIER, hold, release_holds
from solver.domain import cancel as cancellation
from solver.domain.model import Policy
from solver.reduce.normalise import Normalised
from solver.search.floor import Candidate, job_gpus
from solver.search.neighbourhood import Neighbourhoods, narrowed
from solver.search.tiers import apply_hint, maximize, names_from, run_tier, variable_names

LOCALITY = "topology.locality"
ROUNDS = "+rounds"  # the suffix of a plan these rounds bettered
# Regions (spines) freed a round once the spread gangs have had theirs.
REGIONS_A_ROUND = 2
# A round's CP-SAT search: its deterministic units and its wall-clock cap. At 8,192 nodes a round
# that found a job found it within 1 s (bench.locality_proof); at 16,384 a round costs 1.7 s.
ROUND_UNITS, ROUND_MAX_S = 1.5, 1.5
# A round starts only with at least this share of ROUND_MAX_S left: at 8,192 nodes presolve alone
# took most of a round given half a second, which found nothing.
ROUND_LEAST_SHARE = 0.8
# Valuing a plan on every tier after the rounds, against the time a walk of as many terms took:
# kept back from the rounds (twice over) so that the plan is finished before the search's end
# cancels it.
FINISH_PER_READ = 2.0
# How long the rounds wait between asks for a plan to better, while they have none.
WAIT_S = 0.05

# A plan drawn since the last ask, or None.
Newer = Callable[[], "Candidate | None"]


@dataclass
class Rounds:
    """The rounds of one call: a copy of its model, taken before the search touches it."""

    problem: Normalised
    compiled: Compiled
    policy: Policy
    model: cp_model.CpModel

    @staticmethod
    def of(problem: Normalised, compiled: Compiled, policy: Policy) -> Rounds | None:
        """The rounds of a model with a jobs tier (its copy: 60 ms at 8,192 nodes, 140 at 16,384),
        or None without one."""
        if not any(t.name == JOBS_TIER for t in compiled.tiers):
            return None
        return Rounds(problem, compiled, policy, compiled.model.clone())

    def __call__(self, best: Candidate | None, until: float, newer: Newer | None = None) -> Candidate | None:
        """``best`` bettered by rounds until ``until`` (``time.perf_counter()``), valued on every
        tier by then; None when no round bettered it. With ``newer`` (a plan drawn since it was
        last asked, or None), asked before each round: a plan that ranks above the rounds' own
        becomes what they better from then on, and without ``best`` the rounds wait for its first.
        Where the orders answer, this is how the rounds run beside them (``solver.solve``): from
        their plan brought closer, then from any plan that ranks above the rounds' own (an
        exchange of it)."""
        if until - time.perf_counter() < ROUND_LEAST_SHARE * ROUND_MAX_S:
            return None
        names_from(self.model, self.compiled.model)  # the model's names, read once for both
        hoods = Neighbourhoods.of(self.problem, self.compiled, self.model)
        if hoods is None:
            return None
        tiers = self.compiled.tiers
        names = [t.name for t in tiers]
        at = names.index(JOBS_TIER)
        goal = objective(tiers[at], tiers[names.index(LOCALITY)] if LOCALITY in names else None)
        maximize(self.model, goal)
        order = variable_names(self.model)
        base: _Base | None = None
        # Valuing the plan on every tier at the end is a walk of every tier's terms, as the goal's
        # valuing of a plan is of its terms: kept back from the rounds, with the time a round's
        # domains take to restore.
        finish_s = restore_s = 0.0
        fresh = best
        while True:
            cancellation.check()
            if newer is not None and fresh is None:
                fresh = newer()
            if fresh is not None:
                reading = time.perf_counter()
                score = goal.value_of(fresh.plan)
                finish_s = max(
                    finish_s, FINISH_PER_READ * (time.perf_counter() - reading) * terms_ratio(tiers, goal)
                )
                if base is None or (tuple(fresh.values[:at]), score) > (base.work, base.score):
                    base = self._based_on(fresh, score, hoods, order, at)
                fresh = None
            left = until - finish_s - 2 * restore_s - time.perf_counter()
            if left < ROUND_LEAST_SHARE * ROUND_MAX_S:
                break
            turn = next(base.turns, None) if base is not None else None
            if turn is None:  # nothing to better yet, or every neighbourhood tried: wait for newer
                if newer is None:
                    break
                time.sleep(WAIT_S)
                continue
            assert base is not None
            gang, regions = turn
            if gang is not None and gang not in hoods.spread(base.values):
                continue  # an earlier round brought it under one leaf
            fixed = [i for i in hoods.fixed(gang, regions, base.values) if i not in base.left_out]
            narrowing = time.perf_counter()
            with narrowed(hoods, fixed, base.values):
                restore_s = max(restore_s, time.perf_counter() - narrowing)
                left = until - finish_s - 2 * restore_s - time.perf_counter()
                seconds = max(0.01, min(left, ROUND_MAX_S))
                found = run_tier(self.model, goal, self.policy, seconds, ROUND_UNITS).solution
            score = goal.value_of(found) if found is not None else base.score
            if found is not None and score > base.score:
                # More jobs may place more work than the tiers hold: what a newer plan must outrank.
                work = tuple(t.value_of(found) for t in tiers[:at])
                base.better(found, work, score, hoods, order)
                apply_hint(self.model, found)  # the next round starts from it
        if base is None or not base.bettered:
            return None
        worth = tuple(t.value_of(base.plan) for t in cancellation.checked(tiers))
        return (
            Candidate(base.source.placer + ROUNDS, base.plan, worth) if worth > base.source.values else None
        )

    def _based_on(
        self, source: Candidate, score: int, hoods: Neighbourhoods, order: list[str], at: int
    ) -> _Base:
        """Rounds from ``source`` on: every tier down to the jobs held at its values (only those:
        an earlier plan's holds let go), its plan the hint, its neighbourhoods in turn."""
        release_holds(self.model)
        for tier, value in zip(self.compiled.tiers[: at + 1], source.values, strict=False):
            hold(self.model, tier, value)
        apply_hint(self.model, source.plan)
        values = [source.plan[name] for name in order]
        base = _Base(source, source.plan, tuple(source.values[:at]), score, values, hoods.left_out(values))
        base.turns = self._neighbourhoods(hoods, base)
        return base

    def _neighbourhoods(
        self, hoods: Neighbourhoods, base: _Base
    ) -> Iterator[tuple[int | None, tuple[str, ...]]]:
        """What the rounds free, in turn: each gang spread over leaves with the regions it uses,
        the fewest regions first (then the largest gang); then, while time lasts,
        :data:`REGIONS_A_ROUND` regions drawn at random (seeded by the policy), with the jobs in
        them, as many times as there are regions; always with every job left out. Few regions
        first: the rounds that placed a job at 8,192 nodes freed one or two spines and took under a
        second, while a 256-GPU gang's fourteen spines were not settled in 10 s
        (bench.locality_proof, seed 1). Tried in session 36 and not kept: the two regions with the
        most GPUs free, in turn with the gangs' and random ones (from one plan they placed as many
        jobs as random regions, but in the 15 s calls the rounds from the orders' plan before the
        closer found none)."""

        def size(j: int) -> tuple[int, int, int]:
            regions = {hoods.region[c] for c in hoods.used(j, base.values)}
            return len(regions), -job_gpus(self.problem, j), j

        for gang in sorted(hoods.spread(base.values), key=size):
            yield gang, ()
        if len(hoods.regions) < REGIONS_A_ROUND:
            return
        draw = random.Random(self.policy.seed)
        for _ in range(len(hoods.regions)):  # about every region drawn once (a tiny model: soon)
            yield None, tuple(draw.sample(hoods.regions, REGIONS_A_ROUND))


@dataclass
class _Base:
    """The plan the rounds better: where it came from, the rounds' best from it so far (its plan,
    its work tiers' values, its goal's value, its member variables' values in the model's order,
    the jobs it leaves out), and the neighbourhoods left to try."""

    source: Candidate
    plan: dict[str, int]
    work: tuple[int, ...]
    score: int
    values: list[int]
    left_out: Collection[int]
    turns: Iterator[tuple[int | None, tuple[str, ...]]] = field(default_factory=lambda: iter(()))
    bettered: bool = False

    def better(
        self, plan: dict[str, int], work: tuple[int, ...], score: int, hoods: Neighbourhoods, order: list[str]
    ) -> None:
        self.plan, self.work, self.score, self.bettered = plan, work, score, True
        self.values = [plan[name] for name in order]
        self.left_out = hoods.left_out(self.values)


def terms_ratio(tiers: Sequence[Tier], goal: Tier) -> float:
    """How many terms every tier has together, per term of ``goal``."""
    return sum(len(t.terms) for t in tiers) / max(1, len(goal.terms))


def objective(jobs: Tier, locality: Tier | None) -> Tier:
    """Jobs placed, then the locality tier, as one sum: a job weighs more than every locality term
    together (exact: both are sums of non-negative terms under their bounds)."""
    if locality is None:
        return jobs
    weight = locality.upper + 1
    terms = tuple((weight * c, v) for c, v in jobs.terms) + tuple(locality.terms)
    return Tier(jobs.tier, f"{jobs.name}+{locality.name}", terms, weight * jobs.upper + locality.upper)
