"""HyperNode and network-topology edge cases, read as Volcano's scheduler reads them.

The references are Volcano's own sources (master of 2026): ``pkg/util/hypernode/member_selector.go``
(an empty ``labelMatch`` selects nothing; ``regexMatch`` is an unanchored search), ``pkg/scheduler/
api/hyper_node_info.go`` (a HyperNode member is found by ``exactMatch`` only), the HyperNode CRD
(``spec.tier`` minimum 0) and ``JobInfo.IsHardTopologyMode`` (hard without ``HighestTierAllowed`` is
not hard).
"""

from __future__ import annotations

from typing import Any

import yaml

from adapters.volcano import hypernodes as hn
from adapters.volcano.batch import JobEntry, job_locality
from adapters.volcano.wire import Job, NetworkTopology, PodGroup
from solver.domain.errors import InvalidRequest
from solver.domain.model import Requirement

NODES = {
    "gpu-0": {"rack": "r0"},
    "gpu-1": {"rack": "r0"},
    "gpu-2": {"rack": "r1"},
    "cpu-0": {},
}


def hypernode(name: str, tier: Any, members: list[dict[str, Any]], tier_name: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"tier": tier, "members": members}
    if tier_name:
        spec["tierName"] = tier_name
    return {"apiVersion": hn.API_VERSION, "kind": "HyperNode", "metadata": {"name": name}, "spec": spec}


def parsed(*objects: dict[str, Any]) -> tuple[hn.HyperNode, ...]:
    problems: list[Any] = []
    found = tuple(h for o in objects if (h := hn.parse(o, "test", problems)) is not None)
    if problems:
        raise InvalidRequest(problems)
    return found


def node(name: str) -> dict[str, Any]:
    return {"type": "Node", "selector": {"exactMatch": {"name": name}}}


def child(name: str) -> dict[str, Any]:
    return {"type": "HyperNode", "selector": {"exactMatch": {"name": name}}}


def job_with(topology: NetworkTopology) -> Job:
    group = PodGroup("pg", "ns", {}, "Inqueue", 2, {}, topology, ())
    return Job("ns/pg", "pg", "ns", "default", 0, 2, {}, (), group)


def test_tier_zero_hypernodes_load_and_keep_their_order() -> None:
    """The CRD allows tier 0; the solver's tiers start at 1, so every tier moves up by one and a
    job's highestTierAllowed with them."""
    fabric = hn.resolve(
        parsed(
            hypernode("nvl-0", 0, [node("gpu-0"), node("gpu-1")], "nvlink"),
            hypernode("leaf-0", 1, [child("nvl-0"), node("gpu-2")]),
        ),
        NODES,
    )
    tiers = {s.id: (s.tier, s.parent) for s in fabric.switches}
    # gpu-2 hangs right under leaf-0 (Volcano tier 1 = solver tier 2); the solver hangs nodes under
    # tier-1 switches (it refused the whole batch before), so gpu-2 gets one of its own under leaf-0
    assert tiers == {"nvl-0": (1, "leaf-0"), "leaf-0": (2, ""), "leaf-0/gpu-2": (1, "leaf-0")}
    assert fabric.tier_offset == 1
    assert fabric.leaf_of == {"gpu-0": "nvl-0", "gpu-1": "nvl-0", "gpu-2": "leaf-0/gpu-2"}
    # the HyperNode written on a PodGroup is a real one, never the made-up switch
    assert (
        fabric.lowest_common(["gpu-2"]) == "leaf-0" and fabric.lowest_common(["gpu-0", "gpu-2"]) == "leaf-0"
    )
    assert fabric.lowest_common(["gpu-0", "gpu-1"]) == "nvl-0"

    entry = JobEntry("ns/pg", "ns", "pg")
    locality, words = job_locality(job_with(NetworkTopology("hard", 0, "")), fabric, entry)
    assert (locality.mode, locality.highest_tier) == (Requirement.REQUIRED, 1)
    assert words == "networkTopology hard, highestTierAllowed 0", "reasons speak Volcano's tiers"
    locality, _ = job_locality(job_with(NetworkTopology("hard", None, "nvlink")), fabric, entry)
    assert locality.highest_tier == 1


