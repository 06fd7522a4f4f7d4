"""A job with no room now is typed at submit for a later start on whichever node Slurm picks
(adapters/slurm/later.py): aligned on every node it may land on, inside one NVLink half where the
nodes allow, spread over the switch groups least pressed — and left untyped when there is nothing to
keep together."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.slurm.agent import Agent
from adapters.slurm.inventory import DeviceMap, SlurmInventory
from adapters.slurm.jobdesc import job_from_description
from adapters.slurm.later import (
    LATER_TAG,
    Ahead,
    NodeViews,
    claims_ahead,
    later_comment,
    later_signature,
    untyped_ahead,
    waiting_demand,
)
from adapters.slurm.nodetypes import NodeType, switch_groups
from adapters.slurm.pending import parse_pending
from bench.slurm_compare import halves_capture
from solver.domain.model import Allocation, Inventory
from solver.ingest.nvidia_smi import parse_topology
from tests.slurm.conftest import agent_on


def cluster(kinds: dict[str, str], used: dict[str, tuple[str, ...]] | None = None) -> SlurmInventory:
    """Nodes of the bench's kinds (NVLink halves, 2 GPUs + 2 NICs a switch group), typed per group."""
    nodes, maps, types = [], {}, {}
    for name, kind in kinds.items():
        node = parse_topology(halves_capture(kind), node=name)
        node_type = NodeType(f"{kind}.txt", node, switch_groups(node))
        maps[name] = DeviceMap(node_type.gpu_order(), node_type.nic_order(), node_type.group_of())
        if used and name in used:
            node = node.model_copy(update={"allocations": (Allocation(owner="x", gpus=used[name]),)})
        nodes.append(node)
        types[name] = node_type
    return SlurmInventory(Inventory(nodes=tuple(nodes)), maps, types)


def spec(tres: str, nodes: int = 1):
    made = job_from_description({"min_nodes": nodes, "tres_per_node": tres}, plan_id="j", max_gpus_per_node=8)
    assert made is not None
    return made


ALIGNED = {f"a{i}": "aligned" for i in range(4)}


def test_one_gpu_and_its_nic_share_a_type_and_go_where_fewest_gpus_are_taken() -> None:
    idle = later_signature(spec("gres:gpu:1,gres:nic:1"), cluster(ALIGNED))
    assert idle == (("gpu", "sw0", 1), ("nic", "sw0", 1))
    # sw0 and sw1 taken on every node (Slurm fills low indices first): the job waits for sw2
    busy = cluster(ALIGNED, {name: ("GPU0", "GPU1", "GPU2") for name in ALIGNED})
    assert later_signature(spec("gres:gpu:1,gres:nic:1"), busy) == (("gpu", "sw2", 1), ("nic", "sw2", 1))
    # jobs already waiting on sw2 count as taken too: the next one waits for sw3
    waiting = Counter({"sw2": 8})
    assert later_signature(spec("gres:gpu:1,gres:nic:1"), busy, waiting) == (
        ("gpu", "sw3", 1),
        ("nic", "sw3", 1),
    )


def test_a_group_held_for_the_hour_is_not_chosen_over_one_that_frees_in_a_minute() -> None:
    """Session 27's churn bench: typed jobs still pending at the end had been given sw0/sw1, which
    the background held for good — in use now, they looked no busier than groups freeing soon."""
    now = 1_000_000.0
    # every node: one GPU of sw0 and of sw1 held by an hour-long job, sw2 and sw3 by short ones
    busy = cluster(ALIGNED, {name: ("GPU0", "GPU2", "GPU4", "GPU5", "GPU6", "GPU7") for name in ALIGNED})
    ends = {
        name: {0: now + 3600, 2: now + 3600, 4: now + 60, 5: now + 60, 6: now + 90, 7: now + 90}
        for name in ALIGNED
    }
    job = spec("gres:gpu:2,gres:nic:2")
    # by use now alone: sw0 (half used) — where no node frees two GPUs within the hour
    assert later_signature(job, busy) == (("gpu", "sw0", 2), ("nic", "sw0", 2))
    # by when they free: sw2, free on every node in a minute
    assert later_signature(job, busy, ends=ends, now=now) == (("gpu", "sw2", 2), ("nic", "sw2", 2))
    # four 2-GPU jobs already wait for sw2 (one per node): the next one waits for sw3
    assert later_signature(job, busy, Counter({"sw2": 8}), ends, now) == (
        ("gpu", "sw3", 2),
        ("nic", "sw3", 2),
    )
    # a GPU in use by no job read (a plan, a job just started) is not counted as free
    unread = {name: {0: now + 3600, 2: now + 3600} for name in ALIGNED}
    assert later_signature(job, busy, ends=unread, now=now) == (("gpu", "sw2", 2), ("nic", "sw2", 2))


