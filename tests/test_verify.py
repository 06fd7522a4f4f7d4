"""The independent verifier: a hand-made valid placement passes, each kind of violation is caught,
and on random inventories and placements its verdict equals a brute-force oracle written another way."""

from __future__ import annotations

import ast
from collections import Counter
from itertools import combinations, permutations
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import solver.answer.verify
import solver.domain.fragmentation
from solver.answer.verify import verify
from solver.answer.verify.alignment import perfect_matching
from solver.domain.model import (
    Allocation,
    ClusterMetrics,
    Distance,
    Gpu,
    JobResult,
    MemberPlacement,
    MemberShape,
    Nic,
    NicMode,
    Node,
    NvLink,
    PcieSwitch,
    Reason,
    ReasonCode,
    Requirement,
    SolveRequest,
    SolveResult,
    SwitchKind,
    WorkloadShape,
)
from tests import kit

REQ, PREF = Requirement.REQUIRED, Requirement.PREFERRED
FOUR = ("GPU0", "GPU1", "GPU2", "GPU3")
FOUR_NICS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")

# --------------------------------------------------------------------------- the hand-made case

TRAIN = kit.job(
    "train",
    roles=(
        kit.role(
            "worker",
            2,
            kit.shape(
                4,
                nics=NicMode.PER_GPU,
                align=REQ,
                numa=REQ,
                nvlink=REQ,
                cpu_milli=32_000,
                memory_mib=200_000,
                models=("H100",),
                selector={"pool": "train"},
            ),
        ),
    ),
)
INFER = kit.job(
    "infer",
    roles=(
        kit.role(
            "prefill",
            1,
            kit.shape(2, nics=NicMode.PER_MEMBER, nic_count=1, align=PREF, distance=Distance.PHB),
        ),
        kit.role("decode", 2, kit.shape(1, cpu_milli=8_000), min_replicas=1),
    ),
)
BIG = kit.job("big", roles=(kit.role("worker", 64, kit.shape(8)),))
POD_A = Allocation(
    owner="pod-a", gpus=("GPU6", "GPU7"), nics=("mlx5_6",), cpu_milli=16_000, memory_mib=100_000
)

REQUEST = kit.request(
    [
        kit.node("dgx-01", kit.DISTANCE_TREE, allocations=[POD_A]),
        kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED),
        kit.node("dgx-03", kit.DISTANCE_TREE, schedulable=False),
    ],
    [TRAIN, INFER, BIG],
)
# dgx-02 is crossed: mlx5_0/1 sit next to GPU2/3 and mlx5_2/3 next to GPU0/1, so the worker there is
# aligned only through a matching that does not pair GPU k with NIC k.
TRAIN_OK = kit.placed(
    "train",
    kit.member("worker", 0, "dgx-01", FOUR, FOUR_NICS, numa=0),
    kit.member("worker", 1, "dgx-02", FOUR, FOUR_NICS, numa=0),
)
INFER_OK = kit.placed(
    "infer",
    kit.member("prefill", 0, "dgx-01", ("GPU4", "GPU5"), ("mlx5_4",), aligned=True),
    kit.member("decode", 1, "dgx-02", ("GPU4",)),
)
VALID = kit.result(REQUEST, TRAIN_OK, INFER_OK, kit.unplaced("big"))


def with_jobs(*jobs: JobResult, req: SolveRequest = REQUEST) -> SolveResult:
    """The valid result with some job answers replaced (by id), metrics recomputed."""
    replaced = {jr.job_id: jr for jr in jobs}
    kept = [replaced.pop(jr.job_id, jr) for jr in VALID.jobs]
    return kit.result(req, *kept, *replaced.values())


def with_train(*members: MemberPlacement) -> SolveResult:
    return with_jobs(kit.placed("train", *members))


def worker(
    index: int = 0,
    node: str = "dgx-01",
    gpus: tuple[str, ...] = FOUR,
    nics: tuple[str, ...] = FOUR_NICS,
    numa: int | None = 0,
) -> MemberPlacement:
    """A train worker: by default the four GPUs and NICs under hb0/psw0, on NUMA node 0."""
    return kit.member("worker", index, node, gpus, nics, numa=numa)


def only(violations: tuple[str, ...], *words: str) -> str:
    """The single violation, which must mention every word."""
    assert len(violations) == 1, violations
    for word in words:
        assert word in violations[0], (word, violations[0])
    return violations[0]


def test_valid_placement_passes() -> None:
    assert verify(REQUEST, VALID) == ()


# --------------------------------------------------------------------------- devices


def test_gpu_given_to_two_members() -> None:
    v = verify(REQUEST, with_train(worker(0), worker(1, nics=("mlx5_4", "mlx5_5", "mlx5_8", "mlx5_7"))))
    assert any("GPU GPU0 is also given to job train role worker member 0" in s for s in v), v
    assert any("job train role worker member 1 on dgx-01" in s for s in v)


