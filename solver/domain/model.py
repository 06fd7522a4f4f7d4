"""Domain types: the inventory, the job batch, the policy and the result.

Every value is an immutable pydantic model. Field names are exactly the field names of
``proto/topoplace/v1/placement.proto`` and enum members carry the proto's numbers, so converting
to and from the wire is a generic walk (``solver.service.convert``), not hand-written glue.

Only *local* rules live here (a count is positive, a share is within (0, 1000]); rules that relate
one part of a request to another (ids unique, references resolve, a member fits some node) live in
``solver.domain.validate`` so that every problem is reported at once, with its path.
"""

from __future__ import annotations

from enum import IntEnum

from pydantic import BaseModel, ConfigDict, Field


class Frozen(BaseModel):
    """Base of every domain value: immutable, unknown fields refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


# --------------------------------------------------------------------------- enums


class Distance(IntEnum):
    """PCIe distance classes as ``nvidia-smi topo -m`` names them, nearest first.

    ``NV`` (an NVLink bond) is not a PCIe distance and never appears as an alignment target.
    """

    UNSPECIFIED = 0
    PIX = 1
    PXB = 2
    PHB = 3
    NODE = 4
    SYS = 5


class Requirement(IntEnum):
    """How hard a topology rule is: ignored, worth a score, or a filter."""

    UNSPECIFIED = 0  # treated as NONE
    NONE = 1
    PREFERRED = 2
    REQUIRED = 3


class NicMode(IntEnum):
    """How a member asks for RDMA NICs."""

    UNSPECIFIED = 0  # treated as NONE
    NONE = 1
    PER_GPU = 2  # one NIC for each of the member's GPUs
    PER_MEMBER = 3  # ``nic_count`` NICs for the member as a whole


class SwitchKind(IntEnum):
    UNSPECIFIED = 0  # treated as SWITCH
    SWITCH = 1
    HOST_BRIDGE = 2  # a CPU root complex: devices meeting here are PHB apart


class Packing(IntEnum):
    UNSPECIFIED = 0  # treated as BINPACK
    BINPACK = 1  # fill partly used nodes first, keep whole nodes free
    SPREAD = 2  # prefer empty nodes, one member per node where possible
    # GPU work to the nodes whose GPUs are most used; CPU-only work to the node with the most CPU to
    # spare beyond what its free GPUs will want (the workload's CPU per GPU)
    FILL = 3


class ObjectiveTier(IntEnum):
    UNSPECIFIED = 0
    PLACED_WORK = 1  # GPUs placed by priority (PriorityMode), all-or-nothing per gang; then jobs
    TOPOLOGY = 2  # preferred alignments met (and, later, locality)
    PACKING = 3  # binpack or spread
    FRAGMENTATION = 4
    STABILITY = 5
    NODE_ORDER = 6  # fill nodes in the policy's node_order (first fit, as Slurm's node weights)


class PriorityMode(IntEnum):
    """How the PLACED_WORK tier weighs jobs of different priorities."""

    UNSPECIFIED = 0  # treated as STRICT
    # A lower-priority job never takes capacity a higher-priority job could have had: each
    # priority level's work is maximised in turn, highest first, as a scheduler's queue behaves.
    STRICT = 1
    # GPUs placed weighted by priority + 1, one sum: more low-priority work may outweigh less of a
    # higher priority (four GPUs of priority 0 weigh as much as one of priority 3).
    WEIGHTED = 2


class BatchOrder(IntEnum):
    """How a batch's jobs are placed relative to one another."""

    UNSPECIFIED = 0  # treated as JOINT
    JOINT = 1  # one model places every job of the batch together
    # One job at a time, highest priority then most GPU work first, each seeing the ones before it
    # (jobs bound by an anti-affinity rule between them are placed together): what a sorted queue
    # does. On the FGD trace it beats a joint model of the batch, but not placing in arrival order
    # except at one window size (bench/RESULTS-replay.md, session 5)
    LARGEST_FIRST = 2
    # One job at a time in several orders — as given, largest first, the jobs the first order left
    # out first, and a few seeded shuffles — keeping the plan with the most placed work, then the
    # least fragmentation left (solver.search.sequence). On the FGD trace, windows of 16 pods placed so
    # allocate more than FGD online on every seed (bench/RESULTS-replay.md, session 6).
    BEST_OF_ORDERS = 3


class Scope(IntEnum):
    """Where an anti-affinity or exclusivity rule applies."""

    UNSPECIFIED = 0  # treated as NODE
    GPU = 1
    PCIE_SWITCH = 2
    NODE = 3


