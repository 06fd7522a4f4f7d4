"""Taints, tolerations and required node affinity as Volcano's predicates plugin applies them
(Kubernetes' TaintToleration and NodeAffinity filters): the plan never names a node Volcano refuses."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapters.volcano.eligibility import affinity_allows, tolerates
from adapters.volcano.extender import Config, Extender
from adapters.volcano.hypernodes import HyperNode
from adapters.volcano.patcher import RecordingPatcher
from fixtures.volcano import build

from .conftest import CapturingSolve

TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "infer"}, True),  # operator defaults to Equal, any effect
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # tolerates everything
        ({"key": "dedicated", "value": "train"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations_as_kubernetes_matches_them(toleration: dict[str, str], ok: bool) -> None:
    assert tolerates([toleration], TAINT) is ok


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


@pytest.mark.parametrize(
    ("affinity", "ok"),
    [
        ({}, True),
        (_required({"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]}]}), True),
        (_required({"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["r1"]}]}), False),
        (_required({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}), True),
        (_required({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}), True),
        (_required({"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["3"]}]}), False),
        (_required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}), True),
        (_required({}), False),  # an empty term selects no node
        (  # terms are OR-ed
            _required(
                {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r9"]}]},
                {"matchExpressions": [{"key": "rack", "operator": "Exists"}]},
            ),
            True,
        ),
    ],
)
def test_required_node_affinity(affinity: dict[str, Any], ok: bool) -> None:
    assert affinity_allows(affinity, {"rack": "r1", "gen": "4"}, "n1") is ok


def test_the_plan_keeps_off_tainted_and_unaffine_nodes(
    body: dict[str, Any], hypernodes: tuple[HyperNode, ...]
) -> None:
    """Half the nodes tainted for inference: the training gangs (no toleration) are planned on the
    other half; a pod with required affinity to rack r3 is planned in rack r3 and tolerates the taint."""
    session = copy.deepcopy(body)
    tainted = set()
    for name, info in session["Nodes"].items():
        if int(name.split("-")[1]) < 16:
            info["Node"]["spec"]["taints"] = [TAINT]
            tainted.add(name)
    spec = build.PodSpec("team-z", "pinned-0", "pinned", "worker", gpus=2)
    task = build.task_info(spec)
    pod_spec = task["Pod"]["spec"]
    pod_spec["affinity"] = _required(
        {"matchExpressions": [{"key": "topology.example.com/rack", "operator": "In", "values": ["r3"]}]}
    )
    pod_spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    session["Jobs"]["team-z/pinned"] = build.job_info(build.GroupSpec("team-z", "pinned", 1), [task])
    extender = Extender(
        solve=CapturingSolve(), patcher=RecordingPatcher(), hypernodes=lambda: hypernodes,
        config=Config(http_timeout_s=20.0, margin_s=0.5),
    )  # fmt: skip
    try:
        extender.on_session_open(session)
        plan = extender.plan
        assert plan is not None and extender.status.error == ""
        racks = {
            name: info["Node"]["metadata"]["labels"]["topology.example.com/rack"]
            for name, info in session["Nodes"].items()
        }
        assert plan.assignments[task["UID"]].node in {n for n, r in racks.items() if r == "r3"}
        others = [a.node for uid, a in plan.assignments.items() if uid != task["UID"]]
        assert others and not set(others) & tainted
        # the labels exist only in the solver's request, never as a patch on the cluster
        assert all(p.kind != "Node" for p in extender._patcher.patches)  # type: ignore[attr-defined]
    finally:
        extender.close()


def _pod(namespace: str, name: str, labels: dict[str, str], affinity: dict[str, Any], node: str = "") -> Any:
    from adapters.volcano import wire

    spec = build.PodSpec(namespace, name, name, "worker", gpus=1, node=node, labels=labels)
    info = build.task_info(spec)
    info["Pod"]["spec"]["affinity"] = affinity
    return wire.task(info, name)


def _pod_affinity(term: dict[str, Any]) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_required_pod_affinity_admits_the_domains_of_matching_running_pods() -> None:
    from adapters.volcano import wire
    from adapters.volcano.eligibility import Eligibility
    from adapters.volcano.kube import NotOurs

    nodes = [build.v1_node(f"n{i}", {"rack": "a" if i < 2 else "b"}) for i in range(4)]
    db = build.task_info(build.PodSpec("ml", "db-0", "db", "worker", gpus=1, node="n3", labels={"app": "db"}))
    infos = [wire.node_info(build.node_info(n, [db] if i == 3 else []), f"n{i}") for i, n in enumerate(nodes)]
    eligible = Eligibility(infos)

    def nodes_for(task: Any) -> set[str]:
        label = eligible.selector(task)
        return {n for n, extra in eligible.labels.items() if label and next(iter(label)) in extra}

    host = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
    assert nodes_for(_pod("ml", "p", {}, _pod_affinity(host))) == {"n3"}
    rack = {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]},
            "topologyKey": "rack"}  # fmt: skip
    assert nodes_for(_pod("ml", "q", {}, _pod_affinity(rack))) == {"n2", "n3"}
    # Another namespace's pods do not count unless the term names it.
    assert eligible.selector(_pod("other", "r", {}, _pod_affinity(host))) != {}
    assert nodes_for(_pod("other", "s", {}, _pod_affinity({**host, "namespaces": ["ml"]}))) == {"n3"}
    # A group's affinity to itself with none of it running, and a namespaceSelector: left to Volcano.
    own = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    with pytest.raises(NotOurs, match="own group"):
        eligible.selector(_pod("ml", "w", {"app": "web"}, _pod_affinity(own)))
    with pytest.raises(NotOurs, match="namespaceSelector"):
        eligible.selector(_pod("ml", "x", {}, _pod_affinity({**host, "namespaceSelector": {}})))


def test_preferred_node_affinity_orders_nodes_last() -> None:
    from adapters.volcano import wire
    from adapters.volcano.batch import preferring
    from adapters.volcano.eligibility import Eligibility
    from solver.domain.model import ObjectiveTier, Policy

    nodes = [build.v1_node(f"n{i}", {"rack": "a" if i < 2 else "b", "gen": str(i)}) for i in range(4)]
    eligible = Eligibility([wire.node_info(build.node_info(n), f"n{i}") for i, n in enumerate(nodes)])
    rack_b = {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["b"]}]}
    gen_3 = {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["2"]}]}
    terms = [{"weight": 10, "preference": rack_b}, {"weight": 5, "preference": gen_3}]
    prefer = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}
    eligible.prefer(_pod("ml", "p", {}, prefer))
    assert eligible.preference == {"n3": 15, "n2": 10}
    policy = preferring(Policy(), eligible.preference)
    assert policy.node_order == ("n3", "n2") and policy.objective[-1] == ObjectiveTier.NODE_ORDER
    assert preferring(Policy(), {}) == Policy()


def test_a_running_pods_anti_affinity_keeps_matching_pods_out_of_its_domain() -> None:
    """Kubernetes checks existing pods' required anti-affinity too: a pod it matches may not join
    that pod's topology domain; Volcano's predicates refuse it, so the plan must not put it there."""
    from adapters.volcano import wire
    from adapters.volcano.eligibility import Eligibility

    nodes = [build.v1_node(f"n{i}", {"rack": "a" if i < 2 else "b"}) for i in range(4)]

    def eligible_for(key: str, labels: dict[str, str]) -> set[str]:
        guard = build.task_info(build.PodSpec("ml", "guard-0", "guard", "worker", gpus=1, node="n1"))
        term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": key}
        guard["Pod"]["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
        infos = [
            wire.node_info(build.node_info(n, [guard] if i == 1 else []), f"n{i}")
            for i, n in enumerate(nodes)
        ]
        eligible = Eligibility(infos)
        label = eligible.selector(_pod("ml", "p", labels, {}))
        if not label:
            return {f"n{i}" for i in range(4)}
        return {n for n, extra in eligible.labels.items() if next(iter(label)) in extra}

    assert eligible_for("kubernetes.io/hostname", {"app": "web"}) == {"n0", "n2", "n3"}
    assert eligible_for("rack", {"app": "web"}) == {"n2", "n3"}
    assert eligible_for("rack", {"app": "db"}) == {"n0", "n1", "n2", "n3"}, "a pod it does not match is free"
