"""Proto ⇄ domain conversion (solver.service.wire) and request/result files (solver.ingest.files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import (
    DEFAULT_TIERS,
    BatchOrder,
    Distance,
    Inventory,
    JobResult,
    MemberPlacement,
    NicMode,
    ObjectiveTier,
    Packing,
    Reason,
    ReasonCode,
    Requirement,
    SolveRequest,
    SolveResult,
    SolveStatus,
    StageTiming,
    TierValue,
)
from solver.ingest.files import dump_request_json, dump_result_json, load_request, load_result
from solver.service import wire
from tests import kit
from topoplace.v1 import placement_pb2

# --------------------------------------------------------------------------- values used throughout


def rich_request() -> SolveRequest:
    """A request that sets every kind of field: maps, optionals at false/0, enums, nested lists."""
    old = kit.allocation("old", ["GPU0"], ["mlx5_0"])
    n0 = kit.node("n0", labels={"zone": "b", "pool": "a"}, allocations=[old])
    n1 = kit.node("n1", gpus=4, nics=2, leaf="leaf1")
    gpus = (n1.gpus[0].model_copy(update={"healthy": False, "numa": 0}), *n1.gpus[1:])
    nics = (n1.nics[0].model_copy(update={"rdma": False, "healthy": False, "rail": None}), *n1.nics[1:])
    n1 = n1.model_copy(update={"gpus": gpus, "nics": nics, "schedulable": False, "nvlink_domain": "rack1"})
    jobs = [
        kit.job(
            "train", 8, 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED, minimum=1, priority=10,
            labels={"team": "ml"},
        ),
        kit.job(
            "infer", 2, nics=NicMode.PER_MEMBER, align=Requirement.REQUIRED, distance=Distance.PXB,
            nic_count=1, numa=Requirement.PREFERRED, models=["H100-SXM5-80GB", "A100"],
        ),
    ]  # fmt: skip
    return kit.request(
        kit.inventory(n0, n1),
        jobs,
        request_id="req-1",
        objective=(ObjectiveTier.PACKING, ObjectiveTier.PLACED_WORK),
        packing=Packing.SPREAD,
        time_limit_s=2.5,
        seed=7,
        deterministic=False,
        workers=3,
    )


def rich_result() -> SolveResult:
    placed = JobResult(
        job_id="train",
        placed=True,
        members=(
            MemberPlacement(role="worker", index=0, node="n0", gpus=("GPU1",), nics=("mlx5_1",), numa=0),
            MemberPlacement(role="worker", index=1, node="n1", gpus=("GPU0",), aligned=False),
        ),
    )
    unplaced = JobResult(
        job_id="infer",
        placed=False,
        reason=Reason(code=ReasonCode.NO_NODE_FITS, message="no node has 2 GPUs", relaxation="ask for 1"),
    )
    return SolveResult(
        request_id="req-1",
        status=SolveStatus.FEASIBLE,
        jobs=(placed, unplaced),
        objectives=(TierValue(tier=ObjectiveTier.PLACED_WORK, value=16.0, bound=24.0, optimal=False),),
        gap=0.5,
        timings=(StageTiming(stage="solve", ms=12.5),),
    )


def base_proto() -> placement_pb2.SolveRequest:
    return wire.request_to_proto(
        kit.request(
            kit.inventory(kit.node("n0")),
            [kit.job("j", 8, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)],
        )
    )


def problems_of(call: object, *args: object) -> tuple[Problem, ...]:
    with pytest.raises(InvalidRequest) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value.problems


# --------------------------------------------------------------------------- round trips


def test_request_round_trip_is_equal() -> None:
    request = rich_request()
    assert wire.request_from_proto(wire.request_to_proto(request)) == request


def test_request_round_trip_through_bytes_is_equal() -> None:
    request = rich_request()
    wire_bytes = wire.request_to_proto(request).SerializeToString()
    assert wire.request_from_proto(placement_pb2.SolveRequest.FromString(wire_bytes)) == request


def test_result_round_trip_is_equal() -> None:
    result = rich_result()
    assert wire.result_from_proto(wire.result_to_proto(result)) == result


def test_unplaced_job_keeps_placed_false() -> None:
    """``placed: false`` is proto3's zero and is dropped on the wire; the domain requires the field."""
    msg = placement_pb2.SolveResponse.FromString(wire.result_to_proto(rich_result()).SerializeToString())
    assert wire.result_from_proto(msg).jobs[1].placed is False


