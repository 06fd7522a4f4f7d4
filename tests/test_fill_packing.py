"""FILL packing: GPU members close up the most used nodes; CPU-only members take CPU where it is spare."""

from __future__ import annotations

from solver.domain.model import Job, MemberShape, ObjectiveTier, Packing, Role, WorkloadShape
from solver.reduce.normalise import normalise
from solver.solve import solve
from tests import kit

TIERS = (ObjectiveTier.PLACED_WORK, ObjectiveTier.PACKING)
TEN_CORES_A_GPU = (WorkloadShape(gpus=1, cpu_milli=10_000),)


def cpu_job(job_id: str, cpu_milli: int) -> Job:
    return Job(id=job_id, roles=(Role(name="pod", replicas=1, member=MemberShape(cpu_milli=cpu_milli)),))


def placed_on(result) -> str:
    (node,) = {m.node for j in result.jobs for m in j.members}
    return node


def test_a_gpu_pod_goes_to_the_node_whose_gpus_are_most_used() -> None:
    # Both nodes have two GPUs free, so a best fit by free GPUs cannot tell them apart; six of
    # eight used on the big one against two of four on the small one.
    big = kit.node("big", kit.SMALL, switches=4, gpus=8, nics=4, used_gpus=range(6), cpu_milli=96_000)
    small = kit.node("small", kit.SMALL, used_gpus=range(2), cpu_milli=96_000)
    for order in (("big", "small"), ("small", "big")):
        req = kit.request([small, big], [kit.job("p", 1)], objective=(*TIERS, ObjectiveTier.NODE_ORDER))
        req = req.model_copy(update={"policy": req.policy.model_copy(update={"packing": Packing.FILL})})
        req = req.model_copy(update={"policy": req.policy.model_copy(update={"node_order": order})})
        assert placed_on(solve(req)) == "big"


def test_a_cpu_only_pod_takes_cpu_its_node_has_to_spare_not_the_most_free_cpu() -> None:
    # At ten cores a GPU, the node with four idle GPUs needs 40 of its 48 cores for them: 8 spare.
    # The node whose GPUs are all busy spares all its 16.
    gpus_idle = kit.node("gpus-idle", kit.SMALL, cpu_milli=48_000)
    gpus_busy = kit.node("gpus-busy", kit.SMALL, used_gpus=range(4), cpu_milli=16_000)
    req = kit.request(
        [gpus_idle, gpus_busy],
        [cpu_job("etl", 4_000)],
        objective=TIERS,
        packing=Packing.FILL,
        workload=TEN_CORES_A_GPU,
    )
    assert placed_on(solve(req)) == "gpus-busy"
    binpack = req.model_copy(update={"policy": req.policy.model_copy(update={"packing": Packing.BINPACK})})
    assert placed_on(solve(binpack)) == "gpus-busy"  # binpack agrees here: the busy node is fuller
    roomy = kit.node("gpus-busy", kit.SMALL, used_gpus=range(4), cpu_milli=64_000)
    req = req.model_copy(update={"inventory": req.inventory.model_copy(update={"nodes": (gpus_idle, roomy)})})
    assert placed_on(solve(req)) == "gpus-busy"  # 64 spare against 8, though it has more CPU free


def test_nodes_split_by_gpu_count_only_where_fill_asks_for_it() -> None:
    # Two nodes with the same free devices (two idle GPUs) but four and eight GPUs in all.
    plain = {"nics": 0, "nvlink": "none"}
    nodes = [
        kit.node("four", kit.SMALL, used_gpus=range(2), **plain),
        kit.node("eight", kit.SMALL, switches=4, gpus=8, used_gpus=range(6), **plain),
    ]
    fill = kit.request(nodes, [kit.job("p", 1)], objective=TIERS, packing=Packing.FILL)
    binpack = kit.request(nodes, [kit.job("p", 1)], objective=TIERS, packing=Packing.BINPACK)
    assert sorted(c.gpu_total for c in normalise(fill).classes) == [4, 8]
    assert [c.gpu_total for c in normalise(binpack).classes] == [0]
