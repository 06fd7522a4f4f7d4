"""Generate the gres.conf lines and slurm.conf ``Gres=`` that type every GPU and NIC by its switch
group (see :mod:`adapters.slurm.nodetypes`), so that a plan can be handed to Slurm as typed GRES
counts and Slurm's own allocation lands on the planned switch groups.

Per node type (nodes sharing one capture) the output is, in IDX order:

* one ``Name=gpu Type=swK File=… Cores=… Links=…`` line per GPU (``Links=`` describes one device,
  so one device per line); ``Links`` is the GPU's row of NVLink counts in IDX order, ``-1`` for itself;
* one ``Name=nic Type=swK File=… Cores=…`` line per group with NICs;
* ``Gres=gpu:sw0:2,…,nic:sw0:2,…`` for the node line of slurm.conf.

``Cores=`` is the socket of the group's NUMA node when the node's socket/core counts are given
(NUMA nodes are spread evenly over sockets, as NPS settings do); otherwise it is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.slurm.hostlist import compress
from adapters.slurm.nodetypes import NodeType

DEFAULT_GPU_FILE = "/dev/nvidia{index}"
DEFAULT_NIC_FILE = "/dev/infiniband/uverbs{index}"


@dataclass(frozen=True)
class Sockets:
    sockets: int
    cores_per_socket: int

    def cores_of_numa(self, numa: int | None, numa_count: int) -> str:
        """The cores of the NUMA node's socket; every core for a device of unknown NUMA node (Slurm
        wants Cores= on all records of a GRES or on none)."""
        if numa is None or numa_count <= 0:
            return f"0-{self.sockets * self.cores_per_socket - 1}"
        socket = min(self.sockets - 1, numa * self.sockets // numa_count)
        first = socket * self.cores_per_socket
        return f"{first}-{first + self.cores_per_socket - 1}"


def _numa_count(node_type: NodeType) -> int:
    seen = [g.numa for g in node_type.node.gpus if g.numa is not None]
    seen += [n.numa for n in node_type.node.nics if n.numa is not None]
    highest = max(seen, default=-1) + 1
    # NUMA ids come in powers of two per socket layout (2, 4, 8 …); round up to one.
    count = 1
    while count < highest:
        count *= 2
    return count if seen else 0


def nic_number(node_type: NodeType, name: str) -> int:
    """The NIC's column number in the capture (``NIC<k>``): what its device file is numbered by."""
    return [n.name for n in node_type.node.nics].index(name)


def gres_string(node_type: NodeType) -> str:
    parts = [f"gpu:{g.type}:{len(g.gpus)}" for g in node_type.groups if g.gpus]
    parts += [f"nic:{g.type}:{len(g.nics)}" for g in node_type.groups if g.nics]
    return ",".join(parts)


def gres_conf_lines(
    node_type: NodeType,
    nodes: list[str],
    *,
    gpu_file: str = DEFAULT_GPU_FILE,
    nic_file: str = DEFAULT_NIC_FILE,
    sockets: Sockets | None = None,
) -> list[str]:
    """The gres.conf lines for ``nodes`` (all of this node type)."""
    hostlist = compress(nodes, sort=True)
    gpu_index = {g.id: g.index for g in node_type.node.gpus}
    order = node_type.gpu_order()
    links = {(lk.gpu_a, lk.gpu_b): lk.links for lk in node_type.node.nvlinks}
    numa_count = _numa_count(node_type)
    lines = [
        f"# {node_type.source}: {len(order)} GPUs, {len(node_type.nic_order())} NICs, "
        f"groups {', '.join(g.type for g in node_type.groups)}"
    ]
    for group in node_type.groups:
        cores = sockets.cores_of_numa(group.numa, numa_count) if sockets else ""
        cores_field = f" Cores={cores}" if cores else ""
        for gpu in group.gpus:
            row = [
                "-1" if other == gpu else str(links.get((gpu, other)) or links.get((other, gpu)) or 0)
                for other in order
            ]
            lines.append(
                f"NodeName={hostlist} Name=gpu Type={group.type} "
                f"File={gpu_file.format(index=gpu_index[gpu])}{cores_field} Links={','.join(row)}"
            )
    for group in node_type.groups:
        if not group.nics:
            continue
        cores = sockets.cores_of_numa(group.numa, numa_count) if sockets else ""
        cores_field = f" Cores={cores}" if cores else ""
        files = ",".join(nic_file.format(index=nic_number(node_type, n)) for n in group.nics)
        lines.append(f"NodeName={hostlist} Name=nic Type={group.type} File={files}{cores_field}")
    return lines
