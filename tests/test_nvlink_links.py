"""NVLink link counts weigh: a member with an NVLink rule meets it fully only on GPUs as well linked as
the node's best set of that size (NV18 pairs over NV2 ones), so 2-GPU jobs land on strong pairs and
4-GPU jobs inside one NVLink half. REQUIRED still means "every pair linked" (the verifier's rule)."""

from __future__ import annotations

import pytest

from solver.domain.model import NicMode, Node, NvLink, Requirement
from solver.reduce.normalise import nvlink_best
from solver.solve import solve
from tests import kit

STRONG, WEAK = 18, 2


def halves(name: str, used: tuple[int, ...] = ()) -> Node:
    """8 GPUs in two NVLink halves (0-3, 4-7): NV18 inside a half, NV2 across."""
    node = kit.node(name, nvlink="none")
    links = tuple(
        NvLink(gpu_a=f"GPU{a}", gpu_b=f"GPU{b}", links=STRONG if a // 4 == b // 4 else WEAK)
        for a in range(8)
        for b in range(a + 1, 8)
    )
    allocations = (kit.allocation("busy", gpus=[f"GPU{g}" for g in used]),) if used else ()
    return node.model_copy(update={"nvlinks": links, "allocations": allocations})


def gpus_of(result, job_id: str) -> tuple[str, set[int]]:
    job = next(j for j in result.jobs if j.job_id == job_id)
    assert job.placed, job
    (member,) = job.members
    return member.node, {int(g.removeprefix("GPU")) for g in member.gpus}


def nvjob(job_id: str, gpus: int, rule: Requirement = Requirement.PREFERRED):
    return kit.job(job_id, gpus, nics=NicMode.NONE, align=Requirement.NONE, nvlink=rule)


def test_best_links_per_gpu_count_come_from_the_hardware() -> None:
    node = halves("n0")
    best = nvlink_best(
        tuple(g.id for g in node.gpus), tuple((lk.gpu_a, lk.gpu_b, lk.links) for lk in node.nvlinks)
    )
    assert best == (0, 0, STRONG, STRONG, STRONG, WEAK, WEAK, WEAK, WEAK)
    # Pairs only (NV12 between 0-1 and 2-3, nothing else): no 3 GPUs are all linked.
    pairs = (("a", "b", 12), ("c", "d", 12))
    assert nvlink_best(("a", "b", "c", "d"), pairs) == (0, 0, 12, 0, 0)
    assert nvlink_best(("a", "b"), ()) == ()


@pytest.mark.parametrize("rule", [Requirement.PREFERRED, Requirement.REQUIRED])
def test_two_gpus_take_the_strong_pair_not_a_weak_one(rule: Requirement) -> None:
    # Free: GPU3 (half A) and GPU4, GPU5 (half B). {3,4} is linked (NV2) but {4,5} has NV18.
    node = halves("n0", used=(0, 1, 2, 6, 7))
    result = solve(kit.request(kit.inventory(node), [nvjob("two", 2, rule)], seed=1))
    assert gpus_of(result, "two")[1] == {4, 5}


def test_four_gpus_stay_inside_one_half() -> None:
    node = halves("n0", used=(0, 7))  # free: 1-3 (half A, 3 GPUs) and 4-6 (half B, 3 GPUs)
    other = halves("n1", used=(0, 1, 2, 3))  # half B whole
    result = solve(kit.request(kit.inventory(node, other), [nvjob("four", 4)], seed=1))
    assert gpus_of(result, "four") == ("n1", {4, 5, 6, 7})


def test_the_node_with_a_strong_pair_wins_over_one_with_only_weak_pairs() -> None:
    weak = halves("weak", used=(0, 1, 2, 5, 6, 7))  # free 3, 4: one NV2 pair
    strong = halves("strong", used=(0, 1, 4, 5, 6, 7))  # free 2, 3: an NV18 pair
    result = solve(kit.request(kit.inventory(weak, strong), [nvjob("two", 2)], seed=1))
    assert gpus_of(result, "two") == ("strong", {2, 3})


def test_required_still_places_on_a_weak_pair_when_nothing_better_is_free() -> None:
    node = halves("n0", used=(0, 1, 2, 5, 6, 7))  # free 3, 4: NV2, linked
    result = solve(kit.request(kit.inventory(node), [nvjob("two", 2, Requirement.REQUIRED)], seed=1))
    assert gpus_of(result, "two")[1] == {3, 4}
