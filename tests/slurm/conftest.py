"""The Slurm fixtures (real captures from Slurm 22.05 on emulated nodes; see fixtures/slurm), and an
agent on the captured cluster reading Slurm through stand-ins (`agent`, `agent_on`)."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapters.slurm.agent import Agent, AgentConfig, RunningAgent

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


def fake_slurm(tmp_path: Path, fixtures: Path) -> tuple[str, str]:
    """scontrol/squeue stand-ins printing the captured node states and no pending job."""
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\ncat {fixtures / 'scontrol-show-node-d.txt'}\n")
    squeue = tmp_path / "squeue"
    squeue.write_text("#!/bin/sh\nexit 0\n")
    for path in (scontrol, squeue):
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(scontrol), str(squeue)


def agent_on(
    fixtures: Path,
    scontrol: str | Path,
    squeue: str | Path,
    solve_fn: Callable[..., Any] | None = None,
    *,
    topology: bool = True,
    unpin_window_s: float = 0.0,
) -> Agent:
    """An agent on the captured cluster, reading Slurm through the given stand-ins, answering with
    the solver's own plans (``answer_budget_s=0``; the budget: test_fast_answer.py) from
    ``solve_fn`` (default: the pipeline in process). Not yet refreshed."""
    from solver.solve import solve

    config = AgentConfig(
        solver="unused",
        topo_dir=fixtures / "topo",
        gres_conf=fixtures / "gres.conf",
        topology=fixtures / "topology.conf" if topology else None,
        scontrol=str(scontrol),
        squeue=str(squeue),
        answer_budget_s=0,
        unpin_window_s=unpin_window_s,
    )
    return Agent(config, solve_fn=solve_fn or (lambda request, timeout: solve(request, deadline_s=timeout)))


@pytest.fixture
def agent(tmp_path: Path, fixtures: Path) -> Agent:
    agent = agent_on(fixtures, *fake_slurm(tmp_path, fixtures))
    agent.refresh()
    return agent
