"""The in-project greedy baselines: valid answers, and each one's characteristic choice on a hand case.

Every result must pass the independent verifier (the baselines are benchmarked against the solver, so a
baseline that cheats on a rule would flatter itself). The hand cases pin what each one mimics: best fit
takes the fullest node that fits and aligned GPUs, Volcano keeps a hard-locality gang under one leaf,
FGD takes the placement that fragments least, against values worked out by hand from FGD's definition.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import openb, replay
from bench.scenario import scenario
from solver.answer.verify import verify
from solver.baselines import PLACERS, bestfit, fgd, sharebestfit, volcano
from solver.baselines.fgd import FGD, sigmoid_score
from solver.baselines.fragmentation import TypicalPod, cluster_fragmentation, node_fragmentation, typical_pods
from solver.baselines.gorand import DEFAULT_COOKED, GoRand
from solver.baselines.sharing import ClusterState, PodSpec
from solver.baselines.topology import Free, Greedy, LocalityIndex, Start, _Memo
from solver.domain.model import (
    Allocation,
    GpuShare,
    Job,
    Locality,
    MemberShape,
    NicMode,
    Node,
    Policy,
    ReasonCode,
    Requirement,
    Role,
    SolveRequest,
    SolveResult,
)
from solver.fallback import FIRST_FIT
from tests import kit
from tests.kit.oracle import fabric_problems

TOPOLOGY = ("volcano", "bestfit")
SHARING = ("random", "bestfit-share", "gpupacking", "fgd")


# --------------------------------------------------------------------------- every baseline is valid


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", TOPOLOGY)
def test_topology_baselines_verify_on_generated_scenarios(name: str, seed: int) -> None:
    request = scenario(64, 24, seed=seed).request
    result = PLACERS[name](request)
    assert verify(request, result) == ()
    assert any(j.placed for j in result.jobs)
    assert all(j.reason is not None for j in result.jobs if not j.placed)


def sharing_request(seed: int, nodes: int = 12, pods: int = 90) -> SolveRequest:
    """A slice of the openb trace with some work already running (whole GPUs and shares), as a request."""
    rows = openb.load_nodes()[:: 1213 // nodes][:nodes]
    inventory = openb.inventory(rows)
    busy = list(inventory.nodes)
    for i, node in enumerate(busy[:4]):
        if len(node.gpus) >= 2:
            held = Allocation(owner=f"run{i}", gpus=("GPU0",), cpu_milli=2000, memory_mib=4096)
            shared = Allocation(owner=f"share{i}", gpu_shares=(GpuShare(gpu="GPU1", milli=300 + 100 * i),))
            busy[i] = node.model_copy(update={"allocations": (held, shared)})
    jobs = tuple(openb.job(p) for p in openb.load_pods()[seed * pods : (seed + 1) * pods])
    gang = Job(
        id="gang",
        roles=(Role(name="w", replicas=3, member=MemberShape(gpus=1, cpu_milli=4000, memory_mib=8192)),),
    )
    return SolveRequest(
        request_id=f"share-{seed}",
        inventory=inventory.model_copy(update={"nodes": tuple(busy)}),
        jobs=(*jobs, gang),
        policy=Policy(seed=seed),
    )


def assert_shares_fit(request: SolveRequest, result: SolveResult) -> None:
    """Independently of the verifier: per GPU, existing and new shares stay within 1000 milli, and no
    share lands on a GPU that is held whole (before or by this answer)."""
    used: Counter[tuple[str, str]] = Counter()
    whole: set[tuple[str, str]] = set()
    for node in request.inventory.nodes:
        for a in node.allocations:
            whole |= {(node.name, g) for g in a.gpus}
            for s in a.gpu_shares:
                used[node.name, s.gpu] += s.milli
    for job in result.jobs:
        for m in job.members:
            for g in m.gpus if not m.gpu_shares else ():  # a share member names its GPU too
                assert (m.node, g) not in whole and used[m.node, g] == 0, (m.node, g)
                whole.add((m.node, g))
            for s in m.gpu_shares:
                used[m.node, s.gpu] += s.milli
                assert (m.node, s.gpu) not in whole
    assert max(used.values(), default=0) <= 1000


# The trace and Go's cooked table live in ../shared, beside the repository (as in CI); a checkout
# without it skips these, like tests/test_replay.py.
needs_openb = pytest.mark.skipif(
    not openb.DEFAULT_PODS.exists(), reason="shared/data/openb is not beside the repo"
)
needs_cooked = pytest.mark.skipif(
    not DEFAULT_COOKED.exists(), reason="Go's cooked table is not beside the repo"
)


@needs_openb
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", SHARING)
def test_sharing_baselines_verify_on_trace_slices(name: str, seed: int) -> None:
    request = sharing_request(seed)
    result = PLACERS[name](request)
    assert verify(request, result) == ()
    assert_shares_fit(request, result)
    placed = [j for j in result.jobs if j.placed]
    assert placed and any(m.gpu_shares for j in placed for m in j.members)
    gang = next(j for j in result.jobs if j.job_id == "gang")
    assert not gang.placed or len(gang.members) == 3


def test_sharing_baselines_refuse_what_they_do_not_model() -> None:
    request = kit.request(
        kit.cluster(2), [kit.job("nics", 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)]
    )
    result = fgd.place(request)
    assert verify(request, result) == ()
    assert not result.jobs[0].placed and "NICs" in result.jobs[0].reason.message


# --------------------------------------------------------------------------- best fit (Slurm-like)


def test_bestfit_picks_the_fullest_node_that_fits() -> None:
    def busy_node(name: str, busy: int) -> Node:
        return kit.node(name, allocations=[kit.allocation("run", [f"GPU{g}" for g in range(busy)])])

    inventory = kit.inventory(busy_node("a-roomy", 2), busy_node("b-tight", 6), busy_node("c-full", 7))
    request = kit.request(inventory, [kit.job("j", 2, nics=NicMode.NONE, align=Requirement.PREFERRED)])
    result = bestfit.place(request)
    assert verify(request, result) == ()
    assert result.jobs[0].members[0].node == "b-tight"  # 2 free: fits exactly; c-full has 1


def test_bestfit_takes_aligned_gpus_where_volcano_takes_the_first_free() -> None:
    # GPU0 and GPU1 sit on sw0, whose two NICs are held by running work
    inventory = kit.inventory(kit.node("n0", allocations=[kit.allocation("run", [], ["mlx5_0", "mlx5_1"])]))
    request = kit.request(inventory, [kit.job("j", 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED)])
    slurm, vc = bestfit.place(request), volcano.place(request)
    assert verify(request, slurm) == () and verify(request, vc) == ()
    assert slurm.jobs[0].members[0].gpus == ("GPU2", "GPU3") and slurm.jobs[0].members[0].aligned
    assert vc.jobs[0].members[0].gpus == ("GPU0", "GPU1") and not vc.jobs[0].members[0].aligned


def test_required_alignment_is_never_broken_by_the_greedy_pick() -> None:
    inventory = kit.inventory(kit.node("n0", allocations=[kit.allocation("run", [], ["mlx5_0", "mlx5_1"])]))
    request = kit.request(inventory, [kit.job("j", 2, nics=NicMode.PER_GPU, align=Requirement.REQUIRED)])
    for place in (volcano.place, bestfit.place):
        result = place(request)
        assert verify(request, result) == ()
        assert not result.jobs[0].placed or result.jobs[0].members[0].aligned


# --------------------------------------------------------------------------- Volcano-like


def test_volcano_keeps_a_hard_locality_gang_under_one_leaf() -> None:
    inventory = kit.cluster(8, nodes_per_leaf=4)  # leaf0: n0..n3, leaf1: n4..n7
    busy = [kit.allocation("run", [f"GPU{g}" for g in range(6)])]
    nodes = [
        n.model_copy(update={"allocations": busy}) if n.name in ("n0", "n4", "n5") else n
        for n in inventory.nodes
    ]
    inventory = inventory.model_copy(update={"nodes": tuple(nodes)})
    job = kit.job("gang", 8, 3, nics=NicMode.NONE, align=Requirement.PREFERRED)
    job = job.model_copy(update={"locality": Locality(mode=Requirement.REQUIRED, highest_tier=1)})
    request = kit.request(inventory, [job])
    result = volcano.place(request)
    assert verify(request, result) == ()
    (gang,) = result.jobs
    leaves = {next(n.leaf for n in nodes if n.name == m.node) for m in gang.members}
    assert gang.placed and len(leaves) == 1 and gang.locality_tier == 1 and gang.leaves_spanned == 1
    assert {m.node for m in gang.members} == {"n1", "n2", "n3"}  # leaf0 has room (26 free), leaf1 not


def test_volcano_leaves_a_gang_unplaced_when_no_leaf_can_hold_it() -> None:
    inventory = kit.cluster(4, nodes_per_leaf=2)  # 32 idle GPUs, 16 per leaf
    job = kit.job("gang", 8, 3, nics=NicMode.NONE, align=Requirement.PREFERRED)
    job = job.model_copy(update={"locality": Locality(mode=Requirement.REQUIRED, highest_tier=1)})
    request = kit.request(inventory, [job])
    result = volcano.place(request)
    assert verify(request, result) == ()
    assert not result.jobs[0].placed and result.jobs[0].reason.code == ReasonCode.LOCALITY
    soft = job.model_copy(update={"locality": Locality(mode=Requirement.PREFERRED, highest_tier=1)})
    request = kit.request(inventory, [soft])
    result = volcano.place(request)
    assert verify(request, result) == () and result.jobs[0].placed and result.jobs[0].leaves_spanned == 2


def test_volcano_without_locality_packs_and_keeps_a_gang_close() -> None:
    inventory = kit.cluster(8, nodes_per_leaf=4)
    request = kit.request(inventory, [kit.job("pair", 4, 2, nics=NicMode.NONE, align=Requirement.PREFERRED)])
    result = volcano.place(request)
    assert verify(request, result) == ()
    assert {m.node for m in result.jobs[0].members} == {"n0"}  # binpack: both halves on one node


# --------------------------------------------------------------------------- fragmentation (FGD's measure)

WHOLE = TypicalPod(cpu=1000, milli=1000, gpus=1, popularity=0.5)
QUARTER = TypicalPod(cpu=0, milli=250, gpus=1, popularity=0.3)
CPU_ONLY = TypicalPod(cpu=500, milli=0, gpus=0, popularity=0.2)


def test_node_fragmentation_against_hand_values() -> None:
    workload = (WHOLE, QUARTER, CPU_ONLY)
    # WHOLE fits (GPU0 idle): only GPU1's 300 is a fragment for it -> 0.5 * 300
    # QUARTER fits, no GPU has less than 250 free -> 0;  CPU_ONLY: all idle GPU milli -> 0.2 * 1300
    assert node_fragmentation([1000, 300], 10_000, workload) == pytest.approx(150 + 0 + 260)
    # no CPU for WHOLE: all 1300 idle milli are fragments for it; QUARTER asks no CPU and still fits
    assert node_fragmentation([1000, 300], 0, workload) == pytest.approx(0.5 * 1300 + 0 + 0.2 * 1300)
    # only 200 free: WHOLE and QUARTER cannot use it at all
    assert node_fragmentation([200, 0], 10_000, workload) == pytest.approx(0.5 * 200 + 0.3 * 200 + 0.2 * 200)
    # a shape bound to another GPU model sees the whole node as fragments
    a100 = TypicalPod(cpu=0, milli=500, gpus=1, models=("A100",), popularity=1.0)
    assert node_fragmentation([1000, 1000], 0, (a100,), model="V100") == pytest.approx(2000)
    assert node_fragmentation([1000, 1000], 0, (a100,), model="A100") == pytest.approx(0)
    assert cluster_fragmentation(
        [([1000, 300], 10_000, ""), ([200, 0], 10_000, "")], workload
    ) == pytest.approx(410 + 200)


def test_typical_pods_keep_the_commonest_shapes_up_to_the_coverage() -> None:
    shapes = [(1, 1000, 1, ())] * 5 + [(2, 500, 1, ())] * 3 + [(3, 0, 0, ())] * 2
    kept = typical_pods(shapes, coverage=0.7)
    assert [(p.cpu, p.popularity) for p in kept] == [(1, pytest.approx(5 / 8)), (2, pytest.approx(3 / 8))]
    assert math.isclose(sum(p.popularity for p in typical_pods(shapes, coverage=1.0)), 1.0)


@needs_openb
def test_openb_workload_is_fgds_35_typical_pods() -> None:
    workload = openb.workload(openb.load_pods())
    assert len(workload) == 35 and math.isclose(sum(p.popularity for p in workload), 1.0)


# --------------------------------------------------------------------------- FGD


def test_fgd_picks_the_least_fragmenting_gpu_where_best_fit_picks_the_tightest() -> None:
    # workload: half-GPU shares only. Node has GPU0 idle, GPU1 with 600 free; the pod asks 200.
    workload = (TypicalPod(cpu=0, milli=500, gpus=1, popularity=1.0),)
    state = ClusterState(["n"], [10_000], [10_000], [[1000, 600]], ["G"])
    pod = PodSpec(cpu=0, memory=0, gpus=1, milli=200)
    policy = FGD(workload)
    # on GPU1: 400 left < 500 is a fragment: F 0 -> 400, score int(sigmoid(-0.4) * 100) = 40
    # on GPU0: 800 and 600 both still take a 500 share: F stays 0, score int(sigmoid(0) * 100) = 50
    assert sigmoid_score(-400) == 40 and sigmoid_score(0) == 50
    assert policy.score(state, 0, pod) == (50, (0,))
    assert policy.choose(state, pod) == (0, (0,))
    assert sharebestfit.BestFitShare().choose(state, pod) == (0, (1,))


def test_fgd_prefers_the_node_where_fragmentation_grows_least() -> None:
    # workload: whole GPUs. Node a has a GPU with 300 free (a fragment), node b is idle; pod asks 300.
    workload = (TypicalPod(cpu=0, milli=1000, gpus=1, popularity=1.0),)
    state = ClusterState(["a", "b"], [10_000] * 2, [10_000] * 2, [[1000, 300], [1000, 1000]], ["G", "G"])
    pod = PodSpec(cpu=0, memory=0, gpus=1, milli=300)
    # a/GPU1: F 300 -> 0 (delta +300, score 57); a/GPU0: F 300 -> 1000 (no idle GPU left, score 33);
    # b/GPU0: F 0 -> 700 (score 33)
    policy = FGD(workload)
    assert policy.score(state, 0, pod) == (57, (1,))
    assert policy.score(state, 1, pod) == (33, (0,))
    assert policy.choose(state, pod) == (0, (1,))


def test_ties_go_to_the_lowest_rank() -> None:
    state = ClusterState(["a", "b"], [1000] * 2, [1000] * 2, [[1000], [1000]], ["G", "G"], ranks=[7, 3])
    pod = PodSpec(cpu=0, memory=0, gpus=1, milli=1000)
    assert sharebestfit.BestFitShare().choose(state, pod) == (1, (0,))


def test_fgd_tie_keys_rank_equal_scores_before_the_node_rank() -> None:
    # Two 2-GPU nodes, each with one GPU busy; a whole-GPU pod on either leaves the node full, so
    # both score alike. Node a's other GPU is half used, b's fully, so b is the fuller, but a ranks first.
    workload = (TypicalPod(cpu=0, milli=1000, gpus=1, popularity=1.0),)
    state = ClusterState(
        ["a", "b"], [1000] * 2, [1000] * 2, [[1000, 500], [1000, 0]], ["G"] * 2, ranks=[0, 1]
    )
    pod = PodSpec(cpu=0, memory=0, gpus=1, milli=1000)
    assert FGD(workload).score(state, 0, pod)[0] == FGD(workload).score(state, 1, pod)[0]
    assert FGD(workload).choose(state, pod) == (0, (0,))
    assert FGD(workload, tie="used").choose(state, pod) == (1, (0,))
    assert FGD(workload, tie="bestfit").choose(state, pod) == (1, (0,))


def test_fgd_exact_points_leave_no_ties() -> None:
    # A 300 share on a's 400-free GPU leaves a 100 fragment; on idle b, a 700 one that still takes a
    # 500 share: both truncate to one score, but the exact drop tells them apart.
    workload = (TypicalPod(cpu=0, milli=500, gpus=1, popularity=1.0),)
    state = ClusterState(["a", "b"], [1000] * 2, [1000] * 2, [[400], [1000]], ["G"] * 2, ranks=[1, 0])
    pod = PodSpec(cpu=0, memory=0, gpus=1, milli=300)
    exact = FGD(workload, points=0)
    assert exact.score(state, 0, pod)[0] == 400 - 100 and exact.score(state, 1, pod)[0] == 0
    assert exact.choose(state, pod) == (0, (0,))


def test_sorted_greedy_windows_choose_largest_first_and_leave_binding_to_the_caller() -> None:
    # Window of two: a 300 share and a whole GPU, on one idle GPU and one with 300 free. Largest
    # first, the whole GPU takes the idle one and the share the 300; in arrival order the share
    # would land first, wherever FGD likes it.
    workload = (TypicalPod(cpu=0, milli=1000, gpus=1, popularity=1.0),)
    state = ClusterState(["a", "b"], [1000] * 2, [1000] * 2, [[300], [1000]], ["G"] * 2)
    rows = [
        openb.PodRow(name="s", cpu_milli=0, memory_mib=0, num_gpu=1, gpu_milli=300),
        openb.PodRow(name="w", cpu_milli=0, memory_mib=0, num_gpu=1, gpu_milli=1000),
    ]
    policy = replay.SortedWindows("fgd-sorted2", FGD(workload), 2)
    assert replay._decide(policy, state, None, rows, 42) == [(0, (0,)), (1, (0,))]
    assert state.allocated_milli == 0 and state.free_of(0) == [300]  # undone for the caller to bind


# --------------------------------------------------------------------------- Go's math/rand


@needs_cooked
def test_go_rand_reproduces_gos_documented_sequence() -> None:
    rng = GoRand(1)  # the seed Go's global source had before 1.20: the Go tour's numbers
    assert [rng.intn(100) for _ in range(10)] == [81, 87, 47, 59, 81, 18, 25, 40, 56, 0]
    a, b = GoRand(42), GoRand(42)
    assert a.perm(50) == b.perm(50) and sorted(GoRand(7).perm(50)) == list(range(50))


# --------------------------------------------------------------------------- first fit, remembered


def scored_first_fit() -> Greedy:
    """The fallback's first-fit greedy without its shortcuts: every node of a pool scored alike, so
    the first in name order that admits a member wins, with no cursor remembering where a shape
    was refused."""
    return replace(FIRST_FIT, name=FIRST_FIT.name, first_fit=False, node_score=lambda *_: 0.0)


def same_plan(a: SolveResult, b: SolveResult) -> bool:
    def plan(result: SolveResult) -> list[tuple]:
        return [(j.job_id, j.placed, j.members) for j in result.jobs]

    return plan(a) == plan(b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=fabric_problems(max_nodes=8, max_jobs=6))
def test_first_fit_remembers_refusals_by_shape_value_without_changing_the_plan(request: SolveRequest) -> None:
    """First fit keeps per shape how far a pool refuses it, and each domain's free GPUs, across the
    call's jobs (each job brings its own equal shape objects). The plan must be the one scoring
    every node would give; the reasons of unplaced jobs must count the GPUs free then."""
    fast, slow = FIRST_FIT.place(request), scored_first_fit().place(request)
    assert same_plan(fast, slow)
    assert verify(request, fast) == ()
    assert [j.reason for j in fast.jobs] == [j.reason for j in slow.jobs]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=fabric_problems(max_nodes=8, max_jobs=6), seed=st.integers(0, 9))
def test_a_start_placed_from_again_gives_what_a_fresh_one_gives(request: SolveRequest, seed: int) -> None:
    """The fallback places one request in several orders from one ``Start``: an order placed after
    another must see the cluster as it was, not as the other left it (a call copies the nodes)."""
    start = Start.of(request.inventory)
    shuffled = list(range(len(request.jobs)))
    random.Random(seed).shuffle(shuffled)
    FIRST_FIT.place(request, start=start, order=shuffled)  # leaves nothing behind in ``start``
    assert same_plan(FIRST_FIT.place(request, start=start), FIRST_FIT.place(request))
    assert same_plan(
        FIRST_FIT.place(request, start=start, order=shuffled), FIRST_FIT.place(request, order=shuffled)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_fit_is_first_fit_on_generated_scenarios(seed: int) -> None:
    """Many jobs of equal shapes on a 64-node fat tree: the remembered cursors and rooms are shared."""
    request = scenario(64, 60, seed=seed).request
    fast, slow = FIRST_FIT.place(request), scored_first_fit().place(request)
    assert same_plan(fast, slow)
    assert sum(j.placed for j in fast.jobs) > 0
    assert verify(request, fast) == ()


@settings(max_examples=60, deadline=None)
@given(
    request=fabric_problems(max_nodes=8, max_jobs=1),
    takes=st.lists(st.tuples(st.integers(0, 7), st.integers(1, 4))),
)
def test_a_domains_remembered_room_follows_the_members_kept(
    request: SolveRequest, takes: list[tuple[int, int]]
) -> None:
    """``_Memo.taken`` brings each domain's free GPUs and member slots down by what a kept try took,
    without summing the domain afresh: after any sequence of kept takes they equal a fresh count."""
    fabric = LocalityIndex(request.inventory)
    free = {n.name: Free.of(n) for n in sorted(request.inventory.nodes, key=lambda n: n.name)}
    names = list(free)
    memo = _Memo.of(fabric, free)
    job = request.jobs[0]

    def fresh(domain: str) -> tuple[int, dict[int, int]]:
        counts = [len(free[n].gpus) for n in fabric.under[domain]]
        return sum(counts), {g: sum(c // g for c in counts) for g in memo.slots.get(domain, {})}

    for domain in fabric.under:  # remember every domain's room and slots first
        memo.room(domain, free, fabric)
        memo.could_hold(domain, [free[n] for n in fabric.under[domain]], job)
    for node, gpus in takes:
        f = free[names[node % len(names)]]
        saved = {f.node.name: (f, f.copy())}
        f.gpus = f.gpus[gpus:]
        memo.taken(saved)
        for domain in fabric.under:
            assert (memo.room(domain, free, fabric), memo.slots.get(domain, {})) == fresh(domain)
