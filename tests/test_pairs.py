"""Issue 21: the answer says which NIC serves which GPU — in the domain result, over the wire (proto and
JSON) and in the table — and the verifier refuses pairs that are not true."""

from __future__ import annotations

import json
from pathlib import Path

from solver.answer.verify import verify
from solver.cli import render_table
from solver.domain.model import (
    Alignment,
    Distance,
    GpuNicPair,
    Inventory,
    Job,
    MemberShape,
    NicMode,
    NicRequest,
    Node,
    Requirement,
    Role,
    SolveRequest,
)
from solver.domain.topology import gpu_nic_pairing
from solver.ingest.files import dump_result_json, load_result
from solver.service import wire
from solver.solve import solve

NODES = Path(__file__).resolve().parents[1] / "fixtures" / "nodes"


def nv12() -> Node:
    """The A100 NV12 server: GPU0/1 sit with mlx5_2/3, GPU2/3 with mlx5_0/1 — not GPU k with NIC k."""
    data = json.loads((NODES / "a100-nv12.json").read_text())
    return wire.request_from_dict({"inventory": {"nodes": [data]}}, "a100-nv12.json").inventory.nodes[0]


def request(node: Node, gpus: int, nics: NicRequest) -> SolveRequest:
    member = MemberShape(
        gpus=gpus, nics=nics, alignment=Alignment(mode=Requirement.REQUIRED, distance=Distance.PXB)
    )
    job = Job(id="j", roles=(Role(name="worker", replicas=1, member=member),))
    return SolveRequest(inventory=Inventory(nodes=(node,)), jobs=(job,))


def test_each_gpu_is_paired_with_a_nic_of_its_own_switch_group() -> None:
    node = nv12()
    req = request(node, 8, NicRequest(mode=NicMode.PER_GPU))
    result = solve(req)
    (member,) = result.jobs[0].members
    assert [p.gpu for p in member.pairs] == list(member.gpus)  # one pair per GPU, in GPU order
    assert len({p.nic for p in member.pairs}) == 8
    near = gpu_nic_pairing(node)
    for pair in member.pairs:
        assert pair.nic in near[pair.gpu], pair
        assert pair.distance <= Distance.PXB
    # GPU0's NIC is one of mlx5_2/3: the sorted NIC list alone would have suggested mlx5_0
    assert member.pairs[0].nic in {"mlx5_2", "mlx5_3"}


def test_pairs_travel_over_proto_and_json(tmp_path: Path) -> None:
    result = solve(request(nv12(), 4, NicRequest(mode=NicMode.PER_GPU)))
    assert wire.result_from_proto(wire.result_to_proto(result)) == result
    text = dump_result_json(result)
    assert '"pairs"' in text and '"distance": "DISTANCE_' in text
    path = tmp_path / "result.json"
    path.write_text(text)
    assert load_result(path).jobs[0].members[0].pairs == result.jobs[0].members[0].pairs


def test_the_table_lists_each_gpus_nic_in_gpu_order() -> None:
    req = request(nv12(), 8, NicRequest(mode=NicMode.PER_GPU))
    result = solve(req)
    (member,) = result.jobs[0].members
    row = next(line for line in render_table(req, result).splitlines() if line.startswith("j "))
    assert ",".join(p.nic for p in member.pairs) in row
    assert ",".join(member.gpus) in row


def test_nics_per_member_are_paired_with_their_nearest_gpu() -> None:
    result = solve(request(nv12(), 2, NicRequest(mode=NicMode.PER_MEMBER, count=1)))
    (member,) = result.jobs[0].members
    (pair,) = member.pairs
    assert pair.nic in member.nics and pair.gpu in member.gpus and pair.distance <= Distance.PXB


def test_the_verifier_refuses_a_false_pair() -> None:
    req = request(nv12(), 2, NicRequest(mode=NicMode.PER_GPU))
    result = solve(req)
    job = result.jobs[0]
    (member,) = job.members
    first, second = member.pairs
    lying = GpuNicPair(gpu=first.gpu, nic=first.nic, distance=Distance.SYS)
    swapped = member.model_copy(update={"pairs": (lying, second)})
    tampered = result.model_copy(update={"jobs": (job.model_copy(update={"members": (swapped,)}),)})
    (violation,) = verify(req, tampered)
    assert "says SYS but they are" in violation
    one_nic_twice = member.model_copy(update={"pairs": (first, first.model_copy(update={"gpu": second.gpu}))})
    tampered = result.model_copy(update={"jobs": (job.model_copy(update={"members": (one_nic_twice,)}),)})
    assert any("every GPU its own NIC" in v for v in verify(req, tampered))