def test_nic_given_to_two_jobs() -> None:
    prefill = kit.member("prefill", 0, "dgx-01", ("GPU4", "GPU5"), ("mlx5_0",))  # PHB: aligned
    v = verify(REQUEST, with_jobs(kit.placed("infer", prefill, kit.member("decode", 0, "dgx-02", ("GPU4",)))))
    only(v, "job infer role prefill member 0 on dgx-01", "NIC mlx5_0 is also given to job train")


def test_allocated_gpu() -> None:
    prefill = kit.member("prefill", 0, "dgx-01", ("GPU6", "GPU5"), ("mlx5_4",))
    v = verify(REQUEST, with_jobs(kit.placed("infer", prefill, *INFER_OK.members[1:])))
    only(v, "job infer role prefill member 0 on dgx-01: GPU GPU6 is already allocated to pod-a")


def test_allocated_nic() -> None:
    prefill = kit.member("prefill", 0, "dgx-01", ("GPU4", "GPU5"), ("mlx5_6",), aligned=False)
    v = verify(REQUEST, with_jobs(kit.placed("infer", prefill, *INFER_OK.members[1:])))
    only(v, "NIC mlx5_6 is already allocated to pod-a")


def test_unhealthy_gpu_and_nic() -> None:
    req = kit.request(
        [
            kit.node("dgx-01", kit.DISTANCE_TREE, unhealthy=["GPU2", "mlx5_3"]),
            kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED),
        ],
        [TRAIN],
    )
    v = verify(req, kit.result(req, TRAIN_OK))
    assert sorted(v) == [
        "job train role worker member 0 on dgx-01: GPU GPU2 is unhealthy",
        "job train role worker member 0 on dgx-01: NIC mlx5_3 is unhealthy",
    ]


def test_nic_without_rdma() -> None:
    req = kit.request(
        [
            kit.node("dgx-01", kit.DISTANCE_TREE, no_rdma=["mlx5_1"]),
            kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED),
        ],
        [TRAIN],
    )
    only(verify(req, kit.result(req, TRAIN_OK)), "NIC mlx5_1 is not an RDMA NIC")


def test_device_that_does_not_exist() -> None:
    v = verify(REQUEST, with_train(worker(0, gpus=("GPU0", "GPU1", "GPU2", "GPU9")), worker(1, "dgx-02")))
    only(v, "member 0 on dgx-01: GPU GPU9 does not exist on the node")


def test_wrong_gpu_and_nic_counts_and_repeats() -> None:
    v = verify(REQUEST, with_train(worker(0, gpus=("GPU0", "GPU0", "GPU1")), worker(1, "dgx-02")))
    assert "job train role worker member 0 on dgx-01: has 3 GPUs but the role asks for 4" in v
    assert "job train role worker member 0 on dgx-01: GPU GPU0 is listed 2 times" in v
    v = verify(REQUEST, with_train(worker(0, nics=("mlx5_0",)), worker(1, "dgx-02")))
    assert any("has 1 NICs but the role asks for 4 (PER_GPU)" in s for s in v), v


def test_member_with_nics_it_did_not_ask_for() -> None:
    v = verify(
        REQUEST, with_jobs(kit.placed("infer", kit.member("decode", 0, "dgx-02", ("GPU4",), ("mlx5_4",))))
    )
    assert "job infer role decode member 0 on dgx-02: has 1 NICs but the role asks for 0 (NONE)" in v


# --------------------------------------------------------------------------- nodes


def test_node_that_does_not_exist() -> None:
    only(
        verify(REQUEST, with_train(worker(0), worker(1, "dgx-99"))),
        "member 1 on dgx-99: node dgx-99 does not exist",
    )


def test_unschedulable_node() -> None:
    only(verify(REQUEST, with_train(worker(0), worker(1, "dgx-03"))), "member 1 on dgx-03", "not schedulable")


def test_node_selector_mismatch() -> None:
    req = kit.request(
        [
            kit.node("dgx-01", kit.DISTANCE_TREE),
            kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED, labels={"pool": "infer"}),
        ],
        [TRAIN],
    )
    only(
        verify(req, kit.result(req, TRAIN_OK)),
        "member 1 on dgx-02",
        "node selector pool=train",
        "(pool=infer)",
    )
    req = kit.request(
        [kit.node("dgx-01", kit.DISTANCE_TREE), kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED, labels={})],
        [TRAIN],
    )
    only(verify(req, kit.result(req, TRAIN_OK)), "no such label")


def test_wrong_gpu_model() -> None:
    req = kit.request(
        [kit.node("dgx-01", kit.DISTANCE_TREE), kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED, model="A100")],
        [TRAIN],
    )
    v = verify(req, kit.result(req, TRAIN_OK))
    assert len(v) == 4
    assert "job train role worker member 1 on dgx-02: GPU GPU0 is a A100, not one of H100" in v


