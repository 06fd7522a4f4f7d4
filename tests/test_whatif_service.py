"""What-if over the wire: the WhatIf RPC on a real gRPC server, the generated code of whatif.proto, and
the Slurm and Volcano adapters as base inventories. Sweeps are in ``test_whatif_sweep.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from solver.domain.model import Job, NicMode, Requirement
from solver.service.server import serve
from solver.whatif.convert import report_from_proto, scenario_to_proto
from solver.whatif.report import without_timings
from solver.whatif.run import run_prepared
from solver.whatif.scenario import BaseInventory, PolicySpec, Scenario, Variant
from solver.whatif.world import prepare
from tests import kit
from topoplace.v1 import whatif_pb2, whatif_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
PROTO = Path("topoplace/v1/whatif.proto")
JOBS: tuple[Job, ...] = (
    kit.job("big", 8, 3, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
    kit.job("a", 4, nics=NicMode.PER_GPU, align=Requirement.PREFERRED),
    kit.job("b", 2, nics=NicMode.PER_GPU, align=Requirement.PREFERRED, priority=2),
)


# --------------------------------------------------------------------------- generated code


@pytest.mark.parametrize("name", ["whatif_pb2.py", "whatif_pb2.pyi", "whatif_pb2_grpc.py"])
def test_generated_code_is_current(tmp_path: Path, name: str) -> None:
    command = [
        sys.executable, "-m", "grpc_tools.protoc", "-I", "proto", f"--python_out={tmp_path}",
        f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", str("proto" / PROTO),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    fresh = (tmp_path / PROTO.parent / name).read_bytes()
    assert (ROOT / "proto" / PROTO.parent / name).read_bytes() == fresh, f"{name} is stale: regenerate it"


# --------------------------------------------------------------------------- the RPC


@pytest.fixture(scope="module")
def stub() -> whatif_pb2_grpc.WhatIfStub:
    running = serve("127.0.0.1", 0)
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield whatif_pb2_grpc.WhatIfStub(channel)
    finally:
        channel.close()
        running.stop(grace_s=1)


def test_rpc_answers_like_the_library(stub: whatif_pb2_grpc.WhatIfStub) -> None:
    s = kit.scenario([{"drain_nodes": {"select": {"nodes": ["n1"]}}}], JOBS).model_copy(
        update={"policies": (kit.SOLVER, kit.BESTFIT)}
    )
    response = stub.Run(whatif_pb2.WhatIfRequest(scenario=scenario_to_proto(s)), timeout=60)
    remote = report_from_proto(response.report)
    local = run_prepared(prepare(s, root=None, source="scenario"))
    assert remote.complete and len(remote.outcomes) == 4
    assert without_timings(remote) == without_timings(local)


def test_rpc_trace_replay(stub: whatif_pb2_grpc.WhatIfStub) -> None:
    response = stub.Run(
        whatif_pb2.WhatIfRequest(scenario=scenario_to_proto(kit.trace_scenario())), timeout=60
    )
    report = report_from_proto(response.report)
    assert [s.queue_length for s in report.outcome("base", "solver").timeline] == [0, 1, 2, 1, 1, 0, 0]


def test_rpc_refuses_a_bad_scenario_with_paths(stub: whatif_pb2_grpc.WhatIfStub) -> None:
    s = Scenario(
        base=BaseInventory(file="/etc/hosts"),
        variants=(Variant(name="base"),),
        policies=(PolicySpec(name="x", baseline="nope"),),
    )
    with pytest.raises(grpc.RpcError) as err:
        stub.Run(whatif_pb2.WhatIfRequest(scenario=scenario_to_proto(s)), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(err.value)
    assert status is not None
    detail = error_details_pb2.BadRequest()
    status.details[0].Unpack(detail)
    assert [v.field for v in detail.field_violations] == ["scenario:base"]
    assert "over RPC send its content inline" in detail.field_violations[0].description


# --------------------------------------------------------------------------- adapters as the base


def test_slurm_sources_as_the_base() -> None:
    pytest.importorskip("adapters.slurm.inventory")
    slurm = ROOT / "fixtures" / "slurm"
    s = Scenario(
        base=BaseInventory.model_validate(
            {"slurm": {"scontrol": str(slurm / "scontrol-show-node-d.txt"), "topo_dir": str(slurm / "topo"),
                       "gres_conf": str(slurm / "gres.conf"), "topology": str(slurm / "topology.conf")}}
        ),
    )  # fmt: skip
    world = prepare(s, root=ROOT).worlds["base"]
    assert world.inventory.nodes and world.inventory.switches


def test_volcano_session_as_the_base() -> None:
    pytest.importorskip("adapters.volcano.batch")
    volcano = ROOT / "fixtures" / "volcano"
    base = {
        "volcano": {
            "session": str(volcano / "session-open.json"),
            "hypernodes": str(volcano / "hypernodes.yaml"),
        }
    }
    world = prepare(Scenario(base=BaseInventory.model_validate(base)), root=ROOT).worlds["base"]
    assert world.inventory.nodes and any(n.leaf for n in world.inventory.nodes)


def test_busy_cluster_is_what_the_rpc_tests_assume() -> None:
    assert len(kit.busy_cluster().nodes) == 4 and len(kit.cluster(2).nodes) == 2
