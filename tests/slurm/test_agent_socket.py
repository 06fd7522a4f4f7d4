"""The agent on a unix socket only its user can reach, and both ends checking who is at the other:
the hook's client refuses an agent run by another user (a local user binding the port while the
agent is down), the agent refuses callers that are not the hook. Real sockets on this machine; the
other user is ``nobody`` (uid 65534), so those cases need root and skip otherwise."""

from __future__ import annotations

import io
import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from adapters.slurm import place_client
from adapters.slurm.agent import Agent, AgentConfig, SocketRefused, parse_listen, serve_agent
from adapters.slurm.place_client import PeerRefused, tcp_owner

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"  # what the hook runs; nobody may not read the project's venv
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="switching to another user needs root (and /usr/bin/python3)",
)


class _Answering(Agent):
    """The real agent's HTTP side; the answer itself is not under test here."""

    def place(self, desc: dict) -> dict:
        return {"action": "pass", "message": f"saw {sorted(desc)}"}

    def refresh(self) -> None:
        return


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    return _Answering(AgentConfig(solver="unused", topo_dir=tmp_path))


def ask(address: str, *extra: str) -> str:
    out = io.StringIO()
    place_client.main(["--agent", address, "--timeout", "5", *extra], io.BytesIO(b'{"a": 1}'), out)
    return out.getvalue()


def test_unix_socket_serves_the_hook_and_only_its_user(agent: Agent, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    path = run / "agent.sock"
    path.touch()  # a leftover regular file is never replaced
    with pytest.raises(SocketRefused, match="not a socket"):
        serve_agent(agent, unix=path)
    path.unlink()
    running = serve_agent(agent, unix=path)
    try:
        assert running.address == f"unix:{path}"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert ask(running.address).startswith("action pass\nmessage saw ['a']")
        with pytest.raises(SocketRefused, match="another agent is listening"):
            serve_agent(agent, unix=path)
    finally:
        running.stop()
    assert not path.exists()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # a socket nobody listens on: an agent that died
    stale.close()
    running = serve_agent(agent, unix=path)
    running.stop()


def test_socket_directory_writable_by_others_is_refused(agent: Agent, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone could remove the socket and put their own in its place
    with pytest.raises(SocketRefused, match="writable by other users"):
        serve_agent(agent, unix=shared / "agent.sock")


def test_listen_forms() -> None:
    assert parse_listen("unix:/run/topoplace/agent.sock") == (Path("/run/topoplace/agent.sock"), "", 0)
    assert parse_listen("127.0.0.1:6820") == (None, "127.0.0.1", 6820)
    for bad in ("unix:relative.sock", "6820", "host:port"):
        with pytest.raises(ValueError, match="--listen"):
            parse_listen(bad)


def test_tcp_owner_reads_proc_net_tcp(tmp_path: Path) -> None:
    table = tmp_path / "tcp"
    table.write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:1AA4 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1234        0 9 1\n"
    )
    assert tcp_owner(("127.0.0.1", 6820), ("127.0.0.1", 54321), (str(table),)) == 1234
    assert tcp_owner(("127.0.0.1", 6821), ("127.0.0.1", 54321), (str(table),)) is None


def _as_nobody(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [SYSTEM_PYTHON, "-I", "-S", "-c", code, *args],
        user=NOBODY,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


IMPOSTOR = """
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
conn, _ = s.accept()
conn.recv(65536)
conn.sendall(b'HTTP/1.0 200 OK\\r\\n\\r\\n{"action": "apply", "set": {"req_nodes": "evil"}}')
conn.close()
"""


@needs_root
def test_the_client_refuses_an_agent_run_by_another_user() -> None:
    impostor = _as_nobody(IMPOSTOR)
    try:
        port = impostor.stdout.readline().strip()  # type: ignore[union-attr]
        answer = ask(f"127.0.0.1:{port}")
        assert answer.startswith("action error"), answer
        assert f"run by uid {NOBODY}" in answer and "req_nodes" not in answer
    finally:
        impostor.kill()
        impostor.wait(timeout=5)
    impostor = _as_nobody(IMPOSTOR)
    try:  # the same impostor, explicitly allowed: its answer is read (the check is what refused it)
        port = impostor.stdout.readline().strip()  # type: ignore[union-attr]
        assert "set req_nodes evil" in ask(f"127.0.0.1:{port}", "--agent-uid", str(NOBODY))
    finally:
        impostor.kill()
        impostor.wait(timeout=5)
    with pytest.raises(PeerRefused, match="not by an allowed user"):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        try:
            client = socket.create_connection(server.getsockname())
            place_client._check_peer(client, {NOBODY})
        finally:
            server.close()


CALLER = """
import socket, sys
address = sys.argv[1]
if address.startswith("unix:"):
    s = socket.socket(socket.AF_UNIX); s.connect(address[5:])
else:
    host, port = address.rsplit(":", 1); s = socket.create_connection((host, int(port)))
s.sendall(b"POST /place HTTP/1.0\\r\\nContent-Length: 2\\r\\n\\r\\n{}")
print(s.recv(65536).split(b"\\r\\n")[0].decode())
"""


@needs_root
def test_the_agent_refuses_callers_that_are_not_the_hook(agent: Agent, tmp_path: Path) -> None:
    running = serve_agent(agent)
    try:
        caller = _as_nobody(CALLER, running.address)
        out, err = caller.communicate(timeout=20)
        assert "403" in out, (out, err)
    finally:
        running.stop()
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    running = serve_agent(agent, unix=run / "agent.sock")
    try:  # mode 0600: nobody cannot even connect
        caller = _as_nobody(CALLER, running.address)
        out, err = caller.communicate(timeout=20)
        assert caller.returncode != 0 and "PermissionError" in err, (out, err)
    finally:
        running.stop()


def test_what_the_agent_holds_is_frozen_before_the_first_submit(agent: Agent, tmp_path: Path) -> None:
    """At 1,024 nodes a full garbage collection scanned the node cache and snapshot for 40-150 ms
    with the interpreter lock held, and the one that fell on an answer was the hook's p99: the agent
    collects and freezes what it holds before serving, and again after each read."""
    import gc

    gc.unfreeze()
    running = serve_agent(agent, unix=tmp_path / "agent.sock")
    try:
        assert gc.get_freeze_count() > 0
    finally:
        running.stop()
        gc.unfreeze()