def test_cpu_and_memory_overflow() -> None:
    req = kit.request(
        [
            kit.node("dgx-01", kit.DISTANCE_TREE, cpu_milli=40_000, memory_mib=300_000),
            kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED),
        ],
        [TRAIN],
    )
    two = kit.result(req, TRAIN_OK)
    assert verify(req, two) == ()  # one worker fits
    crowded = kit.placed(
        "train", worker(0), worker(1, gpus=("GPU4", "GPU5", "GPU6", "GPU7"), nics=("mlx5_4",) * 4)
    )
    v = verify(req, kit.result(req, crowded))
    assert "node dgx-01: members of job train ask for 64000 milli-CPU but only 40000 are free" in v
    assert "node dgx-01: members of job train ask for 400000 MiB of memory but only 300000 are free" in v


def test_allocations_count_against_free_cpu() -> None:
    held = Allocation(owner="pod-b", cpu_milli=100_000)
    req = kit.request(
        [
            kit.node("dgx-01", kit.DISTANCE_TREE, allocations=[held]),
            kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED),
        ],
        [TRAIN],
    )
    only(verify(req, kit.result(req, TRAIN_OK)), "node dgx-01", "32000 milli-CPU but only 28000 are free")


def test_untracked_cpu_has_no_limit() -> None:
    req = kit.request(
        [
            kit.node("dgx-01", kit.DISTANCE_TREE, cpu_milli=0, memory_mib=0),
            kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED),
        ],
        [TRAIN],
    )
    assert verify(req, kit.result(req, TRAIN_OK)) == ()


# --------------------------------------------------------------------------- gangs and jobs


def test_incomplete_gang() -> None:
    only(verify(REQUEST, with_train(worker(0))), "job train role worker", "1 members", "at least 2")


def test_too_many_members_and_bad_indexes() -> None:
    v = verify(
        REQUEST,
        with_jobs(
            kit.placed(
                "infer",
                kit.member("prefill", 0, "dgx-01", ("GPU4", "GPU5"), ("mlx5_4",)),
                kit.member("decode", 1, "dgx-02", ("GPU4",)),
                kit.member("decode", 1, "dgx-02", ("GPU5",)),
                kit.member("decode", 2, "dgx-02", ("GPU6",)),
            )
        ),
    )
    assert "job infer role decode is placed with 3 members but has only 2 replicas" in v
    assert "job infer role decode member 1 is placed 2 times" in v
    assert "job infer role decode member 2 is out of range (2 replicas)" in v


def test_member_of_unknown_role() -> None:
    v = verify(
        REQUEST,
        with_jobs(kit.placed("infer", *INFER_OK.members, kit.member("ghost", 0, "dgx-02", ("GPU5",)))),
    )
    only(v, "job infer lists member 0 of role ghost")


def test_unknown_missing_and_repeated_jobs() -> None:
    v = verify(REQUEST, kit.result(REQUEST, TRAIN_OK, INFER_OK, INFER_OK, kit.unplaced("nope")))
    assert "job nope is in the result but not in the request" in v
    assert "job big of the request is missing from the result" in v
    assert "job infer appears 2 times in the result" in v


def test_unplaced_job_without_reason_or_with_members() -> None:
    v = verify(REQUEST, with_jobs(JobResult(job_id="big", placed=False)))
    only(v, "job big is not placed but gives no reason")
    reason = Reason(code=ReasonCode.NO_NODE_FITS, message="x")
    v = verify(
        REQUEST,
        with_jobs(
            JobResult(job_id="big", placed=False, members=(kit.member("worker", 0, "dgx-01"),), reason=reason)
        ),
    )
    only(v, "job big is not placed but lists 1 members")


def test_placed_job_with_a_reason_is_fine() -> None:
    reason = Reason(code=ReasonCode.OUTPRIORITISED, message="only one decode fits")
    assert verify(REQUEST, with_jobs(INFER_OK.model_copy(update={"reason": reason}))) == ()


# --------------------------------------------------------------------------- topology


def test_misaligned_required_pair_on_crossed_node() -> None:
    # On dgx-02, GPU0/1 are next to mlx5_2/3: giving a worker GPU0, GPU1, GPU4, GPU5 with mlx5_0, mlx5_1,
    # mlx5_4, mlx5_5 pairs GPU k with NIC k by name, yet GPU0 and GPU1 have no PIX NIC.
    train = kit.job("train", roles=(kit.role("worker", 1, kit.shape(4, nics=NicMode.PER_GPU, align=REQ)),))
    req = kit.request([kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED)], [train])
    bad = kit.member(
        "worker", 0, "dgx-02", ("GPU0", "GPU1", "GPU4", "GPU5"), ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5")
    )
    v = verify(req, kit.result(req, kit.placed("train", bad)))
    assert len(v) == 2, v
    assert v[0] == (
        "job train role worker member 0 on dgx-02: alignment is REQUIRED but its GPUs cannot each be "
        "paired with their own NIC at PIX or closer"
    )
    assert "aligned is True but the REQUIRED alignment does not hold" in v[1]
    good = bad.model_copy(update={"nics": ("mlx5_3", "mlx5_2", "mlx5_5", "mlx5_4")})
    assert verify(req, kit.result(req, kit.placed("train", good))) == ()


