"""Locality: keep a gang's nodes under one low switch, inside one NVLink domain, roles close.

A *rule* names a set of roles of one job (the whole job, one role, or two roles that must stay
close, e.g. prefill and decode) and a *partition* of the nodes into domains: the switches of one
fabric tier, or the multi-node NVLink domains. "Within one domain at this level" is modelled the
same way for every rule:

* a boolean per candidate domain, at most one of them on (exactly one when the job is placed, for a
  REQUIRED level);
* every member variable of the rule's roles on a class outside the chosen domain is forced to 0.

REQUIRED rules hold at their ``highest_tier``; below it, and at every tier for PREFERRED rules, the
same construction is *soft*: a ``within`` boolean the topology objective rewards, so the gang lands
under the lowest switch it can. The objective also counts the leaf switches each ruled gang spans.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from solver.domain.cancel import checked
from solver.domain.fabric import Fabric
from solver.domain.model import Requirement
from solver.reduce.normalise import NodeClass, Normalised

Vars = dict[tuple[int, int], cp_model.IntVar]
FABRIC, NVLINK = "fabric", "nvlink"


@dataclass(frozen=True)
class Rule:
    job: int
    roles: tuple[int, ...]  # indexes into problem.roles
    partition: str  # FABRIC or NVLINK
    highest_tier: int  # FABRIC only: the tier a REQUIRED rule must reach (0 = no limit)
    mode: Requirement
    what: str  # in words, for explanations: "job locality", "role prefill", "prefill ↔ decode"

    def levels(self, fabric: Fabric) -> tuple[tuple[int, bool], ...]:
        """(level, hard) pairs to model: fabric tiers lowest first; NVLink has the one level 1."""
        if self.partition == NVLINK:
            return ((1, self.mode == Requirement.REQUIRED),)
        hard_tier = self.highest_tier if self.mode == Requirement.REQUIRED else 0
        return tuple(
            (t, hard_tier > 0 and t == hard_tier) for t in fabric.tiers if not hard_tier or t <= hard_tier
        )


@dataclass(frozen=True)
class Locality:
    rules: tuple[Rule, ...]
    within: dict[tuple[int, int], cp_model.LinearExprT]  # (rule, level) → 1 if within one domain
    spans: dict[tuple[int, str], cp_model.IntVar]  # (job, leaf) → the job has a member there
    use: dict[tuple[int, int, str], cp_model.IntVar]  # (rule, level, domain) → a member is there
    base: dict[tuple[int, str], cp_model.IntVar]  # (rule, leaf or NVLink domain) → a member is there
    score_terms: tuple[tuple[int, cp_model.IntVar], ...]  # to maximise: lower tiers reached, by GPUs
    score_upper: int


def locality_rules(problem: Normalised) -> tuple[Rule, ...]:
    """Every locality rule of the batch, for gangs that can have more than one member."""
    rules = []
    roles_of: dict[int, dict[str, tuple[int, ...]]] = defaultdict(dict)
    for r, ref in enumerate(problem.roles):  # a role's variants all answer to its name
        roles_of[ref.job_index][ref.role.name] = (*roles_of[ref.job_index].get(ref.role.name, ()), r)
    for j, job in enumerate(problem.request.jobs):
        every = tuple(r for variants in roles_of[j].values() for r in variants)
        if job.locality.mode in (Requirement.REQUIRED, Requirement.PREFERRED):
            rules.append(Rule(j, every, FABRIC, job.locality.highest_tier, job.locality.mode, "job locality"))
        if job.nvlink_domain in (Requirement.REQUIRED, Requirement.PREFERRED):
            rules.append(Rule(j, every, NVLINK, 0, job.nvlink_domain, "one NVLink domain"))
        for role in job.roles:
            if role.locality.mode in (Requirement.REQUIRED, Requirement.PREFERRED):
                what = f"role {role.name} locality"
                loc = role.locality
                rules.append(Rule(j, roles_of[j][role.name], FABRIC, loc.highest_tier, loc.mode, what))
        for pair in job.role_affinity:
            if pair.mode in (Requirement.REQUIRED, Requirement.PREFERRED, Requirement.UNSPECIFIED):
                mode = Requirement.REQUIRED if pair.mode == Requirement.UNSPECIFIED else pair.mode
                tier = 1 if pair.highest_tier is None else pair.highest_tier
                roles = roles_of[j][pair.role_a] + roles_of[j][pair.role_b]
                rules.append(Rule(j, roles, FABRIC, tier, mode, f"{pair.role_a} ↔ {pair.role_b}"))
    return tuple(r for r in rules if members_of(problem, r.roles) > 1)


def members_of(problem: Normalised, roles: tuple[int, ...]) -> int:
    """Most members the roles can have together (variants of one role counted once)."""
    return sum(problem.roles[g].role.replicas for g in {problem.group_of(r) for r in roles})


def domain_of(cls: NodeClass, fabric: Fabric, partition: str, level: int) -> str | None:
    if partition == NVLINK:
        return cls.nvlink_domain or None
    return fabric.domain(cls.leaf, level) if cls.leaf else None


def add_locality(
    model: cp_model.CpModel, problem: Normalised, fabric: Fabric, y: Vars, placed: dict[int, cp_model.IntVar]
) -> Locality:
    """Per rule, which leaves (or NVLink domains) hold a member, then per level which domains do;
    "within one domain" is then a bound on a sum of a few booleans, not a constraint per member."""
    rules = locality_rules(problem)
    spans = add_spans(model, problem, rules, y)
    within: dict[tuple[int, int], cp_model.LinearExprT] = {}
    use: dict[tuple[int, int, str], cp_model.IntVar] = {}
    bases: dict[tuple[int, str], cp_model.IntVar] = {}
    score_terms, upper = [], 0
    # Each role's member variables, with their place in ``y``: a rule's members are gathered from
    # its roles (in y's order) instead of a scan of every variable per rule.
    job_spans: dict[int, list[tuple[str, cp_model.IntVar]]] = {}
    for (j, leaf), var in spans.items():
        if leaf:
            job_spans.setdefault(j, []).append((leaf, var))
    y_of: dict[int, list[tuple[int, int, cp_model.IntVar]]] = {}
    for pos, ((r, c), var) in enumerate(y.items()):
        y_of.setdefault(r, []).append((pos, c, var))
    for i, rule in enumerate(checked(rules)):  # a caller gone stops the build here (domain.cancel)
        members = [
            (var, problem.roles[r].role.replicas, problem.classes[c])
            for _, r, c, var in sorted(
                (pos, r, c, var) for r in rule.roles for pos, c, var in y_of.get(r, ())
            )
        ]
        weight = rule_weight(problem, rule)
        base = base_use(model, problem, rule, i, members, job_spans)
        bases.update({(i, place): var for place, var in base.items()})
        for level, hard in rule.levels(fabric):

            def domain(place: str, rule: Rule = rule, level: int = level) -> str | None:
                return place if rule.partition == NVLINK else fabric.domain(place, level)

            flag, level_use = add_within(
                model,
                f"{i}.{level}",
                members,
                base,
                domain,
                placed[rule.job],
                hard=hard,
                partition=rule.partition,
            )
            within[i, level] = flag
            use.update({(i, level, d): v for d, v in level_use.items()})
            if not hard:
                score_terms.append((weight, flag))
                upper += weight
    return Locality(
        rules=rules,
        within=within,
        spans=spans,
        use=use,
        base=bases,
        score_terms=tuple(score_terms),
        score_upper=upper,
    )


def rule_weight(problem: Normalised, rule: Rule) -> int:
    """What a level of ``rule`` reached weighs in the locality tier: the GPUs of its roles (a GPU-less
    member counts one), so that keeping a big gang close outweighs keeping a small one."""
    groups = {problem.group_of(r) for r in rule.roles}
    return sum(max(problem.roles[g].role.member.gpus, 1) * problem.roles[g].role.replicas for g in groups)


def domains_at(rule: Rule, places: set[str], level: int, fabric: Fabric) -> set[str | None]:
    """The domains of ``level`` that members of ``rule`` at ``places`` (leaves or NVLink domains,
    :func:`place_of`) fall in; None for a place outside every domain of the level."""
    return {place if rule.partition == NVLINK else fabric.domain(place, level) for place in places}


def inside_one(places: set[str], domains: set[str | None]) -> bool:
    """Whether members at ``places``, falling in ``domains`` (:func:`domains_at`), sit inside one
    domain: what a level's ``within`` flag means for a placed job."""
    return bool(places) and "" not in places and None not in domains and len(domains) <= 1


