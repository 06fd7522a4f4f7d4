"""Fabric benchmark (issue 3): topoplace against the Volcano-like greedy baseline on the fabric fixtures.

    python -m bench.fabric [--runs 3] [--time-limit 10] [--output bench/RESULTS-fabric.md]

Same inventory, same batch, one run: ``solver.solve.solve`` and ``solver.baselines.volcano.place`` on
``fixtures/requests/fattree-256.json`` (the batch of 30 gangs of 2–32 nodes, 3 prefill/decode jobs and
8 single-node jobs), ``rail-64.json`` and ``nvl72-4racks.json``. Prints a Markdown table and writes it,
with the command, the commit and the machine, to ``--output``.

Every figure about locality is computed here from the members' nodes and the inventory, not read off
the placers' own reports (which are only cross-checked): the tier two nodes meet at, the leaves and
NVLink domains used, and each hard rule. A placer that broke a rule and said otherwise would
otherwise flatter itself; ``violations`` shares no code with the solver or the baselines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.provenance import commit, machine
from solver.answer.verify import verify
from solver.baselines import volcano
from solver.domain.model import (
    Distance,
    Inventory,
    Job,
    JobResult,
    Locality,
    NicMode,
    Node,
    Requirement,
    SolveRequest,
    SolveResult,
)
from solver.ingest.files import load_request
from solver.solve import solve

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ("fattree-256.json", "rail-64.json", "nvl72-4racks.json")
Placer = Callable[[SolveRequest], SolveResult]
VOLCANO_NVL = "volcano, NVL rack as tier-1 hypernode"


# --------------------------------------------------------------------------- the fabric, independently


class Tree:
    """Which switches sit above each node, and where node sets meet — from the inventory alone."""

    def __init__(self, inventory: Inventory) -> None:
        self.nodes: dict[str, Node] = {n.name: n for n in inventory.nodes}
        tier = {s.id: s.tier for s in inventory.switches}
        parent = {s.id: s.parent for s in inventory.switches}
        self.tier = tier
        self.chain: dict[str, tuple[str, ...]] = {}
        for node in inventory.nodes:
            chain: list[str] = []
            at = node.leaf
            while at in tier and at not in chain:
                chain.append(at)
                at = parent[at]
            self.chain[node.name] = tuple(chain)

    def meet(self, names: Sequence[str]) -> int | None:
        """Tier of the lowest switch above every node named: 0 for one node, None if none is shared."""
        distinct = sorted(set(names))
        if len(distinct) <= 1:
            return 0
        shared = set(self.chain[distinct[0]]).intersection(*(self.chain[n] for n in distinct[1:]))
        return min((self.tier[s] for s in shared), default=None)

    def within(self, names: Sequence[str], highest_tier: int) -> bool:
        reached = self.meet(names)
        return reached is not None and reached <= highest_tier

    def leaves(self, names: Sequence[str]) -> int:
        return len({self.nodes[n].leaf for n in names if self.nodes[n].leaf})

    def domains(self, names: Sequence[str]) -> int:
        return len({self.nodes[n].nvlink_domain for n in names if self.nodes[n].nvlink_domain})

    def rail_sets(self, result: JobResult) -> set[frozenset[int]]:
        """The set of rails each node of the job uses (one set per node)."""
        per_node: dict[str, set[int]] = {}
        for m in result.members:
            rail = {nic.name: nic.rail for nic in self.nodes[m.node].nics}
            per_node.setdefault(m.node, set()).update(r for x in m.nics if (r := rail.get(x)) is not None)
        return {frozenset(r) for r in per_node.values()}


def _hard(mode: Requirement) -> bool:
    return mode == Requirement.REQUIRED


def violations(request: SolveRequest, result: SolveResult) -> list[str]:
    """Every hard rule a result breaks, in words: gang minimums, GPU and NIC counts, devices held twice,
    GPU↔NIC alignment REQUIRED at PIX, job and role locality REQUIRED, role affinity REQUIRED, one NVLink
    domain REQUIRED. Computed from the request and the members only."""
    tree = Tree(request.inventory)
    jobs = {j.id: j for j in request.jobs}
    out: list[str] = []
    held: Counter[tuple[str, str]] = Counter()
    for node in request.inventory.nodes:
        for a in node.allocations:
            held.update((node.name, g) for g in a.gpus)
            held.update((node.name, f"nic:{x}") for x in a.nics)
    for jr in result.jobs:
        if not jr.placed:
            continue
        job = jobs[jr.job_id]
        out += _member_violations(job, jr, tree, held)
        out += _locality_violations(job, jr, tree)
    out += [f"{node}: {device} held {n} times" for (node, device), n in sorted(held.items()) if n > 1]
    return out


def _member_violations(job: Job, jr: JobResult, tree: Tree, held: Counter[tuple[str, str]]) -> list[str]:
    out = []
    for role in job.roles:
        count = sum(1 for m in jr.members if m.role == role.name)
        if not role.minimum <= count <= role.replicas:
            out.append(f"{job.id}: role {role.name} has {count} members, gang needs {role.minimum}")
    shapes = {r.name: r.member for r in job.roles}
    for m in jr.members:
        shape, node = shapes[m.role], tree.nodes[m.node]
        held.update((m.node, g) for g in m.gpus)
        held.update((m.node, f"nic:{x}") for x in m.nics)
        if len(m.gpus) != shape.gpus:
            out.append(f"{job.id}/{m.role}/{m.index}: {len(m.gpus)} GPUs, asked {shape.gpus}")
        if shape.nics.mode == NicMode.PER_GPU and len(m.nics) != shape.gpus:
            out.append(f"{job.id}/{m.role}/{m.index}: {len(m.nics)} NICs for {shape.gpus} GPUs")
        if (
            _hard(shape.alignment.mode)
            and shape.alignment.distance == Distance.PIX
            and shape.nics.mode == NicMode.PER_GPU
        ):
            # PIX = same PCIe switch: a GPU↔NIC matching exists iff every switch has as many of the
            # member's NICs as of its GPUs.
            gpu_sw = Counter(g.pcie_switch for g in node.gpus if g.id in m.gpus)
            nic_sw = Counter(n.pcie_switch for n in node.nics if n.name in m.nics)
            if gpu_sw != nic_sw:
                out.append(f"{job.id}/{m.role}/{m.index}: GPUs and NICs not paired at PIX on {m.node}")
    return out


def _locality_violations(job: Job, jr: JobResult, tree: Tree) -> list[str]:
    out = []
    names = [m.node for m in jr.members]
    if (
        _hard(job.locality.mode)
        and job.locality.highest_tier
        and not tree.within(names, job.locality.highest_tier)
    ):
        out.append(f"{job.id}: nodes meet at tier {tree.meet(names)}, hard limit {job.locality.highest_tier}")
    for role in job.roles:
        group = [m.node for m in jr.members if m.role == role.name]
        loc = role.locality
        if _hard(loc.mode) and loc.highest_tier and not tree.within(group, loc.highest_tier):
            out.append(
                f"{job.id}: role {role.name} meets at tier {tree.meet(group)}, limit {loc.highest_tier}"
            )
    for pair in job.role_affinity:
        if pair.mode in (Requirement.REQUIRED, Requirement.UNSPECIFIED):
            tier = 1 if pair.highest_tier is None else pair.highest_tier
            group = [m.node for m in jr.members if m.role in (pair.role_a, pair.role_b)]
            if not tree.within(group, tier):
                out.append(
                    f"{job.id}: {pair.role_a} ↔ {pair.role_b} meet at tier {tree.meet(group)}, limit {tier}"
                )
    if _hard(job.nvlink_domain) and len(set(names)) > 1:
        domains = {tree.nodes[n].nvlink_domain for n in names}
        if len(domains) > 1 or "" in domains:
            out.append(f"{job.id}: spans NVLink domains {sorted(domains)}")
    return out


# --------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Figures:
    placer: str
    jobs: str  # "placed/total"
    gangs: str  # multi-member jobs placed / total
    gpus: int
    mean_tier: float | None  # over placed multi-member jobs
    mean_leaves: float | None
    mean_domains: float | None
    mixed_rails: int  # placed multi-node jobs whose nodes use different rail sets
    soft_held: str  # placed jobs with a PREFERRED locality/NVLink rule that holds / such jobs
    violations: int
    verifier: int  # problems solver.answer.verify finds in the result
    report_mismatch: int  # jobs whose reported tier/leaves/domains disagree with their nodes
    time_s: float  # median wall time
    answers: int  # distinct placements over the runs
    status: str


def multi_member(job: Job) -> bool:
    return sum(r.replicas for r in job.roles) > 1


def soft_rule_held(job: Job, jr: JobResult, tree: Tree) -> bool | None:
    """Whether every PREFERRED locality rule with a tier, and a PREFERRED NVLink domain, held;
    None when the job has no such rule. (A soft rule without a tier — "as low as possible" — cannot
    hold or fail: it shows in the mean tier.)"""
    names = [m.node for m in jr.members]
    checks: list[bool] = []
    if job.locality.mode == Requirement.PREFERRED and job.locality.highest_tier:
        checks.append(tree.within(names, job.locality.highest_tier))
    for role in job.roles:
        if role.locality.mode == Requirement.PREFERRED and role.locality.highest_tier:
            group = [m.node for m in jr.members if m.role == role.name]
            checks.append(tree.within(group, role.locality.highest_tier))
    for pair in job.role_affinity:
        if pair.mode == Requirement.PREFERRED:
            group = [m.node for m in jr.members if m.role in (pair.role_a, pair.role_b)]
            checks.append(tree.within(group, 1 if pair.highest_tier is None else pair.highest_tier))
    if job.nvlink_domain == Requirement.PREFERRED:
        checks.append(len(set(names)) <= 1 or tree.domains(names) == 1)
    return all(checks) if checks else None


def figures(name: str, request: SolveRequest, runs: Runs) -> Figures:
    result = runs.result
    tree = Tree(request.inventory)
    jobs = {j.id: j for j in request.jobs}
    placed = [jr for jr in result.jobs if jr.placed]
    gangs = [jr for jr in placed if multi_member(jobs[jr.job_id])]
    tiers = [tree.meet([m.node for m in jr.members]) for jr in gangs]
    leaves = [tree.leaves([m.node for m in jr.members]) for jr in gangs]
    domains = [tree.domains([m.node for m in jr.members]) for jr in gangs]
    soft = [s for jr in placed if (s := soft_rule_held(jobs[jr.job_id], jr, tree)) is not None]
    mismatch = sum(
        1
        for jr in placed
        if (jr.locality_tier, jr.leaves_spanned, jr.nvlink_domains_spanned)
        != (
            tree.meet([m.node for m in jr.members]) or 0,
            tree.leaves([m.node for m in jr.members]),
            tree.domains([m.node for m in jr.members]),
        )
    )
    return Figures(
        placer=name,
        jobs=f"{len(placed)}/{len(result.jobs)}",
        gangs=f"{len(gangs)}/{sum(multi_member(j) for j in request.jobs)}",
        gpus=sum(len(m.gpus) for jr in placed for m in jr.members),
        mean_tier=statistics.mean(t if t is not None else 99 for t in tiers) if tiers else None,
        mean_leaves=statistics.mean(leaves) if leaves else None,
        mean_domains=statistics.mean(domains) if domains else None,
        mixed_rails=sum(1 for jr in gangs if len(tree.rail_sets(jr)) > 1),
        soft_held=f"{sum(soft)}/{len(soft)}",
        violations=len(violations(request, result)),
        verifier=len(verify(request, result)),
        report_mismatch=mismatch,
        time_s=statistics.median(runs.times),
        answers=runs.answers,
        status=result.status.name,
    )


@dataclass(frozen=True)
class Runs:
    result: SolveResult  # the last run's answer: the figures are of this one
    times: list[float]
    answers: int  # distinct placements over the runs (1 for a deterministic placer)


def run(placer: Placer, request: SolveRequest, runs: int) -> Runs:
    """``runs`` calls: the last result, every wall time, and how many distinct placements came back —
    deterministic mode promises one, and the figures are of the last run only, so a placer whose
    answer moves with the machine's load must say so in the table."""
    results, times = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        results.append(placer(request))
        times.append(time.perf_counter() - t0)
    answers = len({tuple((jr.job_id, jr.members) for jr in r.jobs) for r in results})
    return Runs(results[-1], times, answers)


