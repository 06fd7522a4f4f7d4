"""The lexicographic search: one CP-SAT search per objective tier, highest first.

Each tier's value is then held as a constraint while the next is optimised, and each search is
hinted with the answer in hand (the first with the floor's plan); a small model is searched once for
all its tiers, weighted so that the sum is lexicographic. Time is shared between tiers by weight;
time a tier does not use flows down.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import floor, gcd
from weakref import WeakKeyDictionary

from ortools.sat.python import cp_model

from solver.compile import Compiled, Tier
from solver.compile.cost import PACE
from solver.compile.objective import JOBS_TIER, hold, is_placed_work
from solver.domain import cancel as cancellation
from solver.domain.model import ObjectiveTier, Policy, SolveStatus, TierValue
from solver.search import neighbourhood
from solver.search.neighbourhood import Neighbourhoods

# How the search time is shared between tiers (by the first part of a tier's name): placed work
# matters most; the topology parts together get as much again; the tie-breakers less.
TIER_WEIGHT = {
    "placed_work": 4.0,
    JOBS_TIER: 0.5,
    "topology": 1.5,
    "packing": 1.0,
    "fragmentation": 1.0,
}

# In deterministic mode the limit is CP-SAT's deterministic time (work units, not seconds), so the
# answer does not depend on the machine's load. Roughly one unit per second on this hardware.
DETERMINISTIC_UNITS_PER_SECOND = 1.0
# A model this small is searched once for all its tiers, weighted into one objective
# (:func:`solve_merged`): a lone pod's model is built and searched in a few milliseconds, and one
# search per tier cost more than the rest of its solve. Bigger models keep one search per tier,
# where each tier's own objective guides the search better than a sum with huge weights.
MERGE_MAX_VARIABLES = 2_000
# The least time a search that only bounds a STRICT block's levels (bounded_by_weighted_sum) is
# started with, per model variable: 0.6 s at 4,096 nodes x 500 jobs, where it proved its sum in 1.1 s.
BOUND_SEARCH_S_PER_VARIABLE = 1e-5
# Below this, CP-SAT would not even hand back its hint on a big model: the plan in hand is the answer.
# CP-SAT's presolve runs to its end whatever the time limit, and grows with the model: at 1,024
# nodes x 200 jobs (15,000 variables) a search given 0.06 s took 0.15 s and the call missed its
# 0.5 s deadline, so a search starts only with at least this much time per variable as well; a
# tier below the first too (at 4,096 nodes x 500 jobs, tiers started with a few tenths of a second
# left took the search 0.2-0.5 s past its budget and a 5 s call past its deadline, session 12).
# Both are idle figures, scaled by the process's pace (solver.compile.cost.PACE): a cold 4,096-node
# call at load 3 (compile 4x its idle time) ran a search given 2.1 s for 3.2 s and was 0.45 s late.
MIN_SEARCH_S, MIN_SEARCH_S_PER_VARIABLE = 0.05, 8e-6
# CP-SAT scales the objective through a double: sums beyond 2^53 would lose units.
EXACT_OBJECTIVE = 2**50


def searched_whole(compiled: Compiled) -> bool:
    """Whether ``compiled`` is small enough to be searched once for all its tiers
    (:data:`MERGE_MAX_VARIABLES`): proven in milliseconds, whatever the clock says."""
    return len(compiled.model.proto.variables) <= MERGE_MAX_VARIABLES


def least_search_s(compiled: Compiled) -> float:
    """The least time a search of ``compiled`` is started with (:data:`MIN_SEARCH_S_PER_VARIABLE`
    at the process's pace); none for a small model, which is proven in milliseconds."""
    if searched_whole(compiled):
        return 0.0
    return max(MIN_SEARCH_S, MIN_SEARCH_S_PER_VARIABLE * len(compiled.model.proto.variables)) * PACE.ratio()


@dataclass(frozen=True)
class TierOutcome:
    value: TierValue
    solution: dict[str, int] | None  # values of every variable, by name


def solve_lexicographic(
    compiled: Compiled,
    policy: Policy,
    budget_s: float,
    hint: dict[str, int] | None = None,
    polish: Callable[[dict[str, int]], dict[str, int]] | None = None,
    locality_moves: Sequence[Callable[[dict[str, int]], dict[str, int] | None]] = (),
    neighbourhoods: Callable[[], Neighbourhoods | None] | None = None,
) -> list[TierOutcome]:
    """Optimise each tier in turn, holding the tiers above at the values reached; each search
    starts from the previous answer (the first from ``hint``, e.g. a greedy placement), improved
    by ``polish`` where a cheap rule can do better than the tier above cared to; before the first
    topology part, each of ``locality_moves`` in turn (model-free moves of the plan in hand: a
    repack, gangs brought closer), kept where it raises that part and lowers no tier above. A small model is
    first searched once for all tiers (:func:`solve_merged`); only if that is not proven optimal in
    the first tier's share of the time do the tiers go one by one. With ``neighbourhoods`` (what
    makes a model's :class:`Neighbourhoods`, called when a locality tier is reached, inside the
    search's time: 0.2 s at 16,384 nodes), a big model's locality tiers are searched a
    neighbourhood at a time (``solver.search.neighbourhood``)."""
    outcomes: list[TierOutcome] = []
    model = compiled.model
    deadline = time.perf_counter() + budget_s
    weights = tier_weights(compiled.tiers)
    if compiled.tiers and searched_whole(compiled):
        share = budget_s * weights[0] / sum(weights)
        merged, found = solve_merged(
            compiled, policy, share, policy.time_limit_s * weights[0] / sum(weights), hint
        )
        if merged is not None:
            return merged
        hint = found or hint  # not proven in its share of the time: tier by tier, from what it found
    tried_moves = False
    hoods: Neighbourhoods | None = None
    for step in steps(compiled):
        i, block, tier = step.first, step.tiers, step.tier
        remaining = deadline - time.perf_counter()
        if i > 0 and (remaining <= 0 or remaining < least_search_s(compiled)):
            outcomes += [unsolved(t, hint) for t in block]  # out of time: the answer above still stands
            continue
        maximize(model, tier)
        if tier.tier == ObjectiveTier.TOPOLOGY and hint is not None and not tried_moves:
            # Once, before the first topology part: the same jobs placed again, locality first,
            # then gangs moved closer one at a time.
            tried_moves = True
            for move in locality_moves:
                moved = move(hint)
                if (
                    moved is not None
                    and all(t.value_of(moved) >= t.value_of(hint) for t in compiled.tiers[:i])
                    and tier.value_of(moved) > tier.value_of(hint)
                ):
                    hint = moved
        lns = hint is not None and tier.name in neighbourhood.TIERS
        if lns and neighbourhoods is not None:
            hoods, neighbourhoods = neighbourhoods(), None  # made once, for every locality tier
        apply_hint(model, hint)
        # Shared once the objective and hint are set (the first hint reads every variable's name:
        # 0.3 s at 4,096 nodes x 500 jobs), so that the search ends when its share does.
        remaining = deadline - time.perf_counter()
        # Each tier gets its weight's part of what is left; time a tier does not use flows down.
        weight = sum(weights[i : i + len(block)])
        part = weight / sum(weights[i:])
        # At least enough for CP-SAT's presolve to hand back the hint on a big model.
        share = max(remaining * part, min(remaining, 0.5 + 0.05 * budget_s))
        started = time.perf_counter()
        # Deterministic mode: the search effort of a tier is a fixed share of the policy's limit,
        # never of the wall time left, so the answer does not depend on the machine's load.
        effort = policy.time_limit_s * weight / sum(weights)
        if lns and hoods is not None and hint is not None:

            def search(
                plan: dict[str, int], seconds: float, units: float, tier: Tier = tier
            ) -> dict[str, int] | None:
                apply_hint(model, plan)
                return run_tier(model, tier, policy, seconds, units).solution

            names = variable_names(model)
            value, plan = neighbourhood.improve(
                hoods, tier, hint, names, policy, max(0.01, share), effort, search
            )
            outcome = TierOutcome(value, plan)
        else:
            outcome = run_tier(model, tier, policy, max(0.01, share), effort)
        found = outcome.solution is not None
        if outcome.solution is None and hint is not None:
            # Nothing found in time: the answer in hand (the tier above's, or the floor's plan for
            # the first tier) stands; the verifier checks it like any other.
            outcome = unsolved(tier, hint, keep=i == 0)
        elif outcome.solution is not None and hint is not None and tier.value_of(hint) > outcome.value.value:
            # CP-SAT may drop a hint it could not complete in time and stop on a worse plan: the
            # answer in hand stands, with the bound the search proved.
            kept = outcome.value.model_copy(update={"value": float(tier.value_of(hint))})
            outcome = TierOutcome(kept, hint)
        ms = (time.perf_counter() - started) * 1000
        outcome = TierOutcome(outcome.value.model_copy(update={"ms": ms}), outcome.solution)
        parts = [outcome] if step.merged is None else block_outcomes(step, outcome)
        if step.merged is not None and found and not all(p.value.optimal for p in parts):
            # The block's lexicographic weights are huge and its bound is loose below the levels it
            # proves: a search of the same levels under small weights bounds them far better. (Not
            # when the block's own search found nothing in its time: the model is too big for it.)
            left = deadline - time.perf_counter()
            # Half the block's weight: below placed work the search at scale has seldom bettered
            # the floor (bench/RESULTS.md), while a proof here closes the answer's own gap.
            bound_weight = TIER_WEIGHT["placed_work"] / 2
            parts = bounded_by_weighted_sum(
                model,
                step,
                parts,
                policy,
                max(0.01, left * bound_weight / (bound_weight + sum(weights[i + len(block) :]))),
                policy.time_limit_s * bound_weight / sum(weights),
            )
        outcomes += parts
        if outcome.solution is not None:
            hint = polish(outcome.solution) if polish else outcome.solution
        # Hold each tier at what the standing answer reaches, found or not, before the next one.
        for t, o in zip(block, parts, strict=True):
            hold(model, t, round(o.value.value))
    return outcomes


@dataclass(frozen=True)
class Step:
    """Tiers the search takes together: one tier, or a STRICT batch's priority levels as ``merged``,
    one sum in which a GPU of a level outweighs everything below it."""

    first: int  # the index of its first tier
    tiers: tuple[Tier, ...]
    merged: Tier | None = None
    weights: tuple[int, ...] = (1,)  # what one unit of each tier's scaled terms weighs in ``merged``
    units: tuple[int, ...] = (1,)  # that unit in each tier's own terms (their gcd)

    @property
    def tier(self) -> Tier:
        return self.merged or self.tiers[0]


def steps(compiled: Compiled) -> list[Step]:
    """The tiers as the search takes them: one at a time, except a STRICT batch's priority levels
    (consecutive placed-work tiers), searched as one lexicographic sum where its weights stay exact
    (:func:`merged_weights` of the tiers scaled by their gcd, spans from each level's own bound,
    which holds in every plan: its terms are non-negative) — one search instead of one a level: on
    4,096 nodes x 500 jobs each level's search alone spent its time in presolve and proved nothing."""
    out: list[Step] = []
    tiers = compiled.tiers
    i = 0
    while i < len(tiers):
        j = i + 1
        while is_placed_work(tiers[i].name) and j < len(tiers) and is_placed_work(tiers[j].name):
            j += 1
        block = tiers[i:j]
        units = [unit(t) for t in block]
        parts = [
            Tier(t.tier, t.name, tuple((c // g, v) for c, v in t.terms), t.upper // g)
            for t, g in zip(block, units, strict=True)
        ]
        weights = merged_weights(compiled.model, parts, bounded=True) if len(block) > 1 else None
        if weights is None:
            out.append(Step(i, (tiers[i],)))  # one tier, or weights that would not stay exact
            i += 1
            continue
        terms = tuple((w * c, v) for w, t in zip(weights, parts, strict=True) for c, v in t.terms)
        upper = sum(w * t.upper for w, t in zip(weights, parts, strict=True))
        merged = Tier(block[0].tier, "+".join(t.name for t in block), terms, upper)
        out.append(Step(i, tuple(block), merged, tuple(weights), tuple(units)))
        i = j
    return out


def unit(tier: Tier) -> int:
    """The greatest common divisor of a tier's coefficients (1,000 for milli-GPU work of whole
    GPUs): dividing by it keeps the optimum and makes the spans a thousand times smaller, so more
    tiers fit under exact lexicographic weights."""
    return gcd(*(c for c, _ in tier.terms)) or 1


def block_outcomes(step: Step, outcome: TierOutcome) -> list[TierOutcome]:
    """One outcome per tier of a block searched as ``step.merged``: each tier's value in the plan and
    the block's search time; proven optimal all together, or else each tier bounded by what the
    merged bound leaves it once the tiers above it take their values — which holds while every
    tier above is proven (an optimal plan has exactly those values there, and the tiers below add
    nothing negative); below the first tier not proven, the trivial bound."""
    plan = outcome.solution
    left: int | None = floor(outcome.value.bound)  # of the merged sum, in scaled units
    out = []
    for tier, weight, unit_ in zip(step.tiers, step.weights, step.units, strict=True):
        value = float(tier.value_of(plan)) if plan else 0.0
        if outcome.value.optimal:
            bound = value
        elif left is not None:
            bound = max(value, min(float(tier.upper), (left // weight) * unit_))
            # The next tier's share: what is left once this one takes its value, if that is proven.
            left = left - weight * (int(value) // unit_) if bound <= value else None
        else:
            bound = float(tier.upper)
        # Every level was searched, together, for the block's time.
        out.append(outcome_of(tier, value, max(bound, value), outcome.value.ms, plan if not out else None))
    return out


def bounded_by_weighted_sum(
    model: cp_model.CpModel,
    step: Step,
    parts: list[TierOutcome],
    policy: Policy,
    seconds: float,
    effort: float,
) -> list[TierOutcome]:
    """``parts`` (one outcome per priority level of a STRICT block, highest first, the block's plan
    in the first) with the levels below the proven ones bounded through a search of their sum
    under small weights (n for the highest of n levels, ..., 1 for the lowest): if every plan has
    ``sum(a_i * w_i) <= B``, a plan that keeps the proven levels above level k at their values has
    ``a_k * w_k <= B - sum(a_p * v_p)`` over them, the levels below adding nothing negative. On
    4,096 nodes x 500 jobs such a search proves its sum in seconds, where the block's own bound
    left every level below the top ones open (bench/RESULTS.md, session 11)."""
    plan = parts[0].solution
    levels = len(step.tiers)
    terms = [
        ((levels - i) * (c // unit_), v)
        for i, (tier, unit_) in enumerate(zip(step.tiers, step.units, strict=True))
        for c, v in tier.terms
    ]
    upper = sum(
        (levels - i) * (t.upper // u) for i, (t, u) in enumerate(zip(step.tiers, step.units, strict=True))
    )
    weighted = Tier(step.tiers[0].tier, "placed_work.weighted", tuple(terms), upper)
    maximize(model, weighted)
    apply_hint(model, plan)
    if seconds < BOUND_SEARCH_S_PER_VARIABLE * len(model.proto.variables) * PACE.ratio():
        return parts  # too little time to bound this model: the answer would come late
    started = time.perf_counter()
    # Without presolve: faster to its bound here (4,096 nodes x 500 jobs: 1.1 s against 1.9 s), and
    # a presolve that overran its time limit made whole calls late (8 s for a 5 s limit, loaded).
    searched = run_tier(model, weighted, policy, seconds, effort, presolve=False)
    ms = (time.perf_counter() - started) * 1000
    if searched.solution is None and searched.value.bound >= upper:
        return parts  # nothing learnt
    left = floor(searched.value.bound)
    out = []
    for i, (part, unit_) in enumerate(zip(parts, step.units, strict=True)):
        value, weight = part.value.value, levels - i
        if left is not None and not part.value.optimal:
            bound = max(value, min(part.value.bound, (left // weight) * unit_))
            part = outcome_of(step.tiers[i], value, bound, part.value.ms + ms, part.solution)
        out.append(part)
        # The next level's share, while every level so far is proven at its value.
        left = left - weight * (int(value) // unit_) if left is not None and part.value.optimal else None
    return out


def outcome_of(tier: Tier, value: float, bound: float, ms: float, plan: dict[str, int] | None) -> TierOutcome:
    """A tier's outcome: proven optimal exactly when its value reaches its bound."""
    return TierOutcome(
        TierValue(tier=tier.tier, name=tier.name, value=value, bound=bound, optimal=value >= bound, ms=ms),
        plan,
    )


def tier_weights(tiers: Sequence[Tier]) -> list[float]:
    """Each tier's share of the search time (``TIER_WEIGHT``, by its name or the name's first part);
    the priority levels of STRICT placed work share the placed-work weight between them."""
    levels = sum(1 for tier in tiers if is_placed_work(tier.name))
    weights = []
    for tier in tiers:
        weight = TIER_WEIGHT.get(tier.name, TIER_WEIGHT.get(tier.name.split(".")[0], 1.0))
        weights.append(weight / levels if is_placed_work(tier.name) else weight)
    return weights


def merged_weights(
    model: cp_model.CpModel, tiers: Sequence[Tier], *, bounded: bool = False
) -> list[int] | None:
    """Weights under which the sum of weight x tier is lexicographic: each tier's weight is one more
    than the most all the tiers below it can move the sum (their spans, from the variables'
    domains; with ``bounded``, tiers of non-negative terms whose ``upper`` bounds them in every
    feasible plan, that upper, often far tighter), so a unit on a tier outweighs any change below
    it. None when the weighted sum would leave the range CP-SAT's double-precision objective holds
    exactly."""
    variables = model.proto.variables
    spans = []
    for tier in tiers:
        if bounded:
            spans.append(tier.upper)
            continue
        low = high = 0
        for c, v in tier.terms:
            domain = variables[v.index].domain
            # Indexed from the front: this protobuf's repeated fields read domain[-1] as 0.
            a, b = c * domain[0], c * domain[len(domain) - 1]
            low, high = low + min(a, b), high + max(a, b)
        spans.append(high - low)
    weights = [0] * len(tiers)
    below = 0
    for i in reversed(range(len(tiers))):
        weights[i] = below + 1
        below += weights[i] * spans[i]
        if below >= EXACT_OBJECTIVE:
            return None
    return weights


def solve_merged(
    compiled: Compiled, policy: Policy, seconds: float, effort: float, hint: dict[str, int] | None
) -> tuple[list[TierOutcome] | None, dict[str, int] | None]:
    """Every tier in one search, weighted (:func:`merged_weights`). Proven optimal, its answer is the
    lexicographic optimum and each tier's value its proven best; the search's time is the first
    tier's. Otherwise (no exact weights, or not proven in time) no outcomes, and what it found."""
    weights = merged_weights(compiled.model, compiled.tiers)
    if weights is None:
        return None, None
    model = compiled.model
    terms = [(w * c, v) for w, tier in zip(weights, compiled.tiers, strict=True) for c, v in tier.terms]
    merged = Tier(
        compiled.tiers[0].tier,
        "merged",
        tuple(terms),
        sum(w * t.upper for w, t in zip(weights, compiled.tiers, strict=True)),
    )
    maximize(model, merged)
    apply_hint(model, hint)
    started = time.perf_counter()
    outcome = run_tier(model, merged, policy, max(0.01, seconds), effort)
    ms = (time.perf_counter() - started) * 1000
    if outcome.solution is None or not outcome.value.optimal:
        return None, outcome.solution
    solution = outcome.solution
    outcomes = []
    for i, tier in enumerate(compiled.tiers):
        value = float(tier.value_of(solution))
        outcomes.append(outcome_of(tier, value, value, 0.0 if i else ms, solution))
        # Held, as the tier-by-tier search holds them: a caller may go on to use the model.
        hold(model, tier, round(value))
    return outcomes, solution


def unsolved(tier: Tier, solution: dict[str, int] | None, *, keep: bool = False) -> TierOutcome:
    """A tier left unsearched or unsolved: what the standing answer scores on it, not optimal.
    With ``keep`` the standing answer becomes this tier's answer (the first tier's fallback)."""
    value = float(tier.value_of(solution)) if solution else 0.0
    return TierOutcome(
        TierValue(tier=tier.tier, name=tier.name, value=value, bound=float(tier.upper), optimal=False),
        solution if keep else None,
    )


def apply_hint(model: cp_model.CpModel, hint: dict[str, int] | None) -> None:
    model.clear_hints()
    if not hint:
        return
    # Straight into the proto: one call per variable through the Python wrapper costs more than
    # the search of a lone pod's model.
    names = variable_names(model)
    known = [i for i, name in enumerate(names) if name in hint]
    model.proto.solution_hint.vars.extend(known)
    model.proto.solution_hint.values.extend(hint[names[i]] for i in known)


def maximize(model: cp_model.CpModel, tier: Tier) -> None:
    """``model.maximize(tier.expr)``, written straight into the proto from the tier's flattened
    terms (:attr:`Tier.flat`): the wrapper's own walk of a 30,000-term tier took 0.45 s at 4,096
    nodes x 500 jobs, before every tier's search and outside its time."""
    indices, coefficients, offset = tier.flat
    model.clear_objective()
    objective = model.proto.objective
    objective.vars.extend(indices)
    # CP-SAT minimises: a maximisation is the negated sum, scaled by -1 (as CpModel.maximize does).
    objective.coeffs.extend(-c for c in coefficients)
    objective.offset = -offset
    objective.scaling_factor = -1.0


# Each model's variable names, in index order (read again when the model has grown): a name is read
# from the proto's C++ side each time (0.3-0.75 s for 95,000 variables), and every tier's hint and
# solution needs them all. A model only gains variables, never renames one.
_NAMES: WeakKeyDictionary[cp_model.CpModel, list[str]] = WeakKeyDictionary()


def variable_names(model: cp_model.CpModel) -> list[str]:
    """The model's variable names by index, read from its proto once (again if it has grown)."""
    variables = model.proto.variables
    names = _NAMES.get(model)
    if names is None or len(names) != len(variables):
        names = [v.name for v in variables]
        _NAMES[model] = names
    return names


def names_from(copy: cp_model.CpModel, model: cp_model.CpModel) -> None:
    """Let ``copy`` (a clone of ``model``, same variables in the same order) answer
    :func:`variable_names` from ``model``'s list instead of reading its own proto: 0.3-0.75 s
    saved at 8,192 nodes and more."""
    variables = len(copy.proto.variables)
    _NAMES[copy] = variable_names(model)[:variables]


def run_tier(
    model: cp_model.CpModel,
    tier: Tier,
    policy: Policy,
    seconds: float,
    effort: float | None = None,
    *,
    presolve: bool = True,
) -> TierOutcome:
    """One search of ``tier`` on the model as it stands (objective and hint set), for ``seconds``
    (and, deterministic, ``effort`` units)."""
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = policy.seed
    params.max_time_in_seconds = seconds
    # Presolve runs to its end whatever the time limit; a search that only wants a bound skips it.
    params.cp_model_presolve = presolve
    # The model is small and its structure is known; probing and symmetry detection cost more
    # presolve time than they save search (measured: bench/RESULTS.md, "presolve settings").
    params.cp_model_probing_level = 0
    params.symmetry_level = 0
    if policy.deterministic:
        # One worker, or interleaved workers, search the same way on every run; the deterministic
        # time limit makes the stopping point independent of how loaded the machine is. Wall time
        # stays as the safety net for the caller's deadline. One worker is the fastest on 2 cores.
        params.num_workers = policy.workers or 1
        params.interleave_search = params.num_workers > 1
        params.max_deterministic_time = (
            effort if effort is not None else seconds
        ) * DETERMINISTIC_UNITS_PER_SECOND
    else:
        params.num_workers = policy.workers or max(1, os.cpu_count() or 1)
    with cancellation.stopping(solver.stop_search):  # a cancelled call stops the search at once
        code = solver.solve(model)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return TierOutcome(TierValue(tier=tier.tier, value=0.0, bound=float(tier.upper), optimal=False), None)
    solution = dict(zip(variable_names(model), solver.response_proto.solution, strict=True))
    return TierOutcome(
        TierValue(
            tier=tier.tier,
            name=tier.name,
            # Every tier is an integer expression; CP-SAT reports it through a float scaling.
            value=float(round(solver.objective_value)),
            bound=float(round(solver.best_objective_bound)),
            optimal=code == cp_model.OPTIMAL,
        ),
        solution,
    )


def overall_status(outcomes: list[TierOutcome]) -> SolveStatus:
    if not outcomes:
        return SolveStatus.OPTIMAL  # nothing to optimise: an empty batch
    if outcomes[0].solution is None:
        return SolveStatus.UNKNOWN
    if all(o.value.optimal for o in outcomes) and all(o.solution is not None for o in outcomes):
        return SolveStatus.OPTIMAL
    return SolveStatus.FEASIBLE


def settle(
    compiled: Compiled,
    outcomes: Sequence[TierOutcome],
    floor_plan: dict[str, int],
    floor_values: Sequence[int] | None = None,
) -> tuple[dict[str, int], tuple[TierValue, ...], bool]:
    """The plan to return and the truth about it, tier by tier: the search's plan unless the floor's
    is lexicographically better (then the floor's: no answer is worse than the floor); every tier's
    value is the returned plan's own; every bound is a true one — never above what the tier can
    take, the tier's trivial bound where no search bounded it (or where the bound was proved with
    tiers above held at other values), never below the plan's value. Returns (plan, values, whether
    the floor's plan was kept). ``floor_values``: the floor plan's tier values when known already
    (the portfolio values every plan it keeps): each walk of every tier's terms took 0.2 s at
    16,384 nodes."""
    found = next((o.solution for o in reversed(outcomes) if o.solution is not None), None)
    if floor_values is None:
        floor_values = tuple(t.value_of(floor_plan) for t in compiled.tiers)
    floor_values = tuple(floor_values)
    found_values = tuple(t.value_of(found) for t in compiled.tiers) if found is not None else None
    keep_floor = found_values is None or floor_values > found_values
    plan = floor_plan if keep_floor else found
    plan_values = floor_values if keep_floor else found_values
    assert plan_values is not None
    # Bounds of tiers below the first where the plans differ were proved for other values above.
    differs = len(compiled.tiers)
    if keep_floor and found_values is not None:
        differs = next(i for i, (a, b) in enumerate(zip(floor_values, found_values, strict=True)) if a != b)
    values = []
    for i, tier in enumerate(compiled.tiers):
        value = float(plan_values[i])
        searched = outcomes[i] if i < len(outcomes) else None
        bound = float(tier.upper)
        if searched is not None and i <= differs:
            bound = min(bound, searched.value.bound)
        bound = max(bound, value)
        values.append(
            TierValue(
                tier=tier.tier,
                name=tier.name,
                ms=searched.value.ms if searched is not None else 0.0,
                value=value,
                bound=bound,
                optimal=value >= bound,
            )
        )
    return plan, tuple(values), keep_floor
