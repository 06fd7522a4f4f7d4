"""The Alibaba "openb" GPU trace (cluster-trace-gpu-v2023) as FGD's simulator reads it, and its conversion
to this project's domain.

Any node list with the columns ``sn,cpu_milli,memory_mib,gpu,model`` and any pod list with
``name,cpu_milli,memory_mib,num_gpu,gpu_milli`` (other columns ignored) is accepted, so every variant
the trace publishes loads as published: ``gpu_spec`` (the GPU models a pod accepts) is optional, and
``openb_pod_list_multigpu50.csv`` has none (every pod takes any model), as FGD's simulator reads it.
``gpu_milli`` is per GPU: a sharing pod asks ``num_gpu`` = 1 and ``gpu_milli`` < 1000; a pod with
``num_gpu`` = n > 0 and ``gpu_milli`` = 1000 asks for n whole GPUs.

Two views of the same rows: ``PodSpec``/``ClusterState`` (``solver.baselines.sharing``) for the fast replay,
and ``Inventory``/``Job`` domain objects for anything that takes a ``SolveRequest`` (the solver included).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from solver.baselines.fragmentation import Workload, typical_pods
from solver.baselines.gorand import OPENB_DIR
from solver.baselines.sharing import MILLI, ClusterState, PodSpec
from solver.domain.model import Gpu, GpuShare, Inventory, Job, MemberShape, Node, Role

DATA = OPENB_DIR
DEFAULT_NODES = DATA / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = DATA / "openb_pod_list_default.csv"
# Every pod list published with the node list, by the name its file carries (SOURCE.md there).
VARIANTS = {
    "default": DEFAULT_PODS,
    **{
        name: DATA / "variants" / f"openb_pod_list_{name}.csv"
        for name in ("multigpu50", "gpuspec33", "gpushare100", "cpu250")
    },
}
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
# Required; gpu_spec (the GPU models a pod accepts) is read when present.
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
GPU_MODEL_LABEL = "gpu.model"


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class PodRow:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU
    gpu_spec: tuple[str, ...] = ()  # accepted GPU models; empty = any

    @property
    def total_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    def spec(self) -> PodSpec:
        return PodSpec(
            cpu=self.cpu_milli,
            memory=self.memory_mib,
            gpus=self.num_gpu,
            milli=self.gpu_milli if self.num_gpu else 0,
            models=self.gpu_spec,
            name=self.name,
        )

    def renamed(self, name: str) -> PodRow:
        return PodRow(name, self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.gpu_spec)


def _rows(path: Path, columns: Sequence[str]) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(columns)}")
        return list(reader)


def _int(row: dict[str, str], column: str, path: Path, line: int) -> int:
    text = (row.get(column) or "").strip()
    try:
        return int(float(text)) if text else 0
    except ValueError:
        raise ValueError(f"{path}:{line}: column {column} is {text!r}, not a number") from None


def _model(text: str | None) -> str:
    text = (text or "").strip()
    return "" if text.lower() in ("", "nan", "none") else text


def load_nodes(path: Path = DEFAULT_NODES) -> tuple[NodeRow, ...]:
    """Every row of a node list (CSV line numbers in errors count the header as line 1)."""
    rows = _rows(path, NODE_COLUMNS)
    return tuple(
        NodeRow(
            name=row["sn"],
            cpu_milli=_int(row, "cpu_milli", path, k + 2),
            memory_mib=_int(row, "memory_mib", path, k + 2),
            gpus=_int(row, "gpu", path, k + 2),
            model=_model(row["model"]),
        )
        for k, row in enumerate(rows)
    )


def load_pods(path: Path = DEFAULT_PODS) -> tuple[PodRow, ...]:
    rows = _rows(path, POD_COLUMNS)
    pods = []
    for k, row in enumerate(rows):
        spec = _model(row.get("gpu_spec"))
        pods.append(
            PodRow(
                name=row["name"],
                cpu_milli=_int(row, "cpu_milli", path, k + 2),
                memory_mib=_int(row, "memory_mib", path, k + 2),
                num_gpu=_int(row, "num_gpu", path, k + 2),
                gpu_milli=_int(row, "gpu_milli", path, k + 2),
                gpu_spec=tuple(m for m in spec.split("|") if m) if spec else (),
            )
        )
    return tuple(pods)


# --------------------------------------------------------------------------- views


def workload(pods: Iterable[PodRow], coverage: float = 0.95) -> Workload:
    """FGD's workload profile of a pod list: the commonest (cpu, milli, gpus, models) shapes covering
    ``coverage`` of the pods, CPU-only pods included, weighted by how often they occur."""
    return typical_pods((p.spec().shape for p in pods), coverage=coverage, cpu_only=True)


class ReplayState(ClusterState):
    """The fast replay state, which also keeps each node's CPU and memory in total (the trace's nodes
    start idle): what a solver request's nodes say of themselves, free or not."""

    def __init__(self, nodes: Sequence[NodeRow], ranks: Sequence[int] | None = None) -> None:
        super().__init__(
            names=[n.name for n in nodes],
            cpu=[n.cpu_milli for n in nodes],
            memory=[n.memory_mib for n in nodes],
            gpu_free=[[MILLI] * n.gpus for n in nodes],
            models=[n.model for n in nodes],
            ranks=ranks,
        )
        self.cpu_total = self.cpu_left.copy()
        self.memory_total = self.mem_left.copy()


def cluster_state(nodes: Sequence[NodeRow], ranks: Sequence[int] | None = None) -> ReplayState:
    """The fast replay state of idle nodes."""
    return ReplayState(nodes, ranks)


def domain_node(row: NodeRow) -> Node:
    """A node per CSV row: its CPU, memory and GPUs (``GPU0``..) of one model; no NICs or PCIe tree,
    which the trace does not describe."""
    return Node(
        name=row.name,
        labels={GPU_MODEL_LABEL: row.model} if row.model else {},
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        gpus=tuple(Gpu(id=f"GPU{i}", index=i, model=row.model) for i in range(row.gpus)),
    )


def inventory(nodes: Sequence[NodeRow]) -> Inventory:
    return Inventory(nodes=tuple(domain_node(n) for n in nodes))


def member(pod: PodRow) -> MemberShape:
    """One pod as a member: a GPU share, whole GPUs, or CPU and memory only."""
    share = pod.num_gpu == 1 and pod.gpu_milli < MILLI
    return MemberShape(
        gpus=0 if share else pod.num_gpu,
        gpu_share=GpuShare(milli=pod.gpu_milli) if share else None,
        gpu_models=pod.gpu_spec,
        cpu_milli=pod.cpu_milli,
        memory_mib=pod.memory_mib,
    )


def job(pod: PodRow) -> Job:
    return Job(id=pod.name, roles=(Role(name="pod", replicas=1, member=member(pod)),))
