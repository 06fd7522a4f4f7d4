"""Issue 21, fair what-if: every baseline handles every job kind or marks the job "unsupported by this
policy" — never a crash, never a plan the verifier refuses, never a false NO_NODE_FITS — and a what-if
comparison does not count a job a baseline could not express as the solver's win."""

from __future__ import annotations

import pytest

from solver.answer.verify import verify
from solver.baselines import PLACERS
from solver.domain.model import (
    AntiAffinity,
    GpuShare,
    Job,
    MemberShape,
    NicMode,
    NicRequest,
    ReasonCode,
    Role,
)
from solver.whatif.convert import report_from_proto, report_to_proto, scenario_from_data
from solver.whatif.run import run_prepared
from solver.whatif.scenario import BaseInventory
from solver.whatif.table import render
from solver.whatif.world import prepare
from tests import kit


def one(job_id: str, shape: MemberShape, replicas: int = 1) -> Job:
    return Job(id=job_id, roles=(Role(name="w", replicas=replicas, member=shape),))


# Every job kind the issue names, on a cluster where each would fit the solver.
KINDS = (
    one("share", MemberShape(gpu_share=GpuShare(milli=300)), replicas=2),
    one("share-mem", MemberShape(gpu_share=GpuShare(memory_mib=4096))),
    one("mutex", MemberShape(gpu_share=GpuShare(milli=200), mutex=True)),
    one("nics", MemberShape(gpus=2, nics=NicRequest(mode=NicMode.PER_GPU))),
    Job(
        id="pd",
        roles=(
            Role(name="prefill", replicas=1, member=MemberShape(gpus=2)),
            Role(name="decode", replicas=2, member=MemberShape(gpus=1)),
        ),
    ),
    Job(
        id="apart",
        labels={"app": "x"},
        anti_affinity=(AntiAffinity(labels={"app": "x"}),),
        roles=(Role(name="w", replicas=2, member=MemberShape(gpus=1)),),
    ),
    one("whole", MemberShape(gpus=4)),
)

BASELINES = [name for name in PLACERS if name != "random"]  # random reads shared/ data (bench)


@pytest.mark.parametrize("name", BASELINES)
def test_every_job_kind_is_placed_or_marked_unsupported_and_the_plan_verifies(name: str) -> None:
    request = kit.request(kit.cluster(4), KINDS)
    result = PLACERS[name](request)  # no exception, whatever the kinds
    assert verify(request, result) == ()
    for job in result.jobs:
        if job.placed:
            continue
        assert job.reason is not None
        # room is plentiful: a job left out is one the baseline cannot express, and says so
        assert job.reason.code == ReasonCode.UNSUPPORTED, (name, job)
        assert job.reason.message.startswith("unsupported by this policy")


def test_nic_jobs_are_unsupported_by_the_sharing_family_not_no_node_fits() -> None:
    request = kit.request(kit.cluster(2), [KINDS[3]])
    for name in ("fgd", "gpupacking", "bestfit-share"):
        (job,) = PLACERS[name](request).jobs
        assert job.reason is not None and job.reason.code == ReasonCode.UNSUPPORTED
        assert "NICs" in job.reason.message


def test_share_jobs_are_unsupported_by_the_whole_gpu_family_instead_of_placed_as_cpu_only() -> None:
    # Was: placed with no GPU at all (the verifier refused the plan and the what-if run exited 3).
    request = kit.request(kit.cluster(2), [KINDS[0]])
    for name in ("volcano", "bestfit"):
        result = PLACERS[name](request)
        assert verify(request, result) == ()
        (job,) = result.jobs
        assert job.reason is not None and job.reason.code == ReasonCode.UNSUPPORTED


def test_a_comparison_does_not_count_unsupported_jobs_as_the_solvers_win() -> None:
    data = {
        "base": {"file": "x.json"},
        "policies": [
            {"name": "solver", "solver": {"time_limit_s": 2}},
            {"name": "fgd", "baseline": "fgd"},
            {"name": "volcano", "baseline": "volcano"},
        ],
    }
    scenario = scenario_from_data(data, "fair.yaml").model_copy(
        update={"base": BaseInventory(inventory=kit.cluster(4)), "jobs": KINDS}
    )
    report = run_prepared(prepare(scenario, root=None, source="fair.yaml"))
    solver = report.outcome("base", "solver")
    assert solver.summary.jobs_placed == len(KINDS)
    by_pair = {(d.policy_a, d.policy_b): d for d in report.diffs if d.variant == "base"}
    fgd, volcano = by_pair["solver", "fgd"], by_pair["solver", "volcano"]
    assert "nics" in fgd.unsupported_b and "nics" not in fgd.only_a
    assert "share" in volcano.unsupported_b and "share" not in volcano.only_a
    assert fgd.only_a == () and volcano.only_a == ()  # every job both sides tried, both placed
    table = render(report)
    assert "unsupported by fgd: " in table and "unsupported by volcano: " in table
    assert report_from_proto(report_to_proto(report)) == report  # and over gRPC