def test_gpus_free_on_a_node_promised_to_a_job_ahead_are_not_counted_free() -> None:
    """Churn bench seed 2 (session 28): a 2-GPU job typed for sw0, free then only on nodes backfill
    had promised to whole-node jobs queued ahead, was the one job left pending that started untyped."""
    now = 1_000_000.0
    # a0: sw0 free, the rest held; elsewhere sw0 and sw1 held for the hour, sw2 and sw3 soon
    used = {name: tuple(f"GPU{i}" for i in range(8)) for name in ALIGNED}
    used["a0"] = tuple(f"GPU{i}" for i in range(2, 8))
    busy = cluster(ALIGNED, used)
    soon = {4: now + 60, 5: now + 60, 6: now + 90, 7: now + 90}
    ends = {name: dict.fromkeys(range(4), now + 3600) | soon for name in ALIGNED}
    job = spec("gres:gpu:2,gres:nic:2")
    assert later_signature(job, busy, ends=ends, now=now) == (("gpu", "sw0", 2), ("nic", "sw0", 2))
    promised = frozenset({"a0"})
    assert later_signature(job, busy, ends=ends, now=now, promised=promised) == (
        ("gpu", "sw2", 2),
        ("nic", "sw2", 2),
    )
    # the same with the views kept from one submit to the next (the agent's): a0 promised since
    views = NodeViews()
    assert later_signature(job, busy, ends=ends, now=now, views=views)[0] == ("gpu", "sw0", 2)
    assert later_signature(job, busy, ends=ends, now=now, promised=promised, views=views)[0] == (
        "gpu",
        "sw2",
        2,
    )


def test_a_group_that_frees_only_where_an_untyped_job_ahead_waits_is_not_chosen() -> None:
    """Churn bench seed 2 (sessions 28, 35, 38): background jobs Slurm placed hold the low indices
    (sw0) for good on most nodes, so sw0 frees soonest only on a node about to empty — the node the
    whole-node jobs queued ahead, untyped, wait for. Two jobs typed for sw0 waited there to the
    window's end; typed GRES alone started them at once elsewhere."""
    now = 1_000_000.0
    used = {name: tuple(f"GPU{i}" for i in range(8)) for name in ALIGNED}
    busy = cluster(ALIGNED, used)
    ends = {
        name: dict.fromkeys(range(4), now + 86400) | dict.fromkeys(range(4, 8), now + 90) for name in ALIGNED
    }
    ends["a0"] = {0: now + 30, 1: now + 30} | dict.fromkeys(range(2, 8), now + 600)  # empties in 10 min
    job = spec("gres:gpu:2,gres:nic:2")
    assert later_signature(job, busy, ends=ends, now=now)[0] == ("gpu", "sw0", 2)  # a0's sw0, in 30 s
    whole = [Ahead(nodes=1, gpus=8, hold_s=600)]
    claims = claims_ahead(busy, ends, whole, now)
    assert claims == {"a0": dict.fromkeys(range(8), now + 1200)}  # where all eight free soonest
    assert later_signature(job, busy, ends=ends, now=now, claims=claims)[0] in (
        ("gpu", "sw2", 2),
        ("gpu", "sw3", 2),
    )
    # the same with the views kept from one submit to the next (the agent's)
    views = NodeViews()
    assert later_signature(job, busy, ends=ends, now=now, views=views)[0] == ("gpu", "sw0", 2)
    assert later_signature(job, busy, ends=ends, now=now, views=views, claims=claims)[0] != ("gpu", "sw0", 2)


