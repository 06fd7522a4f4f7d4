"""On a real Slurm 22.05: a typed request gets exactly its switch group's GPUs and NICs, the IDX in
``scontrol show job -d`` maps back to them through gres.conf, and the TaskProlog exports them — on node
kinds whose NICs are not numbered like their GPUs (``rotated``: sw1 = GPU2, GPU3 with mlx5_4, mlx5_5).

Slurm 22.05 numbers GPUs by device file and gives each type one run of IDX, so gres.conf lines are
written in file order with each type's lines together (``topoplace slurm gres-conf``; a node whose
switch groups are not runs of consecutive GPUs is refused, see test_parsers). One munged, one
slurmctld, two ``slurmd -N`` on loopback (about 20 s). Skips without Slurm/MUNGE."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from adapters.slurm.emulate import ClusterSpec, EmulatedCluster, missing_binaries
from adapters.slurm.gres import node_devices, parse_gres_conf, parse_gres_item, split_outside_parens
from bench.slurm_compare import halves_capture

MISSING = missing_binaries()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"Slurm/MUNGE not installed ({', '.join(MISSING)})")
TASK = "srun sh -c 'echo TP gpus=$CUDA_VISIBLE_DEVICES hca=$NCCL_IB_HCA'; sleep 120"


def test_typed_requests_get_their_switch_groups_devices(tmp_path: Path) -> None:
    captures = []
    for kind in ("rotated", "reversed"):
        captures.append(tmp_path / f"{kind}.txt")
        captures[-1].write_text(halves_capture(kind))
    cluster = EmulatedCluster(
        tmp_path / "c", ClusterSpec(nodes=2, nodes_per_leaf=2, captures=tuple(captures))
    )
    cluster.write_files({"enabled": "no"})
    cluster.start()
    try:
        out = cluster.root / "out"
        # gn01 is rotated (sw1: GPU2,3 + NIC4,5), gn02 reversed (sw2: GPU4,5 + NIC3,2).
        want = {
            ("gn01", "sw1"): ([2, 3], ["mlx5_4", "mlx5_5"]),
            ("gn01", "sw3"): ([6, 7], ["mlx5_0", "mlx5_1"]),
            ("gn02", "sw2"): ([4, 5], ["mlx5_2", "mlx5_3"]),
        }
        ids = {}
        for node, gtype in want:
            done = cluster.run(
                "sbatch", "--parsable", "-w", node, f"--gres=gpu:{gtype}:2,nic:{gtype}:2",
                "-o", str(out / "%j.out"), "--wrap", TASK,
            )  # fmt: skip
            ids[node, gtype] = done.stdout.strip()
        conf = parse_gres_conf((cluster.root / "etc" / "gres.conf").read_text())
        legend = {f"nic{k}": f"mlx5_{k}" for k in range(8)}  # the captures name NIC k mlx5_k
        deadline = time.monotonic() + 40
        lines: dict[tuple[str, str], str] = {}
        while time.monotonic() < deadline and len(lines) < len(ids):
            for key, job_id in ids.items():
                path = out / f"{job_id}.out"
                if path.exists() and "TP " in path.read_text():
                    lines[key] = path.read_text().strip()
            time.sleep(0.5)
        assert len(lines) == len(ids), lines
        for (node, gtype), job_id in ids.items():
            text = cluster.run("scontrol", "show", "job", "-d", job_id).stdout
            gres = re.search(rf"Nodes={node} CPU_IDs=\S+ Mem=\S+ GRES=(\S+)", text)
            assert gres, text
            devices = node_devices(conf, node)
            held: dict[str, list] = {"gpu": [], "nic": []}
            for item in (parse_gres_item(p) for p in split_outside_parens(gres.group(1))):
                for idx in item.indices:
                    device = devices.get(item.name)[idx]
                    held[item.name].append(
                        device.number if item.name == "gpu" else legend[Path(device.file).name]
                    )
            gpus, nics = want[node, gtype]
            assert (sorted(held["gpu"]), sorted(held["nic"])) == (gpus, nics), gres.group(1)
            assert lines[node, gtype] == f"TP gpus={gpus[0]},{gpus[1]} hca=={nics[0]},{nics[1]}"
    finally:
        cluster.stop()
    assert cluster.pids == {}
