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
PROTO = Path("topoplace/v1/placement.proto")
GENERATED = ("placement_pb2.py", "placement_pb2.pyi", "placement_pb2_grpc.py")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("proto")
    command = [
        sys.executable, "-m", "grpc_tools.protoc", "-I", "proto",
        f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", str("proto" / PROTO),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"protoc failed: {done.stderr}"
    return out / PROTO.parent


@pytest.mark.parametrize("name", GENERATED)
def test_generated_code_is_current(regenerated: Path, name: str) -> None:
    committed = (ROOT / "proto" / PROTO.parent / name).read_bytes()
    fresh = (regenerated / name).read_bytes()
    assert committed == fresh, f"proto/{PROTO.parent}/{name} is stale: run `make proto`"
