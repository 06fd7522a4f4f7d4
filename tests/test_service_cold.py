"""Cold calls keep their deadline (issue 23 item 2): a request whose nodes the server has never seen
is read, validated and normalised only as far as its deadline leaves room for an answer, and the
answer is verified; and the cost estimate follows the pace this process has measured.

Timing is asserted once, through a real server on 127.0.0.1, with the deadline gRPC itself enforces
(the client gets DEADLINE_EXCEEDED when the answer is late); everything else injects the clock's
verdict (a budget already spent, a reading with room for exactly three nodes, a measured pace)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from unittest.mock import patch

import grpc
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bench import quality
from solver.answer.measures import cluster_metrics
from solver.answer.verify import verify
from solver.compile.cost import PACE, Estimate, Pace, estimate
from solver.domain.cancel import Cancel, Cancelled, OutOfBudget, bounded, cancelling, checked
from solver.domain.model import ReasonCode, SolveRequest, SolveStatus
from solver.domain.validate import validate
from solver.fallback import NORMALISE_LATE
from solver.reduce.intranode import hosts_some_member
from solver.reduce.normalise import normalise
from solver.reduce.policy import apply_policy_chains
from solver.reduce.pools import pool
from solver.service import wire
from solver.service.partial import answer_from_nodes_read
from solver.service.server import serve
from solver.solve import solve
from tests import kit
from topoplace.v1 import placement_pb2_grpc


@pytest.fixture(autouse=True)
def fresh_pace() -> Iterator[None]:
    """The pace is the process's: no test leaves its measures to the next."""
    PACE.forget()
    yield
    PACE.forget()


def unseen(request: SolveRequest) -> SolveRequest:
    """``request`` with node names and node kinds this process has never seen: new wire bytes (the
    server's node cache misses), new node objects, and a CPU count of this call's own, so that no
    memo kept by a node's content (its kind's validation and shape: solver.domain.nodekey) holds
    them either — an earlier test's nodes of the same generator made the call warm, read whole in
    time and searched. The devices kept for nodes built alike are forgotten by the test itself."""
    tag = uuid.uuid4().hex[:8]
    extra = 1 + int(tag, 16) % 997  # milli-CPUs: a kind no earlier call sent
    nodes = tuple(
        n.model_copy(update={"name": f"{tag}-{n.name}", "cpu_milli": n.cpu_milli + extra})
        for n in request.inventory.nodes
    )
    inventory = request.inventory.model_copy(update={"nodes": nodes})
    return request.model_copy(update={"inventory": inventory})


@pytest.fixture(scope="module")
def hgx_1024() -> SolveRequest:
    """bench.quality's 1,024 HGX nodes, half busy, 200 pending pods and gangs; a 20 s time limit,
    so that the deadline is what binds."""
    return quality.request(1024, 0.5, 200, seed=1, time_limit_s=20.0)


def test_a_cold_1024_node_call_with_a_short_deadline_is_answered_in_time_and_verified(
    hgx_1024: SolveRequest,
) -> None:
    """Before: converting, validating and normalising 1,024 new nodes (about 1 s) ran before any
    estimate, and the deadline stopped the call with nothing answered (DEADLINE_EXCEEDED)."""
    # Cold in devices too: nodes built like ones an earlier test sent would otherwise convert from
    # the devices kept for them (wire.DEVICES_CACHE).
    wire.forget_nodes()
    request = unseen(hgx_1024)
    running = serve("127.0.0.1", 0)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = placement_pb2_grpc.PlacementStub(channel)
            # The pipeline imported (OR-Tools) by a small call first: not what this test measures. Two
            # jobs, so the model's path runs (one pod is answered by enumeration: search/single.py).
            small = kit.request(kit.cluster(2), [kit.job("j", 1), kit.job("k", 1)])
            stub.Solve(wire.request_to_proto(small), timeout=60)
            # 0.5 s: since nodes built alike convert in 0.13 ms (session 29), a process could read
            # all 1,024 within 0.8 s and answer from the floor instead (CI saw it in session 30).
            response = stub.Solve(wire.request_to_proto(request), timeout=0.5)
    finally:
        running.stop(grace_s=None)
    result = wire.result_from_proto(response)
    assert result.status == SolveStatus.FEASIBLE
    assert result.plan_source.startswith("unsearched:first-fit"), result.plan_source
    assert any(job.placed for job in result.jobs)
    # Verified on the whole inventory, not only on the nodes read: the metrics are counted again
    # over all of them (the answer's own are the nodes read, as its plan_source says).
    whole = result.model_copy(update={"metrics": cluster_metrics(apply_policy_chains(request), result.jobs)})
    assert not verify(apply_policy_chains(request), whole)
    for job in result.jobs:
        if not job.placed:
            assert job.reason is not None and job.reason.code in (
                ReasonCode.TIME_LIMIT,
                ReasonCode.NO_NODE_FITS,
            )


