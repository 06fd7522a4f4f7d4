"""The ``topoplace.v1.WhatIf`` gRPC service: a scenario in, the report ``topoplace whatif`` prints out.

Registered by ``solver.service.server.serve`` next to ``Placement``. Errors keep the Placement
service's conventions: a bad scenario is ``INVALID_ARGUMENT`` with one BadRequest field violation per
problem; a plan the verifier refuses is ``INTERNAL``. The scenario must be self-contained (files on
the server's disk are not the caller's to name). The caller's deadline is honoured: the run stops in
time and answers what it computed, with ``complete`` false.
"""

from __future__ import annotations

import time

import grpc
import structlog

from solver.domain.errors import InvalidRequest, VerificationFailed
from solver.whatif.convert import report_to_proto, scenario_from_proto
from solver.whatif.run import run_prepared
from solver.whatif.world import prepare
from topoplace.v1 import whatif_pb2, whatif_pb2_grpc

SERVICE_NAME = whatif_pb2.DESCRIPTOR.services_by_name["WhatIf"].full_name
# Time kept back from the caller's deadline to assemble and send the report.
DEADLINE_MARGIN_S = 0.5
NO_DEADLINE_ABOVE_S = 365 * 24 * 3600.0

_log = structlog.get_logger("topoplace.whatif")


class WhatIfServicer(whatif_pb2_grpc.WhatIfServicer):
    def Run(  # the RPC's name, hence not snake_case
        self, request: whatif_pb2.WhatIfRequest, context: grpc.ServicerContext
    ) -> whatif_pb2.WhatIfResponse:
        from solver.service.status import invalid_argument_status

        started = time.perf_counter()
        stop_at = _stop_at(context)
        try:
            scenario = scenario_from_proto(request.scenario)
            prepared = prepare(scenario, root=None, source="scenario")
            report = run_prepared(
                prepared, should_stop=lambda: stop_at is not None and time.monotonic() >= stop_at
            )
        except InvalidRequest as exc:
            _log.info("whatif_rejected", problems=len(exc.problems))
            context.abort_with_status(invalid_argument_status(exc.problems))
        except VerificationFailed as exc:
            _log.error("whatif_failed", violations=list(exc.violations))
            context.abort(grpc.StatusCode.INTERNAL, str(exc)[:1000])
        except Exception:
            _log.exception("whatif_failed")
            context.abort(grpc.StatusCode.INTERNAL, "internal error")
        _log.info(
            "whatif",
            scenario=report.scenario,
            cells=len(report.outcomes),
            complete=report.complete,
            ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return whatif_pb2.WhatIfResponse(report=report_to_proto(report))


def _stop_at(context: grpc.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    if remaining is None or remaining > NO_DEADLINE_ABOVE_S:
        return None
    return time.monotonic() + max(0.0, remaining - DEADLINE_MARGIN_S)


def add_to_server(server: grpc.Server) -> str:
    """Register the WhatIf service on ``server``; its full name, for reflection and health."""
    whatif_pb2_grpc.add_WhatIfServicer_to_server(WhatIfServicer(), server)
    return SERVICE_NAME
