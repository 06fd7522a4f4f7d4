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
