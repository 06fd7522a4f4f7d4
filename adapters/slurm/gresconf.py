"""Generate the gres.conf lines and slurm.conf ``Gres=`` that type every GPU and NIC by its switch
group (see :mod:`adapters.slurm.nodetypes`), so that a plan can be handed to Slurm as typed GRES
counts and Slurm's own allocation lands on the planned switch groups.

Per node type (nodes sharing one capture) the output is, in IDX order:

* one ``Name=gpu Type=swK File=… Cores=… Links=…`` line per GPU, in device-file order (Slurm 22.05
  numbers IDX by file; see :meth:`NodeType.gpu_order`); ``Links`` is the GPU's row of NVLink counts in
  that order, ``-1`` for itself;
* one ``Name=nic Type=swK File=… Cores=…`` line per group, groups in order (gres/nic numbers IDX
  by line);
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


def gres_string(node_type: NodeType, *, typed: bool = True) -> str:
    if not typed:
        gpus, nics = len(node_type.node.gpus), len(node_type.node.nics)
        return ",".join([f"gpu:{gpus}"] * bool(gpus) + [f"nic:{nics}"] * bool(nics))
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
    typed: bool = True,
) -> list[str]:
    """The gres.conf lines for ``nodes`` (all of this node type). ``typed=False``: the same devices,
    order, ``Cores=`` and ``Links=`` without ``Type=`` (plain ``gpu:8``, to compare against).
    Raises ValueError when the node's switch groups cannot be typed (``typed_layout_problem``)."""
    problem = node_type.typed_layout_problem() if typed else None
    if problem:
        raise ValueError(problem)
    hostlist = compress(nodes, sort=True)
    gpu_index = {g.id: g.index for g in node_type.node.gpus}
    order = node_type.gpu_order()
    links = {(lk.gpu_a, lk.gpu_b): lk.links for lk in node_type.node.nvlinks}
    numa_count = _numa_count(node_type)

    def type_field(gtype: str) -> str:
        return f" Type={gtype}" if typed else ""

    lines = [
        f"# {node_type.source}: {len(order)} GPUs, {len(node_type.nic_order())} NICs, "
        f"groups {', '.join(g.type for g in node_type.groups)}"
    ]
    group_of = {d: g for g in node_type.groups for d in (*g.gpus, *g.nics)}

    def cores_field(device: str) -> str:
        cores = sockets.cores_of_numa(group_of[device].numa, numa_count) if sockets else ""
        return f" Cores={cores}" if cores else ""

    # One line per device, in device-file order: Slurm 22.05 numbers IDX by file, and gives the
    # types of the lines in line order (see NodeType.gpu_order).
    for gpu in order:
        row = [
            "-1" if other == gpu else str(links.get((gpu, other)) or links.get((other, gpu)) or 0)
            for other in order
        ]
        lines.append(
            f"NodeName={hostlist} Name=gpu{type_field(group_of[gpu].type)} "
            f"File={gpu_file.format(index=gpu_index[gpu])}{cores_field(gpu)} Links={','.join(row)}"
        )
    for group in node_type.groups:  # gres/nic keeps line order: one line per group, groups in order
        if group.nics:
            files = ",".join(nic_file.format(index=nic_number(node_type, n)) for n in group.nics)
            cores = cores_field(group.nics[0])
            lines.append(f"NodeName={hostlist} Name=nic{type_field(group.type)} File={files}{cores}")
    return lines
