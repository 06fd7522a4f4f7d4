"""``topoplace volcano serve --standby``: the extender's port is held by a small front process that
never waits on the serving process longer than Volcano's budget.

Volcano v1.10.0's allocate action dereferences a nil node when a ``prioritize`` call fails with
``extender.ignorable: false`` (the shipped setting): the plugin registered its verbs at
``onSessionOpen``, so a serving process that dies, hangs (a deadlock, SIGSTOP, swapping) or is
killed with a call in flight between that call and a ``prioritize`` call of the same session would
crash vc-scheduler, a timeout or a reset connection being a failed call.

So the front binds Volcano's port, starts the serving process on a private loopback port (an
inherited listening socket) and relays every call to it with a budget a little shorter than
Volcano's ``httpTimeout`` (``--http-timeout``), counted from the moment the request arrived. Whenever
the serving process is not up (it died, a new one is loading OR-Tools), or the relay fails (connection
refused or reset: killed with the call in flight) or runs out of budget (hung), the front answers the
verb neutrally itself, so the session ends under Volcano's own rules:

- ``onSessionOpen`` 503: Volcano's plugin registers nothing for the session (Volcano alone);
- ``prioritize`` no scores, ``predicate`` pass, ``jobReady`` ready;
- ``onSessionClose``, ``allocateFunc``, ``deallocateFunc`` an empty error message.

After a failed relay the serving process is *suspect*: every call is answered neutrally at once (a
hung process would otherwise cost each call of the session its whole budget) while a watchdog asks
its ``/healthz`` with a short timeout. An answer clears the suspicion; three unanswered probes in a row
and the front kills it (SIGKILL: a stopped or deadlocked process ignores SIGTERM) and starts a new one
(at most once a second). The front imports nothing heavy and holds no plan, so it has little to die
of; it keeps Volcano's connections alive (the serving process closes each of its own).
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
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

import structlog

from adapters.connections import QuietClients
from adapters.volcano import wire

SPENT_HEADER = "X-Topoplace-Spent-Ms"  # the time the front spent on a call; the serving process reads it
READY_FD_ENV = "TOPOPLACE_READY_FD"  # the serving process writes one byte here once it listens

RELAY_MARGIN_S = 0.08  # kept back from Volcano's httpTimeout: the front's own reply and the network
# A busy serving process (a 1,000-node session's JSON parsed under the GIL, on a loaded machine)
# still answers /healthz within a second or two; one that answers nothing for ~10 s is hung.
PROBE_TIMEOUT_S = 2.0  # a /healthz the serving process does not answer in this time is a miss
PROBE_MISSES = 5  # misses in a row before the serving process is killed as hung
# A serving process not listening this long after its start hung while starting (OR-Tools loads in
# a few seconds); TOPOPLACE_STANDBY_STARTUP_S overrides it (tests).
STARTUP_S = float(os.environ.get("TOPOPLACE_STANDBY_STARTUP_S") or 120)

_log = structlog.get_logger("topoplace.volcano.standby")

# What each verb answers while the serving process cannot: Volcano's own rules for the session.
_NEUTRAL: dict[str, tuple[int, dict[str, Any]]] = {
    "onSessionOpen": (
        503,
        {"error": "topoplace: the serving process is restarting or not answering; Volcano schedules alone"},
    ),
    "onSessionClose": (200, wire.event_reply()),
    "predicate": (200, wire.predicate_reply()),
    "prioritize": (200, wire.prioritize_reply({})),
    "jobReady": (200, wire.job_ready_reply(True)),
    "allocateFunc": (200, wire.event_reply()),
    "deallocateFunc": (200, wire.event_reply()),
}


class RelayFailed(Exception):
    """The serving process gave no whole answer within the budget (refused, reset, timed out)."""


class ClientGone(Exception):
    """Volcano's side of the call closed before its whole body arrived (not the serving process's
    fault: no neutral answer, no suspicion)."""


class _Body:
    """A call's body, read from Volcano's connection as it is relayed: a 5 MiB prioritize body is
    passed on while it arrives instead of after (the two processes overlap on two cores)."""

    def __init__(self, rfile: Any, length: int) -> None:
        self.rfile, self.length, self.left = rfile, length, length

    def chunks(self) -> Iterator[bytes]:
        while self.left > 0:
            chunk = self.rfile.read1(min(self.left, 1 << 20))
            if not chunk:
                raise ClientGone(f"{self.left} of {self.length} body bytes never came")
            self.left -= len(chunk)
            yield chunk

    def drain(self) -> None:
        """Read what is left, so the answer goes to a client that is no longer writing."""
        for _ in self.chunks():
            pass


class Backend:
    """The serving process as the front sees it: its private address, whether it is up, whether the
    last relay to it failed (suspect)."""

    def __init__(self, address: tuple[str, int], budget_s: float) -> None:
        self.address = address
        self.budget_s = budget_s
        self.up = threading.Event()  # set once the serving process signalled ready, cleared when it exits
        self.suspect = threading.Event()
        self.pid = 0

    def relay(
        self, method: str, path: str, started: float, length: int = 0, body: Iterable[bytes] = ()
    ) -> tuple[int, bytes]:
        """Send one request (``length`` bytes of ``body``) and return (status, body) of a whole
        answer before ``started + budget``."""
        deadline = started + self.budget_s

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RelayFailed(f"no answer within {self.budget_s:.2f} s")
            return remaining

        spent_ms = (time.monotonic() - started) * 1000  # reading the call: the server's budget is shorter
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.address[0]}:{self.address[1]}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n"
            f"{SPENT_HEADER}: {spent_ms:.1f}\r\nConnection: close\r\n\r\n"
        ).encode()
        try:
            with socket.create_connection(self.address, timeout=left()) as conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(left())  # Python 3.5+: the whole sendall, not each chunk
                conn.sendall(head)
                for chunk in body:
                    conn.settimeout(left())
                    conn.sendall(chunk)
                chunks: list[bytes] = []
                while True:
                    conn.settimeout(left())
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
        except TimeoutError as err:
            raise RelayFailed(f"no answer within {self.budget_s:.2f} s") from err
        except OSError as err:
            raise RelayFailed(f"{type(err).__name__}: {err}") from err
        return _parse_answer(b"".join(chunks))


def _parse_answer(raw: bytes) -> tuple[int, bytes]:
    """Status and body of the serving process's answer, which it ends by closing the connection; a
    cut answer (the process died while writing) is a failed relay."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if not sep or len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise RelayFailed(f"not an HTTP answer ({len(raw)} bytes)")
    length = next(
        (
            int(v)
            for k, _, v in (line.partition(b":") for line in lines[1:])
            if k.strip().lower() == b"content-length"
        ),
        None,
    )
    if length is None or len(body) != length:
        raise RelayFailed(f"a cut answer: {len(body)} bytes of {length}")
    return int(parts[1]), body


