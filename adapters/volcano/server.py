"""The extender's HTTP face: ``POST <prefix>/<verb>`` with a JSON body, JSON reply, standard library.

Volcano's plugin treats any status but 200 as an error. Malformed requests (not JSON, nested too
deep, not an object, missing or mistyped fields) get **400** with ``{"error": reason}``; an unknown
verb 404; a body over the size cap 413; no free slot 503; anything else that goes wrong inside is a
bug and gets 500 "internal error" with the traceback in the log only. ``GET /healthz`` answers
liveness probes and ``GET /status`` what the last session did.

Volcano's extender plugin calls with a plain ``http.Client`` (a timeout, no client certificate, no
token), so a caller cannot prove who it is: the server listens on loopback by default and is meant
to run as a sidecar of the volcano-scheduler pod (deploy/volcano/extender-sidecar.yaml). Whatever
reaches it is bounded (:class:`Limits`): a deadline to read each request (a slow client cannot hold
a thread: a watchdog closes its socket), a socket idle timeout, a body cap, a cap on connections
served at once (more are answered 503 and closed at once), one large body at a time, a listen
backlog that absorbs Volcano's bursts of parallel predicate calls.

``ThreadingHTTPServer`` because Volcano calls predicate for many nodes at once; HTTP/1.1 keep-alive
because its Go client reuses connections. A production ASGI stack would add an event loop and a
dependency and bound none of this better for one local caller.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from adapters.connections import QuietClients
from adapters.volcano import wire
from adapters.volcano.extender import Extender
from adapters.volcano.standby import SPENT_HEADER  # set by the --standby front on the calls it relays
from adapters.volcano.wire import BadPayload


@dataclass(frozen=True)
class Limits:
    """What one caller can make the server hold."""

    max_body_bytes: int = 256 * 1024 * 1024  # a 10,000-node snapshot with full NodeInfo bodies fits
    large_body_bytes: int = 8 * 1024 * 1024  # bodies above this are read one at a time
    read_timeout_s: float = 10.0  # from waiting for a request line to the last body byte
    max_connections: int = 64  # connections served at once (Volcano's predicate workers are 16)
    backlog: int = 256  # the listen queue: connections waiting to be accepted


LOOPBACK = "127.0.0.1"

VERBS: dict[str, Callable[[Extender, Any], dict[str, Any]]] = {
    "onSessionOpen": Extender.on_session_open,
    "onSessionClose": Extender.on_session_close,
    "predicate": Extender.predicate,
    "prioritize": Extender.prioritize,
    "allocateFunc": Extender.allocate,
    "deallocateFunc": Extender.deallocate,
    "jobReady": Extender.job_ready,
}

_log = structlog.get_logger("topoplace.volcano.http")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A reply is two writes (headers, then body); with Nagle on, the body waited for the client's
    # delayed ACK of the headers: ~40 ms per call on Linux, for every predicate Volcano sends.
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        self.timeout = self.server.limits.read_timeout_s  # socket idle timeout (keep-alive included)
        super().setup()

    _arrived = 0.0  # when the request line of the call being served was read (perf_counter)

    def parse_request(self) -> bool:
        self._arrived = time.perf_counter()  # the request line is in; headers and body follow
        return super().parse_request()

    def handle_one_request(self) -> None:
        # The watchdog closes the socket if the request line, headers and body are not all read
        # within the read deadline: a client sending a byte at a time cannot hold this thread.
        self.server.watch(self.connection)
        try:
            super().handle_one_request()
        finally:
            self.server.unwatch(self.connection)

    def do_POST(self) -> None:
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        handler = VERBS.get(self.server.aliases.get(verb, verb))
        if handler is None:
            self._drain()
            self._reply(404, {"error": f"unknown verb {verb!r}; known: {', '.join(VERBS)}"})
            return
        # Volcano v1.10's allocate action dereferences a nil node when prioritize fails with
        # extender.ignorable false (the shipped setting): every prioritize answer is a 200 with a
        # node score object, neutral (no scores) when the body cannot be read, with the reason logged.
        neutral = wire.prioritize_reply({}) if handler is Extender.prioritize else None
        try:
            raw = self._read_body(wait=neutral is not None)
            self.server.unwatch(self.connection)  # read in time; the verb has its own budget
            extender = self.server.extender
            # From the request line's arrival: reading a 13 MiB snapshot is part of Volcano's timeout.
            started = self._arrived - self._spent_in_front()
            if handler is Extender.on_session_open:
                digest = hashlib.blake2b(raw, digest_size=16).hexdigest()
                reply = extender.reopen(digest)
                if reply is None:
                    with collections_paused():
                        reply = extender.on_session_open(_parse(raw), digest, received=started)
                declined = extender.declined()
                if declined:  # Volcano's plugin registers nothing on a non-200 open: it schedules alone
                    extender.count("onSessionOpen", time.perf_counter() - started)
                    self._reply(503, {"error": declined})
                    return
            elif handler is Extender.predicate:
                reply = extender.predicate_raw(raw)  # once per task and node: the parts are cached
                if reply is None:
                    reply = extender.predicate(_parse(raw))
            elif handler is Extender.prioritize:
                reply = extender.prioritize_raw(raw)  # the names are scanned, not parsed
                if reply is None:
                    reply = extender.prioritize(_parse(raw))
            else:
                reply = handler(extender, _parse(raw))
            extender.count(self.server.aliases.get(verb, verb), time.perf_counter() - started)
        except BadPayload as err:
            self._refuse(400, str(err), verb, neutral)
            return
        except _TooLarge as err:
            self._refuse(413, str(err), verb, neutral)
            return
        except _Busy as err:
            self._refuse(503, str(err), verb, neutral)
            return
        except OSError:  # the client went away or the watchdog closed a slow one: nobody to answer
            self.close_connection = True
            return
        except Exception:
            # A plain traceback, never a rendering of the frames' locals (which hold the whole
            # snapshot and took seconds per request).
            _log.error("internal error", verb=verb, traceback=traceback.format_exc(limit=20))
            self._refuse(500, "internal error", verb, neutral)
            return
        self._reply(200, reply)

    def _refuse(self, code: int, reason: str, verb: str, neutral: dict[str, Any] | None) -> None:
        """Answer a request that could not be served: ``code`` with the reason, or, for a verb whose
        failure Volcano cannot take (``neutral`` given), a 200 with the neutral answer."""
        if neutral is None:
            self._reply(code, {"error": reason})
            return
        _log.warning("answered neutrally", verb=verb, status=code, reason=reason)
        self._reply(200, neutral)

    def _spent_in_front(self) -> float:
        """Under --standby: the part of Volcano's httpTimeout the front process spent reading the
        call and relaying it, so that the session's budget counts from the call's arrival."""
        if not self.server.standby:
            return 0.0
        try:
            return min(max(float(self.headers.get(SPENT_HEADER) or 0) / 1000, 0.0), 60.0)
        except ValueError:
            return 0.0

    def do_GET(self) -> None:
        self.server.unwatch(self.connection)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/healthz"):
            # solverReady: the solver process has loaded and run its warm-up solve; until then a
            # session's solve waits behind it (seconds) and the session is answered neutrally.
            self._reply(200, {"ok": True, "solverReady": self.server.extender.ready(0)})
        elif path.endswith("/status"):
            self._reply(200, self.server.extender.status_view())
        else:
            self._reply(404, {"error": "GET serves /healthz and /status"})

    def _read_body(self, wait: bool = False) -> bytes:
        """The request body. ``wait``: a large body waits its turn instead of being refused busy
        (prioritize carries every candidate node and must never fail)."""
        limits = self.server.limits
        length = self._length()
        if length > limits.max_body_bytes:
            self.close_connection = True
            raise _TooLarge(f"body of {length} bytes is over the {limits.max_body_bytes}-byte cap")
        if length > limits.large_body_bytes:
            # Volcano sends one snapshot per session: a second large body at once is not Volcano.
            large = self.server.large
            if not (large.acquire(timeout=limits.read_timeout_s) if wait else large.acquire(blocking=False)):
                self.close_connection = True
                raise _Busy("another large request is being read; try again")
            try:
                raw = self._read_exactly(length)
            finally:
                self.server.large.release()
        else:
            raw = self._read_exactly(length) if length else b""
        if not raw:
            raise BadPayload("empty body: expected a JSON object")
        return raw

    def _read_exactly(self, length: int) -> bytes:
        raw = self.rfile.read(length)
        if len(raw) != length:
            self.close_connection = True
            raise BadPayload(f"body ended after {len(raw)} of {length} bytes (Content-Length)")
        return raw

    def _length(self) -> int:
        value = self.headers.get("Content-Length")
        if value is None:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                self.close_connection = True
                raise BadPayload("chunked bodies are not accepted; send Content-Length")
            return 0
        try:
            length = int(value)
        except ValueError:
            self.close_connection = True
            raise BadPayload(f"Content-Length {value!r} is not a number") from None
        if length < 0:
            self.close_connection = True
            raise BadPayload("negative Content-Length")
        return length

    def _drain(self) -> None:
        try:
            length = self._length()
        except BadPayload:
            return
        if 0 < length <= self.server.limits.large_body_bytes:
            self.rfile.read(length)
        elif length:
            self.close_connection = True

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            # Under --standby the front relays each call on a connection of its own and reads the
            # answer to its end: closing it marks the end (and a cut answer is seen as one).
            if self.server.standby:
                self.close_connection = True
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client is gone
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # the access log goes to debug
        _log.debug("http", line=format % args)


_paused = 0  # opens running with collections paused
_was_enabled = True  # whether collections were on when the first of them paused them
_paused_lock = threading.Lock()


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """No garbage collection while a session's snapshot is parsed and converted (the opener thread
    works while this thread waits for it). Parsing a 1,024-node snapshot makes a million young
    objects and the node cache thousands of long-lived ones: collections took 0.1-0.28 s of each
    open, one of them a full pass over the heap (session 13). The parsed body is a tree, freed by
    reference counting; what survives is collected as usual once the open has answered."""
    global _paused, _was_enabled
    with _paused_lock:
        if _paused == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _paused_lock:
            _paused -= 1
            if _paused == 0 and _was_enabled:
                gc.enable()


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BadPayload(f"body is not JSON: {err}") from None
    except RecursionError:
        raise BadPayload("body is nested too deeply to be a Volcano request") from None


class _TooLarge(ValueError):
    pass


class _Busy(RuntimeError):
    pass


_BUSY_BODY = b'{"error":"too many connections; try again later"}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\nConnection: close\r\n\r\n".encode()
    + _BUSY_BODY
)


class _Server(QuietClients, ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        extender: Extender,
        aliases: dict[str, str],
        limits: Limits,
        listen_fd: int | None = None,
    ) -> None:
        self.request_queue_size = limits.backlog  # read by server_activate's listen()
        self.limits = limits
        self.extender = extender
        self.aliases = aliases
        self.slots = threading.BoundedSemaphore(limits.max_connections)
        self.large = threading.Lock()
        self._deadlines: dict[socket.socket, float] = {}
        self._watch_lock = threading.Lock()
        self._stopped = threading.Event()
        super().__init__(address, _Handler, bind_and_activate=listen_fd is None)
        self.standby = listen_fd is not None
        if listen_fd is not None:
            # A private loopback socket bound by the front process (--standby), which relays
            # Volcano's calls to it and answers them itself whenever this process cannot.
            self.socket.close()
            self.socket = socket.socket(fileno=listen_fd)
            self.server_address = self.socket.getsockname()
            self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])
        self._watchdog = threading.Thread(target=self._expire, name="volcano-extender-watchdog", daemon=True)
        self._watchdog.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):  # answered, not left hanging: a 503 is a failed call
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def watch(self, conn: socket.socket) -> None:
        with self._watch_lock:
            self._deadlines[conn] = time.monotonic() + self.limits.read_timeout_s

    def unwatch(self, conn: socket.socket) -> None:
        with self._watch_lock:
            self._deadlines.pop(conn, None)

    def _expire(self) -> None:
        tick = min(0.25, self.limits.read_timeout_s / 4)
        while not self._stopped.wait(tick):
            now = time.monotonic()
            with self._watch_lock:
                late = [c for c, deadline in self._deadlines.items() if deadline < now]
                for conn in late:
                    del self._deadlines[conn]
            for conn in late:
                _log.info("closing a connection that did not send its request in time")
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def server_close(self) -> None:
        self._stopped.set()
        super().server_close()


@dataclass
class RunningServer:
    """A started server: ``url`` for clients, ``stop()`` to shut it down and free the port."""

    server: _Server
    thread: threading.Thread

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        host = self.server.server_address[0]
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(
    extender: Extender,
    host: str = LOOPBACK,
    port: int = 8888,
    aliases: dict[str, str] | None = None,
    limits: Limits = Limits(),
    listen_fd: int | None = None,
) -> RunningServer:
    """Start serving in a background thread (``port=0`` picks a free port). ``aliases`` maps other
    verb names an operator configured (e.g. ``allocate`` → ``allocateFunc``)."""
    server = _Server((host, port), extender, aliases or {}, limits, listen_fd)
    thread = threading.Thread(target=server.serve_forever, name="volcano-extender", daemon=True)
    thread.start()
    return RunningServer(server, thread)
