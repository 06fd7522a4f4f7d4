"""job_submit.lua's direct path: slurmctld's Lua 5.1 talks to the agent's unix socket through luaposix
(no process per submit). Run here in the stock ``lua5.1`` interpreter through bench/slurm_hook_harness.lua
(the same script slurmctld loads; the ``slurm`` table is the harness's, the only stand-in). The agent
is a socket server written here that answers in the agent's line format, so the tests can make it slow,
wrong or absent; the real agent behind the real slurmctld is tests/slurm/test_e2e.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.slurm.agent import Agent, AgentConfig, serve_agent
from adapters.slurm.place_client import render
from tests.slurm.conftest import Counter

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "adapters" / "slurm" / "job_submit.lua"
HARNESS = ROOT / "bench" / "slurm_hook_harness.lua"

pytestmark = pytest.mark.skipif(
    shutil.which("lua5.1") is None
    or subprocess.run(["lua5.1", "-e", "require('posix.sys.socket')"], capture_output=True).returncode,
    reason="lua5.1 and lua-posix not installed (scripts/install-slurm.sh installs them)",
)


def read_request(conn: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP request from ``conn``: its head and its body (by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(ln for ln in head.split(b"\r\n") if ln.startswith(b"Content-Length:"))[15:])
    while len(body) < length:
        body += conn.recv(65536)
    return head, body


class FakeAgent:
    """Accepts one connection at a time, records the request, answers ``reply`` (None: never) as the
    agent does: in the line format when asked ``Accept: text/plain``, else JSON."""

    def __init__(self, path: Path, reply: dict | None) -> None:
        self.requests: list[bytes] = []
        self.reply = reply
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                head, body = read_request(conn)
                self.requests.append(head + b"\r\n\r\n" + body)
                if self.reply is None:
                    self.stop.wait(3)
                    continue
                lines = b"Accept: text/plain" in head
                body = render(self.reply).encode() if lines else json.dumps(self.reply).encode()
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: x\r\n\r\n" + body)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def hookdir(tmp_path: Path) -> Iterator[Path]:
    run = tmp_path / "hook"
    run.mkdir(mode=0o700)
    shutil.copy(HOOK, run / "job_submit.lua")
    yield run


def submit(hookdir: Path, conf: str, job: str = "min_nodes=1 max_nodes=1 tres_per_node=gres:gpu:2") -> tuple:
    (hookdir / "job_submit_topoplace.conf").write_text(conf)
    done = subprocess.run(
        ["lua5.1", str(HARNESS), str(hookdir / "job_submit.lua")],
        input=job + "\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    ms, rc, rest = done.stdout.split(" ", 2)
    req_nodes, _, comment = rest.rstrip("\n").partition(" | ")
    return float(ms), int(rc), req_nodes, comment, done.stderr


ANSWER = {
    "action": "apply",
    "set": {
        "req_nodes": "gn07",
        "min_nodes": 1,
        "max_nodes": 1,
        "tres_per_node": "gres:gpu:sw1:2",
        "comment": "topoplace/v1 plan",
    },
    "message": "topoplace: planned on gn07",
}


def test_the_hook_asks_the_agent_socket_itself_and_applies_the_answer(hookdir: Path) -> None:
    agent = FakeAgent(hookdir / "agent.sock", ANSWER)
    try:
        _ms, rc, req_nodes, comment, log = submit(hookdir, f"agent = unix:{hookdir / 'agent.sock'}\n")
    finally:
        agent.close()
    assert (rc, req_nodes, comment) == (0, "gn07", "topoplace/v1 plan")
    assert "planned on gn07" in log
    request = agent.requests[0]
    assert request.startswith(b"POST /place HTTP/1.1") and b"Accept: text/plain" in request
    assert b'"tres_per_node":"gres:gpu:2"' in request and b'"submit_uid":0' in request


def test_a_socket_in_a_directory_others_can_write_is_not_trusted(hookdir: Path) -> None:
    shared = hookdir / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # anyone could have put this socket here: never send it a job
    agent = FakeAgent(shared / "agent.sock", ANSWER)
    try:
        _, rc, req_nodes, _, log = submit(hookdir, f"agent = unix:{shared / 'agent.sock'}\n")
    finally:
        agent.close()
    assert (rc, req_nodes) == (0, "")  # fail open: submitted unchanged
    assert "writable by other users" in log and "left unplanned" in log
    assert agent.requests == []


def test_a_sticky_directory_of_root_is_trusted_for_roots_socket(hookdir: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs the socket's owner to be an allowed uid of a root-owned sticky directory")
    sticky = hookdir / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    agent = FakeAgent(sticky / "agent.sock", ANSWER)
    try:
        _, rc, req_nodes, _, _ = submit(hookdir, f"agent = unix:{sticky / 'agent.sock'}\n")
    finally:
        agent.close()
    assert (rc, req_nodes) == (0, "gn07")


def test_no_socket_or_not_a_socket_fails_open_with_the_reason(hookdir: Path) -> None:
    _, rc, req_nodes, _, log = submit(hookdir, f"agent = unix:{hookdir / 'absent.sock'}\n")
    assert (rc, req_nodes) == (0, "") and "does not exist" in log
    (hookdir / "file.sock").write_text("")
    _, rc, _, _, log = submit(hookdir, f"agent = unix:{hookdir / 'file.sock'}\n")
    assert rc == 0 and "is not a socket" in log


def test_a_silent_agent_is_given_up_on_at_the_timeout(hookdir: Path) -> None:
    agent = FakeAgent(hookdir / "agent.sock", None)
    try:
        ms, rc, req_nodes, _, log = submit(hookdir, f"agent = unix:{hookdir / 'agent.sock'}\ntimeout = 0.5\n")
    finally:
        agent.close()
    assert (rc, req_nodes) == (0, "") and "no answer within 0.5 s" in log
    assert 450 <= ms < 2000


def test_fail_closed_refuses_when_the_agent_cannot_be_asked(hookdir: Path) -> None:
    conf = f"agent = unix:{hookdir / 'absent.sock'}\nfail_mode = closed\n"
    _, rc, _, _, log = submit(hookdir, conf)
    assert rc != 0 and "refusing GPU job" in log


def test_direct_no_uses_the_client_process(hookdir: Path) -> None:
    agent = FakeAgent(hookdir / "agent.sock", ANSWER)
    conf = (
        f"agent = unix:{hookdir / 'agent.sock'}\ndirect = no\npython = /usr/bin/python3\n"
        f"client = {ROOT / 'adapters' / 'slurm' / 'place_client.py'}\n"
    )
    try:
        _, rc, req_nodes, comment, _ = submit(hookdir, conf)
    finally:
        agent.close()
    assert (rc, req_nodes, comment) == (0, "gn07", "topoplace/v1 plan")
    assert b"Accept: text/plain" not in agent.requests[0]  # the client asks for JSON


def test_heterogeneous_job_components_are_left_to_slurm_with_a_message(hookdir: Path) -> None:
    """Slurm 22.05 hands each component of ``sbatch … : …`` to the hook on its own, with
    ``het_job_offset`` 0, 1, … (NO_VAL = 4294967294 for other jobs; checked on the emulated cluster):
    no component count, so no whole plan. Each is left to Slurm, said to the user and the log; the
    agent is not asked. A plain job (NO_VAL) is planned as usual."""
    agent = FakeAgent(hookdir / "agent.sock", ANSWER)
    conf = f"agent = unix:{hookdir / 'agent.sock'}\n"
    try:
        het = "het_job_offset=1 min_nodes=1 max_nodes=1 tres_per_node=gres:gpu:2"
        _, rc, req_nodes, _, log = submit(hookdir, conf, het)
        assert (rc, req_nodes) == (0, "")
        assert "heterogeneous job component 1 is not planned" in log and agent.requests == []
        # The user is told why, not only that (issue 20): one component at a time, no count of them.
        assert "one component at a time, with no count of the components" in log
        plain = "het_job_offset=4294967294 min_nodes=1 max_nodes=1 tres_per_node=gres:gpu:2"
        _, rc, req_nodes, _, _ = submit(hookdir, conf, plain)
        assert (rc, req_nodes) == (0, "gn07") and len(agent.requests) == 1
    finally:
        agent.close()


class _Numbered(Agent):
    """The real agent's HTTP side (serve_agent: keep-alive, peer check, the line format); place()
    answers "answer N" (N counts this agent's submits), after ``slow_first_s`` on the first."""

    def __init__(self, topo_dir: Path, slow_first_s: float = 0.0) -> None:
        super().__init__(AgentConfig(solver="unused", topo_dir=topo_dir))
        self.answered = 0
        self.slow_first_s = slow_first_s

    def place(self, desc: dict) -> dict:
        self.answered += 1
        if self.answered == 1:
            time.sleep(self.slow_first_s)
        return {"action": "pass", "message": f"answer {self.answered}"}

    def refresh(self) -> None:
        return


class Hook:
    """job_submit.lua in one long-lived Lua 5.1 interpreter (as slurmctld keeps it), one job at a
    time, so that what it keeps between submits is under test."""

    def __init__(self, hookdir: Path, conf: str) -> None:
        (hookdir / "job_submit_topoplace.conf").write_text(conf)
        self.lua = subprocess.Popen(
            ["lua5.1", str(HARNESS), str(hookdir / "job_submit.lua")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def submit(self, job: str = "min_nodes=1 max_nodes=1 tres_per_node=gres:gpu:2") -> str:
        assert self.lua.stdin is not None and self.lua.stdout is not None
        self.lua.stdin.write(job + "\n")
        self.lua.stdin.flush()
        return self.lua.stdout.readline()

    def close(self) -> str:
        """Ends the interpreter; its log (stderr)."""
        _, log = self.lua.communicate(timeout=10)
        return log


def test_the_hook_keeps_one_connection_for_every_submit(hookdir: Path, count_connections: Counter) -> None:
    running = serve_agent(_Numbered(hookdir), unix=hookdir / "agent.sock")
    opened = count_connections(running)
    hook = Hook(hookdir, f"agent = unix:{hookdir / 'agent.sock'}\n")
    try:
        answers = [hook.submit() for _ in range(3)]
    finally:
        log = hook.close()
        running.stop()
    assert [a.split(" ", 1)[1].startswith("0 ") for a in answers] == [True] * 3
    assert [f"answer {n}" in log for n in (1, 2, 3)] == [True] * 3, log
    assert len(opened) == 1


def test_a_kept_connection_the_agent_closed_is_opened_again(
    hookdir: Path, count_connections: Counter
) -> None:
    """The agent restarted between two submits: the second is answered by the new agent, on a new
    connection, instead of failing open on the dead one."""
    path = hookdir / "agent.sock"
    first = serve_agent(_Numbered(hookdir), unix=path)
    hook = Hook(hookdir, f"agent = unix:{path}\n")
    try:
        hook.submit()
        first.stop()
        second = serve_agent(_Numbered(hookdir), unix=path)
        opened = count_connections(second)
        try:
            hook.submit()
        finally:
            second.stop()
    finally:
        log = hook.close()
    assert log.count("answer 1") == 2 and "error" not in log, log
    assert len(opened) == 1


def test_an_answer_given_up_on_is_never_read_by_the_next_submit(
    hookdir: Path, capfd: pytest.CaptureFixture[str], count_connections: Counter
) -> None:
    """The first answer comes after the hook's timeout: the hook fails open and drops that
    connection, so the next submit reads its own answer (2), not the late first one. The agent's
    late write to the dropped connection is one quiet line, not socketserver's traceback."""
    running = serve_agent(_Numbered(hookdir, slow_first_s=1.0), unix=hookdir / "agent.sock")
    opened = count_connections(running)
    failed = threading.Event()
    handle_error = running.server.handle_error

    def noting(request: Any, address: Any) -> None:
        handle_error(request, address)
        failed.set()

    running.server.handle_error = noting  # type: ignore[method-assign]
    hook = Hook(hookdir, f"agent = unix:{hookdir / 'agent.sock'}\ntimeout = 0.5\n")
    try:
        hook.submit()
        hook.submit()
        assert failed.wait(5), "the late answer's write to the dropped connection"
    finally:
        log = hook.close()
        running.stop()
    assert "no answer within 0.5 s" in log and "answer 2" in log and "answer 1" not in log, log
    assert len(opened) == 2
    assert "Traceback" not in capfd.readouterr().err


def test_a_body_the_agent_did_not_read_ends_the_connection(hookdir: Path) -> None:
    """A request refused before its body is read (too long) is answered and the connection closed:
    the unread body must not be taken for the next request."""
    running = serve_agent(_Numbered(hookdir), unix=hookdir / "agent.sock")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(hookdir / "agent.sock"))
            client.settimeout(5)
            head = b"POST /place HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n"
            client.sendall(head + b"GET / HTTP/1.1\r\n\r\n")
            received = b""
            while chunk := client.recv(65536):
                received += chunk
    finally:
        running.stop()
    assert received.startswith(b"HTTP/1.1 400") and received.count(b"HTTP/1.1") == 1


def test_a_kept_connection_closed_without_an_answer_is_asked_again_once(hookdir: Path) -> None:
    """The agent reads the second request on the kept connection and closes it without a byte (it
    went away in between): the hook asks again on a new connection instead of failing open. A
    stand-in agent, since the real one never closes a connection it has read a request on."""
    path = hookdir / "agent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    server.settimeout(10)
    requests: list[int] = []  # the connection (1, 2) each request came on

    def answer(conn: socket.socket, n: int) -> None:
        text = render({"action": "pass", "message": f"answer {n}"}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text))

    def serve() -> None:
        first, _ = server.accept()
        with first:
            read_request(first)
            requests.append(1)
            answer(first, 1)
            read_request(first)
            requests.append(1)  # and closed unanswered
        second, _ = server.accept()
        with second:
            read_request(second)
            requests.append(2)
            answer(second, 2)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    hook = Hook(hookdir, f"agent = unix:{path}\n")
    try:
        hook.submit()
        hook.submit()
    finally:
        log = hook.close()
        thread.join(timeout=10)
        server.close()
    assert requests == [1, 1, 2]
    assert "answer 1" in log and "answer 2" in log and "error" not in log, log


def test_a_dropped_connection_is_closed_once(hookdir: Path) -> None:
    """An agent answering HTTP/1.0 closes after each answer, so the hook drops its connection; the
    descriptor number is then free and the next file slurmctld opens may get it. Collecting the
    dropped connection must not close that number again (it would be slurmctld's file)."""
    agent = FakeAgent(hookdir / "agent.sock", ANSWER)
    (hookdir / "job_submit_topoplace.conf").write_text(f"agent = unix:{hookdir / 'agent.sock'}\n")
    script = f"""
        slurm = {{ SUCCESS = 0, ERROR = -1, log_info = function() end, log_error = function() end,
                   log_user = function() end, log_debug = function() end }}
        dofile("{hookdir / "job_submit.lua"}")
        local job = {{ environment = {{}}, min_nodes = 1, max_nodes = 1, tres_per_node = "gres:gpu:2" }}
        assert(slurm_job_submit(job, {{}}, 0) == 0 and job.req_nodes == "gn07")
        local fcntl, unistd = require("posix.fcntl"), require("posix.unistd")
        local fd = fcntl.open("{hookdir / "other"}", fcntl.O_WRONLY + fcntl.O_CREAT, 384)
        collectgarbage("collect")
        collectgarbage("collect")
        io.stdout:write(tostring(unistd.write(fd, "still open")))
    """
    try:
        done = subprocess.run(["lua5.1", "-e", script], capture_output=True, text=True, timeout=30)
    finally:
        agent.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout == "10" and (hookdir / "other").read_text() == "still open"
