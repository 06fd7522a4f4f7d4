from google.protobuf import struct_pb2 as _struct_pb2
from topoplace.v1 import placement_pb2 as _placement_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WhatIfRequest(_message.Message):
    __slots__ = ("scenario",)
    SCENARIO_FIELD_NUMBER: _ClassVar[int]
    scenario: Scenario
    def __init__(self, scenario: _Optional[_Union[Scenario, _Mapping]] = ...) -> None: ...

class WhatIfResponse(_message.Message):
    __slots__ = ("report",)
    REPORT_FIELD_NUMBER: _ClassVar[int]
    report: WhatIfReport
    def __init__(self, report: _Optional[_Union[WhatIfReport, _Mapping]] = ...) -> None: ...

class Scenario(_message.Message):
    __slots__ = ("name", "base", "templates", "edits", "variants", "jobs", "jobs_file", "trace", "policies", "seed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATES_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    VARIANTS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FILE_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    name: str
    base: BaseInventory
    templates: _containers.RepeatedCompositeFieldContainer[NodeTemplate]
    edits: _containers.RepeatedCompositeFieldContainer[Edit]
    variants: _containers.RepeatedCompositeFieldContainer[Variant]
    jobs: _containers.RepeatedCompositeFieldContainer[_placement_pb2.Job]
    jobs_file: str
    trace: Trace
    policies: _containers.RepeatedCompositeFieldContainer[PolicySpec]
    seed: int
    def __init__(self, name: _Optional[str] = ..., base: _Optional[_Union[BaseInventory, _Mapping]] = ..., templates: _Optional[_Iterable[_Union[NodeTemplate, _Mapping]]] = ..., edits: _Optional[_Iterable[_Union[Edit, _Mapping]]] = ..., variants: _Optional[_Iterable[_Union[Variant, _Mapping]]] = ..., jobs: _Optional[_Iterable[_Union[_placement_pb2.Job, _Mapping]]] = ..., jobs_file: _Optional[str] = ..., trace: _Optional[_Union[Trace, _Mapping]] = ..., policies: _Optional[_Iterable[_Union[PolicySpec, _Mapping]]] = ..., seed: _Optional[int] = ...) -> None: ...

class BaseInventory(_message.Message):
    __slots__ = ("inventory", "file", "slurm", "volcano")
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    SLURM_FIELD_NUMBER: _ClassVar[int]
    VOLCANO_FIELD_NUMBER: _ClassVar[int]
    inventory: _placement_pb2.Inventory
    file: str
    slurm: SlurmSources
    volcano: VolcanoSources
    def __init__(self, inventory: _Optional[_Union[_placement_pb2.Inventory, _Mapping]] = ..., file: _Optional[str] = ..., slurm: _Optional[_Union[SlurmSources, _Mapping]] = ..., volcano: _Optional[_Union[VolcanoSources, _Mapping]] = ...) -> None: ...

class VolcanoSources(_message.Message):
    __slots__ = ("session", "hypernodes")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    HYPERNODES_FIELD_NUMBER: _ClassVar[int]
    session: str
    hypernodes: str
    def __init__(self, session: _Optional[str] = ..., hypernodes: _Optional[str] = ...) -> None: ...

class SlurmSources(_message.Message):
    __slots__ = ("scontrol", "topo_dir", "gres_conf", "topology")
    SCONTROL_FIELD_NUMBER: _ClassVar[int]
    TOPO_DIR_FIELD_NUMBER: _ClassVar[int]
    GRES_CONF_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    scontrol: str
    topo_dir: str
    gres_conf: str
    topology: str
    def __init__(self, scontrol: _Optional[str] = ..., topo_dir: _Optional[str] = ..., gres_conf: _Optional[str] = ..., topology: _Optional[str] = ...) -> None: ...

class NodeTemplate(_message.Message):
    __slots__ = ("name", "nvidia_smi", "nvidia_smi_text", "node_file", "node", "like", "gpu_model", "gpu_memory_mib", "cpu_milli", "memory_mib", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    NVIDIA_SMI_FIELD_NUMBER: _ClassVar[int]
    NVIDIA_SMI_TEXT_FIELD_NUMBER: _ClassVar[int]
    NODE_FILE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    LIKE_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    nvidia_smi: str
    nvidia_smi_text: str
    node_file: str
    node: _placement_pb2.Node
    like: str
    gpu_model: str
    gpu_memory_mib: int
    cpu_milli: int
    memory_mib: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., nvidia_smi: _Optional[str] = ..., nvidia_smi_text: _Optional[str] = ..., node_file: _Optional[str] = ..., node: _Optional[_Union[_placement_pb2.Node, _Mapping]] = ..., like: _Optional[str] = ..., gpu_model: _Optional[str] = ..., gpu_memory_mib: _Optional[int] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class NodeSelector(_message.Message):
    __slots__ = ("nodes", "switch")
    NODES_FIELD_NUMBER: _ClassVar[int]
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    switch: str
    def __init__(self, nodes: _Optional[_Iterable[str]] = ..., switch: _Optional[str] = ...) -> None: ...

class AddNodes(_message.Message):
    __slots__ = ("count", "template", "leaf", "parent", "name_prefix")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    LEAF_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    NAME_PREFIX_FIELD_NUMBER: _ClassVar[int]
    count: int
    template: str
    leaf: str
    parent: str
    name_prefix: str
    def __init__(self, count: _Optional[int] = ..., template: _Optional[str] = ..., leaf: _Optional[str] = ..., parent: _Optional[str] = ..., name_prefix: _Optional[str] = ...) -> None: ...

class RemoveNodes(_message.Message):
    __slots__ = ("select",)
    SELECT_FIELD_NUMBER: _ClassVar[int]
    select: NodeSelector
    def __init__(self, select: _Optional[_Union[NodeSelector, _Mapping]] = ...) -> None: ...

class DrainNodes(_message.Message):
    __slots__ = ("select",)
    SELECT_FIELD_NUMBER: _ClassVar[int]
    select: NodeSelector
    def __init__(self, select: _Optional[_Union[NodeSelector, _Mapping]] = ...) -> None: ...

class FailGpus(_message.Message):
    __slots__ = ("node", "gpus")
    NODE_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    node: str
    gpus: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node: _Optional[str] = ..., gpus: _Optional[_Iterable[str]] = ...) -> None: ...

class FailNics(_message.Message):
    __slots__ = ("node", "nics")
    NODE_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    node: str
    nics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node: _Optional[str] = ..., nics: _Optional[_Iterable[str]] = ...) -> None: ...

