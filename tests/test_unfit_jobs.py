"""A job no node could ever hold is unplaced with its reason; the rest of its batch is placed.

Shared root cause of issue 21 item 5 (one 9-GPU job on 8-GPU nodes failed the whole batch) and issue
25 (the openb replay's windows aborted: a window's request holds only the nodes its pods pass the
filter on, and a pod whose GPU model or CPU no such node has made validation refuse the window).
The real pipeline throughout; the gRPC test runs a real server on loopback.
"""

from __future__ import annotations

import grpc
import pytest

from solver.domain.errors import InvalidRequest
from solver.domain.model import (
    BatchOrder,
    Job,
    MemberShape,
    NicMode,
    ReasonCode,
    Requirement,
    Role,
    SolveRequest,
    SolveResult,
)
from solver.service import wire
from solver.service.client import solve_remote
from solver.service.server import serve
from solver.solve import solve
from tests import kit
from topoplace.v1 import placement_pb2_grpc

ORDERS = (BatchOrder.JOINT, BatchOrder.LARGEST_FIRST, BatchOrder.BEST_OF_ORDERS)


def batch(*jobs: object, order: BatchOrder = BatchOrder.JOINT) -> SolveRequest:
    inventory = kit.inventory(kit.node("n0"), kit.node("n1", cpu_milli=96_000))
    return kit.request(inventory, jobs, batch_order=order, time_limit_s=5)  # type: ignore[arg-type]


def by_id(result: SolveResult) -> dict[str, object]:
    return {jr.job_id: jr for jr in result.jobs}


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.name)
def test_a_nine_gpu_job_on_eight_gpu_nodes_is_unplaced_and_the_rest_placed(order: BatchOrder) -> None:
    request = batch(
        kit.job("a", 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        kit.job("too-big", 9, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        kit.job("b", 8, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        order=order,
    )
    result = solve(request)
    jobs = by_id(result)
    assert [jr.job_id for jr in result.jobs] == ["a", "too-big", "b"]  # the request's order
    assert jobs["a"].placed and jobs["b"].placed  # type: ignore[attr-defined]
    unfit = jobs["too-big"]
    assert not unfit.placed and not unfit.members  # type: ignore[attr-defined]
    assert unfit.reason.code == ReasonCode.NO_NODE_FITS  # type: ignore[attr-defined]
    assert unfit.reason.message == (  # type: ignore[attr-defined]
        "a member of role worker asks for 9 GPUs but the largest node has 8; "
        "asks for 9 RDMA NICs but the largest node has 8"
    )
    assert result.metrics.gpus_used_after == 12


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.name)
def test_a_model_or_cpu_no_held_node_has_leaves_the_window_placed(order: BatchOrder) -> None:
    """The replay's two crashes, small: gpuspec33 at pod 1,216 (a GPU model whose nodes were all full,
    so the filtered request held none of them) and cpu250 at pod 11,504 (a pod asking more CPU than
    any node the request held)."""
    request = batch(
        kit.job("gpu", 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        kit.job("model", 1, nics=NicMode.PER_GPU, align=Requirement.PREFERRED, models=("A10",)),
        Job(id="cpu", roles=(Role(name="worker", replicas=1, member=MemberShape(cpu_milli=300_000)),)),
        kit.job("small", 1, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        order=order,
    )
    jobs = by_id(solve(request))
    assert jobs["gpu"].placed and jobs["small"].placed  # type: ignore[attr-defined]
    model, cpu = jobs["model"], jobs["cpu"]
    assert not model.placed and model.reason.code == ReasonCode.NO_NODE_FITS  # type: ignore[attr-defined]
    assert "model A10 but no node here has one; the nodes have" in model.reason.message  # type: ignore[attr-defined]
    assert not cpu.placed and cpu.reason.message == (  # type: ignore[attr-defined]
        "a member of role worker asks for 300000 milli-CPU but the largest node has 224000"
    )


def test_a_batch_of_only_unfit_jobs_is_answered_not_refused() -> None:
    result = solve(
        batch(
            kit.job("x", 16, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
            kit.job("y", 9, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        )
    )
    assert [(jr.job_id, jr.placed, jr.reason.code) for jr in result.jobs] == [  # type: ignore[union-attr]
        ("x", False, ReasonCode.NO_NODE_FITS),
        ("y", False, ReasonCode.NO_NODE_FITS),
    ]


def test_a_malformed_request_is_still_refused_whole() -> None:
    good = batch(
        kit.job("a", 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
        kit.job("too-big", 9, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
    )
    bad = good.model_copy(update={"jobs": (*good.jobs, good.jobs[0])})  # a repeated job id
    with pytest.raises(InvalidRequest) as caught:
        solve(bad)
    assert [p.path for p in caught.value.problems] == ["jobs[2].id"]


def test_over_grpc_the_impossible_job_is_unplaced_and_bad_input_is_invalid_argument() -> None:
    running = serve("127.0.0.1", 0)
    try:
        target = f"127.0.0.1:{running.port}"
        result = solve_remote(
            target,
            batch(
                kit.job("a", 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
                kit.job("too-big", 9, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
            ),
        )
        jobs = by_id(result)
        assert jobs["a"].placed and not jobs["too-big"].placed  # type: ignore[attr-defined]
        assert jobs["too-big"].reason.code == ReasonCode.NO_NODE_FITS  # type: ignore[attr-defined]
        assert "asks for 9 GPUs but the largest node has 8" in jobs["too-big"].reason.message  # type: ignore[attr-defined]
        msg = wire.request_to_proto(batch(kit.job("a", 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)))
        msg.jobs[0].roles[0].replicas = 0
        with grpc.insecure_channel(target) as channel, pytest.raises(grpc.RpcError) as caught:
            placement_pb2_grpc.PlacementStub(channel).Solve(msg, timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    finally:
        running.stop(grace_s=None)
