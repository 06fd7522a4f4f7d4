"""Bad input on the wire: ``INVALID_ARGUMENT`` with a ``google.rpc.BadRequest``, one field violation
per problem — shared by every servicer (Placement, WhatIf) so a caller reads errors one way."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from solver.domain.errors import Problem

# Status details travel in trailing metadata, which peers cap (8 KiB by default) and reject whole
# when exceeded. A request with thousands of problems must still arrive as INVALID_ARGUMENT, so the
# details carry as many problems as fit these budgets and then say how many were left out.
MAX_DETAILS_BYTES = 3000
MAX_MESSAGE_TEXT_BYTES = 1000


def invalid_argument_status(problems: tuple[Problem, ...]) -> grpc.Status:
    """``INVALID_ARGUMENT`` with a ``BadRequest`` detail (field = path, description = message) and
    the same problems in the plain message, for clients that only print ``details()``."""
    bad_request, shown = _bad_request(problems)
    detail = any_pb2.Any()
    detail.Pack(bad_request)
    message = truncate(_summary(problems, shown), MAX_MESSAGE_TEXT_BYTES)
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=message, details=[detail])
    return rpc_status.to_status(status)


def _bad_request(problems: tuple[Problem, ...]) -> tuple[error_details_pb2.BadRequest, int]:
    """As many violations as fit ``MAX_DETAILS_BYTES`` (and how many that is), then one saying how
    many more there are."""
    out = error_details_pb2.BadRequest()
    for shown, problem in enumerate(problems):
        out.field_violations.add(field=problem.path, description=problem.message)
        if out.ByteSize() > MAX_DETAILS_BYTES:
            del out.field_violations[-1]
            more = f"{len(problems) - shown} more problem(s) not shown"
            out.field_violations.add(field="request", description=more)
            return out, shown
    return out, len(problems)


def _summary(problems: tuple[Problem, ...], shown: int) -> str:
    lines = [f"invalid request: {len(problems)} problem(s)"]
    lines += [f"{p.path}: {p.message}" for p in problems[:shown]]
    return "\n".join(lines)


def truncate(text: str, max_bytes: int) -> str:
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    return data[: max_bytes - 4].decode(errors="ignore") + " ..."