def test_a_negative_tier_is_refused_with_its_place() -> None:
    problems: list[Any] = []
    assert hn.parse(hypernode("bad", -1, [node("gpu-0")]), "f.yaml: doc[0]", problems) is None
    assert problems[0].path == "f.yaml: doc[0].spec.tier" and "≥ 0" in problems[0].message


def test_regex_members_are_searched_unanchored_over_node_names() -> None:
    fabric = hn.resolve(
        parsed(hypernode("leaf", 1, [{"type": "Node", "selector": {"regexMatch": {"pattern": "gpu-[01]"}}}])),
        {**NODES, "big-gpu-1x": {}},
    )
    # Go's regexp.MatchString finds a match anywhere in the name, as re.search does
    assert sorted(fabric.leaf_of) == ["big-gpu-1x", "gpu-0", "gpu-1"]


def test_a_hypernode_member_by_regex_is_ignored_as_volcano_ignores_it() -> None:
    fabric = hn.resolve(
        parsed(
            hypernode("leaf-a", 1, [node("gpu-0")]),
            hypernode("leaf-b", 1, [node("gpu-1")]),
            hypernode(
                "spine", 2, [{"type": "HyperNode", "selector": {"regexMatch": {"pattern": "leaf-.*"}}}]
            ),
        ),
        NODES,
    )
    assert {s.id: s.parent for s in fabric.switches} == {"leaf-a": "", "leaf-b": "", "spine": ""}
    assert any("spine" in w and "exactMatch" in w for w in fabric.warnings)


def test_an_empty_label_match_selects_no_node() -> None:
    fabric = hn.resolve(
        parsed(
            hypernode("everything?", 1, [{"type": "Node", "selector": {"labelMatch": {}}}]),
            hypernode(
                "rack-0", 1, [{"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "r0"}}}}]
            ),
        ),
        NODES,
    )
    assert fabric.leaf_of == {"gpu-0": "rack-0", "gpu-1": "rack-0"}
    assert any("everything?" in w and "empty labelMatch" in w for w in fabric.warnings)


def test_hard_mode_without_a_tier_is_no_tier_limit() -> None:
    """Volcano's JobInfo.IsHardTopologyMode is false without HighestTierAllowed: no limit applies
    (topoplace used to read it as hard tier 1, refusing jobs Volcano would place)."""
    fabric = hn.resolve(parsed(hypernode("leaf", 1, [node("gpu-0")], "leaf")), NODES)
    for topology in (NetworkTopology("hard", None, ""), NetworkTopology("hard", None, "no-such-tier")):
        entry = JobEntry("ns/pg", "ns", "pg")
        locality, words = job_locality(job_with(topology), fabric, entry)
        assert locality.mode == Requirement.NONE and words == ""
        assert any("no tier limit" in n for n in entry.notes), entry.notes
    entry = JobEntry("ns/pg", "ns", "pg")
    locality, _ = job_locality(job_with(NetworkTopology("hard", None, "leaf")), fabric, entry)
    assert (locality.mode, locality.highest_tier) == (Requirement.REQUIRED, 1)
    locality, _ = job_locality(job_with(NetworkTopology("soft", None, "")), fabric, entry)
    assert locality.mode == Requirement.PREFERRED


def test_tier_zero_from_a_file(tmp_path: Any) -> None:
    path = tmp_path / "hn.yaml"
    path.write_text(
        yaml.safe_dump_all([hypernode("nvl", 0, [node("gpu-0")]), hypernode("leaf", "1", [child("nvl")])])
    )
    loaded = hn.load(path)
    assert [(h.name, h.tier) for h in loaded] == [("leaf", 1), ("nvl", 0)]