@pytest.mark.parametrize(
    ("nic", "distance", "holds"),
    [
        ("mlx5_0", Distance.PIX, True),
        ("mlx5_2", Distance.PIX, False),
        ("mlx5_2", Distance.PXB, True),
        ("mlx5_4", Distance.PXB, False),
        ("mlx5_4", Distance.PHB, True),
        ("mlx5_8", Distance.PHB, False),
        ("mlx5_8", Distance.NODE, True),
        ("mlx5_6", Distance.NODE, False),
        ("mlx5_6", Distance.SYS, True),
        ("mlx5_0", Distance.UNSPECIFIED, True),
        ("mlx5_2", Distance.UNSPECIFIED, False),  # UNSPECIFIED means PIX
    ],
)
def test_every_distance_class(nic: str, distance: Distance, holds: bool) -> None:
    solo = kit.job(
        "solo",
        roles=(
            kit.role(
                "r", 1, kit.shape(1, nics=NicMode.PER_MEMBER, nic_count=1, align=REQ, distance=distance)
            ),
        ),
    )
    req = kit.request([kit.node("dgx-01", kit.DISTANCE_TREE)], [solo])
    v = verify(req, kit.result(req, kit.placed("solo", kit.member("r", 0, "dgx-01", ("GPU0",), (nic,)))))
    assert (v == ()) == holds, v


def test_per_member_nic_needs_one_near_gpu() -> None:
    solo = kit.job(
        "solo", roles=(kit.role("r", 1, kit.shape(2, nics=NicMode.PER_MEMBER, nic_count=2, align=REQ)),)
    )
    req = kit.request([kit.node("dgx-01", kit.DISTANCE_TREE)], [solo])
    ok = kit.member("r", 0, "dgx-01", ("GPU0", "GPU2"), ("mlx5_1", "mlx5_3"))  # each NIC near some GPU
    assert verify(req, kit.result(req, kit.placed("solo", ok))) == ()
    far = ok.model_copy(update={"nics": ("mlx5_1", "mlx5_5")})
    v = verify(req, kit.result(req, kit.placed("solo", far)))
    assert "NIC mlx5_5 is farther than PIX from every GPU of the member" in v[0]


def test_wrong_aligned_flag_on_preferred() -> None:
    prefill = kit.member("prefill", 0, "dgx-01", ("GPU4", "GPU5"), ("mlx5_4",), aligned=False)
    v = verify(REQUEST, with_jobs(kit.placed("infer", prefill, *INFER_OK.members[1:])))
    only(v, "job infer role prefill member 0 on dgx-01: aligned is False but the PREFERRED alignment holds")
    far = kit.member("prefill", 0, "dgx-01", ("GPU4", "GPU5"), ("mlx5_8",), aligned=True)  # NODE > PHB
    v = verify(REQUEST, with_jobs(kit.placed("infer", far, *INFER_OK.members[1:])))
    only(v, "aligned is True but the PREFERRED alignment does not hold", "mlx5_8 is farther than PHB")
    assert (
        verify(
            REQUEST,
            with_jobs(kit.placed("infer", far.model_copy(update={"aligned": False}), *INFER_OK.members[1:])),
        )
        == ()
    )


def test_aligned_flag_ignored_without_alignment_rule() -> None:
    decode = kit.member("decode", 0, "dgx-02", ("GPU4",), aligned=False)
    assert verify(REQUEST, with_jobs(kit.placed("infer", INFER_OK.members[0], decode))) == ()


def test_numa_split_and_wrong_numa() -> None:
    split = worker(0, gpus=("GPU4", "GPU5", "GPU6", "GPU7"), nics=("mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"))
    req = kit.request(
        [kit.node("dgx-01", kit.DISTANCE_TREE), kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED)], [TRAIN]
    )
    v = verify(req, kit.result(req, kit.placed("train", split, worker(1, "dgx-02"))))
    only(
        v, "member 0 on dgx-01: NUMA is REQUIRED but its devices are not on one NUMA node", "GPU6@1", "GPU4@0"
    )
    v = verify(req, kit.result(req, kit.placed("train", worker(0, numa=1), worker(1, "dgx-02"))))
    only(v, "member 0 on dgx-01: numa is 1 but its devices are on NUMA node 0")
    v = verify(req, kit.result(req, kit.placed("train", worker(0, numa=None), worker(1, "dgx-02"))))
    only(v, "numa is None")


