"""Where a replay's free capacity ends up (bench/endstate.py): the split by hand, and on a trace slice."""

from __future__ import annotations

import pytest

from bench import endstate, openb
from solver.baselines.sharing import ClusterState, PodSpec


def test_a_sliver_is_fragmented_and_gpus_without_cpu_are_blocked() -> None:
    # a: one GPU holding an 810 share; b: an idle GPU but no CPU left; c: an idle GPU a dropped
    # 470 would fit whole, left free by a batch policy's choice.
    state = ClusterState(["a", "b", "c"], [8000, 0, 8000], [64, 64, 64], [[190], [1000], [1000]], ["T4"] * 3)
    state.allocated_milli = 810
    share = PodSpec(cpu=1000, memory=1, gpus=1, milli=470)
    e = endstate.classify(state, [share, PodSpec(cpu=1, memory=1)], {(0, 0): [810]})
    assert (e.fragmented, e.blocked, e.usable, e.free) == (0.19, 1.0, 1.0, 2.19)
    assert e.slivers == (((810,), 1, 0.19),)
    assert (e.idle_gpus, e.dropped) == (2, 2)


def test_a_whole_gpu_pod_needs_its_gpus_on_one_node() -> None:
    # Two idle GPUs, one on each node: a dropped 2-GPU pod fits neither, so both are fragmented.
    state = ClusterState(["a", "b"], [8000, 8000], [64, 64], [[1000, 0], [0, 1000]], ["T4", "T4"])
    two = PodSpec(cpu=1, memory=1, gpus=2, milli=1000)
    e = endstate.classify(state, [two], {})
    assert (e.fragmented, e.blocked, e.usable) == (2.0, 0.0, 0.0)
    assert e.slivers == (((), 2, 2.0),)


@pytest.mark.skipif(not openb.DEFAULT_PODS.exists(), reason="shared/data/openb is not beside the repo")
def test_an_online_greedy_run_leaves_nothing_a_dropped_pod_could_use() -> None:
    nodes, pods = openb.load_nodes()[:50], openb.load_pods()[:300]
    e = endstate.end_state("fgd", nodes, pods, 42)
    assert e.dropped > 0 and e.usable == 0.0  # no pod leaves, so a dropped pod fits nowhere at the end
    assert e.fragmented + e.blocked + e.usable == pytest.approx(e.free)