# --------------------------------------------------------------------------- presence and defaults


@pytest.mark.parametrize(
    ("message_path", "field", "domain_path"),
    [
        ("inventory.nodes.0.gpus.0", "healthy", "inventory.nodes.0.gpus.0.healthy"),
        ("inventory.nodes.0.nics.0", "rdma", "inventory.nodes.0.nics.0.rdma"),
        ("inventory.nodes.0.nics.0", "healthy", "inventory.nodes.0.nics.0.healthy"),
        ("inventory.nodes.0", "schedulable", "inventory.nodes.0.schedulable"),
        ("policy", "deterministic", "policy.deterministic"),
    ],
)
def test_optional_bool_keeps_presence(message_path: str, field: str, domain_path: str) -> None:
    msg = base_proto()
    target = _walk(msg, message_path)

    setattr(target, field, False)
    assert _walk(wire.request_from_proto(msg), domain_path) is False, "explicit false must stay false"

    target.ClearField(field)
    assert _walk(wire.request_from_proto(msg), domain_path) is True, "unset must take the default"


def test_optional_aligned_keeps_presence() -> None:
    msg = wire.result_to_proto(rich_result())
    member = msg.jobs[0].members[0]
    member.aligned = False
    assert wire.result_from_proto(msg).jobs[0].members[0].aligned is False
    member.ClearField("aligned")
    assert wire.result_from_proto(msg).jobs[0].members[0].aligned is True


def test_optional_ints_keep_zero_and_unset_apart() -> None:
    msg = base_proto()
    msg.inventory.nodes[0].gpus[0].numa = 0
    msg.inventory.nodes[0].gpus[1].ClearField("numa")
    msg.jobs[0].roles[0].ClearField("min_replicas")
    request = wire.request_from_proto(msg)
    assert request.inventory.nodes[0].gpus[0].numa == 0
    assert request.inventory.nodes[0].gpus[1].numa is None
    assert request.jobs[0].roles[0].min_replicas is None


def test_zero_enums_and_scalars_mean_the_domain_default() -> None:
    msg = base_proto()
    member = msg.jobs[0].roles[0].member
    member.alignment.distance = placement_pb2.DISTANCE_UNSPECIFIED
    member.nics.mode = placement_pb2.NIC_MODE_UNSPECIFIED
    msg.policy.time_limit_s = 0
    del msg.policy.objective[:]
    request = wire.request_from_proto(msg)
    assert request.jobs[0].roles[0].member.alignment.distance == Distance.PIX
    assert request.jobs[0].roles[0].member.nics.mode == NicMode.NONE
    assert request.policy.time_limit_s == 10.0
    assert request.policy.objective == DEFAULT_TIERS


def test_empty_request_is_an_empty_inventory() -> None:
    request = wire.request_from_proto(placement_pb2.SolveRequest(inventory=placement_pb2.Inventory()))
    assert request == SolveRequest(inventory=Inventory())


def _walk(root: object, dotted: str) -> object:
    for part in dotted.split("."):
        root = root[int(part)] if part.isdigit() else getattr(root, part)  # type: ignore[index]
    return root


# --------------------------------------------------------------------------- domain errors get paths


def test_a_field_rule_becomes_a_problem_with_its_path() -> None:
    inventory = kit.inventory(kit.node("n0"), kit.node("n1"))
    msg = wire.request_to_proto(
        kit.request(inventory, [kit.job("j", 8, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)])
    )
    msg.inventory.nodes[1].gpus[3].index = -1
    expected = Problem(path="inventory.nodes[1].gpus[3].index", message="must be at least 0, got -1")
    assert problems_of(wire.request_from_proto, msg) == (expected,)


def test_a_zero_required_count_reads_as_a_value_not_as_missing() -> None:
    msg = base_proto()
    msg.jobs[0].roles[0].replicas = 0
    problems = problems_of(wire.request_from_proto, msg)
    assert problems == (Problem(path="jobs[0].roles[0].replicas", message="must be at least 1, got 0"),)


def test_every_field_problem_is_reported_at_once() -> None:
    msg = base_proto()
    msg.inventory.nodes[0].name = ""
    msg.inventory.nodes[0].memory_mib = -5
    msg.jobs[0].roles[0].member.alignment.distance = 9  # open enum: the wire takes unknown numbers
    msg.jobs[0].roles[0].ClearField("member")
    paths = {p.path: p.message for p in problems_of(wire.request_from_proto, msg)}
    assert paths == {
        "inventory.nodes[0].name": "must not be empty",
        "inventory.nodes[0].memory_mib": "must be at least 0, got -5",
        "jobs[0].roles[0].member": "is required",
    }