def test_untyped_jobs_ahead_claim_the_lowest_free_indices_where_they_fit_soonest() -> None:
    """As Slurm fills an untyped request: the nodes whose GPUs free soonest (a gang: as many as it
    has members, starting together), there the lowest indices free by then; a job that can never
    fit claims nothing."""
    now = 1_000_000.0
    nodes = cluster(
        {"a0": "aligned", "a1": "aligned", "a2": "aligned"},
        {"a0": ("GPU0", "GPU1", "GPU2", "GPU3"), "a1": tuple(f"GPU{i}" for i in range(8)), "a2": ("GPU0",)},
    )
    ends = {
        "a0": dict.fromkeys(range(4), now + 100),
        "a1": dict.fromkeys(range(8), now + 50),
        "a2": {0: now + 3600},
    }
    ahead = [
        Ahead(nodes=1, gpus=2, hold_s=60),  # free now on a0 (4-7) and a2 (1-7): a0 by name, 4 and 5
        Ahead(nodes=2, gpus=8, hold_s=300),  # a1 in 50 s, a0 in 100 s: both, from 100 s
        Ahead(nodes=1, gpus=9, hold_s=60),  # fits no node
        Ahead(nodes=1, gpus=7, hold_s=math.inf),  # a2's seven free now: held for good
    ]
    assert claims_ahead(nodes, ends, ahead[:1], now) == {"a0": {4: now + 60, 5: now + 60}}
    claims = claims_ahead(nodes, ends, ahead, now)
    assert claims["a0"] == claims["a1"] == dict.fromkeys(range(8), now + 400)  # the gang's, after
    assert claims["a2"] == dict.fromkeys(range(1, 8), math.inf)
    assert claims_ahead(nodes, ends, [], now) == {}


def test_the_untyped_jobs_ahead_are_read_from_squeue() -> None:
    """``%D|%b|%l``: nodes, GRES a node, time limit. Only eligible, unplanned, untyped GPU asks count
    (a typed or later-typed ask is counted by its type; a plan holds its devices already)."""
    at = "2026-12-08T00:28:01"
    jobs = parse_pending(
        "\n".join(
            [
                f"184|{at}|Resources|N/A|(null)|2|gres:gpu:8,gres:nic:8|3:00|",
                f"185|{at}|Priority|N/A|(null)|1|gres:gpu:2|1:00:00|",
                f"186|{at}|Priority|N/A|(null)|1|gres:gpu:sw0:2|2:00|{LATER_TAG} id=a n=1 gpu:sw0:2",
                f"187|{at}|JobHeldUser|N/A|(null)|1|gres:gpu:4|2:00|",
                f"188|{at}|Priority|N/A|(null)|1|gres:gpu:sw1:1|2:00|a user's own type",
                f"189|{at}|Priority|N/A|(null)|1|gres:gpu:1|2:00|topoplace/v1 id=p gn01:gpu=0:nic=",
                f"190|{at}|Priority|N/A|(null)|1|N/A|UNLIMITED|",
                f"191|{at}|Priority|N/A|(null)|3|gres/gpu:4|1-00:00:00|",
            ]
        )
    )
    assert [(j.nodes, j.tres_per_node, j.time_limit_s) for j in jobs][:2] == [
        (2, "gres:gpu:8,gres:nic:8", 180.0),
        (1, "gres:gpu:2", 3600.0),
    ]
    assert untyped_ahead(jobs) == [
        Ahead(nodes=2, gpus=8, hold_s=180.0),
        Ahead(nodes=1, gpus=2, hold_s=3600.0),
        Ahead(nodes=3, gpus=4, hold_s=86400.0),
    ]
    assert jobs[6].time_limit_s == math.inf and jobs[6].gpus_per_node is None


