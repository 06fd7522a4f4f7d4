"""The committed generated code is what the committed .proto generates, with the pinned grpcio-tools.

Stale generated code is a silent wire break (a field the .proto has and Python does not), so it fails
the build rather than waiting for someone to notice.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROTOS = (
    Path("topoplace/v1/placement.proto"),
    Path("topoplace/kubelet/deviceplugin/v1beta1/api.proto"),  # the RDMA device plugin's kubelet API
)
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("proto")
    command = [
        sys.executable, "-m", "grpc_tools.protoc", "-I", "proto",
        f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}",
        *(str("proto" / p) for p in PROTOS),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"protoc failed: {done.stderr}"
    return out


@pytest.mark.parametrize(
    "generated", [p.parent / f"{p.stem}{suffix}" for p in PROTOS for suffix in SUFFIXES], ids=str
)
def test_generated_code_is_current(regenerated: Path, generated: Path) -> None:
    committed = (ROOT / "proto" / generated).read_bytes()
    fresh = (regenerated / generated).read_bytes()
    assert committed == fresh, f"proto/{generated} is stale: run `make proto`"
