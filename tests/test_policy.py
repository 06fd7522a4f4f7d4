"""HAMi-style policy chains: each word's mapping, the order of sort keys, and the filters."""

from __future__ import annotations

from solver.domain.model import GpuShare, NicMode, ObjectiveTier, Packing, Policy, Requirement
from solver.domain.validate import validate
from solver.reduce.policy import apply_policy_chains, tier_order, words
from solver.solve import solve
from tests import kit


def chained(node_policy: str = "", gpu_policy: str = ""):
    req = kit.request(
        [kit.node("n", kit.SMALL)],
        [kit.job("a", 2, nics=NicMode.PER_GPU)],
        node_policy=node_policy,
        gpu_policy=gpu_policy,
    )
    return apply_policy_chains(req)


def test_words_are_trimmed_and_lowercased() -> None:
    assert words(" Binpack , numa,") == ["binpack", "numa"]


def test_sort_keys_order_the_tiers_and_placed_work_stays_first() -> None:
    assert tier_order(Policy(), ["numa", "binpack"])[:3] == (
        ObjectiveTier.PLACED_WORK,
        ObjectiveTier.TOPOLOGY,
        ObjectiveTier.PACKING,
    )
    assert tier_order(Policy(), ["binpack", "numa"])[:3] == (
        ObjectiveTier.PLACED_WORK,
        ObjectiveTier.PACKING,
        ObjectiveTier.TOPOLOGY,
    )
    assert chained("fgd,binpack").policy.objective[1] == ObjectiveTier.FRAGMENTATION


def test_spread_and_binpack_choose_the_packing() -> None:
    assert chained("spread").policy.packing == Packing.SPREAD
    assert chained("binpack").policy.packing == Packing.BINPACK
    assert chained(gpu_policy="spread").policy.packing == Packing.BINPACK  # GPU level: shares only


def test_numa_topology_aware_and_mutex_raise_member_rules() -> None:
    member = chained("numa", "topology-aware,mutex").jobs[0].roles[0].member
    assert member.numa == Requirement.PREFERRED
    assert member.nvlink == Requirement.PREFERRED
    assert member.alignment.mode == Requirement.PREFERRED
    assert member.mutex


def test_a_required_rule_is_never_lowered() -> None:
    req = kit.request(
        [kit.node("n", kit.SMALL)], [kit.job("a", 2, numa=Requirement.REQUIRED)], node_policy="numa"
    )
    assert apply_policy_chains(req).jobs[0].roles[0].member.numa == Requirement.REQUIRED


def test_unknown_words_are_refused_with_the_field() -> None:
    problems = validate(
        kit.request([kit.node("n", kit.SMALL)], [kit.job("a", 1)], node_policy="binpack,greedy")
    )
    assert [(p.path, "greedy" in p.message) for p in problems] == [("policy.node_policy", True)]


def test_gpu_level_spread_sends_a_share_to_the_emptiest_gpu_and_binpack_to_the_fullest() -> None:
    from solver.domain.model import Allocation

    node = kit.node("n", kit.SMALL, switches=1, gpus=2, nics=0).model_copy(
        update={"allocations": (Allocation(owner="old", gpu_shares=(GpuShare(gpu="GPU0", milli=500),)),)}
    )
    packed = solve(
        kit.request([node], [kit.job("s", role="pod", share=GpuShare(milli=200))], gpu_policy="binpack")
    )
    spread = solve(
        kit.request([node], [kit.job("s", role="pod", share=GpuShare(milli=200))], gpu_policy="spread")
    )
    assert packed.jobs[0].members[0].gpus == ("GPU0",)
    assert spread.jobs[0].members[0].gpus == ("GPU1",)


def test_node_level_spread_takes_the_empty_node() -> None:
    nodes = [kit.node("busy", kit.SMALL, used_gpus=(0, 1)), kit.node("empty", kit.SMALL)]
    result = solve(kit.request(nodes, [kit.job("a", 1)], node_policy="spread"))
    assert result.jobs[0].members[0].node == "empty"
