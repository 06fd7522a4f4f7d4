"""The rule families of the model, and where each one lives: one table to find any rule by.

A rule of placement touches five places, on purpose apart: the reduction that shapes the problem
by it (for a rule inside a node, one function of ``solver.reduce.intranode.member``), the constraint
that builds it into the model, the independent check that the answer obeys it (written without the
model's code, so the two cannot share a mistake), the explanation when it blocks a job, and the
reason code the caller sees. This table names them, one row a rule; ``tests/test_architecture.py``
imports every function it names and fails on an intra-node rule function or a verifier module no
row names, so it cannot drift from the code. ``docs/architecture.md`` says the same in words.

Places are dotted paths (``module:function``) rather than imports: the domain ring imports nothing
of the rings outside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from solver.domain.model import ReasonCode


@dataclass(frozen=True)
class RuleFamily:
    name: str
    rule: str  # in one sentence
    reduces: tuple[str, ...]  # the reductions that shape the problem by it (intra-node rules among them)
    compiles: tuple[str, ...]  # the compile functions that put it into the CP-SAT model
    checks: tuple[str, ...]  # the verifier's checks
    explains: tuple[str, ...]  # where an unplaced job is told about it
    reason: ReasonCode | None  # the code a job blocked by it gets (None: never blocks alone)


_MEMBER = "solver.reduce.intranode.member"
_PACKING = "solver.reduce.intranode.packing"

RULES: tuple[RuleFamily, ...] = (
    RuleFamily(
        "count and model",
        "a member gets exactly its GPUs, of an asked model and of no avoided one, and its NICs",
        (f"{_MEMBER}:of_asked_model", f"{_MEMBER}:gpu_sets", f"{_MEMBER}:choose_nics"),
        ("solver.compile.nodes:add_member_supply",),
        ("solver.answer.verify.member:gpus", "solver.answer.verify.member:nics"),
        ("solver.answer.explain:why_unplaced",),
        ReasonCode.NO_NODE_FITS,
    ),
    RuleFamily(
        "node selector",
        "a member lands only on a node carrying every label its selector names",
        (f"{_MEMBER}:selector_matches", "solver.reduce.normalise:normalise"),
        ("solver.compile.nodes:add_configuration_choice",),
        ("solver.answer.verify.member:node_choice",),
        ("solver.answer.explain:member_relaxations",),
        ReasonCode.NO_NODE_FITS,
    ),
    RuleFamily(
        "capacity",
        "no device, CPU or memory of a node is used twice",
        (f"{_MEMBER}:cpu_and_memory_fit", f"{_PACKING}:enumerate_configurations"),
        ("solver.compile.nodes:add_configuration_choice",),
        ("solver.answer.verify.capacity:node_capacity", "solver.answer.verify.shares:shared_devices"),
        ("solver.answer.explain:largest_free", "solver.answer.explain:largest_minimum"),
        ReasonCode.INSUFFICIENT_CAPACITY,
    ),
    RuleFamily(
        "gang",
        "a job is placed with every role at its minimum, or not at all",
        (),
        ("solver.compile.gangs:add_gangs",),
        ("solver.answer.verify.jobs:gang", "solver.answer.verify.jobs:job_set"),
        ("solver.answer.explain:largest_minimum",),
        ReasonCode.INSUFFICIENT_CAPACITY,
    ),
    RuleFamily(
        "PCIe alignment",
        "each GPU of a member has a NIC of its own within the asked PCIe distance (the answer's pairs)",
        (f"{_MEMBER}:gpu_nic_pairs", f"{_MEMBER}:nics_within"),
        ("solver.compile.objective:topology",),
        ("solver.answer.verify.alignment:alignment", "solver.answer.verify.pairs:pairs"),
        ("solver.answer.explain:member_relaxations",),
        ReasonCode.NO_NODE_FITS,
    ),
    RuleFamily(
        "NUMA",
        "a member's GPUs and NICs sit on one NUMA node",
        (f"{_MEMBER}:one_numa", f"{_MEMBER}:nics_on_numa"),
        ("solver.compile.objective:topology",),
        ("solver.answer.verify.numa:numa",),
        ("solver.answer.explain:member_relaxations",),
        ReasonCode.NO_NODE_FITS,
    ),
    RuleFamily(
        "NVLink",
        "a member's GPUs are linked to each other; a gang stays in one NVLink domain",
        (f"{_MEMBER}:nvlink_linked",),
        ("solver.compile.locality:add_locality",),
        ("solver.answer.verify.nvlink:nvlink", "solver.answer.verify.locality:all_locality"),
        ("solver.answer.explain:member_relaxations", "solver.answer.explain:job_relaxations"),
        ReasonCode.LOCALITY,
    ),
    RuleFamily(
        "NVLink link counts",
        "a member meets its NVLink rule fully only on GPUs as strongly linked as the node's best set of "
        "that size (NV18 over NV2)",
        (f"{_MEMBER}:nvlink_strongest",),
        ("solver.compile.objective:topology",),
        (),  # a preference: scored by the topology tier, never a reason to refuse a placement
        (),
        None,
    ),
    RuleFamily(
        "locality tiers",
        "a gang, a role or two roles stay under one switch of a given tier; a gang that names no "
        "such rule is kept under the lowest switch it can be (preferred)",
        ("solver.reduce.gangs:keep_gangs_close",),
        ("solver.compile.locality:add_locality", "solver.compile.objective:topology"),
        ("solver.answer.verify.locality:all_locality",),
        ("solver.answer.explain:job_relaxations", "solver.answer.explain:locality_shortfall"),
        ReasonCode.LOCALITY,
    ),
    RuleFamily(
        "rails",
        "every member of a role uses NICs on the same rails",
        ("solver.reduce.rails:expand_rails", f"{_MEMBER}:nics_on_rails", f"{_MEMBER}:rails_covered"),
        ("solver.compile.gangs:add_gangs",),
        ("solver.answer.verify.rails:rails_aligned",),
        ("solver.answer.explain:job_relaxations",),
        ReasonCode.LOCALITY,
    ),
    RuleFamily(
        "shares",
        "shares of one GPU fit its 1000 milli and its memory; a whole-GPU member takes an idle GPU",
        (f"{_MEMBER}:gpu_fits", f"{_MEMBER}:share_stacks"),
        ("solver.compile.nodes:add_configuration_choice",),
        ("solver.answer.verify.shares:gpu_shares", "solver.answer.verify.shares:share_record"),
        ("solver.answer.explain:why_unplaced",),
        ReasonCode.NO_NODE_FITS,
    ),
    RuleFamily(
        "mutex and anti-affinity",
        "a member keeps away from labelled work; a mutex member takes idle GPUs nobody shares after",
        (
            "solver.reduce.separation:Separation",
            f"{_MEMBER}:forbidden_gpus",
            f"{_MEMBER}:kept_apart",
            f"{_MEMBER}:node_apart",
        ),
        ("solver.compile.nodes:add_configuration_choice",),
        ("solver.answer.verify.separation:separation", "solver.answer.verify.shares:gpu_shares"),
        ("solver.answer.explain:member_relaxations", "solver.answer.explain:job_relaxations"),
        ReasonCode.MUTEX,
    ),
    RuleFamily(
        "priority",
        "a lower-priority job never takes room a higher-priority job could have had",
        (),
        ("solver.compile.objective:placed_work",),
        (),
        ("solver.answer.explain:why_unplaced",),
        ReasonCode.OUTPRIORITISED,
    ),
)
