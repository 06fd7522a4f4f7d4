"""``topoplace node-report``: what a node's DaemonSet pod publishes as ``topoplace.io/topology``.

Input is what the node itself can print: ``nvidia-smi topo -m`` (PCIe tree, NUMA, NVLink, NIC
names from its legend) and, optionally, ``nvidia-smi --query-gpu=index,uuid,name,memory.total
--format=csv,noheader,nounits`` (UUIDs, model, memory — the matrix prints none of them). UUIDs are
what ties the topology to HAMi's and Volcano's device registers and to the device plugin.
"""

from __future__ import annotations

from adapters.volcano import annotations as ann
from solver.domain.model import Node
from solver.ingest.nvidia_smi import parse_topology


def report(
    topo_text: str, node: str, *, gpu_csv: str = "", source: str = "nvidia-smi topo -m", nic_gbps: int = 0
) -> Node:
    """The node as the topology annotation carries it. Raises ``InvalidRequest`` for a matrix that
    cannot be read and :class:`~adapters.volcano.annotations.AnnotationError` for a bad GPU list."""
    parsed = parse_topology(topo_text, node=node, source=source)
    rows = ann.parse_gpu_csv(gpu_csv) if gpu_csv else {}
    gpus = []
    for gpu in parsed.gpus:
        uuid, model, memory = rows.get(gpu.index, ("", "", 0))
        gpus.append(
            gpu.model_copy(
                update={"uuid": uuid, "model": model or gpu.model, "memory_mib": memory or gpu.memory_mib}
            )
        )
    nics = (
        tuple(n.model_copy(update={"bandwidth_gbps": nic_gbps}) for n in parsed.nics)
        if nic_gbps
        else parsed.nics
    )
    return parsed.model_copy(update={"gpus": tuple(gpus), "nics": nics})


def annotation_patch(node: Node) -> dict[str, dict[str, dict[str, str]]]:
    """The merge patch that publishes ``node``'s topology on its Node object."""
    return {"metadata": {"annotations": {ann.TOPOLOGY: ann.topology_value(node)}}}