COLUMNS = (
    "fixture",
    "placer",
    "status",
    "jobs placed",
    "gangs placed",
    "GPUs placed",
    "mean tier (gangs)",
    "mean leaves (gangs)",
    "mean NVL domains (gangs)",
    "gangs on mixed rails",
    "soft rules held",
    "hard-rule violations",
    "verifier problems",
    "wrong reports",
    "time s (median)",
    "distinct answers",
)


NOTES = (
    "Columns. *Gangs*: jobs with more than one member (multi-node gangs and prefill/decode jobs). "
    "*Mean tier*: the tier of the lowest switch above all of a placed gang's nodes (0 = one node; "
    "fattree-256: 1 leaf, 2 spine/pod, 3 core), computed from the nodes, as are *leaves* and *NVL "
    "domains*. *Mixed rails*: placed gangs whose nodes use different rail sets (what rail alignment "
    "will forbid; not a rule of these batches). *Soft rules held*: placed jobs whose PREFERRED "
    "locality with a tier (or PREFERRED NVLink domain) held, of those that have one. *Hard-rule "
    "violations*: `bench.fabric.violations` (gang minimums, device counts, devices held twice, "
    "alignment REQUIRED at PIX, job/role locality, role affinity and NVLink domain REQUIRED), written "
    "independently of the solver and the baseline; *verifier problems*: `solver.answer.verify` on the same "
    "result; *wrong reports*: placed jobs whose reported tier, leaves or NVLink domains disagree with "
    "their nodes. Both placers get the same request; topoplace's time is the whole `solve` (validate "
    "to verify), the baseline's its `place` call. *Distinct answers*: different placements over the "
    "runs (the figures are of the last run); topoplace runs in deterministic mode, so anything but 1 "
    "means its answer depends on the machine's load.",
    "",
    f"*{VOLCANO_NVL}*: the baseline's candidate search knows fabric locality only, so a job with "
    '"one NVLink domain" is placed task by task over the whole cluster and refused when it spans '
    "racks. In nvl72-4racks each rack is both an NVLink domain and a leaf, so this row gives the "
    "baseline the request as a Volcano user would write it (NVLink domain → locality tier 1, same "
    "mode); its rules are still checked against the original request.",
)


