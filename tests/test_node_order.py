"""The NODE_ORDER tier: first fit over the policy's node order, below every other tier."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from solver.domain.model import Allocation, ObjectiveTier
from solver.domain.validate import validate
from solver.reduce.normalise import ranked_nodes
from solver.solve import solve
from tests import kit

FIRST_FIT = (ObjectiveTier.PLACED_WORK, ObjectiveTier.NODE_ORDER)


def nodes_of(result) -> list[str]:
    return sorted(m.node for j in result.jobs for m in j.members)


def test_a_pod_goes_to_the_first_node_of_the_order() -> None:
    nodes = [kit.node(name, kit.SMALL) for name in ("a", "b", "c")]
    for order in (("c", "a", "b"), ("b", "c", "a")):
        result = solve(kit.request(nodes, [kit.job("p", 1)], objective=FIRST_FIT, node_order=order))
        assert nodes_of(result) == [order[0]]


def test_many_nodes_of_one_class_are_taken_lowest_rank_first() -> None:
    # Six identical idle nodes are one class to the model; four single-node jobs must land on the
    # four best-ranked, not on any four of the class.
    nodes = [kit.node(f"n{i}", kit.SMALL) for i in range(6)]
    order = ("n4", "n1", "n5", "n0", "n2", "n3")
    result = solve(
        kit.request(nodes, [kit.job(f"j{k}", 4) for k in range(4)], objective=FIRST_FIT, node_order=order)
    )
    assert result.status.name == "OPTIMAL"
    assert nodes_of(result) == sorted(order[:4])


def test_earlier_tiers_outrank_the_order() -> None:
    # Binpack wants the node already in use, even though the order ranks it last.
    nodes = [kit.node("idle", kit.SMALL), kit.node("busy", kit.SMALL, used_gpus=(0, 1))]
    tiers = (ObjectiveTier.PLACED_WORK, ObjectiveTier.PACKING, ObjectiveTier.NODE_ORDER)
    result = solve(kit.request(nodes, [kit.job("p", 1)], objective=tiers, node_order=("idle", "busy")))
    assert nodes_of(result) == ["busy"]


def test_nodes_the_order_leaves_out_come_after_the_named_ones() -> None:
    nodes = [kit.node(name, kit.SMALL) for name in ("a", "b", "c")]
    result = solve(kit.request(nodes, [kit.job("p", 1)], objective=FIRST_FIT, node_order=("c",)))
    assert nodes_of(result) == ["c"]
    full = [
        kit.node("a", kit.SMALL),
        kit.node("b", kit.SMALL),
        kit.node("c", kit.SMALL, used_gpus=(0, 1, 2, 3)),
    ]
    result = solve(kit.request(full, [kit.job("p", 1)], objective=FIRST_FIT, node_order=("c",)))
    assert result.jobs[0].placed and nodes_of(result) != ["c"]


def test_an_order_naming_an_unknown_or_repeated_node_is_refused() -> None:
    problems = validate(
        kit.request(
            [kit.node("a", kit.SMALL), kit.node("b", kit.SMALL)],
            [kit.job("p", 1)],
            node_order=("b", "x", "b"),
        )
    )
    assert [(p.path, p.message) for p in problems] == [
        ("policy.node_order[2]", "node name 'b' is used again (first at policy.node_order[0])"),
        ("policy.node_order[1]", "no node 'x' in the inventory"),
    ]
    # Each check alone: a repeat among known names, an unknown name without repeats.
    repeated = validate(
        kit.request(
            [kit.node("a", kit.SMALL), kit.node("b", kit.SMALL)],
            [kit.job("p", 1)],
            node_order=("b", "a", "b"),
        )
    )
    assert [p.path for p in repeated] == ["policy.node_order[2]"]
    unknown = validate(
        kit.request(
            [kit.node("a", kit.SMALL), kit.node("b", kit.SMALL)], [kit.job("p", 1)], node_order=("a", "x")
        )
    )
    assert [p.path for p in unknown] == ["policy.node_order[1]"]


def test_a_tier_the_solver_does_not_build_is_refused_not_ignored() -> None:
    tiers = (ObjectiveTier.PLACED_WORK, ObjectiveTier.STABILITY)
    problems = validate(kit.request([kit.node("a", kit.SMALL)], [kit.job("p", 1)], objective=tiers))
    assert [p.path for p in problems] == ["policy.objective[1]"]
    assert "STABILITY" in problems[0].message


@settings(max_examples=25, deadline=None)
@given(
    used=st.lists(st.integers(0, 4), min_size=5, max_size=5),
    gpus=st.integers(1, 4),
    order=st.permutations(range(5)),
)
def test_first_fit_takes_the_best_ranked_node_that_fits(used: list[int], gpus: int, order: list[int]) -> None:
    # Oracle without the model: a node fits a whole-GPU pod when it has that many idle GPUs.
    nodes = [kit.node(f"n{i}", kit.SMALL, used_gpus=tuple(range(u))) for i, u in enumerate(used)]
    names = tuple(f"n{i}" for i in order)
    result = solve(kit.request(nodes, [kit.job("p", gpus)], objective=FIRST_FIT, node_order=names))
    fitting = [name for name in names if 4 - used[int(name[1:])] >= gpus]
    assert nodes_of(result) == fitting[:1]


def test_the_completed_greedy_plan_sets_the_order_booleans_the_model_demands() -> None:
    # The greedy plan stands as the answer when a tier finds nothing in time, and the tier is then
    # held at the plan's value: the order Booleans must be the ones its nodes make true, or a tier
    # held at "0" would forbid every ranked node below it.
    from ortools.sat.python import cp_model

    from solver.compile import compile_model
    from solver.reduce.intranode import hosts_some_member
    from solver.reduce.normalise import normalise
    from solver.search.floor import complete, greedy_hint

    nodes = [kit.node(f"n{i}", kit.SMALL) for i in range(4)]
    req = kit.request(
        nodes, [kit.job(f"j{k}", 4) for k in range(3)], objective=FIRST_FIT, node_order=("n3", "n2")
    )
    problem = normalise(req, hosts_some_member)
    compiled = compile_model(problem, req.policy)
    plan = complete(problem, compiled, greedy_hint(problem, compiled))
    assert compiled.order and all(b.name in plan for used in compiled.order.values() for b in used)
    model = compiled.model.clone()
    for index in range(len(model.proto.variables)):
        var = model.get_int_var_from_proto_index(index)
        if var.name in plan:
            model.add(var == plan[var.name])
    assert cp_model.CpSolver().solve(model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    assert compiled.tiers[-1].value_of(plan) < 0  # three of four nodes touched: ranks 0, 1 and 2


def test_ranks_follow_renamed_nodes_and_a_new_order_not_the_last_ones_asked() -> None:
    """``node_ranks`` reuses the last inventory's ranks while only allocations change (a replay's
    step): a node renamed, or another order of the same names, is ranked anew (session 19). Each
    question follows the one it must not be confused with."""
    nodes = [kit.node(name, kit.SMALL) for name in ("a", "b", "c")]
    request = kit.request(nodes, [kit.job("p", 1)], objective=FIRST_FIT, node_order=("c", "a", "b"))

    def names(asked) -> list[str]:
        return [n.name for _, _, n in ranked_nodes(asked)]

    def with_nodes(*changed):
        inventory = request.inventory.model_copy(update={"nodes": changed})
        return request.model_copy(update={"inventory": inventory})

    assert names(request) == ["c", "a", "b"]
    reordered = request.model_copy(
        update={"policy": request.policy.model_copy(update={"node_order": ("b", "c", "a")})}
    )
    assert names(reordered) == ["b", "c", "a"]
    assert names(request) == ["c", "a", "b"]
    busy = nodes[0].model_copy(update={"allocations": (Allocation(owner="x", gpus=("GPU0",)),)})
    assert [(r, n) for r, _, n in ranked_nodes(with_nodes(busy, *nodes[1:]))] == [
        (0, nodes[2]),
        (1, busy),
        (2, nodes[1]),
    ]
    renamed = with_nodes(nodes[0].model_copy(update={"name": "d"}), *nodes[1:])
    assert names(renamed) == ["c", "b", "d"]  # "d" is not in the order: last
