"""Structured logs of the service: one JSON object per line, for log shippers rather than eyes.

Configured explicitly by :func:`configure_logging` (``run_forever`` calls it), never at import: a
library that reconfigures logging when imported fights every program that embeds it.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def configure_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Send structlog events to ``stream`` (default stderr) as JSON lines at ``level`` and above.

    Each line has ``event``, ``level``, an ISO ``timestamp`` (UTC) and the event's own keys; a
    logged exception adds its formatted traceback under ``exception`` (logs only, never the wire).
    """
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=True),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