def test_unknown_numa_breaks_required_numa() -> None:
    node = kit.node("dgx-01", kit.DISTANCE_TREE)
    node = node.model_copy(update={"gpus": (node.gpus[0].model_copy(update={"numa": None}), *node.gpus[1:])})
    req = kit.request([node, kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED)], [TRAIN])
    only(verify(req, kit.result(req, TRAIN_OK)), "GPU0@unknown")


def test_missing_nvlink() -> None:
    pairs = (NvLink(gpu_a="GPU0", gpu_b="GPU1"), NvLink(gpu_a="GPU3", gpu_b="GPU2"))
    full = tuple(NvLink(gpu_a=a, gpu_b=b) for a, b in combinations(FOUR, 2))
    req = kit.request(
        [
            kit.node("dgx-01", kit.DISTANCE_TREE, nvlinks=pairs),
            kit.node("dgx-02", kit.DISTANCE_TREE_CROSSED, nvlinks=full[::-1]),
        ],
        [TRAIN],
    )
    v = verify(req, kit.result(req, TRAIN_OK))
    assert len(v) == 4
    assert (
        "job train role worker member 0 on dgx-01: NVLink is REQUIRED but "
        "GPU GPU0 and GPU GPU2 are not NVLinked" in v
    )


# --------------------------------------------------------------------------- metrics


def test_metrics_must_match() -> None:
    # dgx-01 holds pod-a's GPUs, dgx-02 is whole until train lands on it, dgx-03 is cordoned.
    # Fragmentation, against the batch's four member shapes (8, 4, 2 and 1 GPU, a quarter each):
    # before, dgx-01's 6 free GPUs cannot host the 8-GPU shape (6 x 1/4 = 1.5); after, infer leaves
    # it 3, which neither the 8- nor the 4-GPU shape can use (3 x 1/2 = 1.5) and train fills dgx-02.
    right = ClusterMetrics(
        gpus_total=16,
        gpus_used_before=2,
        gpus_used_after=13,
        nodes_fully_free_before=1,
        nodes_fully_free_after=0,
        fragmentation_before=1.5,
        fragmentation_after=1.5,
    )
    assert VALID.metrics == right
    wrong = right.model_copy(
        update={
            "gpus_total": 24,
            "gpus_used_after": 11,
            "nodes_fully_free_after": 1,
            "fragmentation_after": 0.0,
        }
    )
    assert verify(REQUEST, VALID.model_copy(update={"metrics": wrong})) == (
        "metrics: gpus_total is 24 but the inventory and placement give 16",
        "metrics: gpus_used_after is 11 but the inventory and placement give 13",
        "metrics: nodes_fully_free_after is 1 but the inventory and placement give 0",
        "metrics: fragmentation_after is 0.0 but the inventory and placement give 1.5",
    )


def test_metrics_of_an_empty_plan() -> None:
    req = kit.request(
        [
            kit.node("dgx-01", kit.DISTANCE_TREE),
            kit.node("dgx-02", kit.DISTANCE_TREE, allocations=[Allocation(owner="x", cpu_milli=1)]),
        ],
        [BIG],
    )
    res = kit.result(req, kit.unplaced("big"))
    assert res.metrics == ClusterMetrics(
        gpus_total=16,
        gpus_used_before=0,
        gpus_used_after=0,
        nodes_fully_free_before=2,
        nodes_fully_free_after=2,
    )  # no fragmentation: both nodes can host the only shape, 8 GPUs
    assert verify(req, res) == ()


def test_metrics_are_checked_against_each_request_s_own_workload() -> None:
    # The same node objects under another profile: the verifier remembers what it measured of a
    # node, and must not hand the first profile's measure to the second request.
    assert verify(REQUEST, VALID) == ()
    ones = REQUEST.policy.model_copy(update={"workload": (WorkloadShape(gpus=1, popularity=1),)})
    other = REQUEST.model_copy(update={"policy": ones})
    assert other.inventory.nodes[0] is REQUEST.inventory.nodes[0]
    res = kit.result(other, TRAIN_OK, INFER_OK, kit.unplaced("big"))
    assert (
        res.metrics.fragmentation_before == 0.0 != VALID.metrics.fragmentation_before
    )  # 1-GPU pods fit anywhere
    assert verify(other, res) == ()


# =========================================================================== property tests
#
# The oracles below are deliberately written another way than solver/answer/verify.py: distances as the
# nearest class over every switch above both devices, GPU↔NIC matching by trying every permutation,
# capacity by counting claims in one flat list.


def _is_under(switches: dict[str, PcieSwitch], leaf: str, top: str) -> bool:
    if not leaf or leaf not in switches:
        return False
    return leaf == top or _is_under(switches, switches[leaf].parent, top)


