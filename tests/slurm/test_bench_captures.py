"""The bench's synthetic node kinds parse as intended: four switch groups of 2 GPUs + 2 NICs, two
NVLink halves (NV18 inside, NV2 across), and the GPU↔NIC pairing each kind claims."""

from __future__ import annotations

import pytest

from adapters.slurm.nodetypes import switch_groups
from bench.slurm_compare import KINDS, STRONG, WEAK, halves_capture
from solver.ingest.nvidia_smi import parse_topology


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_halves_capture(kind: str) -> None:
    node = parse_topology(halves_capture(kind), node=kind)
    groups = switch_groups(node)
    want = {
        (frozenset(f"GPU{g}" for g in gpus), frozenset(f"mlx5_{n}" for n in nics))
        for gpus, nics in KINDS[kind][0]
    }
    assert {(frozenset(g.gpus), frozenset(g.nics)) for g in groups} == want
    links = {(lk.gpu_a, lk.gpu_b): lk.links for lk in node.nvlinks}
    assert len(links) == 28
    assert links[("GPU0", "GPU1")] == STRONG and links[("GPU3", "GPU4")] == WEAK
