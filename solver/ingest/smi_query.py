"""``nvidia-smi -q`` (text) and ``nvidia-smi -q -x`` (XML) of one node: its GPUs and its NVLink domain.

On multi-node NVLink systems (GB200/GB300 NVL72) Fabric Manager registers every GPU with the NVLink
fabric, and ``nvidia-smi -q`` prints, per GPU::

        Fabric
            State                             : Completed
            Status                            : Success
            CliqueId                          : 32766
            ClusterUUID                       : 6a130f54-faaa-4b8f-847f-be44ab70f917

(XML: ``<fabric><state>``, ``<status>``, ``<cliqueId>``, ``<clusterUuid>``). GPUs of one clique reach
each other over NVLink; the node's NVLink domain is ``<ClusterUUID>.<CliqueId>`` — exactly the value
GPU Feature Discovery puts in the ``nvidia.com/gpu.clique`` label, so the two sources compare as text.
A GPU whose registration is not ``Completed``/``Success``, or whose ClusterUUID is all zeros, is in
no domain; two GPUs of one node in different cliques is an error naming both.

The GPUs themselves (``GPU<k>`` in the order printed, which is nvidia-smi's index order; UUID,
product name, framebuffer size) are a device set without NICs or PCIe tree: a capture of
``nvidia-smi topo -m`` ranks above it for those.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import Gpu, Node
from solver.ingest.parts import NodeFacts

_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_MIB = re.compile(r"^\s*(\d+)\s*MiB\s*$")
_ZERO_UUID = re.compile(r"^[0-]*$")


@dataclass(frozen=True)
class _SmiGpu:
    where: str  # FILE:LINE or FILE:gpu[k]
    bus_id: str
    fields: dict[str, str]  # "Product Name", "GPU UUID", "FB Memory Usage/Total", "Fabric/State", ...


def read_query(path: Path, node: str) -> NodeFacts:
    """One node's facts from its ``nvidia-smi -q`` output (XML if it starts with ``<``)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise InvalidRequest([Problem(path=str(path), message=f"cannot read: {err.strerror}")]) from None
    gpus = _xml_gpus(text, str(path)) if text.lstrip().startswith("<") else _text_gpus(text, str(path))
    if not gpus:
        raise InvalidRequest([Problem(path=str(path), message="no GPU sections: not nvidia-smi -q output?")])
    devices = Node(
        name=node,
        gpus=tuple(
            Gpu(
                id=f"GPU{k}",
                index=k,
                uuid=g.fields.get("GPU UUID", ""),
                model=g.fields.get("Product Name", "").removeprefix("NVIDIA "),
                memory_mib=_mib(g.fields.get("FB Memory Usage/Total", "")),
            )
            for k, g in enumerate(gpus)
        ),
    )
    domain, field = _domain(gpus, node)
    models = {g.model for g in devices.gpus if g.model}
    return NodeFacts(
        where=str(path),
        devices=devices,
        gpu_count=len(gpus),
        gpu_model=min(models) if models else None,
        nvlink_domain=domain,
        nvlink_field=field,
    )


def _domain(gpus: list[_SmiGpu], node: str) -> tuple[str | None, str]:
    """The node's ``ClusterUUID.CliqueId``; None when no GPU is registered with a fabric."""
    domains: dict[str, _SmiGpu] = {}
    for k, gpu in enumerate(gpus):
        f = gpu.fields
        state, status = f.get("Fabric/State", ""), f.get("Fabric/Status", "")
        cluster, clique = f.get("Fabric/ClusterUUID", ""), f.get("Fabric/CliqueId", "")
        if (
            state != "Completed"
            or status != "Success"
            or not cluster
            or _ZERO_UUID.match(cluster)
            or not clique
        ):
            continue
        if not clique.isdigit():
            raise InvalidRequest(
                [Problem(path=f"{gpu.where}: Fabric/CliqueId", message=f"not a number: {clique!r}")]
            )
        domain = f"{cluster}.{clique}"
        other = next(iter(domains.values()), None)
        if other is not None and domain not in domains:
            message = (
                f"node {node}: GPU{k} is in NVLink clique {domain} but {other.bus_id} in "
                f"{next(iter(domains))}: one node's GPUs must share one clique"
            )
            raise InvalidRequest([Problem(path=f"{gpu.where}: Fabric/ClusterUUID", message=message)])
        domains.setdefault(domain, gpu)
    if not domains:
        return None, ""
    return next(iter(domains)), "Fabric ClusterUUID.CliqueId"


def _mib(text: str) -> int:
    match = _MIB.match(text)
    return int(match[1]) if match else 0


# --------------------------------------------------------------------------- XML


_XML_FIELDS = {
    "product_name": "Product Name",
    "uuid": "GPU UUID",
    "fb_memory_usage/total": "FB Memory Usage/Total",
    "fabric/state": "Fabric/State",
    "fabric/status": "Fabric/Status",
    "fabric/cliqueId": "Fabric/CliqueId",
    "fabric/clusterUuid": "Fabric/ClusterUUID",
}


def _xml_gpus(text: str, source: str) -> list[_SmiGpu]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        line, column = err.position
        raise InvalidRequest(
            [Problem(path=f"{source}:{line}:{column + 1}", message=f"not XML: {err}")]
        ) from None
    if root.tag != "nvidia_smi_log":
        message = f"expected <nvidia_smi_log> (nvidia-smi -q -x), got <{root.tag}>"
        raise InvalidRequest([Problem(path=source, message=message)])
    gpus: list[_SmiGpu] = []
    for k, element in enumerate(root.findall("gpu")):
        fields = {
            name: (element.findtext(tag) or "").strip()
            for tag, name in _XML_FIELDS.items()
            if element.find(tag) is not None
        }
        gpus.append(_SmiGpu(where=f"{source}:gpu[{k}]", bus_id=element.get("id", ""), fields=fields))
    return gpus


# --------------------------------------------------------------------------- text


def _text_gpus(text: str, source: str) -> list[_SmiGpu]:
    """The text form: ``GPU <bus id>`` at column 0, then ``Key : Value`` lines and headings nested by
    indentation (four spaces a level); a field is named by its headings, ``Fabric/State``."""
    gpus: list[_SmiGpu] = []
    fields: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, heading) of the open headings
    start, bus = 0, ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        header = _GPU_HEADER.match(line)
        if header:
            if bus:
                gpus.append(_SmiGpu(where=f"{source}:{start}", bus_id=bus, fields=fields))
            fields, stack, start, bus = {}, [], number, header[1]
            continue
        if not bus or not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:  # the log's own lines after the GPUs (none today) end the GPU
            gpus.append(_SmiGpu(where=f"{source}:{start}", bus_id=bus, fields=fields))
            fields, stack, bus = {}, [], ""
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, colon, value = line.strip().partition(":")
        if not colon:
            stack.append((indent, key.strip()))
            continue
        # The GPU's own fields sit one level in; a heading's fields deeper, named by the headings.
        name = "/".join([h for _, h in stack] + [key.strip()])
        fields.setdefault(name, value.strip())
    if bus:
        gpus.append(_SmiGpu(where=f"{source}:{start}", bus_id=bus, fields=fields))
    return gpus
