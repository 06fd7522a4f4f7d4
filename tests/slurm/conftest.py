"""Paths of the Slurm fixtures (real captures from Slurm 22.05 on emulated nodes; see fixtures/slurm)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapters.slurm.agent import RunningAgent

Counter = Callable[[RunningAgent], list[int]]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def count_connections() -> Counter:
    """``count(running)``: a list that grows by one for each connection the running agent accepts
    from then on (counted where its handler begins), to see what a client keeps open."""

    def count(running: RunningAgent) -> list[int]:
        opened: list[int] = []
        base = running.server.RequestHandlerClass

        def setup(handler: Any) -> None:
            opened.append(1)
            base.setup(handler)

        running.server.RequestHandlerClass = type("Counted", (base,), {"setup": setup})
        return opened

    return count