KINDS = ("aligned", "crossed", "rotated", "reversed")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(("allocate", "ends", "promise", "rekind", "claim", "none")),
            st.integers(0, 5),  # node
            st.lists(st.integers(0, 7), max_size=8),  # GPUs (allocate) or indices (ends, claim)
            st.integers(0, 4000),  # seconds (ends, claim)
        ),
        min_size=1,
        max_size=8,
    ),
    tres=st.sampled_from(("gres:gpu:1,gres:nic:1", "gres:gpu:2,gres:nic:2", "gres:gpu:4,gres:nic:4")),
)
def test_views_kept_from_submit_to_submit_give_what_fresh_views_give(steps, tres) -> None:
    """Session 29: the nodes' views are kept between submits (120-150 ms a submit at 1,024 nodes
    when made afresh); a node changed since — its allocations, its jobs' ends, a backfill promise —
    must be seen changed, so each answer is the one views made for it alone would give. Also a node
    read again as another kind under its name (other devices, another device map): its layout too,
    and the GPUs untyped jobs ahead claim there (session 38)."""
    now = 1_000_000.0
    names = [f"n{i}" for i in range(6)]
    # every node busy but for one GPU, its jobs ending over the hour: rule 4 (when they free) decides
    base = cluster(
        {name: KINDS[i % 4] for i, name in enumerate(names)},
        {name: tuple(f"GPU{g}" for g in range(8) if g != i) for i, name in enumerate(names)},
    )
    nodes = {n.name: n for n in base.inventory.nodes}
    ends = {name: {idx: now + 600 * ((idx + i) % 6) for idx in range(8)} for i, name in enumerate(names)}
    maps = dict(base.device_maps)
    kind = {name: i % 4 for i, name in enumerate(names)}
    promised: set[str] = set()
    claims: dict[str, dict[int, float]] = {}
    views = NodeViews()
    job = spec(tres)
    for action, i, values, seconds in steps:
        name = names[i]
        if action == "allocate":
            gpus = tuple(sorted({f"GPU{g}" for g in values}))
            nodes[name] = nodes[name].model_copy(update={"allocations": (Allocation(owner="x", gpus=gpus),)})
        elif action == "ends":
            ends[name] = {idx: now + seconds for idx in values}  # a new dict, as each read makes
        elif action == "promise":
            promised ^= {name}
        elif action == "claim":  # a new read's claims: a new dict (or none) for the node
            claims = {**claims, name: {idx: now + seconds for idx in values}}
        elif action == "rekind":
            kind[name] = (kind[name] + 1) % 4
            other = cluster({name: KINDS[kind[name]]})
            nodes[name] = other.inventory.nodes[0].model_copy(update={"allocations": nodes[name].allocations})
            maps[name] = other.device_maps[name]
        inventory = SlurmInventory(Inventory(nodes=tuple(nodes.values())), maps, base.node_types)
        args = (job, inventory, Counter({"sw1": 2}), ends, now, frozenset(promised))
        assert later_signature(*args, views=views, claims=claims) == later_signature(*args, claims=claims)


def test_a_gang_typed_for_later_waits_for_groups_free_on_as_many_nodes_as_it_has_members() -> None:
    """Session 29's trial (``AgentConfig.later_gangs``): each member on its own node, so a group
    freeing soon on one node only is not soon for a 2-node gang."""
    now = 1_000_000.0
    busy = cluster(ALIGNED, {name: tuple(f"GPU{i}" for i in range(8)) for name in ALIGNED})
    hour = dict.fromkeys(range(8), now + 3600)
    ends = {name: dict(hour) for name in ALIGNED}
    ends["a0"].update({0: now + 60, 1: now + 60})  # sw0 frees in a minute on a0 alone
    for name in ("a1", "a2"):
        ends[name].update({2: now + 120, 3: now + 120})  # sw1 in two minutes on a1 and a2
    one, gang = spec("gres:gpu:2,gres:nic:2"), spec("gres:gpu:2,gres:nic:2", nodes=2)
    assert later_signature(one, busy, ends=ends, now=now)[0] == ("gpu", "sw0", 2)
    assert later_signature(gang, busy, ends=ends, now=now) is None  # gangs stay untyped by default
    assert later_signature(gang, busy, ends=ends, now=now, gangs=True)[0] == ("gpu", "sw1", 2)


def test_four_gpus_stay_inside_one_nvlink_half_of_the_nodes_they_may_land_on() -> None:
    aligned = later_signature(spec("gres:gpu:4,gres:nic:4"), cluster(ALIGNED))
    assert aligned is not None and {t for _, t, _ in aligned} == {"sw0", "sw1"}  # halves (0-3), (4-7)
    crossed = later_signature(spec("gres:gpu:4,gres:nic:4"), cluster({"c0": "crossed", "c1": "crossed"}))
    assert crossed == (("gpu", "sw0", 2), ("gpu", "sw2", 2), ("nic", "sw0", 2), ("nic", "sw2", 2))
    # a mixed cluster: the half of most nodes (no signature is one half on both kinds)
    mixed = later_signature(spec("gres:gpu:4,gres:nic:4"), cluster(ALIGNED | {"c0": "crossed"}))
    assert mixed is not None and {t for _, t, _ in mixed} in ({"sw0", "sw1"}, {"sw2", "sw3"})