def soft_score(problem: Normalised, fabric: Fabric, rule: Rule, places: set[str]) -> int:
    """What members of ``rule`` at ``places`` add to the locality tier: its weight for every soft
    level they sit inside one domain of (a REQUIRED level is a constraint, not a term)."""
    weight = rule_weight(problem, rule)
    return sum(
        weight
        for level, hard in rule.levels(fabric)
        if not hard and inside_one(places, domains_at(rule, places, level, fabric))
    )


def place_of(cls: NodeClass, partition: str) -> str:
    """Where a class sits for a partition: its leaf, or its NVLink domain ("" = outside)."""
    return cls.nvlink_domain if partition == NVLINK else cls.leaf


def base_use(
    model: cp_model.CpModel,
    problem: Normalised,
    rule: Rule,
    i: int,
    members: list[tuple[cp_model.IntVar, int, NodeClass]],
    spans: dict[int, list[tuple[str, cp_model.IntVar]]],
) -> dict[str, cp_model.IntVar]:
    """Per leaf (or NVLink domain): does a member of the rule's roles sit there? A job-wide fabric
    rule reuses the job's span flags (``spans``: each job's (leaf, flag) pairs)."""
    job_roles = {r for r, ref in enumerate(problem.roles) if ref.job_index == rule.job}
    if rule.partition == FABRIC and set(rule.roles) == job_roles:
        return dict(spans.get(rule.job, ()))
    out: dict[str, cp_model.IntVar] = {}
    for var, ub, cls in members:
        place = place_of(cls, rule.partition)
        if not place:
            continue
        if place not in out:
            out[place] = model.new_bool_var(f"use[{i},{place}]")
        model.add(var <= ub * out[place])
    return out


