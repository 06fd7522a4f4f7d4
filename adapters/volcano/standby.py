"""``topoplace volcano serve --standby``: the extender's port outlives the process serving it.

Volcano v1.10.0's allocate action dereferences a nil node when a ``prioritize`` call fails with
``extender.ignorable: false`` (the shipped setting): the plugin registered its verbs at
``onSessionOpen``, so a serving process that dies between that call and a ``prioritize`` call of the
same session (killed for memory, a crash) would crash vc-scheduler, connection refused being a
failed call. Here a small standby process binds the port and hands the listening socket to the
serving process it starts (an inherited descriptor). While that process is not up (it died, or the
new one is still loading OR-Tools) the standby accepts on the same socket and answers every verb
neutrally, so the session ends under Volcano's own rules:

- ``onSessionOpen`` 503: Volcano's plugin registers nothing for the session (Volcano alone);
- ``prioritize`` no scores, ``predicate`` pass, ``jobReady`` ready;
- ``onSessionClose``, ``allocateFunc``, ``deallocateFunc`` an empty error message.

It restarts the serving process (one second apart at most once a second) and stops answering as soon
as the new process writes a byte to the readiness pipe it was given (after it is listening). The
standby imports nothing heavy and holds no plan, so it has little to die of; the kernel queues the
connections that arrive while neither process is accepting.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from types import FrameType
from typing import Any

import structlog

from adapters.volcano import wire

READY_FD_ENV = "TOPOPLACE_READY_FD"  # the serving process writes one byte here once it listens

_log = structlog.get_logger("topoplace.volcano.standby")

# What each verb answers while no serving process is up: Volcano's own rules for the session.
_NEUTRAL: dict[str, tuple[int, dict[str, Any]]] = {
    "onSessionOpen": (
        503,
        {"error": "topoplace: the serving process is restarting; Volcano schedules alone"},
    ),
    "onSessionClose": (200, wire.event_reply()),
    "predicate": (200, wire.predicate_reply()),
    "prioritize": (200, wire.prioritize_reply({})),
    "jobReady": (200, wire.job_ready_reply(True)),
    "allocateFunc": (200, wire.event_reply()),
    "deallocateFunc": (200, wire.event_reply()),
}


class _NeutralHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = 10.0  # a client that sends nothing does not hold the thread
    aliases: dict[str, str] = {}

    def do_POST(self) -> None:
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        try:
            left = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            left = 0
        while left > 0:  # read (and drop) the body, so the client's write completes
            chunk = self.rfile.read(min(left, 1 << 20))
            if not chunk:
                return
            left -= len(chunk)
        code, body = _NEUTRAL.get(self.aliases.get(verb, verb), (404, {"error": f"unknown verb {verb!r}"}))
        self._reply(code, body)
        _log.info("answered neutrally: no serving process", verb=verb, status=code)

    def do_GET(self) -> None:
        # /healthz is not ready: a readiness probe should not route to a process without a plan.
        self._reply(503, {"ready": False, "standby": True, "error": "the serving process is restarting"})

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")  # no kept-alive connection to a process about to step aside
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Standby:
    def __init__(self, listener: socket.socket, aliases: dict[str, str]) -> None:
        self.listener = listener
        self.answering = threading.Event()
        self.answering.set()
        self.stopping = threading.Event()
        _NeutralHandler.aliases = aliases

    def accept_loop(self) -> None:
        while not self.stopping.is_set():
            if not self.answering.wait(0.2):
                continue
            readable, _, _ = select.select([self.listener], [], [], 0.1)
            if not readable or not self.answering.is_set():
                continue
            try:
                conn, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                continue  # the serving process took it
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn, address), daemon=True).start()

    def _handle(self, conn: socket.socket, address: Any) -> None:
        conn.setblocking(True)
        with contextlib.suppress(OSError), conn:
            _NeutralHandler(conn, address, None)


def run(child_argv: list[str], host: str, port: int, aliases: dict[str, str], backlog: int = 256) -> int:
    """Bind ``host:port``, start ``solver.cli <child_argv> --listen-fd N`` on it and keep it
    running; answer neutrally whenever it is not up. Returns when SIGTERM/SIGINT arrives."""
    listener = socket.create_server((host, port), backlog=backlog)
    listener.setblocking(False)  # accept races the serving process: never block on a taken connection
    listener.set_inheritable(True)
    standby = _Standby(listener, aliases)
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        standby.stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=standby.accept_loop, name="volcano-standby", daemon=True).start()
    print(
        f"topoplace volcano standby on http://{host}:{listener.getsockname()[1]}", file=sys.stderr, flush=True
    )
    restarts = 0
    while not standby.stopping.is_set():
        started = time.monotonic()
        ready_r, ready_w = os.pipe()
        command = [sys.executable, "-m", "solver.cli", *child_argv, "--listen-fd", str(listener.fileno())]
        child = subprocess.Popen(
            command,
            pass_fds=(listener.fileno(), ready_w),
            env={**os.environ, READY_FD_ENV: str(ready_w)},
        )
        os.close(ready_w)
        _log.info("serving process started", pid=child.pid, restarts=restarts)
        with os.fdopen(ready_r, "rb") as ready:
            # A byte: listening. End of file without one: it died while starting.
            if ready.read(1):
                standby.answering.clear()
                _log.info("serving process ready: standby steps aside", pid=child.pid)
        code = child.wait()
        standby.answering.set()
        if standby.stopping.is_set():
            break
        restarts += 1
        _log.error("serving process exited: answering neutrally until it is back", pid=child.pid, code=code)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))  # a crash loop restarts once a second
    listener.close()
    return 0


def signal_ready() -> None:
    """Called by the serving process once it listens: tells the standby to stop answering."""
    fd = os.environ.pop(READY_FD_ENV, "")
    if fd.isdigit():
        with contextlib.suppress(OSError):
            os.write(int(fd), b"r")
            os.close(int(fd))
