"""The extender's HTTP face: ``POST <prefix>/<verb>`` with a JSON body, JSON reply, standard library.

Volcano's plugin treats any status but 200 as an error. Malformed requests (not JSON, not an
object, missing or mistyped fields) get **400** with ``{"error": reason}``; an unknown verb 404; a
body over the size cap 413; anything else that goes wrong inside is a bug and gets 500 "internal
error" with the traceback in the log only. ``GET /healthz`` answers liveness probes and ``GET
/status`` what the last session did.

``ThreadingHTTPServer`` because Volcano calls predicate for many nodes at once; HTTP/1.1 keep-alive
because its Go client reuses connections.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from adapters.volcano.extender import Extender
from adapters.volcano.wire import BadPayload

MAX_BODY_BYTES = 512 * 1024 * 1024  # a 10,000-node snapshot is well under this

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
    server: _Server

    def do_POST(self) -> None:
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        handler = VERBS.get(self.server.aliases.get(verb, verb))
        if handler is None:
            self._drain()
            self._reply(404, {"error": f"unknown verb {verb!r}; known: {', '.join(VERBS)}"})
            return
        try:
            raw = self._read_body()
            if handler is Extender.on_session_open:
                digest = hashlib.blake2b(raw, digest_size=16).hexdigest()
                reply = self.server.extender.reopen(digest)
                if reply is None:
                    reply = self.server.extender.on_session_open(_parse(raw), digest)
            else:
                reply = handler(self.server.extender, _parse(raw))
        except BadPayload as err:
            self._reply(400, {"error": str(err)})
            return
        except _TooLarge as err:
            self._reply(413, {"error": str(err)})
            return
        except Exception:
            _log.exception("internal error", verb=verb)
            self._reply(500, {"error": "internal error"})
            return
        self._reply(200, reply)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/healthz"):
            self._reply(200, {"ok": True})
        elif path.endswith("/status"):
            self._reply(200, self.server.extender.status_view())
        else:
            self._reply(404, {"error": "GET serves /healthz and /status"})

    def _read_body(self) -> bytes:
        length = self._length()
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise _TooLarge(f"body of {length} bytes is over the {MAX_BODY_BYTES}-byte cap")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            raise BadPayload("empty body: expected a JSON object")
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
        if 0 < length <= MAX_BODY_BYTES:
            self.rfile.read(length)
        elif length:
            self.close_connection = True

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # the access log goes to debug
        _log.debug("http", line=format % args)


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BadPayload(f"body is not JSON: {err}") from None


class _TooLarge(ValueError):
    pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], extender: Extender, aliases: dict[str, str]) -> None:
        super().__init__(address, _Handler)
        self.extender = extender
        self.aliases = aliases


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
    extender: Extender, host: str = "127.0.0.1", port: int = 8888, aliases: dict[str, str] | None = None
) -> RunningServer:
    """Start serving in a background thread (``port=0`` picks a free port). ``aliases`` maps other
    verb names an operator configured (e.g. ``allocate`` → ``allocateFunc``)."""
    server = _Server((host, port), extender, aliases or {})
    thread = threading.Thread(target=server.serve_forever, name="volcano-extender", daemon=True)
    thread.start()
    return RunningServer(server, thread)