def oracle_distance(node: Node, a: Gpu | Nic, b: Gpu | Nic) -> Distance:
    switches = {s.id: s for s in node.pcie_switches}
    if a.pcie_switch and a.pcie_switch == b.pcie_switch:
        return Distance.PIX

    def tree_numa(device: Gpu | Nic) -> int | None:
        """NUMA of the root of the device's PCIe tree (the device's own when it has no known switch)."""
        roots = [
            s for s in node.pcie_switches if not s.parent and _is_under(switches, device.pcie_switch, s.id)
        ]
        return roots[0].numa if roots else device.numa if device.pcie_switch not in switches else None

    numa_a, numa_b = tree_numa(a), tree_numa(b)
    best = Distance.NODE if numa_a is not None and numa_a == numa_b else Distance.SYS
    for s in node.pcie_switches:
        if _is_under(switches, a.pcie_switch, s.id) and _is_under(switches, b.pcie_switch, s.id):
            best = min(best, Distance.PHB if s.kind == SwitchKind.HOST_BRIDGE else Distance.PXB)
    return best


def oracle_aligned(node: Node, want: MemberShape, m: MemberPlacement) -> bool:
    gpus = [g for g in node.gpus if g.id in m.gpus]
    nics = [n for n in node.nics if n.name in m.nics]
    limit = want.alignment.distance or Distance.PIX

    def near(g: Gpu, n: Nic) -> bool:
        return oracle_distance(node, g, n) <= limit

    if not gpus:  # a NIC-only member: nothing to align to, so nothing misaligned (issue 23)
        return True
    if want.nics.mode == NicMode.PER_GPU:
        return len(gpus) == len(nics) and any(all(map(near, gpus, p)) for p in permutations(nics))
    return all(any(near(g, n) for g in gpus) for n in nics)


def oracle_topology_ok(node: Node, want: MemberShape, m: MemberPlacement) -> bool:
    mode = want.alignment.mode
    if mode in (PREF, REQ):
        holds = oracle_aligned(node, want, m)
        if m.aligned != holds or (mode == REQ and not holds):
            return False
    devices = [g for g in node.gpus if g.id in m.gpus] + [n for n in node.nics if n.name in m.nics]
    if want.numa == REQ and devices and not all(d.numa is not None and d.numa == m.numa for d in devices):
        return False
    links = {(lk.gpu_a, lk.gpu_b) for lk in node.nvlinks}
    return not (
        want.nvlink == REQ
        and any((a, b) not in links and (b, a) not in links for a, b in combinations(m.gpus, 2))
    )


@st.composite
def pcie_cases(draw: st.DrawFn) -> tuple[SolveRequest, SolveResult, Node, MemberShape, MemberPlacement]:
    """One node with a random PCIe forest and device spots, and one member on random devices."""
    n_switches = draw(st.integers(1, 6))
    switches = [
        PcieSwitch(
            id=f"s{i}",
            parent=draw(st.sampled_from(["", *(f"s{j}" for j in range(i))])),
            kind=draw(st.sampled_from(list(SwitchKind))),
        )
        for i in range(n_switches)
    ]
    spot = st.tuples(st.sampled_from(["", *(s.id for s in switches)]), st.sampled_from([None, 0, 1]))
    gpu_spots = draw(st.lists(spot, min_size=1, max_size=8))
    nic_spots = draw(st.lists(st.one_of(spot, st.sampled_from(gpu_spots)), min_size=1, max_size=8))
    gpus = tuple(Gpu(id=f"G{k}", index=k, pcie_switch=s, numa=n) for k, (s, n) in enumerate(gpu_spots))
    nics = tuple(Nic(name=f"N{k}", pcie_switch=s, numa=n) for k, (s, n) in enumerate(nic_spots))
    pairs = list(combinations([g.id for g in gpus], 2))
    links = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    node = Node(
        name="n",
        gpus=gpus,
        nics=nics,
        pcie_switches=tuple(switches),
        nvlinks=tuple(NvLink(gpu_a=a, gpu_b=b) for a, b in links),
    )

    per_gpu = draw(st.booleans())
    top = min(len(gpus), len(nics), 5) if per_gpu else min(len(gpus), 4)
    chosen_gpus = draw(
        st.lists(
            st.sampled_from([g.id for g in gpus]), unique=True, min_size=1 if per_gpu else 0, max_size=top
        )
    )
    n_nics = len(chosen_gpus) if per_gpu else draw(st.integers(1, min(len(nics), 4)))
    chosen_nics = draw(
        st.lists(st.sampled_from([n.name for n in nics]), unique=True, min_size=n_nics, max_size=n_nics)
    )
    want = kit.shape(
        len(chosen_gpus),
        nics=NicMode.PER_GPU if per_gpu else NicMode.PER_MEMBER,
        nic_count=0 if per_gpu else n_nics,
        align=draw(st.sampled_from(list(Requirement))),
        distance=draw(st.sampled_from([*Distance, Distance.SYS, Distance.NODE])),
        numa=draw(st.sampled_from(list(Requirement))),
        nvlink=draw(st.sampled_from(list(Requirement))),
        cpu_milli=1000,
    )
    # Report alignment and NUMA truthfully most of the time, so that both verdicts are common.
    m = kit.member("r", 0, "n", chosen_gpus, chosen_nics)
    true_numa = next((d.numa for d in gpus if d.id in chosen_gpus), None)
    m = m.model_copy(
        update={
            "aligned": oracle_aligned(node, want, m) != (draw(st.integers(0, 3)) == 0),
            "numa": draw(st.sampled_from([true_numa, true_numa, true_numa, None, 0, 1])),
        }
    )
    req = kit.request([node], [kit.job("j", roles=(kit.role("r", 1, want),))])
    return req, kit.result(req, kit.placed("j", m)), node, want, m


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pcie_cases())
def test_topology_verdict_matches_oracle(
    case: tuple[SolveRequest, SolveResult, Node, MemberShape, MemberPlacement],
) -> None:
    req, res, node, want, m = case
    assert (verify(req, res) == ()) == oracle_topology_ok(node, want, m), verify(req, res)


