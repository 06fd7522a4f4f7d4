"""The fast client ``job_submit.lua`` runs: job description JSON on stdin → the agent → lines on stdout.

Standard library only (socket, json, sys) and meant to run as ``python3 -I -S place_client.py``:
no site-packages, no pydantic, no gRPC, so it starts in ~20 ms and the hook stays inside its budget.
It never raises: any failure prints ``action error`` and a reason, and the hook's fail-open/closed
setting decides.

It talks only to the agent: the process at the other end must run as an allowed user (its own uid —
the SlurmUser the hook runs as — root, or ``--agent-uid``). Over ``unix:/path`` the kernel says who
the peer is (``SO_PEERCRED``); over TCP on loopback the owner of the agent's end of the connection is
read from ``/proc/net/tcp``. A peer that is not the agent (any local user can bind the port while the
agent is down) is refused before a byte of the job is sent.

Output, one instruction per line, values never containing a newline::

    action apply|pass|never_fits|error
    set <field> <value>          (job_desc fields to assign; an empty value clears the field)
    setenv <NAME> <value>        (batch environment variables to overwrite, only if the job has them)
    message <text>               (for the slurmctld log and, on refusal, the user)
    notice <text>                (for the user too: sbatch prints it — what was not planned and why)
"""

from __future__ import annotations

import json
import os
import socket
import sys

DEFAULT_AGENT = "127.0.0.1:6820"
_PROC_TCP = ("/proc/net/tcp", "/proc/net/tcp6")


class PeerRefused(RuntimeError):
    """The other end of the connection is not run by an allowed user."""


def _proc_address(host: str, port: int) -> str:
    """An address as /proc/net/tcp{,6} writes it: the IP's 32-bit words in host order, then the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    raw = socket.inet_pton(family, host)
    words = "".join(raw[i : i + 4][::-1].hex().upper() for i in range(0, len(raw), 4))
    return f"{words}:{port:04X}"


def tcp_owner(local: tuple, remote: tuple, tables: tuple[str, ...] = _PROC_TCP) -> int | None:
    """The uid owning the TCP socket whose local end is ``local`` and remote end ``remote`` (Linux's
    /proc/net/tcp), or None when no such socket is listed."""
    want_local = _proc_address(local[0], local[1])
    want_remote = _proc_address(remote[0], remote[1])
    for table in tables:
        try:
            with open(table) as rows:
                next(rows, None)
                for row in rows:
                    cells = row.split()
                    if len(cells) > 7 and cells[1] == want_local and cells[2] == want_remote:
                        return int(cells[7])
        except OSError:
            continue
    return None


def unix_peer_uid(sock: socket.socket) -> int:
    import struct

    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def peer_uid(sock: socket.socket) -> int | None:
    """Who runs the process at the other end of a connected socket (None: cannot tell)."""
    if sock.family == socket.AF_UNIX:
        return unix_peer_uid(sock)
    here, there = sock.getsockname()[:2], sock.getpeername()[:2]
    return tcp_owner(there, here)  # the peer's socket: its local end is our remote end


def allowed_uids(extra: list[int]) -> set[int]:
    return {os.geteuid(), 0, *extra}


def _check_peer(sock: socket.socket, allowed: set[int]) -> None:
    uid = peer_uid(sock)
    if uid is None:
        raise PeerRefused("cannot tell which user runs the agent's end (no /proc/net/tcp entry)")
    if uid not in allowed:
        raise PeerRefused(f"the agent's end is run by uid {uid}, not by an allowed user {sorted(allowed)}")


def _post(address: str, body: bytes, timeout_s: float, allowed: set[int] | None = None) -> dict:
    if address.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        sock.connect(address[5:])
    else:
        host, _, port = address.rpartition(":")
        sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s)
    with sock:
        _check_peer(sock, allowed if allowed is not None else allowed_uids([]))
        head = (
            f"POST /place HTTP/1.0\r\nHost: topoplace\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        sock.sendall(head + body)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    header, _, payload = raw.partition(b"\r\n\r\n")
    status = header.split(b"\r\n", 1)[0]
    answer = json.loads(payload or b"{}")
    if b" 200 " not in status + b" " and "action" not in answer:
        raise RuntimeError(f"agent answered {status.decode(errors='replace')}")
    return answer


def _clean(value: object) -> str:
    return " ".join(str(value).split())  # no newlines reach the Lua side


def render(answer: dict) -> str:
    lines = [f"action {_clean(answer.get('action', 'error'))}"]
    for key, value in (answer.get("set") or {}).items():
        lines.append(f"set {_clean(key)} {_clean(value)}".rstrip() if value != "" else f"set {_clean(key)}")
    for key, value in (answer.get("setenv") or {}).items():
        lines.append(f"setenv {_clean(key)} {_clean(value)}".rstrip())
    if answer.get("message"):
        lines.append(f"message {_clean(answer['message'])}")
    if answer.get("notice"):
        lines.append(f"notice {_clean(answer['notice'])}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, stdin: object = None, stdout: object = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    address, timeout_s = DEFAULT_AGENT, 5.0
    extra_uids: list[int] = []
    out = stdout or sys.stdout
    while args:
        flag = args.pop(0)
        if flag == "--agent" and args:
            address = args.pop(0)
        elif flag == "--timeout" and args:
            timeout_s = float(args.pop(0))
        elif flag == "--agent-uid" and args:
            extra_uids += [int(u) for u in args.pop(0).split(",") if u.strip().isdigit()]
    try:
        body = (stdin or sys.stdin.buffer).read()
        if isinstance(body, str):
            body = body.encode()
        answer = _post(address, body, timeout_s, allowed_uids(extra_uids))
    except PeerRefused as err:
        answer = {"action": "error", "message": f"topoplace agent {address} refused: {err}"}
    except Exception as err:
        answer = {
            "action": "error",
            "message": f"topoplace agent {address} unreachable: {type(err).__name__}: {err}",
        }
    out.write(render(answer))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