def test_reading_stops_where_the_answer_would_no_longer_fit(hgx_1024: SolveRequest) -> None:
    """Room for exactly three nodes (each costs 300 s afterwards, 1,000 s are left): three are read,
    in wire order, and the answer from them is verified and says it read three of 1,024."""
    msg = wire.request_to_proto(
        hgx_1024.model_copy(
            update={
                "policy": hgx_1024.policy.model_copy(
                    update={"node_order": tuple(n.name for n in reversed(hgx_1024.inventory.nodes))}
                )
            }
        )
    )
    reading = wire.Reading(until=time.perf_counter() + 1000.0, after_s_per_node=300.0)
    part = wire.request_from_proto(msg, reading)
    assert [n.name for n in part.inventory.nodes] == [n.name for n in hgx_1024.inventory.nodes[:3]]
    assert set(part.policy.node_order) == {n.name for n in part.inventory.nodes}  # kept to the nodes read
    assert reading.misses <= 3
    result = answer_from_nodes_read(part, 1024, time.perf_counter() + 30.0)
    assert result.plan_source == "unsearched:first-fit:read-3-of-1024-nodes"
    assert not verify(apply_policy_chains(part), result)
    unplaced = [job for job in result.jobs if not job.placed]
    assert unplaced and all("only 3 of the 1,024 nodes" in job.reason.message for job in unplaced)
    # With no limit on reading, every node is read and nothing is said.
    assert len(wire.request_from_proto(msg, wire.Reading(until=float("inf"))).inventory.nodes) == 1024


def test_a_budget_spent_stops_its_stage_and_a_caller_gone_is_still_a_cancel() -> None:
    with pytest.raises(OutOfBudget, match="too late"), bounded(time.perf_counter() - 1, "too late"):
        list(checked(range(10)))
    caller = Cancel()
    caller.trip("the call ended")
    with (
        pytest.raises(Cancelled, match="the call ended"),
        cancelling(caller),
        bounded(time.perf_counter() + 60, "too late"),
    ):
        list(checked(range(10)))
    with bounded(time.perf_counter() + 60, "too late"):  # time to spare: the stage runs whole
        assert list(checked(range(10))) == list(range(10))


def test_normalise_cut_short_is_answered_by_the_greedy(hgx_1024: SolveRequest) -> None:
    """Cold nodes and a pace at which the greedy's answer alone needs all the time left: normalise
    stops at its first node and the greedy answers, verified, saying why no model was built."""
    request = unseen(hgx_1024)
    for _ in range(Pace.KEPT):
        PACE.observe(1.0, 8.0)  # measured 8x the fit: the cap
    result = solve(request, deadline_s=0.6)
    assert result.plan_source == "unsearched:first-fit"
    assert [t.stage for t in result.timings][:3] == ["validate", "normalise", "fallback"]
    assert not verify(apply_policy_chains(request), result)
    assert any(NORMALISE_LATE in job.reason.message for job in result.jobs if not job.placed)


def test_the_pace_is_the_median_of_recent_measures_never_below_the_fit() -> None:
    pace = Pace()
    assert pace.ratio() == 1.0
    for measured in (0.5, 3.0, 2.0):
        pace.observe(1.0, measured)
    assert pace.ratio() == 2.0
    pace.observe(0.001, 100.0)  # too short to say anything about the machine
    assert pace.ratio() == 2.0
    for _ in range(Pace.KEPT):
        pace.observe(1.0, 0.25)  # faster than the fit: the fit stands
    assert pace.ratio() == 1.0
    for _ in range(Pace.KEPT):
        pace.observe(1.0, 50.0)
    assert pace.ratio() == Pace.MOST