def test_unknown_enum_number_names_the_allowed_numbers() -> None:
    msg = base_proto()
    msg.jobs[0].roles[0].member.alignment.distance = 9
    (problem,) = problems_of(wire.request_from_proto, msg)
    assert problem.path == "jobs[0].roles[0].member.alignment.distance"
    assert "got 9" in problem.message


def test_job_without_roles_is_one_problem() -> None:
    msg = base_proto()
    del msg.jobs[0].roles[:]
    assert problems_of(wire.request_from_proto, msg) == (
        Problem(path="jobs[0].roles", message="must have at least 1 item(s), got 0"),
    )


def test_a_domain_value_too_big_for_the_wire_is_bad_input() -> None:
    request = kit.request(kit.inventory(), seed=2**40)
    (problem,) = problems_of(wire.request_to_proto, request)
    assert problem.path == "policy.seed"
    assert "out of range" in problem.message


# --------------------------------------------------------------------------- JSON text


def test_json_in_proto_or_camel_case_names_reads_the_same() -> None:
    snake = '{"inventory": {"nodes": [{"name": "n0", "pcie_switches": [{"id": "sw0"}]}]}, "request_id": "r"}'
    camel = '{"inventory": {"nodes": [{"name": "n0", "pcieSwitches": [{"id": "sw0"}]}]}, "requestId": "r"}'
    assert wire.request_from_json_text(snake, "a.json") == wire.request_from_json_text(camel, "b.json")


def test_batch_order_reads_from_json_and_unset_means_joint() -> None:
    text = '{"inventory": {}, "policy": {"batch_order": "BATCH_ORDER_LARGEST_FIRST"}}'
    assert wire.request_from_json_text(text, "a.json").policy.batch_order == BatchOrder.LARGEST_FIRST
    text = '{"inventory": {}, "policy": {"batch_order": "BATCH_ORDER_BEST_OF_ORDERS"}}'
    assert wire.request_from_json_text(text, "c.json").policy.batch_order == BatchOrder.BEST_OF_ORDERS
    unset = wire.request_from_json_text('{"inventory": {}}', "b.json").policy.batch_order
    assert unset == BatchOrder.UNSPECIFIED  # solved as JOINT


def test_order_shuffles_keeps_zero_and_unset_apart_and_names_a_bad_count() -> None:
    def read(policy: str) -> SolveRequest:
        return wire.request_from_json_text(f'{{"inventory": {{}}, "policy": {policy}}}', "p.json")

    assert read('{"orderShuffles": 0}').policy.order_shuffles == 0  # no shuffles, not the default
    assert read("{}").policy.order_shuffles == 3
    with pytest.raises(InvalidRequest) as bad:
        read('{"order_shuffles": 65}')
    assert [p.path for p in bad.value.problems] == ["policy.order_shuffles"]


def test_json_optional_false_stays_false() -> None:
    text = '{"inventory": {"nodes": [{"name": "n0", "gpus": [{"id": "GPU0", "healthy": false}]}]}}'
    assert wire.request_from_json_text(text, "x.json").inventory.nodes[0].gpus[0].healthy is False


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        ('{\n  "jobs": [}', "in.json:2:12", ["invalid JSON"]),
        ('{"bogus": 1}', "in.json", ["bogus", "known fields", "inventory"]),
        ('{"jobs": [{"id": "j", "bogus": 1}]}', "in.json", ["jobs[0]", "bogus"]),
        ('{"jobs": [{"roles": [{"member": {"alignment": {"mode": "REQUIREMENT_MAYBE"}}}]}]}', "in.json",
         ["jobs[0].roles[0].member.alignment.mode", "REQUIREMENT_MAYBE"]),
        ('{"policy": {"seed": "x"}}', "in.json", ["policy.seed"]),
        ('{"inventory": {}, "inventory": {}}', "in.json", ["'inventory'", "more than once"]),
        ("[]", "in.json", ["top level must be an object"]),
    ],
)  # fmt: skip
def test_json_errors_name_source_place_and_reason(text: str, path: str, words: list[str]) -> None:
    (problem,) = problems_of(wire.request_from_json_text, text, "in.json")
    assert problem.path == path
    for word in words:
        assert word in problem.message


