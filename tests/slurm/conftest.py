"""Paths of the Slurm fixtures (real captures from Slurm 22.05 on emulated nodes; see fixtures/slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
