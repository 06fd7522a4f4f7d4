"""Large neighbourhood search for the locality tiers of a big model (issue 18 item 2).

At 4,096 nodes x 500 jobs the CP-SAT search of the whole model (60,000 variables, one worker),
hinted with the floor's plan, gave the locality tier nothing in the second it had: it does not get
past the hint. A *neighbourhood* is small enough for it. Each round takes one gang whose members sit
under more than one leaf, and one region (a switch one tier above the leaves, a spine) drawn at
random for it to move into. Everything is fixed at the plan's values except:

- that gang, and every other job with a member in a region the gang uses or the drawn one;
- the pods pooled on those regions' nodes (``solver.reduce.pools``: interchangeable, they may move
  between the region's nodes, and the held jobs tier keeps their count).

CP-SAT re-solves what is free with the tier as its objective, hinted with the whole plan. The tiers
above are held by the model already (``solver.compile.objective.hold``), so whatever it finds places
as much work and as many jobs; a plan that scores better on the tier is kept. What is fixed is the
member variables (``y``: where members sit; the rest follows from them), by narrowing their domains
in the model's proto for the round and restoring them after (:func:`narrowed`), so the model is the
same one afterwards and ``solver.compile.shelf`` may keep it.

A round costs a fraction of a second where the whole-model search gave nothing (4,096 nodes, seed
2: 0.26 s a round, 0.06 s of it narrowing 18,500 domains and 0.04 s restoring them; the locality
tier went 736 -> 824 in four rounds). Fixing through the hint instead
(``fix_variables_to_their_hinted_value``) leaves the free variables unhinted: the same rounds
reached 800. In deterministic mode the
number of rounds comes from the tier's share of the time limit, never the clock, so the answer does
not depend on the machine's load; the wall time only stops rounds early for the caller's deadline.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from ortools.sat.python import cp_model

from solver.compile import Compiled, Tier
from solver.compile.locality import FABRIC
from solver.domain import cancel as cancellation
from solver.domain.fabric import Fabric
from solver.domain.model import Policy, TierValue
from solver.reduce.normalise import Normalised

# A model this big is searched a neighbourhood at a time on its locality tiers; a smaller one is
# searched whole, which at 1,024 nodes x 200 jobs (15,000 variables) proves or improves them.
MIN_VARIABLES = 20_000
# The tiers searched so: both are about gangs spread over leaves, the neighbourhoods' subject.
TIERS = frozenset({"topology.locality", "topology.leaves_spanned"})
# CP-SAT's deterministic time for one round, and its wall-clock cap (the caller's deadline may cut
# it shorter): a round at 4,096 nodes took 0.2-0.5 s (load 2-4), so that the rounds a deterministic
# search takes (its effort over this) fit its tier's share of a 15 s call without the clock's cut.
ROUND_UNITS, ROUND_MAX_S = 0.4, 1.0
# Below this much time left, no round starts: presolve alone would overrun it.
ROUND_MIN_S = 0.05

# A search of the model as it stands, hinted with a plan, for so many seconds and deterministic
# units: the plan it found, or None.
Search = Callable[[dict[str, int], float, float], "dict[str, int] | None"]


@dataclass(frozen=True)
class Neighbourhoods:
    """What every round shares, computed once a model: each job's member variables, the pooled
    pods' by region, their domains, each class's leaf and region."""

    model: cp_model.CpModel
    leaf: tuple[str, ...]  # per class, "" when it has none
    region: tuple[str, ...]  # per class: its switch one tier above the leaves ("" when none)
    regions: tuple[str, ...]  # every region, in name order
    gangs: tuple[int, ...]  # jobs with a fabric rule that are not pools: what a round moves
    job_members: dict[int, tuple[tuple[int, int], ...]]  # job → (class, y variable index) of its members
    job_vars: dict[int, tuple[int, ...]]  # job → its member variables' indexes, fixed with it
    pool_vars: dict[str, tuple[int, ...]]  # region → the pooled pods' member variables on its classes
    bounds: dict[int, tuple[int, int]]  # each member variable's domain, to restore after a round

    @staticmethod
    def of(
        problem: Normalised, compiled: Compiled, model: cp_model.CpModel | None = None
    ) -> Neighbourhoods | None:
        """The neighbourhoods of a model (``compiled``'s, or ``model``, a copy of it), or None when
        it has none worth searching: smaller than :data:`MIN_VARIABLES` (the whole model is
        searched), no tier above the leaves, or no gang with a rule of place."""
        model = model if model is not None else compiled.model
        if len(model.proto.variables) < MIN_VARIABLES:
            return None
        fabric = Fabric.of(problem.request.inventory)
        if len(fabric.tiers) < 2:
            return None
        above = fabric.tiers[1]
        leaf = tuple(c.leaf for c in problem.classes)
        region = tuple((fabric.domain(c.leaf, above) or "") if c.leaf else "" for c in problem.classes)
        pools = problem.pools
        gangs = tuple(
            sorted({r.job for r in compiled.locality.rules if r.partition == FABRIC and r.job not in pools})
        )
        if not gangs:
            return None
        members: dict[int, list[tuple[int, int]]] = defaultdict(list)
        job_vars: dict[int, list[int]] = defaultdict(list)
        pool_vars: dict[str, list[int]] = defaultdict(list)
        domains = model.proto.variables
        bounds: dict[int, tuple[int, int]] = {}
        for (r, c), var in compiled.y.items():
            j = problem.roles[r].job_index
            if j in pools:
                pool_vars[region[c]].append(var.index)
            else:
                job_vars[j].append(var.index)
                members[j].append((c, var.index))
            domain = domains[var.index].domain
            bounds[var.index] = (domain[0], domain[len(domain) - 1])  # y's domains are intervals
        return Neighbourhoods(
            model=model,
            leaf=leaf,
            region=region,
            regions=tuple(sorted(set(region) - {""})),
            gangs=gangs,
            job_members={j: tuple(m) for j, m in members.items()},
            job_vars={j: tuple(v) for j, v in job_vars.items()},
            pool_vars={g: tuple(v) for g, v in pool_vars.items()},
            bounds=bounds,
        )

    def used(self, j: int, values: Sequence[int]) -> list[int]:
        """The classes job ``j`` has members on in ``values`` (a solution, by variable index)."""
        return [c for c, i in self.job_members.get(j, ()) if values[i] > 0]

    def spread(self, values: Sequence[int]) -> list[int]:
        """The gangs whose members sit under more than one leaf: those a round may bring closer."""
        return [j for j in self.gangs if len({self.leaf[c] for c in self.used(j, values)}) > 1]

    def left_out(self, values: Sequence[int]) -> set[int]:
        """The member variables of the jobs ``values`` places nowhere: free in a round that may place
        one of them in the room the round makes (``solver.search.rounds``)."""
        return {i for j, indexes in self.job_vars.items() if not self.used(j, values) for i in indexes}

    def fixed(self, gang: int | None, into: Collection[str], values: Sequence[int]) -> list[int]:
        """The member variables a round around ``gang`` fixes: every job's outside the regions
        ``gang`` uses and those ``into``, and the pooled pods' outside them (without a gang: outside
        the regions ``into``)."""
        free_regions = set(into)
        if gang is not None:
            free_regions |= {self.region[c] for c in self.used(gang, values)}
        out: list[int] = []
        for j, indexes in self.job_vars.items():
            if j != gang and not any(self.region[c] in free_regions for c in self.used(j, values)):
                out.extend(indexes)
        for region, indexes in self.pool_vars.items():
            if region not in free_regions:
                out.extend(indexes)
        return out


def improve(
    hoods: Neighbourhoods,
    tier: Tier,
    start: dict[str, int],
    names: Sequence[str],
    policy: Policy,
    seconds: float,
    effort: float,
    search: Search,
) -> tuple[TierValue, dict[str, int]]:
    """``tier`` of the model bettered round by round from ``start`` (every variable's value, by
    name), for at most ``seconds`` (and, deterministic, ``effort`` units of CP-SAT time in all):
    the tier's value and the best plan found (``start`` when no round bettered it). ``search``
    searches the model as it stands, hinted with a plan, for so many seconds and units
    (``solver.search.tiers.run_tier``)."""
    deadline = time.perf_counter() + seconds
    rng = random.Random(policy.seed)
    rounds = max(1, int(effort / ROUND_UNITS)) if policy.deterministic else None
    best, value = start, tier.value_of(start)
    values = [best[name] for name in names]
    done = 0
    while rounds is None or done < rounds:
        left = deadline - time.perf_counter()
        if left < ROUND_MIN_S:
            break
        spread = hoods.spread(values)
        if not spread:
            break
        gang, into = rng.choice(spread), rng.choice(hoods.regions)
        done += 1
        with narrowed(hoods, hoods.fixed(gang, (into,), values), values):
            found = search(best, min(left, ROUND_MAX_S), ROUND_UNITS)
        cancellation.check()
        if found is not None and tier.value_of(found) > value:
            best, value = found, tier.value_of(found)
            values = [best[name] for name in names]
    upper = float(tier.upper)
    return TierValue(
        tier=tier.tier, name=tier.name, value=float(value), bound=upper, optimal=value >= upper
    ), best


@contextmanager
def narrowed(hoods: Neighbourhoods, indexes: Sequence[int], values: Sequence[int]) -> Iterator[None]:
    """The member variables at ``indexes`` fixed at their ``values`` (by index) while the block runs,
    their domains restored after, whatever happens in it (the model must stay the same one)."""
    variables = hoods.model.proto.variables
    done: list[int] = []
    try:
        for i in indexes:
            domain = variables[i].domain
            domain.clear()
            domain.extend((values[i], values[i]))
            done.append(i)
        yield
    finally:
        for i in done:
            domain = variables[i].domain
            domain.clear()
            domain.extend(hoods.bounds[i])
