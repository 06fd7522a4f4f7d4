"""Fixtures of the Volcano adapter tests: the 32-node session, and a real extender on loopback.

No Kubernetes cluster runs here, so a :class:`RecordingPatcher` stands in for the API server: it
keeps every pod and PodGroup patch the extender would send, which the tests then read.
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from adapters.volcano.extender import Config, Extender, local_solve
from adapters.volcano.hypernodes import HyperNode, load
from adapters.volcano.patcher import RecordingPatcher
from adapters.volcano.server import RunningServer, serve
from solver.domain.model import SolveRequest, SolveResult

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "volcano"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_sharing: needs GPU sharing / mutex in the solver (xfail until it lands; then remove the mark)",
    )


@pytest.fixture(scope="session")
def session_body() -> dict[str, Any]:
    return json.loads((FIXTURES / "session-open.json").read_text())


@pytest.fixture
def body(session_body: dict[str, Any]) -> dict[str, Any]:
    """A copy each test may change."""
    return copy.deepcopy(session_body)


@pytest.fixture(scope="session")
def hypernodes() -> tuple[HyperNode, ...]:
    return load(FIXTURES / "hypernodes.yaml")


@dataclass
class CapturingSolve:
    """The real pipeline, with every request and result kept: the plan must be the solver's."""

    calls: list[tuple[SolveRequest, SolveResult]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: SolveRequest, deadline_s: float) -> SolveResult:
        result = local_solve(request, deadline_s)
        with self.lock:
            self.calls.append((request, result))
        return result


@dataclass
class Client:
    url: str

    def post(self, verb: str, body: Any, *, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
        data = raw if raw is not None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/{verb}", data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def ok(self, verb: str, body: Any) -> dict[str, Any]:
        code, reply = self.post(verb, body)
        assert code == 200, (verb, reply)
        return reply

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/{path}", timeout=10) as reply:
            return json.loads(reply.read())


@dataclass
class Service:
    client: Client
    extender: Extender
    patcher: RecordingPatcher
    solve: CapturingSolve


@pytest.fixture
def config(request: pytest.FixtureRequest) -> Config:
    """The extender's settings; a test may pass its own (``parametrize(..., indirect=True)``).
    A generous timeout: the tests check the plan, not the machine's speed (bench/ does that)."""
    return getattr(request, "param", Config(http_timeout_s=3.0, margin_s=0.5))


@pytest.fixture
def service(hypernodes: tuple[HyperNode, ...], config: Config) -> Iterator[Service]:
    """A real extender on 127.0.0.1 (free port), solving in process; stopped after the test."""
    patcher = RecordingPatcher()
    solve = CapturingSolve()
    extender = Extender(
        solve=solve,
        patcher=patcher,
        hypernodes=lambda: hypernodes,
        config=config,
    )
    running: RunningServer = serve(extender, "127.0.0.1", 0)
    try:
        yield Service(Client(running.url), extender, patcher, solve)
    finally:
        running.stop()
        extender.close()
