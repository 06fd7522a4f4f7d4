"""The emulated Slurm cluster's own plumbing (the daemons themselves run in test_e2e)."""

from __future__ import annotations

import threading
from pathlib import Path

from adapters.slurm.emulate import EmulatedCluster


def test_a_pid_file_is_read_once_its_number_is_written(tmp_path: Path) -> None:
    # slurmd creates its pid file before it writes the number; reading it at once gave int('') and
    # failed the end-to-end tests now and then on a fresh machine.
    path = tmp_path / "slurmd.n0.pid"
    path.write_text("")
    threading.Timer(0.3, lambda: path.write_text("4242\n")).start()
    assert EmulatedCluster._read_pid(path, "slurmd n0") == 4242
