"""The fast client ``job_submit.lua`` runs: job description JSON on stdin → the agent → lines on stdout.

Standard library only (socket, json, sys) and meant to run as ``python3 -I -S place_client.py``:
no site-packages, no pydantic, no gRPC, so it starts in ~20 ms and the hook stays inside its budget.
It never raises: any failure prints ``action error`` and a reason, and the hook's fail-open/closed
setting decides.

Output, one instruction per line, values never containing a newline::

    action apply|pass|never_fits|error
    set <field> <value>          (job_desc fields to assign; an empty value clears the field)
    setenv <NAME> <value>        (batch environment variables to overwrite, only if the job has them)
    message <text>               (for the slurmctld log and, on refusal, the user)
"""

from __future__ import annotations

import json
import socket
import sys

DEFAULT_AGENT = "127.0.0.1:6820"


def _post(address: str, body: bytes, timeout_s: float) -> dict:
    if address.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        sock.connect(address[5:])
    else:
        host, _, port = address.rpartition(":")
        sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s)
    with sock:
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
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, stdin: object = None, stdout: object = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    address, timeout_s = DEFAULT_AGENT, 5.0
    while args:
        flag = args.pop(0)
        if flag == "--agent" and args:
            address = args.pop(0)
        elif flag == "--timeout" and args:
            timeout_s = float(args.pop(0))
    out = stdout or sys.stdout
    try:
        body = (stdin or sys.stdin.buffer).read()
        if isinstance(body, str):
            body = body.encode()
        answer = _post(address, body, timeout_s)
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