@st.composite
def capacity_cases(draw: st.DrawFn) -> tuple[SolveRequest, SolveResult]:
    """1-4 nodes with a few bad or held devices, 1-3 one-role jobs, answers that are mostly right."""
    rare = st.integers(0, 7).map(lambda k: k == 0)
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        gpus = tuple(
            Gpu(id=f"G{k}", index=k, model=draw(st.sampled_from(["A", "A", "B"])), healthy=not draw(rare))
            for k in range(draw(st.integers(1, 8)))
        )
        nics = tuple(
            Nic(name=f"N{k}", healthy=not draw(rare), rdma=not draw(rare))
            for k in range(draw(st.integers(0, 8)))
        )
        held_gpus = [g.id for g in gpus if draw(rare)]
        held_nics = [n.name for n in nics if draw(rare)]
        cpu = draw(st.sampled_from([0, 8000, 16000]))
        allocs = (
            (Allocation(owner="old", gpus=tuple(held_gpus), nics=tuple(held_nics), cpu_milli=cpu // 4),)
            if held_gpus or held_nics
            else ()
        )
        nodes.append(
            Node(
                name=f"n{i}",
                labels={"pool": draw(st.sampled_from(["x", "y"]))},
                cpu_milli=cpu,
                memory_mib=draw(st.sampled_from([0, 64000])),
                gpus=gpus,
                nics=nics,
                allocations=allocs,
                schedulable=not draw(rare),
            )
        )
    jobs, answers = [], []
    for j in range(draw(st.integers(1, 3))):
        n_gpus = draw(st.integers(0, 3))
        mode = draw(
            st.sampled_from([NicMode.NONE, NicMode.PER_MEMBER] + ([NicMode.PER_GPU] if n_gpus else []))
        )
        want = kit.shape(
            n_gpus,
            nics=mode,
            nic_count=draw(st.integers(1, 2)) if mode == NicMode.PER_MEMBER else 0,
            cpu_milli=draw(st.sampled_from([0, 2000, 6000]))
            or (0 if n_gpus or mode != NicMode.NONE else 1000),
            memory_mib=draw(st.sampled_from([0, 0, 20000])),
            models=draw(st.sampled_from([(), (), ("A",)])),
            selector=draw(st.sampled_from([{}, {}, {"pool": "x"}])),
        )
        replicas = draw(st.integers(1, 3))
        r = kit.role("r", replicas, want, min_replicas=draw(st.integers(1, replicas)))
        jobs.append(kit.job(f"j{j}", roles=(r,)))
        if not draw(st.integers(0, 3)):  # unplaced, occasionally wrongly
            reason = None if draw(rare) else Reason(code=ReasonCode.NO_NODE_FITS, message="no")
            answers.append(JobResult(job_id=f"j{j}", placed=False, reason=reason))
            continue
        count = draw(st.sampled_from([r.minimum, replicas, replicas, draw(st.integers(0, replicas + 1))]))
        indexes = (
            list(range(count))
            if not draw(rare)
            else draw(st.lists(st.integers(0, replicas), min_size=count, max_size=count))
        )
        members = []
        for index in indexes:
            node = draw(st.sampled_from(nodes))
            n_nics = {NicMode.PER_GPU: n_gpus, NicMode.PER_MEMBER: want.nics.count}.get(mode, 0)
            g = [x.id for x in node.gpus]
            n = [x.name for x in node.nics]
            pick_g = draw(
                st.lists(
                    st.sampled_from(g),
                    min_size=min(n_gpus, len(g)),
                    max_size=min(n_gpus, len(g)),
                    unique=not draw(rare),
                )
            )
            pick_n = (
                draw(
                    st.lists(
                        st.sampled_from(n),
                        min_size=min(n_nics, len(n)),
                        max_size=min(n_nics, len(n)),
                        unique=True,
                    )
                )
                if n
                else []
            )
            members.append(kit.member("r", index, node.name, pick_g, pick_n))
        answers.append(kit.placed(f"j{j}", *members))
    if draw(rare) and answers:
        answers.pop()
    req = kit.request(nodes, jobs)
    return req, kit.result(req, *answers)


def oracle_capacity_ok(req: SolveRequest, res: SolveResult) -> bool:
    nodes = {n.name: n for n in req.inventory.nodes}
    jobs = {j.id: j for j in req.jobs}
    if sorted(jr.job_id for jr in res.jobs) != sorted(jobs):
        return False
    claims: list[tuple[str, str, str]] = []
    cpu: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    for jr in res.jobs:
        (r,) = jobs[jr.job_id].roles
        want = r.member
        if not jr.placed:
            if jr.members or jr.reason is None:
                return False
            continue
        indexes = [m.index for m in jr.members]
        if (
            not r.minimum <= len(indexes) <= r.replicas
            or len(set(indexes)) < len(indexes)
            or any(i >= r.replicas for i in indexes)
        ):
            return False
        for m in jr.members:
            node = nodes[m.node]
            if not node.schedulable or any(node.labels.get(k) != v for k, v in want.node_selector.items()):
                return False
            held = [x for a in node.allocations for x in (*a.gpus, *a.nics)]
            usable_gpus = [
                g.id
                for g in node.gpus
                if g.healthy and g.id not in held and (not want.gpu_models or g.model in want.gpu_models)
            ]
            usable_nics = [n.name for n in node.nics if n.healthy and n.rdma and n.name not in held]
            n_nics = {NicMode.PER_GPU: want.gpus, NicMode.PER_MEMBER: want.nics.count}.get(want.nics.mode, 0)
            if sorted(m.gpus) != sorted(set(m.gpus) & set(usable_gpus)) or len(m.gpus) != want.gpus:
                return False
            if sorted(m.nics) != sorted(set(m.nics) & set(usable_nics)) or len(m.nics) != n_nics:
                return False
            claims += [(m.node, "gpu", x) for x in m.gpus] + [(m.node, "nic", x) for x in m.nics]
            cpu[m.node] += want.cpu_milli
            memory[m.node] += want.memory_mib
    if len(set(claims)) < len(claims):
        return False
    for name, node in nodes.items():
        if node.cpu_milli and cpu[name] > node.cpu_milli - sum(a.cpu_milli for a in node.allocations):
            return False
        if node.memory_mib and memory[name] > node.memory_mib - sum(a.memory_mib for a in node.allocations):
            return False
    return True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity_cases())
def test_capacity_and_gang_verdict_matches_oracle(case: tuple[SolveRequest, SolveResult]) -> None:
    req, res = case
    assert (verify(req, res) == ()) == oracle_capacity_ok(req, res), verify(req, res)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 6).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))) if n else st.just(set()),
        )
    )
)
def test_matching_equals_trying_every_permutation(case: tuple[int, set[tuple[int, int]]]) -> None:
    n, near = case
    brute = any(all((g, nic) in near for g, nic in enumerate(p)) for p in permutations(range(n)))
    assert perfect_matching(n, n, near) == brute