def test_node_to_json_reads_back_inside_a_request() -> None:
    node = kit.node("n0")
    text = '{"inventory": {"nodes": [' + wire.node_to_json(node) + "]}}"
    assert wire.request_from_json_text(text, "x.json").inventory.nodes == (node,)


# --------------------------------------------------------------------------- files


def test_json_file_round_trip(tmp_path: Path) -> None:
    request = rich_request()
    path = tmp_path / "req.json"
    path.write_text(dump_request_json(request))
    assert load_request(path) == request


def test_yaml_file_reads_like_the_json_file(tmp_path: Path) -> None:
    request = rich_request()
    path = tmp_path / "req.yaml"
    path.write_text(yaml.safe_dump(json.loads(dump_request_json(request))))
    assert load_request(path) == request


def test_result_file_round_trip(tmp_path: Path) -> None:
    result = rich_result()
    path = tmp_path / "result.json"
    path.write_text(dump_result_json(result))
    assert load_result(path) == result


def test_dump_is_stable_whatever_the_label_order() -> None:
    forward = kit.request(kit.inventory(kit.node("n0", labels={"a": "1", "b": "2"})))
    backward = kit.request(kit.inventory(kit.node("n0", labels={"b": "2", "a": "1"})))
    assert dump_request_json(forward) == dump_request_json(backward)
    assert '"pcie_switches"' in dump_request_json(forward), "files use proto field names"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    assert problems_of(load_request, path) == (Problem(path=str(path), message="no such file"),)


def test_bad_json_file_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "inventory": {\n    "nodes": [,]\n  }\n}\n')
    (problem,) = problems_of(load_request, path)
    assert problem.path == f"{path}:3:15"
    assert problem.message.startswith("invalid JSON")


def test_bad_yaml_file_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("inventory:\n  nodes:\n    - name: n0\n   bad: [\n")
    (problem,) = problems_of(load_request, path)
    assert problem.path.startswith(f"{path}:4:")
    assert problem.message.startswith("invalid YAML")


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_unknown_field_in_a_file_is_named(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"req{suffix}"
    path.write_text('{"inventory": {"nodes": [{"name": "n0", "gpuz": []}]}}')  # JSON is YAML too
    (problem,) = problems_of(load_request, path)
    assert problem.path == str(path)
    assert "inventory.nodes[0]" in problem.message
    assert '"gpuz"' in problem.message


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("empty.yaml", "", "is empty"),
        ("list.yaml", "- 1\n", "top level must be an object, got list"),
        ("req.txt", "{}", "unknown file type; expected one of .json, .yaml, .yml"),
    ],
)
def test_file_shape_errors(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert problems_of(load_request, path) == (Problem(path=str(path), message=message),)


def test_field_rule_in_a_file_keeps_its_field_path(tmp_path: Path) -> None:
    path = tmp_path / "req.yaml"
    path.write_text("inventory: {}\njobs:\n  - id: j\n    roles:\n      - name: w\n        replicas: 0\n"
                    "        member: {gpus: 1}\n")  # fmt: skip
    assert problems_of(load_request, path) == (
        Problem(path="jobs[0].roles[0].replicas", message="must be at least 1, got 0"),
    )


def test_unchanged_nodes_are_converted_once_and_changed_ones_again() -> None:
    """The wire layer remembers nodes by their bytes (schedulers resend the same inventory): the
    same node comes back as the same object, a changed one as a new, correct one, and a bad node is
    still refused at its own index."""

    req = kit.request([kit.node("n0", kit.SMALL), kit.node("n1", kit.SMALL)], [kit.job("a", 1)])
    msg = wire.request_to_proto(req)
    first, second = wire.request_from_proto(msg), wire.request_from_proto(msg)
    assert first == req and first.inventory.nodes[1] is second.inventory.nodes[1]
    msg.inventory.nodes[1].allocations.add(owner="new", gpus=["GPU0"])
    changed = wire.request_from_proto(msg)
    assert changed.inventory.nodes[1].allocations[0].owner == "new"
    assert changed.inventory.nodes[0] is first.inventory.nodes[0]
    msg.inventory.nodes[1].gpus[0].index = -1
    with pytest.raises(InvalidRequest) as caught:
        wire.request_from_proto(msg)
    assert [p.path for p in caught.value.problems] == ["inventory.nodes[1].gpus[0].index"]
