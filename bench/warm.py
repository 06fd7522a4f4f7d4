"""End to end as the service sees it, cold and warm: the request's bytes parsed, converted, solved,
verified — first on a fresh process (cold), then the same bytes again (warm: a scheduler resending
its inventory; unchanged nodes are converted, validated and normalised once, see solver/service/wire.py).

    python -m bench.warm NODES GANGS TIME_LIMIT_S [quality]

``quality``: the request of ``bench.quality`` (a fat tree 70 % busy, thousands of node classes at
16,384 nodes) instead of ``bench.scenario``'s.
"""

from __future__ import annotations

import statistics
import sys
import time

from bench.quality import request as quality_request
from bench.scenario import scenario
from solver.service.wire import request_from_proto, request_to_proto
from solver.solve import rare_full_collections, solve
from topoplace.v1 import placement_pb2


def main() -> None:
    nodes, gangs, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    if sys.argv[4:] == ["quality"]:  # bench.quality's fat tree, 70 % busy: thousands of node classes
        request = quality_request(nodes, 0.7, gangs, 1, limit)
    else:
        request = scenario(nodes, gangs, seed=1, time_limit_s=limit).request
    wire = request_to_proto(request).SerializeToString()
    walls, placed, plans = [], [], []
    for _ in range(4):
        t0 = time.perf_counter()
        # As the server runs a call (solver.service.server): full collections made rare through
        # the conversion and the solve.
        with rare_full_collections():
            result = solve(request_from_proto(placement_pb2.SolveRequest.FromString(wire)))
        walls.append(time.perf_counter() - t0)
        placed.append(sum(j.placed for j in result.jobs))
        plans.append(result.plan_source)
    warm = statistics.median(walls[1:])
    print(
        f"{nodes} nodes, {gangs} gangs: cold {walls[0]:.3f} s, warm {warm:.3f} s (median of 3), "
        f"{result.status.name}, gap {result.gap:.2%}; jobs placed, cold then warm: "
        f"{' / '.join(map(str, placed))}; plans: {' / '.join(plans)}"
    )


if __name__ == "__main__":
    main()