def _solver_imports(module: object) -> set[str]:
    """What ``module`` (every file of it, for a package) imports from ``solver``, itself left out."""
    files = sorted(Path(module.__file__).parent.glob("*.py")) if hasattr(module, "__path__") else []
    text = "\n".join(f.read_text() for f in files) or Path(module.__file__).read_text()
    tree = ast.parse(text)
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    own = module.__name__
    return {m for m in imported if m and m.split(".")[0] == "solver" and not m.startswith(own)}


def test_verify_shares_no_code_with_the_pipeline() -> None:
    """The verifier is only worth running if the solver's bugs cannot leak into it. It shares the
    domain types and the definition of fragmentation (a function of one node's free capacity, which
    itself depends on nothing but the domain types); the state it measures it derives itself. And
    the call's cancel token (issue 23): it can stop a check when the caller has gone, never change
    its verdict."""
    assert _solver_imports(solver.answer.verify) == {
        "solver.domain.model",
        "solver.domain.fragmentation",
        "solver.domain.cancel",
    }
    assert _solver_imports(solver.domain.cancel) == set()
    assert _solver_imports(solver.domain.fragmentation) == {"solver.domain.model"}


def test_avoided_gpu_model() -> None:
    avoid = kit.shape(1).model_copy(update={"avoid_gpu_models": ("H100",)})
    req = kit.request(
        [kit.node("dgx-01", kit.DISTANCE_TREE)], [kit.job("j", roles=(kit.role("r", 1, avoid),))]
    )
    only(
        verify(req, kit.result(req, kit.placed("j", kit.member("r", 0, "dgx-01", ("GPU3",))))),
        "GPU GPU3 is a H100, a model the role avoids",
    )
