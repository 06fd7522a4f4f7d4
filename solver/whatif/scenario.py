"""The what-if scenario: a base inventory, edits to it, a job batch or trace, and policies to compare.

Immutable pydantic values whose field names are those of ``proto/topoplace/v1/whatif.proto``, so the
YAML file, the JSON file and the ``WhatIf`` RPC carry one thing in three encodings (see
:mod:`solver.whatif.convert`). Only local rules live here (exactly one source, counts positive);
rules that relate parts of a scenario (a template exists, a node exists, a job id exists) are checked
by :mod:`solver.whatif.world` while the scenario is built, each with its path.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from solver.domain.model import (
    Allocation,
    BatchOrder,
    Frozen,
    Inventory,
    Job,
    Node,
    ObjectiveTier,
    Packing,
    PriorityMode,
)

BASE_VARIANT = "base"
EDITED_VARIANT = "edited"


def _exactly_one(value: Frozen, fields: tuple[str, ...], what: str, *, required: bool = True) -> None:
    """A proto ``oneof``: at most one (and, when ``required``, at least one) of ``fields`` is set."""
    chosen = [f for f in fields if getattr(value, f) not in (None, "")]
    if len(chosen) > 1:
        raise ValueError(f"{what}: give one of {', '.join(fields)}, not {' and '.join(chosen)}")
    if required and not chosen:
        raise ValueError(f"{what}: give one of {', '.join(fields)}")


# --------------------------------------------------------------------------- base inventory


class SlurmSources(Frozen):
    scontrol: str = Field(min_length=1)
    topo_dir: str = Field(min_length=1)
    gres_conf: str = ""
    topology: str = ""


class VolcanoSources(Frozen):
    session: str = Field(min_length=1)
    hypernodes: str = ""


class BaseInventory(Frozen):
    # Members of a proto ``oneof`` are None when unset (never ""), so that writing the value back to
    # the wire sets only the member that was chosen.
    inventory: Inventory | None = None
    file: str | None = None
    slurm: SlurmSources | None = None
    volcano: VolcanoSources | None = None

    @model_validator(mode="after")
    def _one_source(self) -> BaseInventory:
        _exactly_one(self, ("inventory", "file", "slurm", "volcano"), "base")
        return self

    @property
    def files(self) -> tuple[str, ...]:
        """Every file this source reads (refused over RPC)."""
        if self.slurm is not None:
            s = self.slurm
            return tuple(f for f in (s.scontrol, s.topo_dir, s.gres_conf, s.topology) if f)
        if self.volcano is not None:
            return tuple(f for f in (self.volcano.session, self.volcano.hypernodes) if f)
        return (self.file,) if self.file else ()


class NodeTemplate(Frozen):
    name: str = Field(min_length=1)
    nvidia_smi: str | None = None
    nvidia_smi_text: str | None = None
    node_file: str | None = None
    node: Node | None = None
    like: str | None = None
    gpu_model: str = ""
    gpu_memory_mib: int = Field(default=0, ge=0)
    cpu_milli: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> NodeTemplate:
        _exactly_one(self, ("nvidia_smi", "nvidia_smi_text", "node_file", "node", "like"), "template")
        return self


# --------------------------------------------------------------------------- edits


class NodeSelector(Frozen):
    nodes: tuple[str, ...] = ()
    switch: str = ""


class AddNodes(Frozen):
    count: int = Field(ge=1, le=100_000)
    template: str = Field(min_length=1)
    leaf: str = Field(min_length=1)
    parent: str = ""
    name_prefix: str = ""


class RemoveNodes(Frozen):
    select: NodeSelector


class DrainNodes(Frozen):
    select: NodeSelector


class FailGpus(Frozen):
    node: str = Field(min_length=1)
    gpus: tuple[str, ...] = ()


class FailNics(Frozen):
    node: str = Field(min_length=1)
    nics: tuple[str, ...] = ()


class ReleaseAllocations(Frozen):
    select: NodeSelector = NodeSelector()
    owners: tuple[str, ...] = ()


class AddAllocation(Frozen):
    node: str = Field(min_length=1)
    allocation: Allocation


class ChangeJob(Frozen):
    job: str = Field(min_length=1)
    patch: dict[str, Any] = Field(default_factory=dict)


EDIT_KINDS = (
    "add_nodes",
    "remove_nodes",
    "drain_nodes",
    "fail_gpus",
    "fail_nics",
    "release_allocations",
    "add_allocation",
    "change_job",
)


class Edit(Frozen):
    name: str = ""
    add_nodes: AddNodes | None = None
    remove_nodes: RemoveNodes | None = None
    drain_nodes: DrainNodes | None = None
    fail_gpus: FailGpus | None = None
    fail_nics: FailNics | None = None
    release_allocations: ReleaseAllocations | None = None
    add_allocation: AddAllocation | None = None
    change_job: ChangeJob | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Edit:
        _exactly_one(self, EDIT_KINDS, "edit")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in EDIT_KINDS if getattr(self, k) is not None)

    @property
    def body(self) -> Frozen:
        return getattr(self, self.kind)


class Variant(Frozen):
    name: str = Field(min_length=1)
    edits: tuple[Edit, ...] = ()


# --------------------------------------------------------------------------- workload


class TraceEntry(Frozen):
    job: Job
    arrival_s: float = Field(default=0.0, ge=0)
    duration_s: float = Field(default=0.0, ge=0)
    job_class: str = ""


class Departure(Frozen):
    owner: str = Field(min_length=1)
    at_s: float = Field(ge=0)


class Trace(Frozen):
    entries: tuple[TraceEntry, ...] = ()
    departures: tuple[Departure, ...] = ()
    horizon_s: float = Field(default=0.0, ge=0)
    file: str = ""


# --------------------------------------------------------------------------- policies


class SolverPolicy(Frozen):
    objective: tuple[ObjectiveTier, ...] = ()
    packing: Packing = Packing.UNSPECIFIED
    time_limit_s: float = Field(default=0.0, ge=0, le=3600)
    workers: int = Field(default=0, ge=0, le=64)
    batch_order: BatchOrder = BatchOrder.UNSPECIFIED  # JOINT
    order_shuffles: int = Field(default=3, ge=0, le=64)  # BEST_OF_ORDERS only
    priority_mode: PriorityMode = PriorityMode.UNSPECIFIED  # STRICT


class PolicySpec(Frozen):
    name: str = Field(min_length=1)
    solver: SolverPolicy | None = None
    baseline: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> PolicySpec:
        _exactly_one(self, ("solver", "baseline"), f"policy {self.name}")
        return self


DEFAULT_POLICY = PolicySpec(name="solver", solver=SolverPolicy())


# --------------------------------------------------------------------------- the scenario


class Scenario(Frozen):
    name: str = ""
    base: BaseInventory
    templates: tuple[NodeTemplate, ...] = ()
    edits: tuple[Edit, ...] = ()
    variants: tuple[Variant, ...] = ()
    jobs: tuple[Job, ...] = ()
    jobs_file: str = ""
    trace: Trace | None = None
    policies: tuple[PolicySpec, ...] = ()
    seed: int = Field(default=0, ge=0, le=2**31 - 1)

    @model_validator(mode="after")
    def _one_workload(self) -> Scenario:
        given = [f for f in ("jobs", "jobs_file", "trace") if getattr(self, f)]
        if len(given) > 1:
            raise ValueError(f"give one of jobs, jobs_file, trace; not {' and '.join(given)}")
        if self.edits and self.variants:
            raise ValueError("give edits (one variant) or variants, not both")
        return self

    @property
    def is_trace(self) -> bool:
        return self.trace is not None

    def all_variants(self) -> tuple[Variant, ...]:
        """The base (no edits) first, then the scenario's variants: every answer is read against it."""
        extra = self.variants or ((Variant(name=EDITED_VARIANT, edits=self.edits),) if self.edits else ())
        return (Variant(name=BASE_VARIANT), *extra)

    def all_policies(self) -> tuple[PolicySpec, ...]:
        return self.policies or (DEFAULT_POLICY,)

    def file_references(self) -> tuple[tuple[str, str], ...]:
        """(path inside the scenario, file) of every file it reads: refused over RPC, where a path
        would name a file on the server's disk."""
        refs = [("base", f) for f in self.base.files]
        refs += [
            (f"templates[{i}]", f)
            for i, t in enumerate(self.templates)
            for f in (t.nvidia_smi, t.node_file)
            if f
        ]
        if self.jobs_file:
            refs.append(("jobs_file", self.jobs_file))
        if self.trace is not None and self.trace.file:
            refs.append(("trace.file", self.trace.file))
        return tuple(refs)