def test_what_typing_for_later_cost_more_than_it_kept_together_is_left_untyped() -> None:
    """Tried on the churn bench and taken back (session 27): gangs and GPU-only jobs; and what has
    nothing to keep together or cannot be typed."""
    nodes = cluster(ALIGNED)
    assert later_signature(spec("gres:gpu:2,gres:nic:2", nodes=2), nodes) is None  # a gang
    assert later_signature(spec("gres:gpu:4"), nodes) is None  # GPUs alone
    assert later_signature(spec("gres:gpu:1"), nodes) is None
    assert later_signature(spec("gres:gpu:8,gres:nic:8"), nodes) is None  # whole nodes
    assert later_signature(spec("gres:gpu:4,gres:nic:1"), nodes) is None  # one NIC for four GPUs
    excluded = job_from_description(
        {"tres_per_node": "gres:gpu:1,gres:nic:1", "exc_nodes": "a[0-3]"}, plan_id="j", max_gpus_per_node=8
    )
    assert excluded is not None and later_signature(excluded, nodes) is None  # no node left


def test_waiting_jobs_are_read_back_from_their_comments() -> None:
    signature = (("gpu", "sw1", 2), ("gpu", "sw2", 1), ("nic", "sw1", 2), ("nic", "sw2", 1))
    tag = later_comment("abc", 3, signature)
    assert tag == f"{LATER_TAG} id=abc n=3 gpu:sw1:2,gpu:sw2:1,nic:sw1:2,nic:sw2:1"
    assert waiting_demand(["my words " + tag, "topoplace/v1 id=x gn01:gpu=0:nic=", ""]) == {
        "sw1": 6,
        "sw2": 3,
    }
    # a user's own text that looks like a tag is read as far as it makes sense, never an error
    junk = [f"{LATER_TAG} id=me n=2 gpu:sw9:x,gpu:sw3:1,junk", f"{LATER_TAG} id=x n=1 :"]
    assert waiting_demand(junk) == {"sw3": 2}


@pytest.mark.needs_pipeline
def test_the_agent_types_a_job_with_no_room_now_for_later_and_spreads_the_next_one(agent: Agent) -> None:
    """On the captured cluster (gpu01 idle, gpu02 with two GPUs held, gpu03 full, gpu04 down): once
    gpu01 is planned, no node has 7 GPUs free; a 7-GPU job is typed for a later start, not pinned,
    its lone GPU on the most used switch group, and what it waits for is counted for the next."""
    job = {"tres_per_node": "gres:gpu:7,gres:nic:7", "comment": "mine"}
    assert agent.place({"tres_per_node": "gres:gpu:8"})["action"] == "apply"
    assert agent.config.later_types  # the default since session 28
    agent.config = dataclasses.replace(agent.config, later_types=False)
    assert agent.place(job)["action"] == "pass"  # --no-later-types: left to Slurm's queue untyped
    agent.config = dataclasses.replace(agent.config, later_types=True)
    first = agent.place(job)
    assert first["action"] == "apply" and first.get("later"), first
    fields = first["set"]
    assert "req_nodes" not in fields and fields["min_nodes"] == fields["max_nodes"] == 1
    counts = {kind: {} for kind in ("gpu", "nic")}
    for item in fields["tres_per_node"].split(","):
        _, kind, gtype, count = item.split(":")
        counts[kind][gtype] = int(count)
    assert counts["gpu"] == counts["nic"] and sum(counts["gpu"].values()) == 7, fields  # NIC by GPU
    assert counts["gpu"]["sw1"] == 1  # gpu02's held GPUs are sw1's: the most used group
    signature = ",".join(f"{k}:{t}:{c}" for k in ("gpu", "nic") for t, c in sorted(counts[k].items()))
    assert fields["comment"] == f"mine {LATER_TAG} id={first['plan_id']} n=1 {signature}"
    assert first["setenv"]["SLURM_GPUS_PER_NODE"] == ",".join(
        f"{t}:{c}" for t, c in sorted(counts["gpu"].items())
    )
    assert "no room now" in first["message"] and "later start" in first["message"]
    # the GPUs it waits for count as pressed for the next answers, until a read shows it pending
    assert agent._waiting() == counts["gpu"]
    second = agent.place(job)  # sw1, the most used, still gets the lone GPU: 8 of 8 beats 9 of 8
    assert second.get("later") and agent._waiting() == {t: 2 * c for t, c in counts["gpu"].items()}
    # a gang with no room now: left untyped, unless --later-gangs
    gang = {"min_nodes": 2, "tres_per_node": "gres:gpu:4,gres:nic:4"}
    assert agent.place(gang)["action"] == "pass"
    agent.config = dataclasses.replace(agent.config, later_gangs=True)
    typed = agent.place(gang)
    assert typed.get("later") and typed["set"]["min_nodes"] == typed["set"]["max_nodes"] == 2, typed
    assert f"id={typed['plan_id']} n=2 " in typed["set"]["comment"]


