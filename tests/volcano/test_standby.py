"""``topoplace volcano serve --standby`` as an operator runs it: a real process tree on loopback.

The serving process is killed with SIGKILL (no goodbye, as the kernel's OOM killer does); the port
must keep answering every verb neutrally, and the standby must bring a new serving process up.
Volcano's real scheduler against the same thing: tests/volcano/gosched, TestLargeConfServerKilledMidSession.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, data: bytes | None = None) -> tuple[int, dict[str, Any], str]:
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read()), resp.headers.get("Connection", "")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers.get("Connection", "")


def _wait_healthy(url: str, seconds: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            code, _, _ = _call(url + "/healthz")
            if code == 200:
                return _call(url + "/status")[1]
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not healthy within {seconds} s")


def test_killed_server_leaves_the_port_answering_neutrally_and_comes_back(tmp_path: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'proto'}"}
    command = [
        sys.executable,
        "-m",
        "solver.cli",
        "volcano",
        "serve",
        "--port",
        str(port),
        "--dry-run",
        "--standby",
    ]
    log_path = tmp_path / "serve.log"  # a file, not a pipe: nobody reads a pipe while the test runs
    with log_path.open("wb") as log_file:
        standby = subprocess.Popen(command, cwd=ROOT, env=env, stderr=log_file, start_new_session=True)
    try:
        first = _wait_healthy(url)["pid"]
        assert first != standby.pid, "/status should come from the serving process, not the standby"
        # The serving process closes every connection: a kept-alive one would outlive it in the client.
        assert _call(url + "/onSessionClose", b"{}")[2].lower() == "close"
        os.kill(first, signal.SIGKILL)
        time.sleep(0.3)
        neutral = {
            "prioritize": (200, {"nodeScore": {}, "errorMessage": ""}),
            "jobReady": (200, {"status": True}),
            "predicate": (200, {"status": "", "code": 0}),
            "allocateFunc": (200, {"errorMessage": ""}),
            "onSessionClose": (200, {"errorMessage": ""}),
        }
        answered = {verb: _call(f"{url}/{verb}", b'{"anything": 1}')[:2] for verb in neutral}
        assert answered == neutral
        code, body, _ = _call(url + "/onSessionOpen", b"{}")
        assert code == 503 and "restarting" in body["error"]  # Volcano's plugin registers nothing
        second = _wait_healthy(url)["pid"]
        assert second not in (first, standby.pid)
    finally:
        standby.send_signal(signal.SIGTERM)
        try:
            standby.wait(timeout=20)
        finally:
            if standby.poll() is None:
                os.killpg(standby.pid, signal.SIGKILL)
                standby.wait()
    log = log_path.read_text()
    assert "serving process exited" in log, log
    # SIGTERM ends the serving process too: the port refuses
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