def test_the_estimate_scales_with_the_measured_pace(hgx_1024: SolveRequest) -> None:
    """At the fit's pace the 1,024-node model fits 1.5 s; measured 8x slower, it does not, and the
    same call is answered by the greedy instead of late."""
    pooled, _ = pool(apply_policy_chains(hgx_1024))
    problem = normalise(pooled, hosts_some_member)
    idle, slow = estimate(problem, pace=1.0), estimate(problem, pace=8.0)
    assert slow.build_s == pytest.approx(8 * idle.build_s)
    assert slow.answer_s == pytest.approx(8 * idle.answer_s)
    assert idle.fits(1.5) and not slow.fits(1.5)
    for _ in range(Pace.KEPT):
        PACE.observe(1.0, 8.0)
    assert estimate(problem) == slow
    assert solve(hgx_1024, deadline_s=1.5).plan_source == "unsearched:first-fit"
    PACE.forget()
    assert estimate(problem) == idle
    assert isinstance(idle, Estimate)
    assert solve(hgx_1024, deadline_s=1.5).plan_source != "unsearched:first-fit"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.one_of(
        kit.fabric_problems(max_nodes=6, max_jobs=6, spines=2), kit.small_problems(), kit.share_problems()
    ),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_a_plan_on_the_nodes_read_is_valid_on_the_whole_inventory(
    request: SolveRequest, share: float
) -> None:
    """The claim ``solver.service.partial`` rests on, over random requests (every member rule,
    locality, NVLink domains, shares, separation): read the first nodes only (a share of them, as a
    deadline would), answer from them, and the plan verifies on the whole request too (its cluster
    measures counted again over every node). A request valid whole is valid on its first nodes."""
    assume(not validate(request))
    nodes = len(request.inventory.nodes)
    read = min(nodes - 1, int(share * nodes)) if nodes > 1 else 0
    msg = wire.request_to_proto(request)
    # Room for exactly ``read`` nodes: each costs 1,000 s afterwards, ``read`` x 1,000 + 500 s are left.
    reading = wire.Reading(until=time.perf_counter() + 1000.0 * read + 500.0, after_s_per_node=1000.0)
    part = wire.request_from_proto(msg, reading)
    assert len(part.inventory.nodes) == read
    assert not validate(part)
    result = answer_from_nodes_read(part, nodes, time.perf_counter() + 60.0)
    assert result.plan_source == f"unsearched:first-fit:read-{read}-of-{nodes}-nodes"
    whole = apply_policy_chains(request)
    recounted = result.model_copy(update={"metrics": cluster_metrics(whole, result.jobs)})
    assert not verify(whole, recounted)


def test_a_node_read_is_charged_its_cold_answer_once_and_only_when_never_seen(hgx_1024: SolveRequest) -> None:
    """The placer stops early by the answer's extra cost on the nodes read never seen before, and
    only those: charged for every node read, a warm 16,384-node call with a 2 s deadline gave its
    placer no time (session 12). Their cold measures are not charged: the placer's setup pays them
    (``measures.measure_nodes``); until session 26 they were charged here and in the reading too, a
    second time, and a cold 1 s call at 4,096 nodes read 1,276 of its nodes and answered at 0.69 s."""
    from solver.compile.cost import VALIDATE_KNOWN_S_PER_NODE, VALIDATE_S_PER_NODE
    from solver.fallback import (
        ANSWER_COLD_S_PER_NODE,
        ANSWER_S_PER_NODE,
        PLACER_SETUP_S_PER_NODE,
        after_reading_s_per_node,
    )

    part = hgx_1024.model_copy(
        update={"inventory": hgx_1024.inventory.model_copy(update={"nodes": hgx_1024.inventory.nodes[:512]})}
    )
    seen: list[float] = []

    def placer(request, clock, deadline, *args, **kwargs):
        seen.append(deadline)
        raise Cancelled("enough: the placer's deadline is what this test reads")

    PACE.forget()
    deadline = time.perf_counter() + 30.0
    for misses in (0, 100, None):
        with patch("solver.service.partial.unsearched_with_orders", placer), pytest.raises(Cancelled):
            answer_from_nodes_read(part, 1024, deadline, misses=misses)
    cold = ANSWER_COLD_S_PER_NODE
    assert seen == pytest.approx([deadline, deadline - 100 * cold, deadline - 512 * cold])
    assert after_reading_s_per_node(1.0) == pytest.approx(
        (
            PLACER_SETUP_S_PER_NODE + ANSWER_S_PER_NODE,
            VALIDATE_KNOWN_S_PER_NODE + ANSWER_COLD_S_PER_NODE,
            VALIDATE_S_PER_NODE - VALIDATE_KNOWN_S_PER_NODE,
        )
    )