@pytest.mark.needs_pipeline
def test_a_job_no_node_can_take_now_is_typed_for_later_while_the_solver_works(agent: Agent) -> None:
    """Once gpu01 is planned no node sent can take a 7-GPU member, so the answer will be "no room
    now": its later-start type is chosen before the solver answers, not after (after, it added 10-40
    ms to those answers at 1,024 nodes on a loaded host). A job some node can take: nothing ahead."""
    assert agent.place({"tres_per_node": "gres:gpu:8"})["action"] == "apply"
    # The solver runs beside the answer only under a budget (the fixture waits for it): a long one.
    agent.config = dataclasses.replace(agent.config, answer_budget_s=5.0)
    solve = agent.solve_fn
    assert solve is not None
    seen: list[object] = []

    def watched(request: Any, timeout_s: float) -> Any:
        waited = time.monotonic() + 10
        while agent._ahead is None and time.monotonic() < waited:
            time.sleep(0.001)
        seen.append(agent._ahead)
        return solve(request, timeout_s)

    agent.solve_fn = watched
    answer = agent.place({"tres_per_node": "gres:gpu:7,gres:nic:7"})
    assert answer.get("later") and "no room now" in answer["message"], answer
    assert seen[0] == (answer["plan_id"], ANY) and "later" in answer["stages_ms"], (seen, answer)
    agent.solve_fn = solve
    assert agent.place({"tres_per_node": "gres:gpu:1,gres:nic:1"})["action"] == "apply"
    assert agent._ahead is None


@pytest.mark.needs_pipeline
def test_the_agent_reads_when_running_jobs_end_and_types_a_waiting_job_for_the_soonest_group(
    tmp_path: Path, fixtures: Path
) -> None:
    """The captured cluster with its held GPUs given to running jobs (stand-ins print them as Slurm
    does): gpu03's sw3 frees in two minutes, everything else in an hour or is planned. With
    ``later_types`` the agent reads the running jobs in its refresh and a 2-GPU job with no room
    waits for sw3; by use alone every group looks alike and it would wait for sw0."""
    now = time.time()
    soon, late = (datetime.fromtimestamp(now + s).isoformat(timespec="seconds") for s in (120, 7200))
    held = {"11": ("gpu03", "0-5", late), "12": ("gpu03", "6-7", soon), "13": ("gpu02", "2-3", late)}
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(
        "".join(
            f"JobId={i} JobName=wrap\n   JobState=RUNNING Reason=None\n"
            f"     Nodes={node} CPU_IDs=0 Mem=0 GRES=gpu:sw0:0(IDX:),gpu:sw1:2(IDX:{idx})\n\n"
            for i, (node, idx, _) in held.items()
        )
    )
    running = tmp_path / "running.txt"
    running.write_text("".join(f"{i}|{end}\n" for i, (_, _, end) in held.items()))
    scontrol, squeue = tmp_path / "scontrol", tmp_path / "squeue"
    nodes = fixtures / "scontrol-show-node-d.txt"
    scontrol.write_text(f'#!/bin/sh\ncase "$*" in *"show job"*) cat {jobs};; *) cat {nodes};; esac\n')
    squeue.write_text(f'#!/bin/sh\ncase "$*" in *"-t R"*) cat {running};; esac\nexit 0\n')
    for path in (scontrol, squeue):
        path.chmod(0o755)
    agent = agent_on(fixtures, scontrol, squeue)
    agent.config = dataclasses.replace(agent.config, later_types=True)
    agent.refresh()
    assert agent._snapshot is not None and agent._snapshot.ends == {
        "gpu03": {i: (now + (120 if i > 5 else 7200)) // 1 for i in range(8)},
        "gpu02": {2: (now + 7200) // 1, 3: (now + 7200) // 1},
    }
    assert agent.place({"tres_per_node": "gres:gpu:8"})["action"] == "apply"  # gpu01
    assert agent.place({"tres_per_node": "gres:gpu:6"})["action"] == "apply"  # gpu02's free six
    answer = agent.place({"tres_per_node": "gres:gpu:2,gres:nic:2"})
    assert answer.get("later") and answer["set"]["tres_per_node"] == "gres:gpu:sw3:2,gres:nic:sw3:2", answer
