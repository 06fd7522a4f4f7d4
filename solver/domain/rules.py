"""The rule families of the model, and where each one lives: one table to find any rule by.

A rule of placement touches four places, on purpose apart: the reduction or constraint that builds
it into the model, the independent check that the answer obeys it (written without the model's
code, so the two cannot share a mistake), the explanation when it blocks a job, and the reason code
the caller sees. This table names them; ``tests/test_architecture.py`` imports every function it
names, so it cannot drift from the code. ``docs/architecture.md`` says the same in words.

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
    builds: tuple[str, ...]  # where the model gets it: reductions and compile functions
    checks: tuple[str, ...]  # the verifier's checks
    explains: tuple[str, ...]  # where an unplaced job is told about it
    reason: ReasonCode | None  # the code a job blocked by it gets (None: never blocks alone)


RULES: tuple[RuleFamily, ...] = (
    RuleFamily(
        "count and model",
        "a member gets exactly its GPUs, of an asked model and of no avoided one, and its NICs",
        (
            "solver.reduce.intranode:fits",
            "solver.reduce.intranode:gpu_sets",
            "solver.compile.nodes:add_member_supply",
        ),
        ("solver.answer.verify.member:gpus", "solver.answer.verify.member:nics"),
        ("solver.answer.explain:why_unplaced",),
        ReasonCode.NO_NODE_FITS,
    ),
    RuleFamily(
        "capacity",
        "no device, CPU or memory of a node is used twice",
        ("solver.reduce.intranode:enumerate_configurations", "solver.compile.nodes:add_configuration_choice"),
        ("solver.answer.verify.capacity:node_capacity", "solver.answer.verify.shares:shared_devices"),
        ("solver.answer.explain:largest_free", "solver.answer.explain:largest_minimum"),
        ReasonCode.INSUFFICIENT_CAPACITY,
    ),
    RuleFamily(
        "gang",
        "a job is placed with every role at its minimum, or not at all",
        ("solver.compile.gangs:add_gangs",),
        ("solver.answer.verify.jobs:gang", "solver.answer.verify.jobs:job_set"),
        ("solver.answer.explain:largest_minimum",),
        ReasonCode.INSUFFICIENT_CAPACITY,
    ),
    RuleFamily(
        "PCIe alignment",
        "each GPU of a member has a NIC of its own within the asked PCIe distance (the answer's pairs)",
        ("solver.reduce.intranode:choose_nics", "solver.compile.objective:topology"),
        ("solver.answer.verify.alignment:alignment", "solver.answer.verify.pairs:pairs"),
        ("solver.answer.explain:member_relaxations",),
        ReasonCode.NO_NODE_FITS,
    ),
    RuleFamily(
        "NUMA",
        "a member's GPUs and NICs sit on one NUMA node",
        ("solver.reduce.intranode:gpu_sets", "solver.compile.objective:topology"),
        ("solver.answer.verify.numa:numa",),
        ("solver.answer.explain:member_relaxations",),
        ReasonCode.NO_NODE_FITS,
    ),
    RuleFamily(
        "NVLink",
        "a member's GPUs are linked to each other; a gang stays in one NVLink domain",
        ("solver.reduce.intranode:gpu_sets", "solver.compile.locality:add_locality"),
        ("solver.answer.verify.nvlink:nvlink", "solver.answer.verify.locality:all_locality"),
        ("solver.answer.explain:member_relaxations", "solver.answer.explain:job_relaxations"),
        ReasonCode.LOCALITY,
    ),
    RuleFamily(
        "locality tiers",
        "a gang, a role or two roles stay under one switch of a given tier",
        ("solver.compile.locality:add_locality", "solver.compile.objective:topology"),
        ("solver.answer.verify.locality:all_locality",),
        ("solver.answer.explain:job_relaxations", "solver.answer.explain:locality_shortfall"),
        ReasonCode.LOCALITY,
    ),
    RuleFamily(
        "rails",
        "every member of a role uses NICs on the same rails",
        ("solver.reduce.rails:expand_rails", "solver.compile.gangs:add_gangs"),
        ("solver.answer.verify.rails:rails_aligned",),
        ("solver.answer.explain:job_relaxations",),
        ReasonCode.LOCALITY,
    ),
    RuleFamily(
        "shares",
        "shares of one GPU fit its 1000 milli and its memory; a whole-GPU member takes an idle GPU",
        ("solver.reduce.intranode:fits",),
        ("solver.answer.verify.shares:gpu_shares", "solver.answer.verify.shares:share_record"),
        ("solver.answer.explain:why_unplaced",),
        ReasonCode.NO_NODE_FITS,
    ),
    RuleFamily(
        "mutex and anti-affinity",
        "a member keeps away from labelled work; a mutex member takes idle GPUs nobody shares after",
        ("solver.reduce.separation:Separation",),
        ("solver.answer.verify.separation:separation", "solver.answer.verify.shares:gpu_shares"),
        ("solver.answer.explain:member_relaxations", "solver.answer.explain:job_relaxations"),
        ReasonCode.MUTEX,
    ),
    RuleFamily(
        "priority",
        "a lower-priority job never takes room a higher-priority job could have had",
        ("solver.compile.objective:placed_work",),
        (),
        ("solver.answer.explain:why_unplaced",),
        ReasonCode.OUTPRIORITISED,
    ),
)