class SolveStatus(IntEnum):
    UNSPECIFIED = 0
    OPTIMAL = 1  # every objective tier proven optimal
    FEASIBLE = 2  # a verified placement, not proven optimal (see gap)
    INFEASIBLE = 3  # not used for "nothing fits": that is OPTIMAL with unplaced jobs
    UNKNOWN = 4  # the time ran out before any placement was found
    MODEL_INVALID = 5


class ReasonCode(IntEnum):
    UNSPECIFIED = 0
    NO_NODE_FITS = 1  # no single node could host one member, even empty of other new work
    INSUFFICIENT_CAPACITY = 2  # members fit one by one but the gang does not fit as a whole
    OUTPRIORITISED = 3  # it would fit alone; other jobs used the room
    TIME_LIMIT = 4  # the solver ran out of time before placing it
    LOCALITY = 5  # capacity exists, but not within the locality the job requires
    MUTEX = 6  # anti-affinity or exclusivity rules leave no room
    UNSUPPORTED = 7  # a baseline policy cannot express what the job asks (never the solver's answer)


# --------------------------------------------------------------------------- inventory


class Gpu(Frozen):
    id: str = Field(min_length=1, description="unique within its node, e.g. GPU0 or a UUID")
    index: int = Field(default=0, ge=0)
    uuid: str = ""
    model: str = ""
    memory_mib: int = Field(default=0, ge=0)
    numa: int | None = None
    pcie_switch: str = ""  # the leaf PCIe switch the GPU hangs off; "" when unknown
    healthy: bool = True


class Nic(Frozen):
    name: str = Field(min_length=1, description="e.g. mlx5_0; unique within its node")
    numa: int | None = None
    pcie_switch: str = ""
    bandwidth_gbps: int = Field(default=0, ge=0)
    rdma: bool = True
    rail: int | None = None
    healthy: bool = True


class PcieSwitch(Frozen):
    """A PCIe switch (or host bridge) inside a node; ``parent`` builds the PCIe tree.

    A root's ``numa`` decides NODE vs SYS between devices of different trees (``solver.domain.topology``);
    leave it unset when the matrix shows SYS between two trees of one NUMA node.
    """

    id: str = Field(min_length=1)
    parent: str = ""
    kind: SwitchKind = SwitchKind.SWITCH
    numa: int | None = None


class NumaNode(Frozen):
    id: int = Field(default=0, ge=0)
    cpu_milli: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)


class NvLink(Frozen):
    """An NVLink bond between two GPUs of one node (``links`` = the # of ``NV#``)."""

    gpu_a: str
    gpu_b: str
    links: int = Field(default=1, ge=1)


class GpuShare(Frozen):
    """Part of one GPU: compute in milli-GPU (1000 = the whole GPU) and/or memory."""

    gpu: str = ""  # in an allocation or a placement: which GPU; empty in a request
    milli: int = Field(default=0, ge=0, le=1000)
    memory_mib: int = Field(default=0, ge=0)


class Allocation(Frozen):
    """Work already running on a node: what it holds stays held."""

    owner: str = ""  # job or pod that holds it, for people
    gpus: tuple[str, ...] = ()  # whole GPUs
    nics: tuple[str, ...] = ()
    cpu_milli: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)
    gpu_shares: tuple[GpuShare, ...] = ()  # parts of GPUs (HAMi-style sharing)
    mutex: bool = False  # its GPUs take no other work, whole or shared, while it runs
    labels: dict[str, str] = Field(default_factory=dict)  # of the owner, for anti-affinity


