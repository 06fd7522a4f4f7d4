"""A scenario made concrete: the base inventory read, templates built, the workload loaded, and each
variant's edits applied — every problem found on the way reported at once, with the file and the
path inside it.

Everything that can be wrong with a scenario is found here, before any policy runs: a sweep should
not fail an hour in because variant 7 names a node that does not exist. Edits are strict: one that
matches nothing (a typo'd node, an owner no allocation has) is an error, since a silent no-op would
answer a different question than the one asked.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.fabric import Fabric
from solver.domain.model import FabricSwitch, Inventory, Job, Node, SolveRequest
from solver.domain.validate import member_fits_some_node, validate
from solver.ingest.sources import inventory_source
from solver.service import wire
from solver.service.protojson import parse_dict
from solver.whatif import convert
from solver.whatif.scenario import (
    BASE_VARIANT,
    AddAllocation,
    AddNodes,
    ChangeJob,
    DrainNodes,
    Edit,
    FailGpus,
    FailNics,
    NodeSelector,
    NodeTemplate,
    ReleaseAllocations,
    RemoveNodes,
    Scenario,
    Trace,
    TraceEntry,
    Variant,
)
from topoplace.v1 import placement_pb2, whatif_pb2


@dataclass(frozen=True)
class World:
    """One state to answer on: an inventory and the workload (a batch, or a trace's entries)."""

    inventory: Inventory
    jobs: tuple[Job, ...] = ()
    trace: Trace | None = None

    @property
    def all_jobs(self) -> tuple[Job, ...]:
        """The batch, or every job the trace will submit."""
        if self.trace is not None:
            return tuple(e.job for e in self.trace.entries)
        return self.jobs


@dataclass(frozen=True)
class Prepared:
    """A scenario checked and built: one world per variant, base first."""

    scenario: Scenario
    source: str
    worlds: dict[str, World] = field(default_factory=dict)

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(self.worlds)


class _Problems:
    """Problems collected with the scenario's file as prefix."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[Problem] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(Problem(path=f"{self.source}:{where}", message=message))

    def extend(self, problems: Iterable[Problem]) -> None:
        self.items.extend(problems)

    def raise_if_any(self) -> None:
        if self.items:
            raise InvalidRequest(self.items)


# --------------------------------------------------------------------------- entry point


def prepare(scenario: Scenario, *, root: Path | None, source: str = "scenario") -> Prepared:
    """Build every variant's world. ``root`` is the folder relative file references are read from;
    None refuses file references (the RPC: a path would name a file on the server)."""
    problems = _Problems(source)
    if root is None:
        for where, name in scenario.file_references():
            problems.add(where, f"names the file {name!r}; over RPC send its content inline")
        problems.raise_if_any()
    _check_names(scenario, problems)
    problems.raise_if_any()
    inventory = _base_inventory(scenario, root, problems)
    jobs, trace = _workload(scenario, root, problems)
    problems.raise_if_any()
    templates = _templates(scenario, inventory, root, problems)
    problems.raise_if_any()
    base = World(inventory=inventory, jobs=jobs, trace=trace)
    worlds = {BASE_VARIANT: base}
    for v, variant in enumerate(scenario.all_variants()[1:]):
        prefix = f"variants[{v}]" if scenario.variants else ""
        worlds[variant.name] = apply_variant(base, variant, templates, problems, prefix)
    problems.raise_if_any()
    for name, world in worlds.items():
        _check_solvable(world, name, scenario, problems)
    problems.raise_if_any()
    return Prepared(scenario=scenario, source=source, worlds=worlds)


def _check_names(scenario: Scenario, problems: _Problems) -> None:
    for what, names in (
        ("variants", [v.name for v in scenario.variants]),
        ("policies", [p.name for p in scenario.policies]),
        ("templates", [t.name for t in scenario.templates]),
    ):
        seen: set[str] = set()
        for i, name in enumerate(names):
            if name in seen:
                problems.add(f"{what}[{i}].name", f"{name!r} is given twice")
            seen.add(name)
    for i, variant in enumerate(scenario.variants):
        if variant.name == BASE_VARIANT:
            problems.add(f"variants[{i}].name", f"{BASE_VARIANT!r} is the unedited inventory; choose another")
    from solver.whatif.policies import check_policy

    for i, policy in enumerate(scenario.policies):
        for message in check_policy(policy):
            problems.add(f"policies[{i}]", message)


# --------------------------------------------------------------------------- base inventory


def _resolve(root: Path | None, name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() or root is None else root / path


def _base_inventory(scenario: Scenario, root: Path | None, problems: _Problems) -> Inventory:
    base = scenario.base
    try:
        if base.inventory is not None:
            return base.inventory
        if base.file:
            return load_inventory_file(_resolve(root, base.file))
        if base.slurm is not None:
            return _slurm_inventory(scenario, root)
        return _volcano_inventory(scenario, root)
    except InvalidRequest as exc:
        problems.extend(exc.problems)
        return Inventory()


def load_inventory_file(path: Path) -> Inventory:
    """An ``Inventory`` file, or a ``SolveRequest`` file whose inventory is taken."""
    data, _ = convert.load_data(path)
    if isinstance(data, dict) and "inventory" in data:
        return wire.request_from_dict(data, str(path)).inventory
    msg = convert.message_from(data, placement_pb2.Inventory(), str(path))
    return _domain(msg, Inventory, str(path))


def _domain(msg: Any, cls: type, source: str) -> Any:
    try:
        return convert._from_proto(msg, cls)
    except InvalidRequest as exc:
        raise InvalidRequest(
            [Problem(path=f"{source}:{p.path}", message=p.message) for p in exc.problems]
        ) from None


def _slurm_inventory(scenario: Scenario, root: Path | None) -> Inventory:
    """Through the source the Slurm adapter registers (``topoplace slurm inventory`` reads the same)."""
    assert scenario.base.slurm is not None
    return inventory_source("slurm", "base.slurm")(scenario.base.slurm, lambda p: _resolve(root, p))


def _volcano_inventory(scenario: Scenario, root: Path | None) -> Inventory:
    """Through the source the Volcano adapter registers: a session snapshot (OnSessionOpen body) and,
    optionally, the HyperNodes that make its fabric — the inventory the extender would hand the solver."""
    assert scenario.base.volcano is not None
    return inventory_source("volcano", "base.volcano")(scenario.base.volcano, lambda p: _resolve(root, p))


# --------------------------------------------------------------------------- workload


def _workload(
    scenario: Scenario, root: Path | None, problems: _Problems
) -> tuple[tuple[Job, ...], Trace | None]:
    jobs = scenario.jobs
    if scenario.jobs_file:
        from solver.ingest.files import load_request

        try:
            jobs = load_request(_resolve(root, scenario.jobs_file)).jobs
        except InvalidRequest as exc:
            problems.extend(exc.problems)
    trace = scenario.trace
    if trace is not None and trace.file:
        path = _resolve(root, trace.file)
        try:
            data, _ = convert.load_data(path)
            loaded: Trace = _domain(
                convert.message_from(data, whatif_pb2.Trace(), str(path)), Trace, str(path)
            )
        except InvalidRequest as exc:
            problems.extend(exc.problems)
            loaded = Trace()
        trace = trace.model_copy(
            update={
                "entries": (*loaded.entries, *trace.entries),
                "departures": (*loaded.departures, *trace.departures),
                "file": "",
            }
        )
    ids = [j.id for j in jobs] if trace is None else [e.job.id for e in trace.entries]
    where = "jobs" if trace is None else "trace.entries"
    seen: set[str] = set()
    for i, job_id in enumerate(ids):
        if job_id in seen:
            problems.add(f"{where}[{i}]", f"job id {job_id!r} is given twice")
        seen.add(job_id)
    return tuple(jobs), trace


# --------------------------------------------------------------------------- templates


def _templates(
    scenario: Scenario, inventory: Inventory, root: Path | None, problems: _Problems
) -> dict[str, Node]:
    out: dict[str, Node] = {}
    for i, template in enumerate(scenario.templates):
        try:
            node = _template_node(template, inventory, root)
        except InvalidRequest as exc:
            problems.extend(exc.problems)
            continue
        if node is None:
            problems.add(f"templates[{i}].like", f"no node {template.like!r} in the base inventory")
            continue
        out[template.name] = node
    return out


def _template_node(template: NodeTemplate, inventory: Inventory, root: Path | None) -> Node | None:
    """The template's hardware as a node with no work on it; its name is replaced when added."""
    from solver.ingest.nvidia_smi import parse_topology

    if template.nvidia_smi or template.nvidia_smi_text:
        if template.nvidia_smi:
            path = _resolve(root, template.nvidia_smi)
            try:
                text, source = path.read_text(), str(path)
            except OSError as exc:
                raise InvalidRequest(
                    [Problem(path=str(path), message=f"cannot read: {exc.strerror}")]
                ) from None
        else:
            text, source = template.nvidia_smi_text, f"templates.{template.name}.nvidia_smi_text"
        node = parse_topology(
            text, node=template.name, gpu_model=template.gpu_model, source=source,
            gpu_memory_mib=template.gpu_memory_mib,
        )  # fmt: skip
    elif template.node_file:
        path = _resolve(root, template.node_file)
        data, _ = convert.load_data(path)
        node = _domain(convert.message_from(data, placement_pb2.Node(), str(path)), Node, str(path))
    elif template.node is not None:
        node = template.node
    else:
        found = next((n for n in inventory.nodes if n.name == template.like), None)
        if found is None:
            return None
        node = found
    update: dict[str, Any] = {"allocations": (), "schedulable": True}
    if template.cpu_milli:
        update["cpu_milli"] = template.cpu_milli
    if template.memory_mib:
        update["memory_mib"] = template.memory_mib
    if template.labels:
        update["labels"] = {**node.labels, **template.labels}
    if template.gpu_model and not template.nvidia_smi and not template.nvidia_smi_text:
        update["gpus"] = tuple(g.model_copy(update={"model": template.gpu_model}) for g in node.gpus)
    return node.model_copy(update=update)


# --------------------------------------------------------------------------- edits


@dataclass
class _State:
    """The world being edited: plain lists, turned back into immutable values at the end."""

    nodes: list[Node]
    switches: list[FabricSwitch]
    jobs: list[Job]
    entries: list[TraceEntry] | None
    templates: dict[str, Node]

    def node_index(self, name: str) -> int | None:
        return next((i for i, n in enumerate(self.nodes) if n.name == name), None)


EditFn = Callable[[_State, Any, str, _Problems], None]


def apply_variant(
    base: World, variant: Variant, templates: dict[str, Node], problems: _Problems, prefix: str
) -> World:
    """The base world with ``variant``'s edits applied in order, each seeing the ones before."""
    state = _State(
        nodes=list(base.inventory.nodes),
        switches=list(base.inventory.switches),
        jobs=list(base.jobs),
        entries=list(base.trace.entries) if base.trace is not None else None,
        templates=templates,
    )
    for e, edit in enumerate(variant.edits):
        path = f"{prefix}.edits[{e}]" if prefix else f"edits[{e}]"
        apply_edit(state, edit, f"{path}.{edit.kind}", problems)
    inventory = Inventory(nodes=tuple(state.nodes), switches=tuple(state.switches))
    trace = (
        base.trace.model_copy(update={"entries": tuple(state.entries)}) if base.trace is not None else None
    )
    return World(inventory=inventory, jobs=tuple(state.jobs), trace=trace)


def apply_edit(state: _State, edit: Edit, path: str, problems: _Problems) -> None:
    EDITS[edit.kind](state, edit.body, path, problems)


def select_nodes(state: _State, selector: NodeSelector, path: str, problems: _Problems) -> list[int]:
    """Indexes of the nodes a selector names; each name or glob and the switch must match something."""
    chosen: set[int] = set()
    for k, pattern in enumerate(selector.nodes):
        hits = {i for i, n in enumerate(state.nodes) if fnmatch.fnmatchcase(n.name, pattern)}
        if not hits:
            problems.add(f"{path}.nodes[{k}]", f"no node matches {pattern!r}")
        chosen |= hits
    if selector.switch:
        fabric = Fabric.of(Inventory(switches=tuple(state.switches)))
        if selector.switch not in fabric.tier:
            problems.add(f"{path}.switch", f"no fabric switch {selector.switch!r}")
        else:
            chosen |= {i for i, n in enumerate(state.nodes) if selector.switch in fabric.ancestors(n.leaf)}
    if not selector.nodes and not selector.switch:
        problems.add(path, "selects nothing: give nodes and/or a switch")
    return sorted(chosen)


def _add_nodes(state: _State, body: AddNodes, path: str, problems: _Problems) -> None:
    template = state.templates.get(body.template)
    if template is None:
        known = ", ".join(sorted(state.templates)) or "none defined"
        problems.add(f"{path}.template", f"no template {body.template!r} (templates: {known})")
        return
    tiers = {s.id: s.tier for s in state.switches}
    if body.leaf not in tiers:
        if not body.parent:
            problems.add(f"{path}.leaf", f"no fabric switch {body.leaf!r}; give parent to create it")
            return
        if tiers.get(body.parent, 0) < 2:
            problems.add(f"{path}.parent", f"{body.parent!r} is not a switch of tier 2 or above")
            return
        state.switches.append(FabricSwitch(id=body.leaf, tier=1, parent=body.parent))
    elif tiers[body.leaf] != 1:
        problems.add(
            f"{path}.leaf", f"{body.leaf!r} is a tier-{tiers[body.leaf]} switch; nodes hang off tier 1"
        )
        return
    prefix = body.name_prefix or f"{body.leaf}-new"
    taken = {n.name for n in state.nodes}
    for k in range(body.count):
        name = f"{prefix}{k:03d}"
        if name in taken:
            problems.add(f"{path}.name_prefix", f"node {name!r} exists already; choose another prefix")
            return
        state.nodes.append(template.model_copy(update={"name": name, "leaf": body.leaf}))


def _remove_nodes(state: _State, body: RemoveNodes, path: str, problems: _Problems) -> None:
    gone = set(select_nodes(state, body.select, f"{path}.select", problems))
    state.nodes = [n for i, n in enumerate(state.nodes) if i not in gone]


def _drain_nodes(state: _State, body: DrainNodes, path: str, problems: _Problems) -> None:
    for i in select_nodes(state, body.select, f"{path}.select", problems):
        state.nodes[i] = state.nodes[i].model_copy(update={"schedulable": False})


def _node_or_problem(state: _State, name: str, path: str, problems: _Problems) -> int | None:
    i = state.node_index(name)
    if i is None:
        problems.add(path, f"no node {name!r}")
    return i


def _fail_gpus(state: _State, body: FailGpus, path: str, problems: _Problems) -> None:
    i = _node_or_problem(state, body.node, f"{path}.node", problems)
    if i is None:
        return
    node = state.nodes[i]
    known = {g.id for g in node.gpus}
    for k, gpu in enumerate(body.gpus):
        if gpu not in known:
            problems.add(f"{path}.gpus[{k}]", f"node {node.name} has no GPU {gpu!r}")
    failed = set(body.gpus) or known
    gpus = tuple(g.model_copy(update={"healthy": False}) if g.id in failed else g for g in node.gpus)
    state.nodes[i] = node.model_copy(update={"gpus": gpus})


def _fail_nics(state: _State, body: FailNics, path: str, problems: _Problems) -> None:
    i = _node_or_problem(state, body.node, f"{path}.node", problems)
    if i is None:
        return
    node = state.nodes[i]
    known = {n.name for n in node.nics}
    for k, nic in enumerate(body.nics):
        if nic not in known:
            problems.add(f"{path}.nics[{k}]", f"node {node.name} has no NIC {nic!r}")
    failed = set(body.nics) or known
    nics = tuple(n.model_copy(update={"healthy": False}) if n.name in failed else n for n in node.nics)
    state.nodes[i] = node.model_copy(update={"nics": nics})


def _release(state: _State, body: ReleaseAllocations, path: str, problems: _Problems) -> None:
    everywhere = not body.select.nodes and not body.select.switch
    indexes = (
        range(len(state.nodes))
        if everywhere
        else select_nodes(state, body.select, f"{path}.select", problems)
    )
    released = 0
    for i in indexes:
        node = state.nodes[i]
        keep = tuple(a for a in node.allocations if not owner_matches(a.owner, body.owners))
        released += len(node.allocations) - len(keep)
        state.nodes[i] = node.model_copy(update={"allocations": keep})
    if released == 0:
        problems.add(path, "releases nothing: no allocation on the selected nodes matches")


def owner_matches(owner: str, patterns: tuple[str, ...]) -> bool:
    """Empty patterns match every owner."""
    return not patterns or any(fnmatch.fnmatchcase(owner, p) for p in patterns)


def _add_allocation(state: _State, body: AddAllocation, path: str, problems: _Problems) -> None:
    i = _node_or_problem(state, body.node, f"{path}.node", problems)
    if i is None:
        return
    node, alloc = state.nodes[i], body.allocation
    held_gpus = {g for a in node.allocations for g in (*a.gpus, *(s.gpu for s in a.gpu_shares))}
    held_nics = {n for a in node.allocations for n in a.nics}
    for what, asked, known, held in (
        ("gpus", alloc.gpus, {g.id for g in node.gpus}, held_gpus),
        ("nics", alloc.nics, {n.name for n in node.nics}, held_nics),
    ):
        for k, device in enumerate(asked):
            if device not in known:
                problems.add(f"{path}.allocation.{what}[{k}]", f"node {node.name} has no {device!r}")
            elif device in held:
                problems.add(
                    f"{path}.allocation.{what}[{k}]", f"{device} of node {node.name} is already held"
                )
    state.nodes[i] = node.model_copy(update={"allocations": (*node.allocations, alloc)})


def _change_job(state: _State, body: ChangeJob, path: str, problems: _Problems) -> None:
    jobs = [e.job for e in state.entries] if state.entries is not None else state.jobs
    k = next((i for i, j in enumerate(jobs) if j.id == body.job), None)
    if k is None:
        problems.add(
            f"{path}.job", f"no job {body.job!r} in the {'trace' if state.entries is not None else 'batch'}"
        )
        return
    try:
        changed = patched_job(jobs[k], body.patch)
    except InvalidRequest as exc:
        for p in exc.problems:
            problems.add(f"{path}.patch.{p.path}", p.message)
        return
    if state.entries is not None:
        state.entries[k] = state.entries[k].model_copy(update={"job": changed})
    else:
        state.jobs[k] = changed


def patched_job(job: Job, patch: dict[str, Any]) -> Job:
    """``job`` with ``patch`` merged into its canonical JSON; ``roles`` may be keyed by role name."""
    msg = convert.to_proto(job, placement_pb2.Job)
    from google.protobuf import json_format

    data = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    patch = dict(patch)
    roles = patch.pop("roles", None)
    merged = _merge(data, patch)
    if isinstance(roles, dict):
        by_name = {r["name"]: r for r in merged.get("roles", [])}
        for name, role_patch in roles.items():
            if name not in by_name:
                raise InvalidRequest(
                    [Problem(path=f"roles.{name}", message=f"job {job.id} has no role {name!r}")]
                )
            by_name[name].update(_merge(by_name[name], role_patch))
    elif roles is not None:
        merged["roles"] = roles
    merged = _integral(merged)
    try:
        # Paths relative to the patch, as the scenario wrote it: roles keyed by name keep their name.
        parsed = parse_dict(merged, placement_pb2.Job())
    except InvalidRequest as exc:
        names = [r.get("name", "") for r in merged.get("roles", [])] if isinstance(roles, dict) else []
        raise InvalidRequest([_role_named(p, names) for p in exc.problems]) from None
    try:
        return convert._from_proto(parsed, Job)
    except InvalidRequest as exc:
        raise InvalidRequest(exc.problems) from None


def _role_named(problem: Problem, names: list[str]) -> Problem:
    """``roles[1].member.gpus`` → ``roles.decode.member.gpus`` when the patch keyed roles by name."""
    match = re.match(r"roles\[(\d+)\]", problem.path)
    if match is None or int(match.group(1)) >= len(names):
        return problem if problem.path else problem.model_copy(update={"path": "(top)"})
    name = names[int(match.group(1))]
    return problem.model_copy(update={"path": f"roles.{name}{problem.path[match.end() :]}"})


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        key = re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()  # lowerCamelCase as proto JSON allows
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _integral(value: Any) -> Any:
    """Struct carries numbers as floats; whole ones go back to ints for integer fields."""
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


EDITS: dict[str, EditFn] = {
    "add_nodes": _add_nodes,
    "remove_nodes": _remove_nodes,
    "drain_nodes": _drain_nodes,
    "fail_gpus": _fail_gpus,
    "fail_nics": _fail_nics,
    "release_allocations": _release,
    "add_allocation": _add_allocation,
    "change_job": _change_job,
}


# --------------------------------------------------------------------------- solvability


_JOB_PATH = re.compile(r"^jobs\[(\d+)\]")


def unfit_jobs(request: SolveRequest) -> dict[int, str]:
    """Jobs with a member no node of the inventory could ever hold, by index, with the reason.

    For the solver that is bad input; for a what-if it is an answer ("after removing rack 2, nothing
    can hold an 8-GPU member"), so such jobs are reported unplaced instead of refused.
    """
    out: dict[int, str] = {}
    for problem in member_fits_some_node(request):
        if match := _JOB_PATH.match(problem.path):
            out.setdefault(int(match.group(1)), problem.message)
    return out


def _check_solvable(world: World, name: str, scenario: Scenario, problems: _Problems) -> None:
    """The solver's own validation of the world, minus what :func:`unfit_jobs` turns into answers."""
    request = SolveRequest(inventory=world.inventory, jobs=world.all_jobs)
    unfit = {p for p in member_fits_some_node(request)}
    job_paths = "trace.entries[{}].job" if world.trace is not None else "jobs[{}]"
    for p in validate(request):
        if p in unfit:
            continue
        where = f"variant {name}" if name != BASE_VARIANT else "base"
        if match := _JOB_PATH.match(p.path):
            detail = job_paths.format(match.group(1)) + p.path[match.end() :]
            if scenario.jobs_file and world.trace is None:
                detail = f"{scenario.jobs_file} {p.path}"
            problems.add(detail, f"{p.message} ({where})")
        else:
            problems.add(where, f"{p.path}: {p.message}")