def add_within(
    model: cp_model.CpModel,
    name: str,
    members: list[tuple[cp_model.IntVar, int, NodeClass]],
    base: dict[str, cp_model.IntVar],
    domain: Callable[[str], str | None],
    placed: cp_model.IntVar,
    *,
    hard: bool,
    partition: str,
) -> tuple[cp_model.LinearExprT, dict[str, cp_model.IntVar]]:
    """All ``members`` inside one domain of the level: always when ``hard`` (if placed), else when
    the returned flag is true. Also returns the level's domain-use booleans."""
    # Each place's domain, asked once: members are a rule's roles times their classes, places few.
    places = {place_of(cls, partition) for _, _, cls in members} | set(base)
    domains = {place: domain(place) if place else None for place in places}
    outside = [(var, ub) for var, ub, cls in members if not domains[place_of(cls, partition)]]
    by_domain: dict[str, list[cp_model.IntVar]] = {}
    for place, var in base.items():
        d = domains[place]
        if d is not None:
            by_domain.setdefault(d, []).append(var)
    if len(by_domain) <= 1 and not outside:
        return placed, {}  # one domain holds every candidate: nothing to choose
    flag = placed if hard else model.new_bool_var(f"within[{name}]")
    if not hard:
        model.add(flag <= placed)
    used: dict[str, cp_model.IntVar] = {}
    for d, places in sorted(by_domain.items()):
        if len(places) == 1:
            used[d] = places[0]  # the domain is one leaf: its flag is the leaf's
            continue
        used[d] = model.new_bool_var(f"domain[{name},{d}]")
        for var in places:
            model.add(var <= used[d])
    model.add(cp_model.LinearExpr.sum(list(used.values())) <= 1).only_enforce_if(flag)
    for var, ub in outside:
        model.add(var <= ub * (1 - flag))
    return flag, used


def add_spans(model: cp_model.CpModel, problem: Normalised, rules: tuple[Rule, ...], y: Vars) -> dict:
    """``spans[j, leaf]``: job ``j`` (one with a fabric rule) has a member under ``leaf``."""
    ruled = {rule.job for rule in rules if rule.partition == FABRIC}
    spans: dict[tuple[int, str], cp_model.IntVar] = {}
    for (r, c), var in y.items():
        j, leaf = problem.roles[r].job_index, problem.classes[c].leaf
        if j not in ruled:
            continue
        if (j, leaf) not in spans:
            spans[j, leaf] = model.new_bool_var(f"span[{j},{leaf}]")
        model.add(var <= problem.roles[r].role.replicas * spans[j, leaf])  # replicas bound every y
    return spans
