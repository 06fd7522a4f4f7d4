"""What the adapters' HTTP servers (the Volcano extender, the Slurm agent) do with a connection that
fails outside a request's handler.

A handler answers its own errors (400, 503, a neutral answer). What fails before or after it is the
connection itself: a scheduler restarted mid-call, a client that resets its socket or gave up
waiting (the Slurm hook past its timeout), the read deadline's watchdog shutting a slow one.
``socketserver`` prints each such failure as a raw 15-line traceback on stderr, which is noise in an
operator's logs where a client going away is routine: here it is one debug line, and any other
failure one error event with its traceback.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import structlog

_log = structlog.get_logger("topoplace.http")


class QuietClients:
    """A ``socketserver`` mixin: :meth:`handle_error` as the module docstring says."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        err = sys.exc_info()[1]
        peer = str(client_address[0]) if isinstance(client_address, tuple) and client_address else ""
        if isinstance(err, (ConnectionError, TimeoutError)):
            _log.debug("client went away", peer=peer, error=type(err).__name__)
            return
        _log.error("connection failed", peer=peer, traceback=traceback.format_exc(limit=8))
