"""One cluster inventory from any mix of published sources, with a stated precedence and a report.

``topoplace ingest cluster CLUSTER.yaml`` reads a small file naming the sources (docs/ingest.md)::

    nodes: nodes.json                     # kubectl get nodes -o json|yaml: the cluster is these nodes
    captures:                             # nvidia-smi topo -m, one per node type (as `ingest assemble`)
      - {capture: gb200-tray.txt, nodes: "gb200-*", gpu_model: GB200, rails: true}
    nvidia_smi_q: {gb200-r1-01: smi/gb200-r1-01.xml}   # or a glob, node = file stem: "smi/*.txt"
    resource_slices: [resourceslices.json]             # DRA ResourceSlices
    topology: {file: topology.yaml, name: default}     # a Kueue or KAI Topology
    slurm_topology: {file: topology.yaml, name: blocks, blocks: nvlink}  # through the Slurm adapter

**Precedence** — for each fact of a node, the first source in this order that states it wins; every
other source that states it differently is reported as a disagreement (nothing is silently merged):

1. per-node device captures: ``nvidia-smi topo -m`` (devices, PCIe tree, NVLink), then ``nvidia-smi
   -q`` (GPUs and the fabric clique), then DRA ResourceSlices (GPUs, NICs, PCIe roots);
2. the node list (size, labels, schedulable, GPU count);
3. fabric sources: GPU Feature Discovery's clique label, topograph's labels, the Kueue/KAI
   ``Topology``, Slurm's topology.

GPU UUIDs the winning device set lacks are filled from lower device sources by GPU id. Switch paths
and NVLink domains are compared as *groupings* (which nodes share a leaf, a domain), so sources that
name the same rack differently agree.

Re-reading is incremental (:class:`ClusterReader`): a source file whose bytes did not change is not
parsed again, and a node whose facts did not change keeps its ``Node`` object, so its wire bytes — the
service's node-cache key — are unchanged and only the nodes that moved are new to the service.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import FabricSwitch, Inventory, Node, SolveRequest
from solver.domain.topology import gpu_nic_pairing
from solver.domain.validate import validate
from solver.ingest.assemble import expand_names
from solver.ingest.dra import read_slices
from solver.ingest.files import _load_yaml, _read_text
from solver.ingest.kube import read_nodes
from solver.ingest.kueue import read_topology
from solver.ingest.nvidia_smi import capture_metadata, parse_topology
from solver.ingest.parts import NodeFacts, Parts
from solver.ingest.smi_query import read_query

FABRIC_GROUP = "topoplace.fabric_sources"  # readers other packages offer (the Slurm adapter's topology)
KEYS = ("nodes", "captures", "nvidia_smi_q", "resource_slices", "topology", "slurm_topology")
CAPTURE_KEYS = {
    "capture",
    "nodes",
    "gpu_model",
    "gpu_memory_mib",
    "cpus",
    "cpu_milli",
    "memory_gib",
    "memory_mib",
    "rails",
}
NUMBERS = ("_mib", "_gib", "cpus", "_milli")
# The stated precedence, highest first (module docstring); equal ranks keep the file's order.
RANK = {
    "nvidia-smi topo -m": 0,
    "nvidia-smi -q": 1,
    "DRA ResourceSlices": 2,
    "kubernetes nodes": 3,
    "GPU Feature Discovery labels": 4,
    "topograph labels": 5,
    "Kueue topology": 6,
    "KAI topology": 6,
    "Slurm topology": 7,
}
FACTS = (
    "devices",
    "nvlink_domain",
    "path",
    "labels",
    "cpu_milli",
    "memory_mib",
    "schedulable",
    "gpu_count",
    "gpu_model",
)


@dataclass
class Report:
    """What each source contributed, where they disagree, and what else was noticed."""

    contributions: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)  # nodes built anew by this read (all, the first time)

    def render(self) -> str:
        lines = ["sources (highest precedence first):", *(f"  {c}" for c in self.contributions)]
        lines.append(f"disagreements: {len(self.disagreements) or 'none'}")
        lines += [f"  {d}" for d in self.disagreements]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def assemble_cluster(path: Path) -> tuple[Inventory, Report]:
    """The inventory the sources named at ``path`` describe, and the report (one full read)."""
    return ClusterReader(path).read()


class ClusterReader:
    """Reads a cluster file again and again, parsing only changed sources, rebuilding only changed nodes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._parsed: dict[tuple[str, str], tuple[str, list[Parts]]] = {}  # (reader, file) → (sha, parts)
        self._built: dict[str, tuple[tuple[Any, ...], Node]] = {}  # node → (its inputs, the Node)

    def read(self) -> tuple[Inventory, Report]:
        config = _load_yaml(_read_text(self.path), str(self.path))
        if not isinstance(config, dict):
            raise InvalidRequest(
                [Problem(path=str(self.path), message=f"expected a mapping of sources: {', '.join(KEYS)}")]
            )
        problems = [
            Problem(path=f"{self.path}:{key}", message=f"unknown source; known: {', '.join(KEYS)}")
            for key in config
            if key not in KEYS
        ]
        if problems:
            raise InvalidRequest(problems)
        parts = self._sources(config)
        parts.sort(key=lambda p: RANK[p.kind])  # stable: equal ranks keep the file's order
        return self._assemble(parts)

    # ------------------------------------------------------------------ reading the sources

    def _file(self, value: Any, where: str) -> Path:
        if not isinstance(value, str) or not value:
            raise InvalidRequest([Problem(path=f"{self.path}:{where}", message="expected a file name")])
        return self.path.parent / value

    def _cached(self, reader: str, path: Path, parse: Callable[[], list[Parts]]) -> list[Parts]:
        """``parse()`` unless the file's bytes are what they were last time."""
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as err:
            raise InvalidRequest([Problem(path=str(path), message=f"cannot read: {err.strerror}")]) from None
        known = self._parsed.get((reader, str(path)))
        if known is not None and known[0] == digest:
            return known[1]
        parts = parse()
        self._parsed[(reader, str(path))] = (digest, parts)
        return parts

    def _sources(self, config: dict[str, Any]) -> list[Parts]:
        parts: list[Parts] = []
        node_list: Parts | None = None
        if "nodes" in config:
            file = self._file(config["nodes"], "nodes")
            parts += self._cached("nodes", file, lambda: read_nodes(file))
            node_list = parts[0]
        names = list(node_list.nodes) if node_list else []
        typed: dict[str, str] = {}  # node → the capture entry that gives its type
        for i, entry in enumerate(_as_list(config.get("captures"))):
            capture = self._capture(entry, f"captures[{i}]", names)
            for node in capture.nodes:
                if typed.setdefault(node, f"captures[{i}]") != f"captures[{i}]":
                    message = f"node {node} is already of the type of {typed[node]}"
                    raise InvalidRequest([Problem(path=f"{self.path}:captures[{i}].nodes", message=message)])
            parts.append(capture)
        if "nvidia_smi_q" in config:
            parts.append(self._smi_query(config["nvidia_smi_q"]))
        for i, value in enumerate(_as_list(config.get("resource_slices"))):
            file = self._file(value, f"resource_slices[{i}]")
            parts += self._cached("dra", file, lambda file=file: [read_slices(file)])
        if "topology" in config:
            parts.append(self._topology(config["topology"], node_list))
        if "slurm_topology" in config:
            parts.append(self._slurm(config["slurm_topology"]))
        return parts

    def _capture(self, entry: Any, where: str, names: list[str]) -> Parts:
        if not isinstance(entry, dict):
            raise InvalidRequest(
                [Problem(path=f"{self.path}:{where}", message="expected {capture, nodes, ...}")]
            )
        unknown = sorted(set(entry) - CAPTURE_KEYS)
        if unknown:
            message = f"unknown key; known: {', '.join(sorted(CAPTURE_KEYS))}"
            raise InvalidRequest([Problem(path=f"{self.path}:{where}.{unknown[0]}", message=message)])
        file = self._file(entry.get("capture"), f"{where}.capture")
        pattern = entry.get("nodes")
        if not isinstance(pattern, (str, list)) or not pattern:
            message = (
                "required: the nodes of this type (names, a range gpu-[01-18], or a glob over the node list)"
            )
            raise InvalidRequest([Problem(path=f"{self.path}:{where}.nodes", message=message)])
        patterns = [pattern] if isinstance(pattern, str) else [str(p) for p in pattern]
        chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)] if names else []
        if not names:
            chosen = [n for p in patterns for n in expand_names(p)]
        if not chosen:
            message = f"matches no node of the node list: {', '.join(patterns)}"
            raise InvalidRequest([Problem(path=f"{self.path}:{where}.nodes", message=message)])

        numbers = {
            key: self._whole(entry, key, where) for key in sorted(CAPTURE_KEYS) if key.endswith(NUMBERS)
        }

        def parse() -> list[Parts]:
            text = file.read_text(encoding="utf-8", errors="replace")
            meta = capture_metadata(text)
            given = meta.get("gpu_memory_mib", "")
            template = parse_topology(
                text,
                node="template",
                gpu_model=str(entry.get("gpu_model") or meta.get("gpu_model", "")),
                gpu_memory_mib=numbers["gpu_memory_mib"] or (int(given) if given.isdigit() else 0),
                source=str(file),
            )
            if entry.get("rails"):
                paired = [n for g in template.gpus for n in gpu_nic_pairing(template)[g.id]]
                rail = {nic: k for k, nic in enumerate(dict.fromkeys(paired))}
                nics = tuple(n.model_copy(update={"rail": rail.get(n.name)}) for n in template.nics)
                template = template.model_copy(update={"nics": nics})
            return [
                Parts(
                    source=str(file),
                    kind="nvidia-smi topo -m",
                    nodes={"*": NodeFacts(where=str(file), devices=template)},
                )
            ]

        template = self._cached(f"capture:{entry!r}", file, parse)[0].nodes["*"]
        cpu = numbers["cpu_milli"] or 1000 * numbers["cpus"] or template.devices.cpu_milli
        memory = numbers["memory_mib"] or 1024 * numbers["memory_gib"] or None
        facts = dataclasses.replace(
            template,
            where=f"{self.path}:{where}",
            gpu_count=len(template.devices.gpus),
            cpu_milli=cpu or None,
            memory_mib=memory,
        )
        return Parts(source=str(file), kind="nvidia-smi topo -m", nodes=dict.fromkeys(chosen, facts))

    def _whole(self, entry: dict[str, Any], key: str, where: str) -> int:
        value = entry.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            message = f"must be a whole number of at least 0, got {value!r}"
            raise InvalidRequest([Problem(path=f"{self.path}:{where}.{key}", message=message)])
        return value

    def _smi_query(self, value: Any) -> Parts:
        files: dict[str, Path] = {}
        if isinstance(value, dict):
            files = {str(node): self._file(v, f"nvidia_smi_q.{node}") for node, v in value.items()}
        elif isinstance(value, str):
            files = {p.stem: p for p in sorted(self.path.parent.glob(value))}
        if not files:
            message = "expected {node: file} or a glob (node = file stem) that matches files"
            raise InvalidRequest([Problem(path=f"{self.path}:nvidia_smi_q", message=message)])
        facts: dict[str, NodeFacts] = {}
        for node, file in files.items():
            facts[node] = self._cached(
                f"smi:{node}",
                file,
                lambda node=node, file=file: [
                    Parts(str(file), "nvidia-smi -q", {node: read_query(file, node)})
                ],
            )[0].nodes[node]
        return Parts(source=f"{len(files)} files", kind="nvidia-smi -q", nodes=facts)

    def _topology(self, value: Any, node_list: Parts | None) -> Parts:
        spec = value if isinstance(value, dict) else {"file": value}
        file = self._file(spec.get("file"), "topology.file")
        if node_list is None:
            message = "a Topology groups nodes by their labels: name the node list too (nodes: FILE)"
            raise InvalidRequest([Problem(path=f"{self.path}:topology", message=message)])
        labels = {n: (f.where, f.labels or {}) for n, f in node_list.nodes.items()}
        # Not cached by file alone: it depends on the node list's labels too (cheap to recompute).
        return read_topology(file, labels, str(spec.get("name", "")))

    def _slurm(self, value: Any) -> Parts:
        spec = value if isinstance(value, dict) else {"file": value}
        file = self._file(spec.get("file"), "slurm_topology.file")
        found = [ep for ep in entry_points(group=FABRIC_GROUP) if ep.name == "slurm"]
        if not found:
            message = f"reading Slurm's topology needs the Slurm adapter (entry point {FABRIC_GROUP}: slurm)"
            raise InvalidRequest([Problem(path=f"{self.path}:slurm_topology", message=message)])
        reader = found[0].load()
        options = {k: v for k, v in spec.items() if k != "file"}
        return self._cached(f"slurm:{options!r}", file, lambda: [reader(file, options)])[0]

    # ------------------------------------------------------------------ assembling

    def _assemble(self, parts: list[Parts]) -> tuple[Inventory, Report]:
        report = Report()
        node_list = next((p for p in parts if p.defines_nodes), None)
        names = list(node_list.nodes) if node_list else sorted({n for p in parts for n in p.nodes})
        problems = []
        if node_list is not None:
            for p in parts:
                for node, facts in p.nodes.items():
                    if node not in node_list.nodes:
                        message = (
                            f"{p.kind} names node {node}, which is not in the node list {node_list.source}"
                        )
                        problems.append(Problem(path=facts.where, message=message))
        if problems:
            raise InvalidRequest(problems)
        for p in parts:
            report.contributions.append(f"{p.kind} ({p.source}): {', '.join(p.contributes()) or 'nothing'}")
            report.notes += [f"{p.kind}: {n}" for n in p.notes]
        chosen: dict[str, dict[str, tuple[Parts, Any]]] = {}
        for node in names:
            chosen[node] = {}
            for fact in FACTS:
                said = [(p, getattr(p.nodes[node], fact)) for p in parts if node in p.nodes]
                said = [(p, v) for p, v in said if v is not None]
                if said:
                    chosen[node][fact] = said[0]
        self._disagreements(parts, names, chosen, report)
        switches = self._switches(parts, chosen, report)
        nodes = []
        for node in names:
            inputs = self._inputs(parts, node, chosen[node])
            previous = self._built.get(node)
            if previous is not None and previous[0] == inputs:
                nodes.append(previous[1])
                continue
            built = _build(node, chosen[node], parts)
            self._built[node] = (inputs, built)
            report.rebuilt.append(node)
            nodes.append(built)
        for node in list(self._built):
            if node not in chosen:
                del self._built[node]
        inventory = Inventory(nodes=tuple(nodes), switches=switches)
        found = validate(SolveRequest(inventory=inventory))
        if found:
            raise InvalidRequest(
                [Problem(path=f"{self.path}: inventory.{p.path}", message=p.message) for p in found]
            )
        return inventory, report

    @staticmethod
    def _inputs(parts: list[Parts], node: str, chosen: dict[str, tuple[Parts, Any]]) -> tuple[Any, ...]:
        """What the node is built from, without where it was said (a moved line changes nothing)."""
        fill = tuple(
            dataclasses.replace(p.nodes[node], where="")
            for p in parts
            if node in p.nodes and p.nodes[node].devices
        )
        return (tuple((fact, chosen[fact][1]) for fact in sorted(chosen)), fill)

    def _switches(
        self, parts: list[Parts], chosen: dict[str, dict[str, tuple[Parts, Any]]], report: Report
    ) -> tuple[FabricSwitch, ...]:
        """The switches the chosen paths run through, from the sources that chose them."""
        switches: dict[str, tuple[FabricSwitch, str]] = {}
        problems: list[Problem] = []
        for facts in chosen.values():
            if "path" not in facts:
                continue
            source, path = facts["path"]
            for switch_id in path:
                switch = source.switches.get(switch_id)
                if switch is None:
                    continue
                known = switches.setdefault(switch_id, (switch, source.source))
                if known[0] != switch:
                    message = (
                        f"switch {switch_id} is tier {switch.tier} under {switch.parent or 'nothing'} here "
                        f"but tier {known[0].tier} under {known[0].parent or 'nothing'} in {known[1]}"
                    )
                    problems.append(Problem(path=source.source, message=message))
                for parent in _ancestors(source, switch_id):
                    switches.setdefault(parent.id, (parent, source.source))
        if problems:
            raise InvalidRequest(problems)
        return tuple(s for s, _ in sorted(switches.values(), key=lambda x: (-x[0].tier, x[0].id)))

    def _disagreements(
        self,
        parts: list[Parts],
        names: list[str],
        chosen: dict[str, dict[str, tuple[Parts, Any]]],
        report: Report,
    ) -> None:
        for node in names:
            for fact, (winner, value) in chosen[node].items():
                for p in parts:
                    other = getattr(p.nodes[node], fact) if node in p.nodes else None
                    if other is None or p is winner or fact in ("path", "nvlink_domain"):
                        continue
                    if fact == "gpu_count" and p.nodes[node].devices is not None:
                        continue  # said with the devices, compared there
                    difference = _differs(fact, value, other)
                    if difference:
                        report.disagreements.append(
                            f"node {node}: {fact}: {winner.kind} ({winner.source}) {difference[0]}, "
                            f"{p.kind} ({p.source}) {difference[1]}; kept {winner.kind}"
                        )
        for fact in ("path", "nvlink_domain"):
            self._grouping_disagreements(parts, names, chosen, fact, report)

    @staticmethod
    def _grouping_disagreements(
        parts: list[Parts],
        names: list[str],
        chosen: dict[str, dict[str, tuple[Parts, Any]]],
        fact: str,
        report: Report,
    ) -> None:
        """A source disagrees about a node when it groups it (same leaf, same NVLink domain) with
        other nodes than the assembled inventory does. A source's group is matched to the assembled
        group most of its nodes landed in, so sources that name a rack differently still agree."""

        def group_key(value: Any) -> Any:
            return value[0] if fact == "path" else value  # the leaf, or the domain

        final = {n: group_key(chosen[n][fact][1]) for n in names if fact in chosen[n]}
        what = "leaf" if fact == "path" else "NVLink domain"
        for p in parts:
            theirs = {n: group_key(getattr(p.nodes[n], fact)) for n in final if node_says(p, n, fact)}
            members: dict[Any, list[str]] = defaultdict(list)
            for n, group in theirs.items():
                members[group].append(n)
            image = {g: Counter(final[n] for n in ns).most_common(1)[0][0] for g, ns in members.items()}
            for n, group in theirs.items():
                if final[n] != image[group]:
                    winner = chosen[n][fact][0]
                    report.disagreements.append(
                        f"node {n}: {what}: {winner.kind} ({winner.source}) puts it in {final[n]}, "
                        f"{p.kind} ({p.source}) in {group} with {_few(set(members[group]) - {n})}; "
                        f"kept {winner.kind}"
                    )


