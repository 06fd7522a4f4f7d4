"""What-if scenarios for the what-if tests: a small busy cluster, edits over it, a short trace."""

from __future__ import annotations

from solver.domain.model import Inventory, Job, NicMode, Requirement
from solver.whatif.convert import scenario_from_data
from solver.whatif.scenario import (
    BaseInventory,
    Departure,
    PolicySpec,
    Scenario,
    SolverPolicy,
    Trace,
    TraceEntry,
)
from tests.kit.jobs import job
from tests.kit.nodes import allocation, cluster

SOLVER = PolicySpec(name="solver", solver=SolverPolicy(time_limit_s=2))
BESTFIT = PolicySpec(name="bestfit", baseline="bestfit")


def busy_cluster() -> Inventory:
    """Four DGX-shaped nodes on two leaves; n0 runs a 4-GPU job, n3 a 2-GPU job."""
    inventory = cluster(4, nodes_per_leaf=2)
    nodes = list(inventory.nodes)
    nodes[0] = nodes[0].model_copy(
        update={"allocations": (allocation("train-a", ["GPU0", "GPU1", "GPU2", "GPU3"], ["mlx5_0"]),)}
    )
    nodes[3] = nodes[3].model_copy(update={"allocations": (allocation("infer-b", ["GPU4", "GPU5"]),)})
    return inventory.model_copy(update={"nodes": tuple(nodes)})


def scenario(edits: list[dict], jobs: tuple[Job, ...] = (), **extra: object) -> Scenario:
    """A scenario over :func:`busy_cluster` with one variant of ``edits`` (given as file data)."""
    data = {"edits": edits, "templates": [{"name": "twin", "like": "n1"}], **extra}
    parsed = scenario_from_data(data | {"base": {"file": "x.json"}}, "test.yaml")
    return parsed.model_copy(update={"base": BaseInventory(inventory=busy_cluster()), "jobs": jobs})


def trace_scenario() -> Scenario:
    """Two nodes. n0 is full of background work that departs at t=50. ``a`` (8 GPUs) starts at once
    on n1; ``b`` (8 GPUs, t=10) waits for n0 to empty; ``c`` (2×8, t=20) waits until both have ended."""
    nodes = cluster(2, nodes_per_leaf=2).nodes
    bg = allocation("bg-0", [f"GPU{i}" for i in range(8)])
    inventory = Inventory(nodes=(nodes[0].model_copy(update={"allocations": (bg,)}), nodes[1]),
                          switches=cluster(2, nodes_per_leaf=2).switches)  # fmt: skip
    trace = Trace(
        entries=(
            TraceEntry(
                job=job("a", 8, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
                arrival_s=0,
                duration_s=100,
            ),
            TraceEntry(
                job=job("b", 8, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
                arrival_s=10,
                duration_s=100,
            ),
            TraceEntry(
                job=job("c", 8, 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
                arrival_s=20,
                duration_s=30,
                job_class="training",
            ),
        ),
        departures=(Departure(owner="bg-*", at_s=50),),
    )
    return Scenario(
        name="trace", base=BaseInventory(inventory=inventory), trace=trace, policies=(SOLVER, BESTFIT)
    )
