"""Call a topoplace server as if the solver were local.

:func:`solve_remote` raises the same :class:`InvalidRequest` a local ``solve`` would (rebuilt from
the ``BadRequest`` in the status details), so callers handle bad input one way whether they solve in
process or over gRPC; every other failure is a :class:`RemoteError` carrying the gRPC code.
"""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from solver.domain.errors import InvalidRequest, Problem
from solver.domain.model import SolveRequest, SolveResult
from solver.service import wire
from solver.service.channel import CHANNEL_OPTIONS
from topoplace.v1 import placement_pb2_grpc


class RemoteError(RuntimeError):
    """The server could not answer: unreachable, deadline exceeded, or failed inside."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code.name}: {message}")


def solve_remote(target: str, request: SolveRequest, *, timeout_s: float = 30) -> SolveResult:
    """Solve ``request`` on the server at ``target`` (``host:port``), waiting at most ``timeout_s``.

    The timeout is the call's gRPC deadline, so the server stops searching in time to answer.
    """
    message = wire.request_to_proto(request)
    with grpc.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        stub = placement_pb2_grpc.PlacementStub(channel)
        try:
            response = stub.Solve(message, timeout=timeout_s)
        except grpc.RpcError as exc:
            raise _error_from_call(exc) from None
    return wire.result_from_proto(response)


def _error_from_call(call: grpc.RpcError) -> InvalidRequest | RemoteError:
    code: grpc.StatusCode = call.code()  # type: ignore[attr-defined]  # RpcError raised by a call is a Call
    details: str = call.details() or ""  # type: ignore[attr-defined]
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequest(problems_from_call(call) or [Problem(path="request", message=details)])
    return RemoteError(code, details)


def problems_from_call(call: grpc.RpcError) -> list[Problem]:
    """The problems in a failed call's ``BadRequest`` detail; empty when there is none."""
    try:
        status = rpc_status.from_call(call)  # type: ignore[arg-type]
    except ValueError:  # code or message of the rich status disagree with the call's: ignore it
        return []
    if status is None:
        return []
    problems: list[Problem] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            problems += [Problem(path=v.field, message=v.description) for v in bad_request.field_violations]
    return problems