def node_says(parts: Parts, node: str, fact: str) -> bool:
    return node in parts.nodes and getattr(parts.nodes[node], fact) is not None


def _ancestors(parts: Parts, switch_id: str) -> Iterable[FabricSwitch]:
    seen = {switch_id}
    current = parts.switches.get(switch_id)
    while current is not None and current.parent and current.parent not in seen:
        seen.add(current.parent)
        current = parts.switches.get(current.parent)
        if current is not None:
            yield current


def _few(nodes: set[str]) -> str:
    listed = sorted(nodes)
    if not listed:
        return "no other node"
    return ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")


def _differs(fact: str, ours: Any, theirs: Any) -> tuple[str, str] | None:
    """How two values of one fact differ, in words; None when they agree."""
    if fact == "devices":
        a, b = ours, theirs
        if len(a.gpus) != len(b.gpus):
            return f"has {len(a.gpus)} GPUs", f"{len(b.gpus)}"
        if a.nics and b.nics and {n.name for n in a.nics} != {n.name for n in b.nics}:
            return f"has NICs {_few({n.name for n in a.nics})}", f"{_few({n.name for n in b.nics})}"
        models_a = {_model(g.model) for g in a.gpus if g.model}
        models_b = {_model(g.model) for g in b.gpus if g.model}
        if models_a and models_b and models_a != models_b:
            return f"has GPU model {', '.join(sorted(models_a))}", f"{', '.join(sorted(models_b))}"
        return None
    if fact == "gpu_model":
        return None if _model(ours) == _model(theirs) else (f"says {ours}", f"{theirs}")
    if fact == "labels":
        return None  # only the node list has labels; the clique/topograph facts compare on their own
    if ours != theirs:
        return f"says {ours}", f"{theirs}"
    return None