class Node(Frozen):
    name: str = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
    cpu_milli: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)
    numa_nodes: tuple[NumaNode, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    nics: tuple[Nic, ...] = ()
    pcie_switches: tuple[PcieSwitch, ...] = ()
    nvlinks: tuple[NvLink, ...] = ()
    leaf: str = ""  # the fabric switch (tier 1) the node is cabled to
    nvlink_domain: str = ""  # a multi-node NVLink domain (e.g. an NVL72 rack)
    allocations: tuple[Allocation, ...] = ()
    schedulable: bool = True


class FabricSwitch(Frozen):
    id: str = Field(min_length=1)
    tier: int = Field(ge=1, description="1 = leaf, 2 = spine, ...")
    parent: str = ""


class Inventory(Frozen):
    nodes: tuple[Node, ...] = ()
    switches: tuple[FabricSwitch, ...] = ()


# --------------------------------------------------------------------------- jobs


class NicRequest(Frozen):
    mode: NicMode = NicMode.NONE
    count: int = Field(default=0, ge=0, description="NICs per member when mode is PER_MEMBER")


class Alignment(Frozen):
    """GPU↔NIC alignment: each of the member's NICs at ``distance`` or closer to its GPU(s)."""

    mode: Requirement = Requirement.NONE
    distance: Distance = Distance.PIX


class MemberShape(Frozen):
    """What one replica of a role asks for, and the topology rules its devices obey."""

    gpus: int = Field(default=0, ge=0)
    gpu_share: GpuShare | None = None  # instead of whole GPUs: a share of one GPU
    gpu_models: tuple[str, ...] = ()  # any of these models; empty = any
    avoid_gpu_models: tuple[str, ...] = ()
    mutex: bool = False  # idle GPUs only, and nothing shares them afterwards
    nics: NicRequest = NicRequest()
    alignment: Alignment = Alignment()
    numa: Requirement = Requirement.NONE  # all GPUs and NICs on one NUMA node
    nvlink: Requirement = Requirement.NONE  # every pair of the member's GPUs NVLinked
    cpu_milli: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)
    node_selector: dict[str, str] = Field(default_factory=dict)


class Locality(Frozen):
    """Network locality of a gang: the lowest common switch of all its nodes at ``highest_tier`` or
    below (REQUIRED), or as low as possible (PREFERRED). ``highest_tier`` 0 means no limit."""

    mode: Requirement = Requirement.NONE
    highest_tier: int = Field(default=0, ge=0)


class RoleAffinity(Frozen):
    """Every member of ``role_a`` within ``highest_tier`` of every member of ``role_b`` (e.g. the
    KV-cache path between prefill and decode). ``highest_tier`` 0 means no limit, as in
    :class:`Locality`; unset means 1."""

    role_a: str
    role_b: str
    mode: Requirement = Requirement.REQUIRED
    highest_tier: int | None = Field(default=None, ge=0, description="unset = 1")


class AntiAffinity(Frozen):
    """Keep away from running or batch work whose labels include all of ``labels``, at ``scope``."""

    labels: dict[str, str] = Field(default_factory=dict)
    scope: Scope = Scope.NODE


class Role(Frozen):
    name: str = Field(min_length=1)
    replicas: int = Field(ge=1)
    min_replicas: int | None = Field(default=None, ge=1, description="gang minimum; default: replicas")
    member: MemberShape
    locality: Locality = Locality()

    @property
    def minimum(self) -> int:
        return self.replicas if self.min_replicas is None else self.min_replicas


class Job(Frozen):
    id: str = Field(min_length=1)
    priority: int = Field(default=0, ge=0, le=1_000_000)
    labels: dict[str, str] = Field(default_factory=dict)
    roles: tuple[Role, ...] = Field(min_length=1)
    locality: Locality = Locality()
    nvlink_domain: Requirement = Requirement.NONE  # all nodes in one multi-node NVLink domain
    rail_aligned: Requirement = Requirement.NONE  # every node uses the same rails
    role_affinity: tuple[RoleAffinity, ...] = ()
    anti_affinity: tuple[AntiAffinity, ...] = ()
    exclusive_nodes: bool = False  # no other job's member on the job's nodes


# --------------------------------------------------------------------------- policy


class WorkloadShape(Frozen):
    """A typical request and how often it comes (FGD's workload model)."""

    gpus: int = Field(default=0, ge=0)
    milli: int = Field(default=0, ge=0, le=1000)  # per GPU, for a share; neither: a CPU-only request
    # Finite: an infinite weight turns the profile's normalised weights into NaN (inf / inf).
    popularity: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    cpu_milli: int = Field(default=0, ge=0)  # a node with less free CPU cannot host it
    memory_mib: int = Field(default=0, ge=0)
    gpu_models: tuple[str, ...] = ()  # accepted models; empty = any


DEFAULT_TIERS = (
    ObjectiveTier.PLACED_WORK,
    ObjectiveTier.TOPOLOGY,
    ObjectiveTier.PACKING,
    ObjectiveTier.FRAGMENTATION,
)


