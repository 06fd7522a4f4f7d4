"""Issue 21, errors for people: request files and scenarios refuse bad input with the indexed path and a
sentence — never Python's own messages — list an enum's valid values, and accept the short enum names
the docs use (``PXB``, ``REQUIRED``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from solver.domain.errors import InvalidRequest
from solver.domain.model import BatchOrder, Distance, NicMode, ObjectiveTier, Packing, Requirement, SwitchKind
from solver.service import wire
from solver.whatif import load_and_prepare
from solver.whatif.convert import load_scenario_file

ROOT = Path(__file__).resolve().parents[1]
DEMO = json.loads((ROOT / "fixtures/requests/dgx4-mixed.json").read_text())
# Words of Python's and protobuf's internals that must never reach a person.
INTERNALS = ("unhashable", "int()", "literal", "bytes-like", "Failed to parse", "Traceback", "enum type")


def member(data: dict[str, Any], job: int = 1) -> dict[str, Any]:
    return data["jobs"][job]["roles"][0]["member"]


def messages(data: Any) -> list[str]:
    with pytest.raises(InvalidRequest) as caught:
        wire.request_from_dict(data, "r.json")
    problems = caught.value.problems
    assert all(p.path == "r.json" for p in problems)
    return [p.message for p in problems]


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        (("alignment", "distance"), "PXB", ("alignment", "distance", Distance.PXB)),
        (("alignment", "distance"), "pix", ("alignment", "distance", Distance.PIX)),
        (("alignment", "mode"), "REQUIRED", ("alignment", "mode", Requirement.REQUIRED)),
        (("alignment", "mode"), "preferred", ("alignment", "mode", Requirement.PREFERRED)),
        (("nics", "mode"), "PER_GPU", ("nics", "mode", NicMode.PER_GPU)),
        (("nics", "mode"), "per-member", ("nics", "mode", NicMode.PER_MEMBER)),
        (("numa",), "REQUIRED", ("numa", None, Requirement.REQUIRED)),
        (("nvlink",), "REQUIREMENT_NONE", ("nvlink", None, Requirement.NONE)),
    ],
)
def test_short_enum_names_are_read_like_the_full_ones(
    where: tuple[str, ...], value: str, expected: tuple[str, str | None, int]
) -> None:
    data = copy.deepcopy(DEMO)
    target = member(data)
    for key in where[:-1]:
        target = target.setdefault(key, {})
    target[where[-1]] = value
    got = wire.request_from_dict(data, "r.json").jobs[1].roles[0].member
    field, sub, enum_value = expected
    read = getattr(got, field) if sub is None else getattr(getattr(got, field), sub)
    assert read == enum_value


def test_short_enum_names_in_policy_and_inventory() -> None:
    data = copy.deepcopy(DEMO)
    data["policy"].update(packing="spread", batch_order="LARGEST_FIRST", objective=["PLACED_WORK", "PACKING"])
    data["inventory"]["nodes"][0]["pcie_switches"] = [{"id": "hb9", "kind": "HOST_BRIDGE"}]
    request = wire.request_from_dict(data, "r.json")
    assert request.policy.packing == Packing.SPREAD
    assert request.policy.batch_order == BatchOrder.LARGEST_FIRST
    assert request.policy.objective == (ObjectiveTier.PLACED_WORK, ObjectiveTier.PACKING)
    assert request.inventory.nodes[0].pcie_switches[-1].kind == SwitchKind.HOST_BRIDGE


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        # Each of these leaked Python's own message or refused a name the docs use (issue 21).
        (lambda m: m.__setitem__("nics", {"mode": {"x": 1}}),
         "jobs[1].roles[0].member.nics.mode: must be one of NONE, PER_GPU, PER_MEMBER, got an object"),
        (lambda m: m.__setitem__("nics", {"mode": ["PER_GPU"]}),
         "jobs[1].roles[0].member.nics.mode: must be one of NONE, PER_GPU, PER_MEMBER, got a list"),
        (lambda m: m.__setitem__("gpus", "two"),
         "jobs[1].roles[0].member.gpus: must be a whole number, got the text 'two'"),
        (lambda m: m.__setitem__("cpu_milli", "8 cores"),
         "jobs[1].roles[0].member.cpu_milli: must be a whole number, got the text '8 cores'"),
        (lambda m: m.__setitem__("gpus", 1.5),
         "jobs[1].roles[0].member.gpus: must be a whole number, got the number 1.5"),
        (lambda m: m.__setitem__("gpu_models", [{"name": "H100"}]),
         "jobs[1].roles[0].member.gpu_models[0]: must be text (in quotes), got an object"),
        (lambda m: m.__setitem__("node_selector", {"zone": {"a": 1}}),
         "jobs[1].roles[0].member.node_selector['zone']: must be text (in quotes), got an object"),
        (lambda m: m.__setitem__("node_selector", ["zone=a"]),
         "jobs[1].roles[0].member.node_selector: must be an object (a map), got a list"),
        (lambda m: m.__setitem__("alignment", {"mode": "REQUIRE"}),
         "jobs[1].roles[0].member.alignment.mode: must be one of NONE, PREFERRED, REQUIRED, "
         "got the text 'REQUIRE'"),
        (lambda m: m.__setitem__("alignment", {"distance": "PXX"}),
         "jobs[1].roles[0].member.alignment.distance: must be one of PIX, PXB, PHB, NODE, SYS, "
         "got the text 'PXX'"),
        (lambda m: m.__setitem__("numa", 7),
         "jobs[1].roles[0].member.numa: must be one of NONE, PREFERRED, REQUIRED, got the number 7"),
        (lambda m: m.__setitem__("mutex", "yes"),
         "jobs[1].roles[0].member.mutex: must be true or false, got the text 'yes'"),
        (lambda m: m.__setitem__("alignment", ["PXB"]),
         "jobs[1].roles[0].member.alignment: must be an object, got a list"),
    ],
)  # fmt: skip
def test_bad_values_are_named_in_words(mutate: Any, expected: str) -> None:
    data = copy.deepcopy(DEMO)
    mutate(member(data))
    (message,) = messages(data)
    assert message == expected
    assert not any(word in message for word in INTERNALS)


def test_every_problem_is_reported_at_once() -> None:
    data = copy.deepcopy(DEMO)
    member(data, 1)["gpus"] = "two"
    member(data, 2)["nics"] = {"mode": "EVERY_GPU"}
    data["policy"]["packing"] = "tight"
    data["jobs"][3]["bogus"] = 1
    got = messages(data)
    assert [m.split(":")[0] for m in got] == [
        "jobs[1].roles[0].member.gpus",
        "jobs[2].roles[0].member.nics.mode",
        "jobs[3]",
        "policy.packing",
    ]
    assert "must be one of BINPACK, SPREAD, FILL" in got[3]
    assert 'unknown field "bogus"; known fields: id,' in got[2]


def test_a_scenario_takes_short_names_and_says_what_is_wrong_in_words(tmp_path: Path) -> None:
    scenario = {
        "base": {"file": str(ROOT / "fixtures/requests/dgx4-mixed.json")},
        "jobs_file": str(ROOT / "fixtures/requests/dgx4-mixed.json"),
        "policies": [{"name": "s", "solver": {"packing": "SPREAD", "batch_order": "largest_first"}}],
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    load_scenario_file(path)  # short names read

    scenario["policies"][0]["solver"]["packing"] = {"mode": "spread"}
    path.write_text(yaml.safe_dump(scenario))
    with pytest.raises(InvalidRequest) as caught:
        load_scenario_file(path)
    (problem,) = caught.value.problems
    assert problem.path.endswith(":policies[0].solver.packing")
    assert problem.message.startswith("must be one of BINPACK, SPREAD, FILL, got an object")


def test_a_change_job_patch_names_the_role_by_name_once(tmp_path: Path) -> None:
    """Was: ``change_job.patch.patch:roles[0].min_replicas: invalid literal for int() ...``."""
    demo = str(ROOT / "fixtures/requests/dgx4-mixed.json")
    scenario = {
        "base": {"file": demo},
        "jobs_file": demo,
        "edits": [
            {"change_job": {"job": "pretrain-3x8", "patch": {"roles": {"worker": {"min_replicas": "two"}}}}}
        ],
        "policies": [{"name": "s", "solver": {"time_limit_s": 1}}],
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    with pytest.raises(InvalidRequest) as caught:
        load_and_prepare(path)
    (problem,) = caught.value.problems
    assert problem.path.endswith("edits[0].change_job.patch.roles.worker.min_replicas")
    assert problem.message.startswith("must be a whole number, got the text 'two'")