class ReleaseAllocations(_message.Message):
    __slots__ = ("select", "owners")
    SELECT_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    select: NodeSelector
    owners: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, select: _Optional[_Union[NodeSelector, _Mapping]] = ..., owners: _Optional[_Iterable[str]] = ...) -> None: ...

class AddAllocation(_message.Message):
    __slots__ = ("node", "allocation")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    node: str
    allocation: _placement_pb2.Allocation
    def __init__(self, node: _Optional[str] = ..., allocation: _Optional[_Union[_placement_pb2.Allocation, _Mapping]] = ...) -> None: ...

class ChangeJob(_message.Message):
    __slots__ = ("job", "patch")
    JOB_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    job: str
    patch: _struct_pb2.Struct
    def __init__(self, job: _Optional[str] = ..., patch: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Edit(_message.Message):
    __slots__ = ("name", "add_nodes", "remove_nodes", "drain_nodes", "fail_gpus", "fail_nics", "release_allocations", "add_allocation", "change_job")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADD_NODES_FIELD_NUMBER: _ClassVar[int]
    REMOVE_NODES_FIELD_NUMBER: _ClassVar[int]
    DRAIN_NODES_FIELD_NUMBER: _ClassVar[int]
    FAIL_GPUS_FIELD_NUMBER: _ClassVar[int]
    FAIL_NICS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    ADD_ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    CHANGE_JOB_FIELD_NUMBER: _ClassVar[int]
    name: str
    add_nodes: AddNodes
    remove_nodes: RemoveNodes
    drain_nodes: DrainNodes
    fail_gpus: FailGpus
    fail_nics: FailNics
    release_allocations: ReleaseAllocations
    add_allocation: AddAllocation
    change_job: ChangeJob
    def __init__(self, name: _Optional[str] = ..., add_nodes: _Optional[_Union[AddNodes, _Mapping]] = ..., remove_nodes: _Optional[_Union[RemoveNodes, _Mapping]] = ..., drain_nodes: _Optional[_Union[DrainNodes, _Mapping]] = ..., fail_gpus: _Optional[_Union[FailGpus, _Mapping]] = ..., fail_nics: _Optional[_Union[FailNics, _Mapping]] = ..., release_allocations: _Optional[_Union[ReleaseAllocations, _Mapping]] = ..., add_allocation: _Optional[_Union[AddAllocation, _Mapping]] = ..., change_job: _Optional[_Union[ChangeJob, _Mapping]] = ...) -> None: ...

class Variant(_message.Message):
    __slots__ = ("name", "edits")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    name: str
    edits: _containers.RepeatedCompositeFieldContainer[Edit]
    def __init__(self, name: _Optional[str] = ..., edits: _Optional[_Iterable[_Union[Edit, _Mapping]]] = ...) -> None: ...

class TraceEntry(_message.Message):
    __slots__ = ("job", "arrival_s", "duration_s", "job_class")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ARRIVAL_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    JOB_CLASS_FIELD_NUMBER: _ClassVar[int]
    job: _placement_pb2.Job
    arrival_s: float
    duration_s: float
    job_class: str
    def __init__(self, job: _Optional[_Union[_placement_pb2.Job, _Mapping]] = ..., arrival_s: _Optional[float] = ..., duration_s: _Optional[float] = ..., job_class: _Optional[str] = ...) -> None: ...

class Departure(_message.Message):
    __slots__ = ("owner", "at_s")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    AT_S_FIELD_NUMBER: _ClassVar[int]
    owner: str
    at_s: float
    def __init__(self, owner: _Optional[str] = ..., at_s: _Optional[float] = ...) -> None: ...

class Trace(_message.Message):
    __slots__ = ("entries", "departures", "horizon_s", "file")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DEPARTURES_FIELD_NUMBER: _ClassVar[int]
    HORIZON_S_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[TraceEntry]
    departures: _containers.RepeatedCompositeFieldContainer[Departure]
    horizon_s: float
    file: str
    def __init__(self, entries: _Optional[_Iterable[_Union[TraceEntry, _Mapping]]] = ..., departures: _Optional[_Iterable[_Union[Departure, _Mapping]]] = ..., horizon_s: _Optional[float] = ..., file: _Optional[str] = ...) -> None: ...

class SolverPolicy(_message.Message):
    __slots__ = ("objective", "packing", "time_limit_s", "workers", "batch_order", "order_shuffles", "priority_mode")
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    PACKING_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ORDER_FIELD_NUMBER: _ClassVar[int]
    ORDER_SHUFFLES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_MODE_FIELD_NUMBER: _ClassVar[int]
    objective: _containers.RepeatedScalarFieldContainer[_placement_pb2.ObjectiveTier]
    packing: _placement_pb2.Packing
    time_limit_s: float
    workers: int
    batch_order: _placement_pb2.BatchOrder
    order_shuffles: int
    priority_mode: _placement_pb2.PriorityMode
    def __init__(self, objective: _Optional[_Iterable[_Union[_placement_pb2.ObjectiveTier, str]]] = ..., packing: _Optional[_Union[_placement_pb2.Packing, str]] = ..., time_limit_s: _Optional[float] = ..., workers: _Optional[int] = ..., batch_order: _Optional[_Union[_placement_pb2.BatchOrder, str]] = ..., order_shuffles: _Optional[int] = ..., priority_mode: _Optional[_Union[_placement_pb2.PriorityMode, str]] = ...) -> None: ...

class PolicySpec(_message.Message):
    __slots__ = ("name", "solver", "baseline")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    name: str
    solver: SolverPolicy
    baseline: str
    def __init__(self, name: _Optional[str] = ..., solver: _Optional[_Union[SolverPolicy, _Mapping]] = ..., baseline: _Optional[str] = ...) -> None: ...

class WhatIfReport(_message.Message):
    __slots__ = ("scenario", "complete", "outcomes", "diffs", "notes")
    SCENARIO_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    DIFFS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    scenario: str
    complete: bool
    outcomes: _containers.RepeatedCompositeFieldContainer[Outcome]
    diffs: _containers.RepeatedCompositeFieldContainer[PolicyDiff]
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, scenario: _Optional[str] = ..., complete: _Optional[bool] = ..., outcomes: _Optional[_Iterable[_Union[Outcome, _Mapping]]] = ..., diffs: _Optional[_Iterable[_Union[PolicyDiff, _Mapping]]] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class Outcome(_message.Message):
    __slots__ = ("variant", "policy", "seed", "complete", "summary", "jobs", "timeline", "waits", "before", "after")
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    TIMELINE_FIELD_NUMBER: _ClassVar[int]
    WAITS_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    variant: str
    policy: str
    seed: int
    complete: bool
    summary: Summary
    jobs: _containers.RepeatedCompositeFieldContainer[JobOutcome]
    timeline: _containers.RepeatedCompositeFieldContainer[Sample]
    waits: _containers.RepeatedCompositeFieldContainer[ClassWait]
    before: _containers.RepeatedCompositeFieldContainer[NodeUse]
    after: _containers.RepeatedCompositeFieldContainer[NodeUse]
    def __init__(self, variant: _Optional[str] = ..., policy: _Optional[str] = ..., seed: _Optional[int] = ..., complete: _Optional[bool] = ..., summary: _Optional[_Union[Summary, _Mapping]] = ..., jobs: _Optional[_Iterable[_Union[JobOutcome, _Mapping]]] = ..., timeline: _Optional[_Iterable[_Union[Sample, _Mapping]]] = ..., waits: _Optional[_Iterable[_Union[ClassWait, _Mapping]]] = ..., before: _Optional[_Iterable[_Union[NodeUse, _Mapping]]] = ..., after: _Optional[_Iterable[_Union[NodeUse, _Mapping]]] = ...) -> None: ...

class Summary(_message.Message):
    __slots__ = ("jobs_total", "jobs_placed", "gpus_total", "gpus_used_before", "gpus_used_after", "stranded_gpus_before", "stranded_gpus_after", "fragmentation_before", "fragmentation_after", "locality_tiers", "misaligned_pairs", "solves", "solve_ms_total", "solve_ms_max", "worst_status", "mean_utilisation", "end_s")
    JOBS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    JOBS_PLACED_FIELD_NUMBER: _ClassVar[int]
    GPUS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GPUS_USED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    GPUS_USED_AFTER_FIELD_NUMBER: _ClassVar[int]
    STRANDED_GPUS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    STRANDED_GPUS_AFTER_FIELD_NUMBER: _ClassVar[int]
    FRAGMENTATION_BEFORE_FIELD_NUMBER: _ClassVar[int]
    FRAGMENTATION_AFTER_FIELD_NUMBER: _ClassVar[int]
    LOCALITY_TIERS_FIELD_NUMBER: _ClassVar[int]
    MISALIGNED_PAIRS_FIELD_NUMBER: _ClassVar[int]
    SOLVES_FIELD_NUMBER: _ClassVar[int]
    SOLVE_MS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SOLVE_MS_MAX_FIELD_NUMBER: _ClassVar[int]
    WORST_STATUS_FIELD_NUMBER: _ClassVar[int]
    MEAN_UTILISATION_FIELD_NUMBER: _ClassVar[int]
    END_S_FIELD_NUMBER: _ClassVar[int]
    jobs_total: int
    jobs_placed: int
    gpus_total: int
    gpus_used_before: int
    gpus_used_after: int
    stranded_gpus_before: float
    stranded_gpus_after: float
    fragmentation_before: float
    fragmentation_after: float
    locality_tiers: _containers.RepeatedCompositeFieldContainer[TierCount]
    misaligned_pairs: int
    solves: int
    solve_ms_total: float
    solve_ms_max: float
    worst_status: _placement_pb2.SolveStatus
    mean_utilisation: float
    end_s: float
    def __init__(self, jobs_total: _Optional[int] = ..., jobs_placed: _Optional[int] = ..., gpus_total: _Optional[int] = ..., gpus_used_before: _Optional[int] = ..., gpus_used_after: _Optional[int] = ..., stranded_gpus_before: _Optional[float] = ..., stranded_gpus_after: _Optional[float] = ..., fragmentation_before: _Optional[float] = ..., fragmentation_after: _Optional[float] = ..., locality_tiers: _Optional[_Iterable[_Union[TierCount, _Mapping]]] = ..., misaligned_pairs: _Optional[int] = ..., solves: _Optional[int] = ..., solve_ms_total: _Optional[float] = ..., solve_ms_max: _Optional[float] = ..., worst_status: _Optional[_Union[_placement_pb2.SolveStatus, str]] = ..., mean_utilisation: _Optional[float] = ..., end_s: _Optional[float] = ...) -> None: ...

class TierCount(_message.Message):
    __slots__ = ("tier", "jobs")
    TIER_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    tier: int
    jobs: int
    def __init__(self, tier: _Optional[int] = ..., jobs: _Optional[int] = ...) -> None: ...

class JobOutcome(_message.Message):
    __slots__ = ("job_id", "placed", "reason", "job_class", "gpus", "locality_tier", "leaves_spanned", "misaligned_pairs", "arrival_s", "start_s", "end_s")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PLACED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    JOB_CLASS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    LOCALITY_TIER_FIELD_NUMBER: _ClassVar[int]
    LEAVES_SPANNED_FIELD_NUMBER: _ClassVar[int]
    MISALIGNED_PAIRS_FIELD_NUMBER: _ClassVar[int]
    ARRIVAL_S_FIELD_NUMBER: _ClassVar[int]
    START_S_FIELD_NUMBER: _ClassVar[int]
    END_S_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    placed: bool
    reason: _placement_pb2.Reason
    job_class: str
    gpus: int
    locality_tier: int
    leaves_spanned: int
    misaligned_pairs: int
    arrival_s: float
    start_s: float
    end_s: float
    def __init__(self, job_id: _Optional[str] = ..., placed: _Optional[bool] = ..., reason: _Optional[_Union[_placement_pb2.Reason, _Mapping]] = ..., job_class: _Optional[str] = ..., gpus: _Optional[int] = ..., locality_tier: _Optional[int] = ..., leaves_spanned: _Optional[int] = ..., misaligned_pairs: _Optional[int] = ..., arrival_s: _Optional[float] = ..., start_s: _Optional[float] = ..., end_s: _Optional[float] = ...) -> None: ...

class Sample(_message.Message):
    __slots__ = ("t_s", "gpus_used", "gpus_total", "queue_length", "running_jobs", "fragmentation", "stranded_gpus")
    T_S_FIELD_NUMBER: _ClassVar[int]
    GPUS_USED_FIELD_NUMBER: _ClassVar[int]
    GPUS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    FRAGMENTATION_FIELD_NUMBER: _ClassVar[int]
    STRANDED_GPUS_FIELD_NUMBER: _ClassVar[int]
    t_s: float
    gpus_used: int
    gpus_total: int
    queue_length: int
    running_jobs: int
    fragmentation: float
    stranded_gpus: float
    def __init__(self, t_s: _Optional[float] = ..., gpus_used: _Optional[int] = ..., gpus_total: _Optional[int] = ..., queue_length: _Optional[int] = ..., running_jobs: _Optional[int] = ..., fragmentation: _Optional[float] = ..., stranded_gpus: _Optional[float] = ...) -> None: ...

class ClassWait(_message.Message):
    __slots__ = ("job_class", "jobs", "started", "mean_wait_s", "p95_wait_s", "max_wait_s")
    JOB_CLASS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    MEAN_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    P95_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    job_class: str
    jobs: int
    started: int
    mean_wait_s: float
    p95_wait_s: float
    max_wait_s: float
    def __init__(self, job_class: _Optional[str] = ..., jobs: _Optional[int] = ..., started: _Optional[int] = ..., mean_wait_s: _Optional[float] = ..., p95_wait_s: _Optional[float] = ..., max_wait_s: _Optional[float] = ...) -> None: ...

class NodeUse(_message.Message):
    __slots__ = ("node", "leaf", "gpus", "used", "unhealthy", "schedulable")
    NODE_FIELD_NUMBER: _ClassVar[int]
    LEAF_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    UNHEALTHY_FIELD_NUMBER: _ClassVar[int]
    SCHEDULABLE_FIELD_NUMBER: _ClassVar[int]
    node: str
    leaf: str
    gpus: int
    used: int
    unhealthy: int
    schedulable: bool
    def __init__(self, node: _Optional[str] = ..., leaf: _Optional[str] = ..., gpus: _Optional[int] = ..., used: _Optional[int] = ..., unhealthy: _Optional[int] = ..., schedulable: _Optional[bool] = ...) -> None: ...

class PolicyDiff(_message.Message):
    __slots__ = ("variant", "policy_a", "policy_b", "only_a", "only_b", "gpus_a", "gpus_b", "seed", "unsupported_b", "unsupported_a")
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    POLICY_A_FIELD_NUMBER: _ClassVar[int]
    POLICY_B_FIELD_NUMBER: _ClassVar[int]
    ONLY_A_FIELD_NUMBER: _ClassVar[int]
    ONLY_B_FIELD_NUMBER: _ClassVar[int]
    GPUS_A_FIELD_NUMBER: _ClassVar[int]
    GPUS_B_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    UNSUPPORTED_B_FIELD_NUMBER: _ClassVar[int]
    UNSUPPORTED_A_FIELD_NUMBER: _ClassVar[int]
    variant: str
    policy_a: str
    policy_b: str
    only_a: _containers.RepeatedScalarFieldContainer[str]
    only_b: _containers.RepeatedScalarFieldContainer[str]
    gpus_a: int
    gpus_b: int
    seed: int
    unsupported_b: _containers.RepeatedScalarFieldContainer[str]
    unsupported_a: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, variant: _Optional[str] = ..., policy_a: _Optional[str] = ..., policy_b: _Optional[str] = ..., only_a: _Optional[_Iterable[str]] = ..., only_b: _Optional[_Iterable[str]] = ..., gpus_a: _Optional[int] = ..., gpus_b: _Optional[int] = ..., seed: _Optional[int] = ..., unsupported_b: _Optional[_Iterable[str]] = ..., unsupported_a: _Optional[_Iterable[str]] = ...) -> None: ...