def _model(text: str) -> str:
    """A GPU model as every source writes it: ``NVIDIA GB200``, ``NVIDIA-GB200`` and ``GB200`` are one."""
    return "".join(ch for ch in text.upper().removeprefix("NVIDIA") if ch.isalnum())


def _build(name: str, chosen: dict[str, tuple[Parts, Any]], parts: list[Parts]) -> Node:
    devices: Node = chosen["devices"][1] if "devices" in chosen else Node(name=name)
    gpus = list(devices.gpus)
    for p in parts:  # fill what the winning device set lacks, by GPU id, from the lower device sources
        other = p.nodes[name].devices if name in p.nodes else None
        if other is None or other is devices:
            continue
        by_id = {g.id: g for g in other.gpus}
        gpus = [
            g.model_copy(update={"uuid": g.uuid or by_id[g.id].uuid}) if g.id in by_id and not g.uuid else g
            for g in gpus
        ]
    model = chosen.get("gpu_model", (None, ""))[1] if "gpu_model" in chosen else ""
    gpus = [g.model_copy(update={"model": model}) if model and not g.model else g for g in gpus]
    path = chosen.get("path", (None, ()))[1]
    return devices.model_copy(
        update={
            "name": name,
            "gpus": tuple(gpus),
            "labels": dict(chosen["labels"][1]) if "labels" in chosen else {},
            "cpu_milli": chosen["cpu_milli"][1] if "cpu_milli" in chosen else devices.cpu_milli,
            "memory_mib": chosen["memory_mib"][1] if "memory_mib" in chosen else devices.memory_mib,
            "schedulable": chosen["schedulable"][1] if "schedulable" in chosen else True,
            "leaf": path[0] if path else "",
            "nvlink_domain": chosen["nvlink_domain"][1] if "nvlink_domain" in chosen else "",
        }
    )


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def read_inventory(sources: Any, resolve: Callable[[str], Path]) -> Inventory:
    """The ``topoplace.inventory_sources`` entry point ``cluster``: ``sources`` names the cluster file."""
    name = sources if isinstance(sources, str) else getattr(sources, "file", "")
    return assemble_cluster(resolve(name))[0]