def row(fixture: str, f: Figures) -> str:
    def num(x: float | None) -> str:
        return "–" if x is None else f"{x:.2f}"

    cells = (
        fixture,
        f.placer,
        f.status,
        f.jobs,
        f.gangs,
        str(f.gpus),
        num(f.mean_tier),
        num(f.mean_leaves),
        num(f.mean_domains),
        str(f.mixed_rails),
        f.soft_held,
        str(f.violations),
        str(f.verifier),
        str(f.report_mismatch),
        f"{f.time_s:.2f}" if f.time_s >= 0.01 else f"{f.time_s * 1000:.1f} ms",
        str(f.answers),
    )
    return "| " + " | ".join(cells) + " |"


def nvlink_as_tier1(request: SolveRequest) -> SolveRequest | None:
    """The request as a Volcano user would write it when each NVLink domain is exactly one leaf (an
    NVL72 rack as a tier-1 HyperNode): "one NVLink domain" becomes locality at tier 1, hard or soft.
    None when domains and leaves do not coincide. The baseline's candidate search only looks at
    fabric locality, so without this it places NVLink-domain gangs task by task across racks and then
    refuses them; with it, the comparison is like for like. Rules are still checked on the original."""
    pairs = {(n.nvlink_domain, n.leaf) for n in request.inventory.nodes}
    domains, leaves = [d for d, _ in pairs], [leaf for _, leaf in pairs]
    if "" in domains or len(set(domains)) != len(pairs) or len(set(leaves)) != len(pairs):
        return None
    jobs = []
    for job in request.jobs:
        if job.nvlink_domain in (Requirement.REQUIRED, Requirement.PREFERRED):
            job = job.model_copy(
                update={
                    "locality": Locality(mode=job.nvlink_domain, highest_tier=1),
                    "nvlink_domain": Requirement.NONE,
                }
            )
        jobs.append(job)
    return request.model_copy(update={"jobs": tuple(jobs)})


