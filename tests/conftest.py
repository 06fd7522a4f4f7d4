"""Shared pytest configuration. Keep it small: builders live in the test kit (``tests/kit/``); fixtures that
only one test module needs live in that module."""

from __future__ import annotations

import pytest


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