class _FrontHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Front

    def do_POST(self) -> None:
        started = time.monotonic()  # Volcano's httpTimeout runs from about here
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= self.server.max_body_bytes:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            self._neutral(verb, f"Content-Length {self.headers.get('Content-Length')!r} refused")
            return
        body = _Body(self.rfile, length)
        try:
            self._relay(verb, body, started)
        except ClientGone:
            self.close_connection = True

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        backend = self.server.backend
        if backend.up.is_set() and not backend.suspect.is_set():
            try:
                code, answer = backend.relay("GET", self.path, time.monotonic())
                self._send(code, answer)
                return
            except RelayFailed as err:
                backend.suspect.set()
                _log.error(
                    "serving process not answering: calls answered neutrally",
                    pid=backend.pid,
                    reason=str(err),
                )
        # Not ready: a readiness probe should not route to a process without a plan.
        state = {
            "ready": False,
            "standby": True,
            "error": "the serving process is restarting or not answering",
        }
        self._send(503 if path.endswith(("/healthz", "/status")) else 404, json.dumps(state).encode())

    def _relay(self, verb: str, body: _Body, started: float) -> None:
        backend = self.server.backend
        if not backend.up.is_set():
            body.drain()
            self._neutral(verb, "no serving process")
            return
        if backend.suspect.is_set():
            body.drain()
            self._neutral(verb, "the serving process is not answering")
            return
        try:
            code, answer = backend.relay("POST", self.path, started, body.length, body.chunks())
        except RelayFailed as err:
            body.drain()
            backend.suspect.set()
            _log.error(
                "serving process failed a call: answering neutrally",
                verb=verb,
                pid=backend.pid,
                reason=str(err),
            )
            self._neutral(verb, str(err))
            return
        self._send(code, answer)

    def _neutral(self, verb: str, reason: str) -> None:
        code, body = _NEUTRAL.get(
            self.server.aliases.get(verb, verb), (404, {"error": f"unknown verb {verb!r}"})
        )
        self._send(code, json.dumps(body).encode())
        _log.info("answered neutrally", verb=verb, status=code, reason=reason)

    def _send(self, code: int, data: bytes) -> None:
        with contextlib.suppress(OSError):  # Volcano gave up on the call
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Front(QuietClients, ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(
        self,
        address: tuple[str, int],
        backend: Backend,
        aliases: dict[str, str],
        max_body_bytes: int,
        read_timeout_s: float,
    ) -> None:
        self.backend = backend
        self.aliases = aliases
        self.max_body_bytes = max_body_bytes
        self.read_timeout_s = read_timeout_s
        super().__init__(address, _FrontHandler)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        conn.settimeout(self.read_timeout_s)  # a client that sends nothing does not hold a thread
        return conn, address


def _probe(backend: Backend) -> bool:
    """Does the serving process answer ``GET /healthz`` within PROBE_TIMEOUT_S?"""
    try:
        code, _ = Backend(backend.address, PROBE_TIMEOUT_S).relay("GET", "/healthz", time.monotonic())
    except RelayFailed:
        return False
    return code == 200


def _watchdog(backend: Backend, stopping: threading.Event) -> None:
    """Clear a suspicion the serving process answers; kill one that does not (hung)."""
    misses = 0
    while not stopping.wait(0.1):
        if not backend.suspect.is_set() or not backend.up.is_set():
            misses = 0
            continue
        if _probe(backend):
            misses = 0
            backend.suspect.clear()
            _log.info("serving process answers again: calls relayed", pid=backend.pid)
            continue
        misses += 1
        if misses >= PROBE_MISSES and backend.pid:
            _log.error("serving process hung: killed", pid=backend.pid, probes=misses)
            with contextlib.suppress(ProcessLookupError):
                os.kill(backend.pid, signal.SIGKILL)
            misses = 0  # the supervisor sees it exit and starts a new one


def run(
    child_argv: list[str],
    host: str,
    port: int,
    aliases: dict[str, str],
    http_timeout_s: float,
    max_body_bytes: int = 256 << 20,
    read_timeout_s: float = 10.0,
) -> int:
    """Serve Volcano on ``host:port``, run ``solver.cli <child_argv> --listen-fd N`` on a private
    loopback port and relay to it within ``http_timeout_s - RELAY_MARGIN_S``; answer neutrally
    whenever it cannot. Returns when SIGTERM/SIGINT arrives."""
    budget = max(http_timeout_s / 2, http_timeout_s - RELAY_MARGIN_S)
    backend = Backend(("127.0.0.1", 0), budget)
    front = _Front((host, port), backend, aliases, max_body_bytes, read_timeout_s)
    stopping = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGCONT)  # a stopped process would not act on SIGTERM

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=front.serve_forever, name="volcano-front", daemon=True).start()
    threading.Thread(target=_watchdog, args=(backend, stopping), name="volcano-watchdog", daemon=True).start()
    print(
        f"topoplace volcano standby on http://{host}:{front.server_address[1]} (relay budget {budget:.2f} s)",
        file=sys.stderr,
        flush=True,
    )
    restarts = 0
    while not stopping.is_set():
        started = time.monotonic()
        ready_r, ready_w = os.pipe()
        # A new private socket for each serving process, held by it alone: when it dies the kernel
        # resets the connections it had not answered (a call in flight fails at once, not at the
        # end of its budget).
        private = socket.create_server(("127.0.0.1", 0), backlog=256)
        private.set_inheritable(True)
        backend.address = private.getsockname()[:2]
        command = [sys.executable, "-m", "solver.cli", *child_argv, "--listen-fd", str(private.fileno())]
        child = subprocess.Popen(
            command,
            pass_fds=(private.fileno(), ready_w),
            env={**os.environ, READY_FD_ENV: str(ready_w)},
        )
        os.close(ready_w)
        private.close()
        backend.pid = child.pid
        _log.info("serving process started", pid=child.pid, restarts=restarts)
        with os.fdopen(ready_r, "rb") as ready:
            # A byte: listening. End of file without one: it died while starting. Neither in
            # STARTUP_S: it hung while starting (killed; the loop starts another).
            if not select.select([ready], [], [], STARTUP_S)[0]:
                _log.error("serving process hung while starting: killed", pid=child.pid, seconds=STARTUP_S)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
            elif ready.read(1):
                backend.suspect.clear()
                backend.up.set()
                _log.info("serving process ready: calls relayed", pid=child.pid)
        code = child.wait()
        backend.up.clear()
        if stopping.is_set():
            break
        restarts += 1
        _log.error("serving process exited: answering neutrally until it is back", pid=child.pid, code=code)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))  # a crash loop restarts once a second
    front.shutdown()
    front.server_close()
    return 0


def signal_ready() -> None:
    """Called by the serving process once it listens: tells the front to relay to it."""
    fd = os.environ.pop(READY_FD_ENV, "")
    if fd.isdigit():
        with contextlib.suppress(OSError):
            os.write(int(fd), b"r")
            os.close(int(fd))