def with_time_limit(request: SolveRequest, seconds: float | None) -> SolveRequest:
    if seconds is None:
        return request
    return request.model_copy(update={"policy": request.policy.model_copy(update={"time_limit_s": seconds})})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=None, help="override the fixtures' policy (10 s)")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "RESULTS-fabric.md")
    args = parser.parse_args(argv)
    placers: tuple[tuple[str, Placer], ...] = (("topoplace", solve), ("volcano (greedy)", volcano.place))
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    both_lines = []
    for fixture in FIXTURES:
        request = with_time_limit(load_request(ROOT / "fixtures" / "requests" / fixture), args.time_limit)
        outcomes = {name: run(placer, request, args.runs) for name, placer in placers}
        if any(j.nvlink_domain != Requirement.NONE for j in request.jobs) and (
            rewritten := nvlink_as_tier1(request)
        ):
            outcomes[VOLCANO_NVL] = run(volcano.place, rewritten, args.runs)
        for name, runs in outcomes.items():
            lines.append(row(fixture, figures(name, request, runs)))
            print(lines[-1], flush=True)
        both_lines.append(
            common_tiers(fixture, request, {n: r.result for n, r in outcomes.items() if n != VOLCANO_NVL})
        )
    limit = args.time_limit if args.time_limit is not None else "the fixtures' 10"
    command = " ".join(["python -m bench.fabric", *(sys.argv[1:] if argv is None else argv)])
    text = "\n".join(
        [
            "# Fabric benchmark (issue 3): topoplace vs a Volcano-like greedy baseline",
            "",
            f"`{command}` · commit `{commit()}` · {machine()} · median of {args.runs} runs · "
            f"time limit {limit} s",
            "",
            *lines,
            "",
            "Gangs placed by both placers (same jobs, so the tiers compare like for like):",
            "",
            "| fixture | gangs placed by both | mean tier topoplace | mean tier volcano | "
            "mean leaves topoplace | mean leaves volcano |",
            "|---|---|---|---|---|---|",
            *both_lines,
            "",
            *NOTES,
            "",
        ]
    )
    print("\n" + text)
    args.output.write_text(text)
    return 0


def common_tiers(fixture: str, request: SolveRequest, results: dict[str, SolveResult]) -> str:
    """Mean tier and leaves over the multi-member jobs that every placer placed."""
    tree = Tree(request.inventory)
    jobs = {j.id: j for j in request.jobs}
    placed = [{jr.job_id: jr for jr in r.jobs if jr.placed} for r in results.values()]
    common = sorted(set.intersection(*(set(p) for p in placed)))
    common = [j for j in common if multi_member(jobs[j])]
    cells = [fixture, str(len(common))]
    tiers, leaves = [], []
    for p in placed:
        t = [tree.meet([m.node for m in p[j].members]) for j in common]
        lv = [tree.leaves([m.node for m in p[j].members]) for j in common]
        tiers.append(f"{statistics.mean(x if x is not None else 99 for x in t):.2f}" if t else "–")
        leaves.append(f"{statistics.mean(lv):.2f}" if lv else "–")
    return "| " + " | ".join([*cells, *tiers, *leaves]) + " |"


if __name__ == "__main__":
    sys.exit(main())
