"""Writes the generated what-if fixtures: a 16-node HGX inventory and a one-hour job trace on it.

    python -m bench.whatif_fixtures   # rewrites fixtures/whatif/hgx16.json and hgx16-trace.json

Seeded, so the files only change when this script does. The shapes are bench.scenario's (HGX H100
nodes, 8 GPUs and 8 rail NICs each, job-shaped background load), four nodes to a leaf so that
locality and draining a leaf matter on a cluster small enough for the tests and the docs.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from google.protobuf import json_format

from bench.scenario import hgx_node, member, node_load
from solver.domain.model import FabricSwitch, Inventory, Job, Requirement, Role
from solver.service import wire
from solver.whatif.scenario import Departure, Trace, TraceEntry
from topoplace.v1 import placement_pb2, whatif_pb2

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "whatif"
NODES, PER_LEAF, SEED = 16, 4, 7
TRACE_JOBS, HOUR_S = 48, 3600.0


def inventory() -> Inventory:
    rng = random.Random(SEED)
    leaves = NODES // PER_LEAF
    switches = [FabricSwitch(id="spine0", tier=2)] + [
        FabricSwitch(id=f"leaf{k}", tier=1, parent="spine0") for k in range(leaves)
    ]
    nodes = []
    for i in range(NODES):
        name = f"hgx{i:02d}"
        level = rng.choice((0.0, 0.0, 0.25, 0.5, 0.5, 0.75))
        nodes.append(hgx_node(name, f"leaf{i // PER_LEAF}", node_load(rng, name, level)))
    return Inventory(nodes=tuple(nodes), switches=tuple(switches))


def trace(inv: Inventory) -> Trace:
    """Jobs arriving over an hour (Poisson-like gaps), 1-8 GPU singles and 2-4 node gangs, durations
    of 5 to 30 minutes; and half of the background work departing in the first half hour."""
    rng = random.Random(SEED + 1)
    entries, t = [], 0.0
    for k in range(TRACE_JOBS):
        t += rng.expovariate(TRACE_JOBS / HOUR_S)
        if rng.random() < 0.75:
            gpus = rng.choice((1, 1, 2, 2, 4, 8))
            role = Role(name="worker", replicas=1, member=member(gpus, aligned=Requirement.PREFERRED))
            kind = f"{gpus}-gpu"
        else:
            size = rng.randint(2, 4)
            role = Role(name="worker", replicas=size, member=member(8, aligned=Requirement.REQUIRED))
            kind = "gang"
        job = Job(id=f"j{k:02d}", priority=rng.choice((0, 0, 1, 2)), roles=(role,))
        entries.append(
            TraceEntry(
                job=job, arrival_s=round(t), duration_s=round(rng.uniform(300, HOUR_S / 2)), job_class=kind
            )
        )
    owners = sorted({a.owner for n in inv.nodes for a in n.allocations})
    departures = [
        Departure(owner=o, at_s=round(rng.uniform(0, HOUR_S / 2))) for o in owners if rng.random() < 0.5
    ]
    return Trace(entries=tuple(entries), departures=tuple(departures))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    inv = inventory()
    inv_msg = wire.to_proto(inv, placement_pb2.Inventory)
    (OUT / "hgx16.json").write_text(wire.json_text(inv_msg) + "\n")
    trace_msg = wire.to_proto(trace(inv), whatif_pb2.Trace)
    data = json_format.MessageToDict(trace_msg, preserving_proto_field_name=True)
    (OUT / "hgx16-trace.json").write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT / 'hgx16.json'} and {OUT / 'hgx16-trace.json'}")


if __name__ == "__main__":
    main()