class Policy(Frozen):
    objective: tuple[ObjectiveTier, ...] = DEFAULT_TIERS
    packing: Packing = Packing.BINPACK
    time_limit_s: float = Field(default=10.0, gt=0, le=3600)
    seed: int = Field(default=0, ge=0)
    deterministic: bool = True
    workers: int = Field(default=0, ge=0, le=64, description="CP-SAT workers; 0 = one per core")
    node_policy: str = ""  # HAMi-style chain, e.g. "binpack,numa"; see docs/model.md
    gpu_policy: str = ""  # e.g. "topology-aware,mutex"
    workload: tuple[WorkloadShape, ...] = ()  # for the fragmentation tier; empty = from the batch
    # For the NODE_ORDER tier: node names, most preferred first; nodes not named tie after them.
    node_order: tuple[str, ...] = ()
    batch_order: BatchOrder = BatchOrder.UNSPECIFIED  # JOINT
    # BEST_OF_ORDERS: how many seeded shuffles of the batch to try besides the given order, largest
    # first and left-out first. Each order costs a one-job solve per job; three were enough for the
    # gain on the FGD trace (bench/RESULTS-replay.md, session 6).
    order_shuffles: int = Field(default=3, ge=0, le=64)
    priority_mode: PriorityMode = PriorityMode.UNSPECIFIED  # STRICT


class SolveRequest(Frozen):
    request_id: str = ""
    inventory: Inventory
    jobs: tuple[Job, ...] = ()
    policy: Policy = Policy()
    # A plan the caller holds for some of these jobs, e.g. the last answer on this cluster: where it
    # still holds, the floor starts from it and the answer is never worse (solver.search.previous).
    # Jobs it names that are not in the batch are passed over: they have started or gone since.
    previous: tuple[JobResult, ...] = ()


# --------------------------------------------------------------------------- result


class GpuNicPair(Frozen):
    """One GPU and the NIC that serves it, with their PCIe distance class."""

    gpu: str
    nic: str
    distance: Distance = Distance.UNSPECIFIED


class MemberPlacement(Frozen):
    role: str
    index: int = Field(ge=0)
    node: str
    gpus: tuple[str, ...] = ()
    nics: tuple[str, ...] = ()
    numa: int | None = None
    aligned: bool = True  # every GPU↔NIC pair at the asked distance or closer
    gpu_shares: tuple[GpuShare, ...] = ()  # for a share member: the GPU and the part it got
    pairs: tuple[GpuNicPair, ...] = ()  # which NIC serves which GPU (see the proto)


class Reason(Frozen):
    code: ReasonCode
    message: str
    relaxation: str = ""  # the smallest change that would place the job, in words


class JobResult(Frozen):
    job_id: str
    placed: bool
    members: tuple[MemberPlacement, ...] = ()
    reason: Reason | None = None
    locality_tier: int = 0  # tier of the lowest switch above all its nodes (0: one node)
    leaves_spanned: int = 0
    nvlink_domains_spanned: int = 0
    rails: tuple[int, ...] = ()
    rules_held: bool = True  # every PREFERRED locality rule held as well


SolveRequest.model_rebuild()  # its ``previous`` plan is made of the results defined above


class TierValue(Frozen):
    tier: ObjectiveTier
    name: str = ""  # the part of the tier, e.g. "topology.locality"; tiers may be solved in parts
    ms: float = 0.0  # time spent searching this tier
    value: float
    bound: float
    optimal: bool

    @property
    def gap(self) -> float:
        """|bound − value| over the larger of the two: 0 when proven, 1 when nothing is known."""
        return abs(self.bound - self.value) / max(1.0, abs(self.bound), abs(self.value))


class StageTiming(Frozen):
    stage: str
    ms: float


class ModelSize(Frozen):
    variables: int = 0
    constraints: int = 0
    node_classes: int = 0
    configurations: int = 0
    candidate_nodes: int = 0


class ClusterMetrics(Frozen):
    gpus_total: int = 0
    gpus_used_before: int = 0
    gpus_used_after: int = 0
    nodes_fully_free_before: int = 0
    nodes_fully_free_after: int = 0
    stranded_gpus_before: float = 0.0
    stranded_gpus_after: float = 0.0
    fragmentation_before: float = 0.0
    fragmentation_after: float = 0.0


class SolveResult(Frozen):
    request_id: str = ""
    status: SolveStatus
    jobs: tuple[JobResult, ...] = ()
    objectives: tuple[TierValue, ...] = ()
    gap: float = 0.0
    timings: tuple[StageTiming, ...] = ()
    model_size: ModelSize = ModelSize()
    metrics: ClusterMetrics = ClusterMetrics()
    # Who made the returned plan: "search" (CP-SAT, from the floor's best plan), "floor:<placer>"
    # (a greedy placer's plan, no search bettered it), "unsearched:<placer>" (no time to build the
    # model: ``solver.fallback``'s greedy plan, nothing searched), "single" / "gang" (one pod or one
    # gang placed by enumeration, no model needed: ``solver.search.single`` / ``.gang``, proven
    # optimal), or a baseline's name.
    plan_source: str = ""
