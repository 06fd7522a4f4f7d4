"""Slurm's network topology: ``topology.conf`` (tree: ``SwitchName=… Nodes=/Switches=``; block:
``BlockName=… Nodes=`` and ``BlockSizes=``) and 25.05's ``topology.yaml``, as topoplace fabric
switches (tier 1 = leaf) and each node's leaf.

Tree switches keep their names; a switch's tier is one more than its highest child switch (leaves,
the switches with ``Nodes=``, are tier 1). Blocks are tier-1 "switches" named after the block; each
``BlockSizes`` level above the base groups consecutive base blocks into a tier-2, 3, … aggregate
(``block-agg<size>-<k>``) — the shape Slurm's block plugin allocates in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from adapters.slurm.hostlist import HostlistError, expand
from adapters.slurm.problems import Problems, key_values, logical_lines
from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import FabricSwitch
from solver.ingest.parts import NodeFacts, Parts

TREE_KEYS = {"switchname", "nodes", "switches", "linkspeed"}
BLOCK_KEYS = {"blockname", "nodes", "blocksizes"}


@dataclass
class SlurmTopology:
    switches: list[FabricSwitch] = field(default_factory=list)
    leaf_of: dict[str, str] = field(default_factory=dict)
    blocks: bool = False  # a block topology: the leaves are Slurm's base blocks


@dataclass
class _Switch:
    name: str
    line: int
    nodes: list[str]
    children: list[str]


# --------------------------------------------------------------------------- topology.conf


def parse_topology_conf(text: str, source: str = "topology.conf") -> SlurmTopology:
    problems = Problems(source)
    switches: list[_Switch] = []
    blocks: list[_Switch] = []
    sizes: list[int] = []
    for number, line in logical_lines(text):
        values = {k.lower(): v for k, v in key_values(line)}
        if "switchname" in values:
            _unknown(values, TREE_KEYS, number, problems)
            switches.append(_tree_record(values, number, problems))
        elif "blockname" in values:
            _unknown(values, BLOCK_KEYS, number, problems)
            blocks.append(
                _Switch(values["blockname"], number, _hosts(values.get("nodes", ""), number, problems), [])
            )
        elif "blocksizes" in values:
            sizes = _sizes(values["blocksizes"], number, problems)
        else:
            problems.add(number, "expected SwitchName=, BlockName= or BlockSizes=")
    if switches and blocks:
        problems.add(
            blocks[0].line, "a topology.conf is either a tree (SwitchName) or blocks (BlockName), not both"
        )
    fabric = _tree_fabric(switches, problems) if switches else _block_fabric(blocks, sizes, problems)
    problems.raise_if_any()
    return fabric


def _unknown(values: dict[str, str], allowed: set[str], number: int, problems: Problems) -> None:
    for key in values:
        if key not in allowed:
            problems.add(number, f"unknown key {key!r}")


def _hosts(text: str, number: int, problems: Problems) -> list[str]:
    try:
        return expand(text)
    except HostlistError as err:
        problems.add(number, str(err))
        return []


def _sizes(text: str, number: int, problems: Problems) -> list[int]:
    try:
        sizes = [int(v) for v in text.split(",")]
    except ValueError:
        problems.add(number, f"BlockSizes={text!r} is not a list of integers")
        return []
    if sizes != sorted(sizes) or any(s <= 0 for s in sizes):
        problems.add(number, f"BlockSizes={text!r} must be positive and ascending")
    return sizes


def _tree_record(values: dict[str, str], number: int, problems: Problems) -> _Switch:
    nodes = _hosts(values.get("nodes", ""), number, problems) if values.get("nodes") else []
    children = _hosts(values.get("switches", ""), number, problems) if values.get("switches") else []
    if nodes and children:
        problems.add(
            number, "a switch has Nodes= or Switches=, not both (topoplace models leaves and uplinks)"
        )
    return _Switch(values["switchname"], number, nodes, children)


def _tree_fabric(switches: list[_Switch], problems: Problems) -> SlurmTopology:
    """Tiers from the leaves up; every referenced switch must exist; a switch has one parent; every
    node one leaf; no cycles."""
    by_name: dict[str, _Switch] = {}
    for switch in switches:
        if switch.name in by_name:
            problems.add(
                switch.line, f"switch {switch.name} defined twice (first at line {by_name[switch.name].line})"
            )
        by_name.setdefault(switch.name, switch)
    parent: dict[str, str] = {}
    leaf_of: dict[str, str] = {}
    for switch in switches:
        for child in switch.children:
            if child not in by_name:
                problems.add(switch.line, f"switch {switch.name} names unknown switch {child}")
            elif child in parent:
                problems.add(switch.line, f"switch {child} already has parent {parent[child]}")
            else:
                parent[child] = switch.name
        for node in switch.nodes:
            if node in leaf_of:
                problems.add(switch.line, f"node {node} is already under switch {leaf_of[node]}")
            leaf_of.setdefault(node, switch.name)
    tiers = _tiers(by_name, problems)
    result = [FabricSwitch(id=name, tier=tiers.get(name, 1), parent=parent.get(name, "")) for name in by_name]
    return SlurmTopology(switches=result, leaf_of=leaf_of)


def _tiers(by_name: dict[str, _Switch], problems: Problems) -> dict[str, int]:
    tiers: dict[str, int] = {}

    def tier(name: str, path: tuple[str, ...]) -> int:
        if name in tiers:
            return tiers[name]
        if name in path:
            problems.add(
                by_name[name].line, f"switch {name} is its own ancestor: " + " → ".join((*path, name))
            )
            return 1
        children = [c for c in by_name[name].children if c in by_name]
        value = 1 + max((tier(c, (*path, name)) for c in children), default=0)
        tiers[name] = value
        return value

    for name in by_name:
        tier(name, ())
    return tiers


def _block_fabric(blocks: list[_Switch], sizes: list[int], problems: Problems) -> SlurmTopology:
    fabric = SlurmTopology(blocks=True)
    base = sizes[0] if sizes else 0
    for block in blocks:
        if base and len(block.nodes) > base:
            problems.add(
                block.line,
                f"block {block.name} has {len(block.nodes)} nodes, more than BlockSizes' base {base}",
            )
        for node in block.nodes:
            if node in fabric.leaf_of:
                problems.add(block.line, f"node {node} is already in block {fabric.leaf_of[node]}")
            fabric.leaf_of.setdefault(node, block.name)
    parents: dict[str, str] = {}
    lower = [b.name for b in blocks]
    for tier, size in enumerate(sizes[1:], start=2):
        per_group = max(1, size // base) if base else 1
        groups = [lower[i : i + per_group] for i in range(0, len(lower), per_group)]
        names = [f"block-agg{size}-{k}" for k in range(len(groups))]
        for name, members in zip(names, groups, strict=True):
            parents.update(dict.fromkeys(members, name))
        fabric.switches.extend(FabricSwitch(id=n, tier=tier, parent="") for n in names)
        lower = names
    tier_of = {s.id: s.tier for s in fabric.switches}
    fabric.switches = [FabricSwitch(id=b.name, tier=1, parent=parents.get(b.name, "")) for b in blocks] + [
        FabricSwitch(id=n, tier=tier_of[n], parent=parents.get(n, "")) for n in tier_of
    ]
    return fabric


# --------------------------------------------------------------------------- topology.yaml


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that records each mapping's line as ``__line__`` (for FILE:LINE errors)."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[str, Any]:
    mapping = loader.construct_mapping(node, deep=True)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_topology_yaml(text: str, source: str = "topology.yaml", name: str = "") -> SlurmTopology:
    """The topology named ``name``, else the one with ``cluster_default: true``, else the first."""
    problems = Problems(source)
    try:
        data = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problems.add(mark.line + 1 if mark else 1, f"not YAML: {getattr(err, 'problem', err)}")
        problems.raise_if_any()
    if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
        problems.add(1, "expected a list of '- topology: NAME' entries")
        problems.raise_if_any()
    chosen = _choose_topology(data, name, problems)
    problems.raise_if_any()
    if "tree" in chosen:
        switches = [_yaml_switch(s, problems) for s in (chosen["tree"] or {}).get("switches", [])]
        fabric = _tree_fabric(switches, problems)
    elif "block" in chosen:
        block = chosen["block"] or {}
        blocks = [_yaml_block(b, problems) for b in block.get("blocks", [])]
        fabric = _block_fabric(blocks, [int(s) for s in block.get("block_sizes", [])], problems)
    else:
        problems.add(chosen["__line__"], "topology has neither 'tree' nor 'block' (flat: no fabric)")
        fabric = SlurmTopology()
    problems.raise_if_any()
    return fabric


def _choose_topology(data: list[dict[str, Any]], name: str, problems: Problems) -> dict[str, Any]:
    if name:
        for entry in data:
            if entry.get("topology") == name:
                return entry
        problems.add(1, f"no topology named {name!r}")
        return {}
    for entry in data:
        if entry.get("cluster_default"):
            return entry
    return data[0] if data else {}


def _yaml_switch(raw: Any, problems: Problems) -> _Switch:
    line = raw.get("__line__", 1) if isinstance(raw, dict) else 1
    if not isinstance(raw, dict) or "switch" not in raw:
        problems.add(line, "a tree switch needs 'switch: NAME'")
        return _Switch("?", line, [], [])
    nodes = _hosts(str(raw.get("nodes", "")), line, problems) if raw.get("nodes") else []
    children = _hosts(str(raw.get("children", "")), line, problems) if raw.get("children") else []
    return _Switch(str(raw["switch"]), line, nodes, children)


def _yaml_block(raw: Any, problems: Problems) -> _Switch:
    line = raw.get("__line__", 1) if isinstance(raw, dict) else 1
    if not isinstance(raw, dict) or "block" not in raw:
        problems.add(line, "a block needs 'block: NAME'")
        return _Switch("?", line, [], [])
    return _Switch(str(raw["block"]), line, _hosts(str(raw.get("nodes", "")), line, problems), [])


# --------------------------------------------------------------------------- for `topoplace ingest cluster`


def fabric_parts(path: Path, options: dict[str, Any]) -> Parts:
    """The ``topoplace.fabric_sources`` entry point ``slurm``: topology.conf or topology.yaml (the one
    named ``options['name']``) as inventory parts. ``blocks: nvlink`` says the base blocks are NVLink
    domains (GB200/GB300 NVL72 racks, Slurm's topology/block use case): each node's block is then its
    NVLink domain as well as its leaf."""
    unknown = sorted(set(options) - {"name", "blocks"})
    if unknown or options.get("blocks", "nvlink") not in ("nvlink", "switch"):
        message = "options are name: TOPOLOGY and blocks: nvlink|switch"
        where = f"{path}: {unknown[0] if unknown else 'blocks'}"
        raise InvalidRequest([Problem(path=where, message=message)])
    try:
        text = path.read_text()
    except OSError as err:
        raise InvalidRequest([Problem(path=str(path), message=f"cannot read: {err.strerror}")]) from None
    if path.suffix.lower() in (".yaml", ".yml"):
        topology = parse_topology_yaml(text, str(path), str(options.get("name", "")))
    else:
        topology = parse_topology_conf(text, str(path))
    nvlink = topology.blocks and options.get("blocks", "nvlink") == "nvlink"
    switches = {s.id: s for s in topology.switches}
    facts = {}
    for node, leaf in topology.leaf_of.items():
        chain = [leaf]
        while (above := switches[chain[-1]].parent if chain[-1] in switches else "") and above not in chain:
            chain.append(above)
        facts[node] = NodeFacts(
            where=f"{path}: node {node}",
            path=tuple(chain),
            nvlink_domain=leaf if nvlink else None,
            nvlink_field="block" if nvlink else "",
        )
    return Parts(source=str(path), kind="Slurm topology", nodes=facts, switches=switches)
