"""End to end as the service sees it, cold and warm: the request's bytes parsed, converted, solved,
verified — first on a fresh process (cold), then the same bytes again (warm: a scheduler resending
its inventory; unchanged nodes are converted, validated and normalised once, see solver/service/wire.py).

    python -m bench.warm NODES GANGS TIME_LIMIT_S
"""

from __future__ import annotations

import statistics
import sys
import time

from bench.scenario import scenario
from solver.service.wire import request_from_proto, request_to_proto
from solver.solve import solve
from topoplace.v1 import placement_pb2


def main() -> None:
    nodes, gangs, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    wire = request_to_proto(scenario(nodes, gangs, seed=1, time_limit_s=limit).request).SerializeToString()
    walls = []
    for _ in range(4):
        t0 = time.perf_counter()
        result = solve(request_from_proto(placement_pb2.SolveRequest.FromString(wire)))
        walls.append(time.perf_counter() - t0)
    warm = statistics.median(walls[1:])
    print(
        f"{nodes} nodes, {gangs} gangs: cold {walls[0]:.3f} s, warm {warm:.3f} s (median of 3), "
        f"{result.status.name}, gap {result.gap:.2%}"
    )


if __name__ == "__main__":
    main()
