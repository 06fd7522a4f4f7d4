"""Shared pytest configuration. Keep it small: builders live in the test kit (``tests/kit/``); fixtures that
only one test module needs live in that module."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

# Before any test module imports gRPC, as the service's entry points do: the service turns gRPC
# core's fork handlers off before gRPC starts (solver/service/__init__.py), which a solve's forked
# child needs (solver.domain.forked).
import solver.service  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_pipeline: runs the real solver pipeline (solver.solve, solver.domain.validate); never skipped",
    )


@pytest.fixture(autouse=True)
def fresh_model_shelf() -> None:
    """Each test starts without a kept model (solver.compile.shelf keeps the last one per process):
    a test then sees the stages its own requests run, not what an earlier test's request left."""
    from solver.compile import shelf

    shelf.clear()


@pytest.fixture(autouse=True, scope="module")
def earlier_modules_frozen() -> Iterator[None]:
    """What earlier modules left alive is taken out of the garbage collector's passes before each
    module (``gc.freeze``). By the suite's last modules that was 2.5 million objects (caches of
    large clusters), and one full collection over them took 1.5 s: it fell once inside a test's
    0.5 s window (an extender open timed against Volcano's timeout) and failed CI. The product's
    processes do not carry the suite's heap: the Slurm agent freezes what it holds, the extender
    pauses collections during an open. So solves leave the freezing to this fixture
    (``solver.solve.FREEZE_HEAP``; ``tests/test_solve.py`` turns it on where it tests it)."""
    import solver.solve

    solver.solve.FREEZE_HEAP = False
    gc.collect()
    gc.freeze()
    yield
