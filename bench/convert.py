"""A cold conversion: ``wire.request_from_proto`` of bench.quality's request (bench.deadlines' size:
half busy, seed 1) with node names this process has never seen, under the server's collector regime
(``rare_full_collections``), timed per node; ``--unlike`` gives each node a GPU model of its own, so
that no two nodes are built alike. Runs against whichever ``solver`` is first on the path, so two
trees are compared by alternating fresh processes::

    python -m bench.convert --nodes 16384
    PYTHONPATH=/other/tree:/other/tree/proto python bench/convert.py --nodes 16384   # a tree without it

The first call of the process is what a cold gRPC call pays (the server's reading is left out:
every node is read).
"""

from __future__ import annotations

import argparse
import os
import time

from bench.deadlines import sized, unseen
from bench.provenance import commit
from solver.service import wire
from solver.solve import rare_full_collections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=16384)
    parser.add_argument("--calls", type=int, default=1, help="cold calls, one after the other")
    parser.add_argument("--unlike", action="store_true", help="no two nodes built alike")
    args = parser.parse_args()
    base = sized(args.nodes, 500)
    took = []
    for call in range(args.calls):
        msg = wire.request_to_proto(unseen(base, f"cold{call}"))
        if args.unlike:
            for i, node in enumerate(msg.inventory.nodes):
                node.gpus[0].model = f"{node.gpus[0].model}-{call}-{i}"
        with rare_full_collections():
            started = time.perf_counter()
            wire.request_from_proto(msg)
            took.append(time.perf_counter() - started)
    per_node = " ".join(f"{t / args.nodes * 1e6:.0f}" for t in took)
    print(
        f"commit {commit()} load {os.getloadavg()[0]:.2f} · {args.nodes} nodes"
        f"{' none alike' if args.unlike else ''} · cold conversion {per_node} us a node",
        flush=True,
    )


if __name__ == "__main__":
    main()
