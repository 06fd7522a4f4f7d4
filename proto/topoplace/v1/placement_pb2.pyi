from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Distance(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DISTANCE_UNSPECIFIED: _ClassVar[Distance]
    DISTANCE_PIX: _ClassVar[Distance]
    DISTANCE_PXB: _ClassVar[Distance]
    DISTANCE_PHB: _ClassVar[Distance]
    DISTANCE_NODE: _ClassVar[Distance]
    DISTANCE_SYS: _ClassVar[Distance]

class Requirement(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REQUIREMENT_UNSPECIFIED: _ClassVar[Requirement]
    REQUIREMENT_NONE: _ClassVar[Requirement]
    REQUIREMENT_PREFERRED: _ClassVar[Requirement]
    REQUIREMENT_REQUIRED: _ClassVar[Requirement]

class NicMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NIC_MODE_UNSPECIFIED: _ClassVar[NicMode]
    NIC_MODE_NONE: _ClassVar[NicMode]
    NIC_MODE_PER_GPU: _ClassVar[NicMode]
    NIC_MODE_PER_MEMBER: _ClassVar[NicMode]

class SwitchKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SWITCH_KIND_UNSPECIFIED: _ClassVar[SwitchKind]
    SWITCH_KIND_SWITCH: _ClassVar[SwitchKind]
    SWITCH_KIND_HOST_BRIDGE: _ClassVar[SwitchKind]

class Packing(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PACKING_UNSPECIFIED: _ClassVar[Packing]
    PACKING_BINPACK: _ClassVar[Packing]
    PACKING_SPREAD: _ClassVar[Packing]
    PACKING_FILL: _ClassVar[Packing]

class BatchOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BATCH_ORDER_UNSPECIFIED: _ClassVar[BatchOrder]
    BATCH_ORDER_JOINT: _ClassVar[BatchOrder]
    BATCH_ORDER_LARGEST_FIRST: _ClassVar[BatchOrder]
    BATCH_ORDER_BEST_OF_ORDERS: _ClassVar[BatchOrder]

class PriorityMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_MODE_UNSPECIFIED: _ClassVar[PriorityMode]
    PRIORITY_MODE_STRICT: _ClassVar[PriorityMode]
    PRIORITY_MODE_WEIGHTED: _ClassVar[PriorityMode]

class ObjectiveTier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OBJECTIVE_TIER_UNSPECIFIED: _ClassVar[ObjectiveTier]
    OBJECTIVE_TIER_PLACED_WORK: _ClassVar[ObjectiveTier]
    OBJECTIVE_TIER_TOPOLOGY: _ClassVar[ObjectiveTier]
    OBJECTIVE_TIER_PACKING: _ClassVar[ObjectiveTier]
    OBJECTIVE_TIER_FRAGMENTATION: _ClassVar[ObjectiveTier]
    OBJECTIVE_TIER_STABILITY: _ClassVar[ObjectiveTier]
    OBJECTIVE_TIER_NODE_ORDER: _ClassVar[ObjectiveTier]

class Scope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCOPE_UNSPECIFIED: _ClassVar[Scope]
    SCOPE_GPU: _ClassVar[Scope]
    SCOPE_PCIE_SWITCH: _ClassVar[Scope]
    SCOPE_NODE: _ClassVar[Scope]

class SolveStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SOLVE_STATUS_UNSPECIFIED: _ClassVar[SolveStatus]
    SOLVE_STATUS_OPTIMAL: _ClassVar[SolveStatus]
    SOLVE_STATUS_FEASIBLE: _ClassVar[SolveStatus]
    SOLVE_STATUS_INFEASIBLE: _ClassVar[SolveStatus]
    SOLVE_STATUS_UNKNOWN: _ClassVar[SolveStatus]
    SOLVE_STATUS_MODEL_INVALID: _ClassVar[SolveStatus]

class ReasonCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REASON_CODE_UNSPECIFIED: _ClassVar[ReasonCode]
    REASON_CODE_NO_NODE_FITS: _ClassVar[ReasonCode]
    REASON_CODE_INSUFFICIENT_CAPACITY: _ClassVar[ReasonCode]
    REASON_CODE_OUTPRIORITISED: _ClassVar[ReasonCode]
    REASON_CODE_TIME_LIMIT: _ClassVar[ReasonCode]
    REASON_CODE_LOCALITY: _ClassVar[ReasonCode]
    REASON_CODE_MUTEX: _ClassVar[ReasonCode]
    REASON_CODE_UNSUPPORTED: _ClassVar[ReasonCode]
DISTANCE_UNSPECIFIED: Distance
DISTANCE_PIX: Distance
DISTANCE_PXB: Distance
DISTANCE_PHB: Distance
DISTANCE_NODE: Distance
DISTANCE_SYS: Distance
REQUIREMENT_UNSPECIFIED: Requirement
REQUIREMENT_NONE: Requirement
REQUIREMENT_PREFERRED: Requirement
REQUIREMENT_REQUIRED: Requirement
NIC_MODE_UNSPECIFIED: NicMode
NIC_MODE_NONE: NicMode
NIC_MODE_PER_GPU: NicMode
NIC_MODE_PER_MEMBER: NicMode
SWITCH_KIND_UNSPECIFIED: SwitchKind
SWITCH_KIND_SWITCH: SwitchKind
SWITCH_KIND_HOST_BRIDGE: SwitchKind
PACKING_UNSPECIFIED: Packing
PACKING_BINPACK: Packing
PACKING_SPREAD: Packing
PACKING_FILL: Packing
BATCH_ORDER_UNSPECIFIED: BatchOrder
BATCH_ORDER_JOINT: BatchOrder
BATCH_ORDER_LARGEST_FIRST: BatchOrder
BATCH_ORDER_BEST_OF_ORDERS: BatchOrder
PRIORITY_MODE_UNSPECIFIED: PriorityMode
PRIORITY_MODE_STRICT: PriorityMode
PRIORITY_MODE_WEIGHTED: PriorityMode
OBJECTIVE_TIER_UNSPECIFIED: ObjectiveTier
OBJECTIVE_TIER_PLACED_WORK: ObjectiveTier
OBJECTIVE_TIER_TOPOLOGY: ObjectiveTier
OBJECTIVE_TIER_PACKING: ObjectiveTier
OBJECTIVE_TIER_FRAGMENTATION: ObjectiveTier
OBJECTIVE_TIER_STABILITY: ObjectiveTier
OBJECTIVE_TIER_NODE_ORDER: ObjectiveTier
SCOPE_UNSPECIFIED: Scope
SCOPE_GPU: Scope
SCOPE_PCIE_SWITCH: Scope
SCOPE_NODE: Scope
SOLVE_STATUS_UNSPECIFIED: SolveStatus
SOLVE_STATUS_OPTIMAL: SolveStatus
SOLVE_STATUS_FEASIBLE: SolveStatus
SOLVE_STATUS_INFEASIBLE: SolveStatus
SOLVE_STATUS_UNKNOWN: SolveStatus
SOLVE_STATUS_MODEL_INVALID: SolveStatus
REASON_CODE_UNSPECIFIED: ReasonCode
REASON_CODE_NO_NODE_FITS: ReasonCode
REASON_CODE_INSUFFICIENT_CAPACITY: ReasonCode
REASON_CODE_OUTPRIORITISED: ReasonCode
REASON_CODE_TIME_LIMIT: ReasonCode
REASON_CODE_LOCALITY: ReasonCode
REASON_CODE_MUTEX: ReasonCode
REASON_CODE_UNSUPPORTED: ReasonCode

class Gpu(_message.Message):
    __slots__ = ("id", "index", "uuid", "model", "memory_mib", "numa", "pcie_switch", "healthy")
    ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    NUMA_FIELD_NUMBER: _ClassVar[int]
    PCIE_SWITCH_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    id: str
    index: int
    uuid: str
    model: str
    memory_mib: int
    numa: int
    pcie_switch: str
    healthy: bool
    def __init__(self, id: _Optional[str] = ..., index: _Optional[int] = ..., uuid: _Optional[str] = ..., model: _Optional[str] = ..., memory_mib: _Optional[int] = ..., numa: _Optional[int] = ..., pcie_switch: _Optional[str] = ..., healthy: _Optional[bool] = ...) -> None: ...

class Nic(_message.Message):
    __slots__ = ("name", "numa", "pcie_switch", "bandwidth_gbps", "rdma", "rail", "healthy")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUMA_FIELD_NUMBER: _ClassVar[int]
    PCIE_SWITCH_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    RDMA_FIELD_NUMBER: _ClassVar[int]
    RAIL_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    name: str
    numa: int
    pcie_switch: str
    bandwidth_gbps: int
    rdma: bool
    rail: int
    healthy: bool
    def __init__(self, name: _Optional[str] = ..., numa: _Optional[int] = ..., pcie_switch: _Optional[str] = ..., bandwidth_gbps: _Optional[int] = ..., rdma: _Optional[bool] = ..., rail: _Optional[int] = ..., healthy: _Optional[bool] = ...) -> None: ...

class PcieSwitch(_message.Message):
    __slots__ = ("id", "parent", "kind", "numa")
    ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NUMA_FIELD_NUMBER: _ClassVar[int]
    id: str
    parent: str
    kind: SwitchKind
    numa: int
    def __init__(self, id: _Optional[str] = ..., parent: _Optional[str] = ..., kind: _Optional[_Union[SwitchKind, str]] = ..., numa: _Optional[int] = ...) -> None: ...

class NumaNode(_message.Message):
    __slots__ = ("id", "cpu_milli", "memory_mib")
    ID_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    id: int
    cpu_milli: int
    memory_mib: int
    def __init__(self, id: _Optional[int] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ...) -> None: ...

class NvLink(_message.Message):
    __slots__ = ("gpu_a", "gpu_b", "links")
    GPU_A_FIELD_NUMBER: _ClassVar[int]
    GPU_B_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    gpu_a: str
    gpu_b: str
    links: int
    def __init__(self, gpu_a: _Optional[str] = ..., gpu_b: _Optional[str] = ..., links: _Optional[int] = ...) -> None: ...

class GpuShare(_message.Message):
    __slots__ = ("gpu", "milli", "memory_mib")
    GPU_FIELD_NUMBER: _ClassVar[int]
    MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    gpu: str
    milli: int
    memory_mib: int
    def __init__(self, gpu: _Optional[str] = ..., milli: _Optional[int] = ..., memory_mib: _Optional[int] = ...) -> None: ...

class Allocation(_message.Message):
    __slots__ = ("owner", "gpus", "nics", "cpu_milli", "memory_mib", "gpu_shares", "mutex", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GPU_SHARES_FIELD_NUMBER: _ClassVar[int]
    MUTEX_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    owner: str
    gpus: _containers.RepeatedScalarFieldContainer[str]
    nics: _containers.RepeatedScalarFieldContainer[str]
    cpu_milli: int
    memory_mib: int
    gpu_shares: _containers.RepeatedCompositeFieldContainer[GpuShare]
    mutex: bool
    labels: _containers.ScalarMap[str, str]
    def __init__(self, owner: _Optional[str] = ..., gpus: _Optional[_Iterable[str]] = ..., nics: _Optional[_Iterable[str]] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., gpu_shares: _Optional[_Iterable[_Union[GpuShare, _Mapping]]] = ..., mutex: _Optional[bool] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("name", "labels", "cpu_milli", "memory_mib", "numa_nodes", "gpus", "nics", "pcie_switches", "nvlinks", "leaf", "nvlink_domain", "allocations", "schedulable")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    PCIE_SWITCHES_FIELD_NUMBER: _ClassVar[int]
    NVLINKS_FIELD_NUMBER: _ClassVar[int]
    LEAF_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    labels: _containers.ScalarMap[str, str]
    cpu_milli: int
    memory_mib: int
    numa_nodes: _containers.RepeatedCompositeFieldContainer[NumaNode]
    gpus: _containers.RepeatedCompositeFieldContainer[Gpu]
    nics: _containers.RepeatedCompositeFieldContainer[Nic]
    pcie_switches: _containers.RepeatedCompositeFieldContainer[PcieSwitch]
    nvlinks: _containers.RepeatedCompositeFieldContainer[NvLink]
    leaf: str
    nvlink_domain: str
    allocations: _containers.RepeatedCompositeFieldContainer[Allocation]
    schedulable: bool
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., numa_nodes: _Optional[_Iterable[_Union[NumaNode, _Mapping]]] = ..., gpus: _Optional[_Iterable[_Union[Gpu, _Mapping]]] = ..., nics: _Optional[_Iterable[_Union[Nic, _Mapping]]] = ..., pcie_switches: _Optional[_Iterable[_Union[PcieSwitch, _Mapping]]] = ..., nvlinks: _Optional[_Iterable[_Union[NvLink, _Mapping]]] = ..., leaf: _Optional[str] = ..., nvlink_domain: _Optional[str] = ..., allocations: _Optional[_Iterable[_Union[Allocation, _Mapping]]] = ..., schedulable: _Optional[bool] = ...) -> None: ...

class FabricSwitch(_message.Message):
    __slots__ = ("id", "tier", "parent")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    tier: int
    parent: str
    def __init__(self, id: _Optional[str] = ..., tier: _Optional[int] = ..., parent: _Optional[str] = ...) -> None: ...

class Inventory(_message.Message):
    __slots__ = ("nodes", "switches")
    NODES_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    switches: _containers.RepeatedCompositeFieldContainer[FabricSwitch]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., switches: _Optional[_Iterable[_Union[FabricSwitch, _Mapping]]] = ...) -> None: ...

class NicRequest(_message.Message):
    __slots__ = ("mode", "count")
    MODE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    mode: NicMode
    count: int
    def __init__(self, mode: _Optional[_Union[NicMode, str]] = ..., count: _Optional[int] = ...) -> None: ...

class Alignment(_message.Message):
    __slots__ = ("mode", "distance")
    MODE_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_FIELD_NUMBER: _ClassVar[int]
    mode: Requirement
    distance: Distance
    def __init__(self, mode: _Optional[_Union[Requirement, str]] = ..., distance: _Optional[_Union[Distance, str]] = ...) -> None: ...

class MemberShape(_message.Message):
    __slots__ = ("gpus", "gpu_models", "nics", "alignment", "numa", "nvlink", "cpu_milli", "memory_mib", "node_selector", "gpu_share", "avoid_gpu_models", "mutex")
    class NodeSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_MODELS_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    NUMA_FIELD_NUMBER: _ClassVar[int]
    NVLINK_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    NODE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    GPU_SHARE_FIELD_NUMBER: _ClassVar[int]
    AVOID_GPU_MODELS_FIELD_NUMBER: _ClassVar[int]
    MUTEX_FIELD_NUMBER: _ClassVar[int]
    gpus: int
    gpu_models: _containers.RepeatedScalarFieldContainer[str]
    nics: NicRequest
    alignment: Alignment
    numa: Requirement
    nvlink: Requirement
    cpu_milli: int
    memory_mib: int
    node_selector: _containers.ScalarMap[str, str]
    gpu_share: GpuShare
    avoid_gpu_models: _containers.RepeatedScalarFieldContainer[str]
    mutex: bool
    def __init__(self, gpus: _Optional[int] = ..., gpu_models: _Optional[_Iterable[str]] = ..., nics: _Optional[_Union[NicRequest, _Mapping]] = ..., alignment: _Optional[_Union[Alignment, _Mapping]] = ..., numa: _Optional[_Union[Requirement, str]] = ..., nvlink: _Optional[_Union[Requirement, str]] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., node_selector: _Optional[_Mapping[str, str]] = ..., gpu_share: _Optional[_Union[GpuShare, _Mapping]] = ..., avoid_gpu_models: _Optional[_Iterable[str]] = ..., mutex: _Optional[bool] = ...) -> None: ...

class Locality(_message.Message):
    __slots__ = ("mode", "highest_tier")
    MODE_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_TIER_FIELD_NUMBER: _ClassVar[int]
    mode: Requirement
    highest_tier: int
    def __init__(self, mode: _Optional[_Union[Requirement, str]] = ..., highest_tier: _Optional[int] = ...) -> None: ...

class RoleAffinity(_message.Message):
    __slots__ = ("role_a", "role_b", "mode", "highest_tier")
    ROLE_A_FIELD_NUMBER: _ClassVar[int]
    ROLE_B_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_TIER_FIELD_NUMBER: _ClassVar[int]
    role_a: str
    role_b: str
    mode: Requirement
    highest_tier: int
    def __init__(self, role_a: _Optional[str] = ..., role_b: _Optional[str] = ..., mode: _Optional[_Union[Requirement, str]] = ..., highest_tier: _Optional[int] = ...) -> None: ...

class AntiAffinity(_message.Message):
    __slots__ = ("labels", "scope")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    scope: Scope
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ..., scope: _Optional[_Union[Scope, str]] = ...) -> None: ...

class Role(_message.Message):
    __slots__ = ("name", "replicas", "min_replicas", "member", "locality")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MIN_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    LOCALITY_FIELD_NUMBER: _ClassVar[int]
    name: str
    replicas: int
    min_replicas: int
    member: MemberShape
    locality: Locality
    def __init__(self, name: _Optional[str] = ..., replicas: _Optional[int] = ..., min_replicas: _Optional[int] = ..., member: _Optional[_Union[MemberShape, _Mapping]] = ..., locality: _Optional[_Union[Locality, _Mapping]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "priority", "labels", "roles", "locality", "nvlink_domain", "rail_aligned", "role_affinity", "anti_affinity", "exclusive_nodes")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    LOCALITY_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    RAIL_ALIGNED_FIELD_NUMBER: _ClassVar[int]
    ROLE_AFFINITY_FIELD_NUMBER: _ClassVar[int]
    ANTI_AFFINITY_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_NODES_FIELD_NUMBER: _ClassVar[int]
    id: str
    priority: int
    labels: _containers.ScalarMap[str, str]
    roles: _containers.RepeatedCompositeFieldContainer[Role]
    locality: Locality
    nvlink_domain: Requirement
    rail_aligned: Requirement
    role_affinity: _containers.RepeatedCompositeFieldContainer[RoleAffinity]
    anti_affinity: _containers.RepeatedCompositeFieldContainer[AntiAffinity]
    exclusive_nodes: bool
    def __init__(self, id: _Optional[str] = ..., priority: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., roles: _Optional[_Iterable[_Union[Role, _Mapping]]] = ..., locality: _Optional[_Union[Locality, _Mapping]] = ..., nvlink_domain: _Optional[_Union[Requirement, str]] = ..., rail_aligned: _Optional[_Union[Requirement, str]] = ..., role_affinity: _Optional[_Iterable[_Union[RoleAffinity, _Mapping]]] = ..., anti_affinity: _Optional[_Iterable[_Union[AntiAffinity, _Mapping]]] = ..., exclusive_nodes: _Optional[bool] = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ("objective", "packing", "time_limit_s", "seed", "deterministic", "workers", "node_policy", "gpu_policy", "workload", "node_order", "batch_order", "order_shuffles", "priority_mode")
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    PACKING_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NODE_POLICY_FIELD_NUMBER: _ClassVar[int]
    GPU_POLICY_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    NODE_ORDER_FIELD_NUMBER: _ClassVar[int]
    BATCH_ORDER_FIELD_NUMBER: _ClassVar[int]
    ORDER_SHUFFLES_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_MODE_FIELD_NUMBER: _ClassVar[int]
    objective: _containers.RepeatedScalarFieldContainer[ObjectiveTier]
    packing: Packing
    time_limit_s: float
    seed: int
    deterministic: bool
    workers: int
    node_policy: str
    gpu_policy: str
    workload: _containers.RepeatedCompositeFieldContainer[WorkloadShape]
    node_order: _containers.RepeatedScalarFieldContainer[str]
    batch_order: BatchOrder
    order_shuffles: int
    priority_mode: PriorityMode
    def __init__(self, objective: _Optional[_Iterable[_Union[ObjectiveTier, str]]] = ..., packing: _Optional[_Union[Packing, str]] = ..., time_limit_s: _Optional[float] = ..., seed: _Optional[int] = ..., deterministic: _Optional[bool] = ..., workers: _Optional[int] = ..., node_policy: _Optional[str] = ..., gpu_policy: _Optional[str] = ..., workload: _Optional[_Iterable[_Union[WorkloadShape, _Mapping]]] = ..., node_order: _Optional[_Iterable[str]] = ..., batch_order: _Optional[_Union[BatchOrder, str]] = ..., order_shuffles: _Optional[int] = ..., priority_mode: _Optional[_Union[PriorityMode, str]] = ...) -> None: ...

class WorkloadShape(_message.Message):
    __slots__ = ("gpus", "milli", "popularity", "cpu_milli", "memory_mib", "gpu_models")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    MILLI_FIELD_NUMBER: _ClassVar[int]
    POPULARITY_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    GPU_MODELS_FIELD_NUMBER: _ClassVar[int]
    gpus: int
    milli: int
    popularity: float
    cpu_milli: int
    memory_mib: int
    gpu_models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, gpus: _Optional[int] = ..., milli: _Optional[int] = ..., popularity: _Optional[float] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., gpu_models: _Optional[_Iterable[str]] = ...) -> None: ...

class SolveRequest(_message.Message):
    __slots__ = ("request_id", "inventory", "jobs", "policy", "previous")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    inventory: Inventory
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    policy: Policy
    previous: _containers.RepeatedCompositeFieldContainer[JobResult]
    def __init__(self, request_id: _Optional[str] = ..., inventory: _Optional[_Union[Inventory, _Mapping]] = ..., jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ..., previous: _Optional[_Iterable[_Union[JobResult, _Mapping]]] = ...) -> None: ...

class MemberPlacement(_message.Message):
    __slots__ = ("role", "index", "node", "gpus", "nics", "numa", "aligned", "gpu_shares", "pairs")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    NUMA_FIELD_NUMBER: _ClassVar[int]
    ALIGNED_FIELD_NUMBER: _ClassVar[int]
    GPU_SHARES_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    role: str
    index: int
    node: str
    gpus: _containers.RepeatedScalarFieldContainer[str]
    nics: _containers.RepeatedScalarFieldContainer[str]
    numa: int
    aligned: bool
    gpu_shares: _containers.RepeatedCompositeFieldContainer[GpuShare]
    pairs: _containers.RepeatedCompositeFieldContainer[GpuNicPair]
    def __init__(self, role: _Optional[str] = ..., index: _Optional[int] = ..., node: _Optional[str] = ..., gpus: _Optional[_Iterable[str]] = ..., nics: _Optional[_Iterable[str]] = ..., numa: _Optional[int] = ..., aligned: _Optional[bool] = ..., gpu_shares: _Optional[_Iterable[_Union[GpuShare, _Mapping]]] = ..., pairs: _Optional[_Iterable[_Union[GpuNicPair, _Mapping]]] = ...) -> None: ...

class GpuNicPair(_message.Message):
    __slots__ = ("gpu", "nic", "distance")
    GPU_FIELD_NUMBER: _ClassVar[int]
    NIC_FIELD_NUMBER: _ClassVar[int]
    DISTANCE_FIELD_NUMBER: _ClassVar[int]
    gpu: str
    nic: str
    distance: Distance
    def __init__(self, gpu: _Optional[str] = ..., nic: _Optional[str] = ..., distance: _Optional[_Union[Distance, str]] = ...) -> None: ...

class Reason(_message.Message):
    __slots__ = ("code", "message", "relaxation")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RELAXATION_FIELD_NUMBER: _ClassVar[int]
    code: ReasonCode
    message: str
    relaxation: str
    def __init__(self, code: _Optional[_Union[ReasonCode, str]] = ..., message: _Optional[str] = ..., relaxation: _Optional[str] = ...) -> None: ...

class JobResult(_message.Message):
    __slots__ = ("job_id", "placed", "members", "reason", "locality_tier", "leaves_spanned", "nvlink_domains_spanned", "rails", "rules_held")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PLACED_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LOCALITY_TIER_FIELD_NUMBER: _ClassVar[int]
    LEAVES_SPANNED_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAINS_SPANNED_FIELD_NUMBER: _ClassVar[int]
    RAILS_FIELD_NUMBER: _ClassVar[int]
    RULES_HELD_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    placed: bool
    members: _containers.RepeatedCompositeFieldContainer[MemberPlacement]
    reason: Reason
    locality_tier: int
    leaves_spanned: int
    nvlink_domains_spanned: int
    rails: _containers.RepeatedScalarFieldContainer[int]
    rules_held: bool
    def __init__(self, job_id: _Optional[str] = ..., placed: _Optional[bool] = ..., members: _Optional[_Iterable[_Union[MemberPlacement, _Mapping]]] = ..., reason: _Optional[_Union[Reason, _Mapping]] = ..., locality_tier: _Optional[int] = ..., leaves_spanned: _Optional[int] = ..., nvlink_domains_spanned: _Optional[int] = ..., rails: _Optional[_Iterable[int]] = ..., rules_held: _Optional[bool] = ...) -> None: ...

class TierValue(_message.Message):
    __slots__ = ("tier", "value", "bound", "optimal", "name", "ms")
    TIER_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    OPTIMAL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MS_FIELD_NUMBER: _ClassVar[int]
    tier: ObjectiveTier
    value: float
    bound: float
    optimal: bool
    name: str
    ms: float
    def __init__(self, tier: _Optional[_Union[ObjectiveTier, str]] = ..., value: _Optional[float] = ..., bound: _Optional[float] = ..., optimal: _Optional[bool] = ..., name: _Optional[str] = ..., ms: _Optional[float] = ...) -> None: ...

class StageTiming(_message.Message):
    __slots__ = ("stage", "ms")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    MS_FIELD_NUMBER: _ClassVar[int]
    stage: str
    ms: float
    def __init__(self, stage: _Optional[str] = ..., ms: _Optional[float] = ...) -> None: ...

class ModelSize(_message.Message):
    __slots__ = ("variables", "constraints", "node_classes", "configurations", "candidate_nodes")
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    NODE_CLASSES_FIELD_NUMBER: _ClassVar[int]
    CONFIGURATIONS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_NODES_FIELD_NUMBER: _ClassVar[int]
    variables: int
    constraints: int
    node_classes: int
    configurations: int
    candidate_nodes: int
    def __init__(self, variables: _Optional[int] = ..., constraints: _Optional[int] = ..., node_classes: _Optional[int] = ..., configurations: _Optional[int] = ..., candidate_nodes: _Optional[int] = ...) -> None: ...

class ClusterMetrics(_message.Message):
    __slots__ = ("gpus_total", "gpus_used_before", "gpus_used_after", "nodes_fully_free_before", "nodes_fully_free_after", "stranded_gpus_before", "stranded_gpus_after", "fragmentation_before", "fragmentation_after")
    GPUS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GPUS_USED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    GPUS_USED_AFTER_FIELD_NUMBER: _ClassVar[int]
    NODES_FULLY_FREE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    NODES_FULLY_FREE_AFTER_FIELD_NUMBER: _ClassVar[int]
    STRANDED_GPUS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    STRANDED_GPUS_AFTER_FIELD_NUMBER: _ClassVar[int]
    FRAGMENTATION_BEFORE_FIELD_NUMBER: _ClassVar[int]
    FRAGMENTATION_AFTER_FIELD_NUMBER: _ClassVar[int]
    gpus_total: int
    gpus_used_before: int
    gpus_used_after: int
    nodes_fully_free_before: int
    nodes_fully_free_after: int
    stranded_gpus_before: float
    stranded_gpus_after: float
    fragmentation_before: float
    fragmentation_after: float
    def __init__(self, gpus_total: _Optional[int] = ..., gpus_used_before: _Optional[int] = ..., gpus_used_after: _Optional[int] = ..., nodes_fully_free_before: _Optional[int] = ..., nodes_fully_free_after: _Optional[int] = ..., stranded_gpus_before: _Optional[float] = ..., stranded_gpus_after: _Optional[float] = ..., fragmentation_before: _Optional[float] = ..., fragmentation_after: _Optional[float] = ...) -> None: ...

class SolveResponse(_message.Message):
    __slots__ = ("request_id", "status", "jobs", "objectives", "gap", "timings", "model_size", "metrics", "plan_source")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVES_FIELD_NUMBER: _ClassVar[int]
    GAP_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    MODEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    PLAN_SOURCE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    status: SolveStatus
    jobs: _containers.RepeatedCompositeFieldContainer[JobResult]
    objectives: _containers.RepeatedCompositeFieldContainer[TierValue]
    gap: float
    timings: _containers.RepeatedCompositeFieldContainer[StageTiming]
    model_size: ModelSize
    metrics: ClusterMetrics
    plan_source: str
    def __init__(self, request_id: _Optional[str] = ..., status: _Optional[_Union[SolveStatus, str]] = ..., jobs: _Optional[_Iterable[_Union[JobResult, _Mapping]]] = ..., objectives: _Optional[_Iterable[_Union[TierValue, _Mapping]]] = ..., gap: _Optional[float] = ..., timings: _Optional[_Iterable[_Union[StageTiming, _Mapping]]] = ..., model_size: _Optional[_Union[ModelSize, _Mapping]] = ..., metrics: _Optional[_Union[ClusterMetrics, _Mapping]] = ..., plan_source: _Optional[str] = ...) -> None: ...
