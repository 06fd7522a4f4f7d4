"""The model-free fallback's greedy (``solver.fallback.FIRST_FIT``) on bench.quality's requests: how
long it takes to place the whole batch, how many jobs it places, and a hash of its plan, so that two
trees can be compared side by side (the same hash: the same plan)::

    python -m bench.fallback_speed --nodes 16384 --seeds 1,2
    PYTHONPATH=/other/tree:/other/tree/proto python -m bench.fallback_speed --nodes 16384 --seeds 1,2

It is what a call answers with when its model cannot be built in time (a cold 16,384-node call with
a 5 s limit), given all the time it wants.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

from bench.provenance import commit
from bench.quality import request
from solver.fallback import FIRST_FIT
from solver.solve import rare_full_collections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=16384)
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--seeds", default="1,2")
    args = parser.parse_args()
    print(f"commit {commit()}")
    for seed in (int(s) for s in args.seeds.split(",")):
        req = request(args.nodes, args.load, args.jobs, seed)
        with rare_full_collections():  # as the solver runs it
            started = time.perf_counter()
            result = FIRST_FIT.place(req)
            seconds = time.perf_counter() - started
        plan = json.dumps([j.model_dump(mode="json") for j in result.jobs], sort_keys=True)
        digest = hashlib.sha1(plan.encode()).hexdigest()[:12]
        placed = sum(j.placed for j in result.jobs)
        print(f"{args.nodes} nodes seed {seed}: {seconds:.2f} s, {placed} jobs placed, plan {digest}")


if __name__ == "__main__":
    main()
