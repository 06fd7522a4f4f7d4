"""Handing memory the caches let go back to the operating system (glibc's allocator).

The caches of nodes are bounded in bytes (``solver.domain.nodefold.NODE_BUDGET``), but what they
evict is freed to the C allocator, which keeps it: glibc raises its mmap threshold each time a large
block is freed (up to 32 MiB), so the next large strings and wire keys come from its heaps, where
freed space stays resident. A soak of 1 MiB-label nodes through a 64 MiB budget grew the server's
RSS by 191 MiB that way; with the threshold fixed and the heaps trimmed after evictions, by 72 MiB
(``bench/RESULTS.md``). So a server, on glibc only (elsewhere this is a no-op):

* fixes the mmap threshold at glibc's own default (128 KiB) — blocks at least that large are mapped
  on their own and returned whole when freed;
* runs a :class:`Trimmer` that calls ``malloc_trim(0)`` once the caches have evicted enough since
  the last trim, off the request path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from typing import Any

import structlog

from solver.domain.nodefold import NODE_BUDGET, CacheBudget

M_MMAP_THRESHOLD = -3  # mallopt parameter, <malloc.h>
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's default, kept fixed (setting it stops the dynamic raise)
TRIM_CHECK_S = 0.5
TRIM_AFTER_MIN_BYTES = 8 * 1024 * 1024  # evicted since the last trim; and at least a 16th of the budget

_log = structlog.get_logger("topoplace.service")
_tuned = threading.Lock()
_libc: Any = None


def _glibc() -> Any:
    """glibc, or None on another C library (musl, macOS): nothing to tune there."""
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
        except OSError:
            libc = None
        usable = libc is not None and hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt")
        _libc = libc if usable else False
    return _libc or None


def tune() -> bool:
    """Fix glibc's mmap threshold for this process (idempotent); whether it is glibc."""
    libc = _glibc()
    if libc is None:
        return False
    with _tuned:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    return True


def trim() -> None:
    """Return the allocator's free memory to the system (glibc's ``malloc_trim``)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


class Trimmer:
    """A thread that trims the allocator once ``budget`` has evicted enough since the last trim."""

    def __init__(self, budget: CacheBudget = NODE_BUDGET) -> None:
        self.budget = budget
        self.trims = 0
        self._stop = threading.Event()
        self._last = budget.evicted
        self._thread = threading.Thread(target=self._run, name="topoplace-trim", daemon=True)

    def start(self) -> Trimmer:
        if _glibc() is not None:
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(TRIM_CHECK_S):
            evicted = self.budget.evicted
            if evicted - self._last >= max(TRIM_AFTER_MIN_BYTES, self.budget.max_bytes // 16):
                self._last = evicted
                trim()
                self.trims += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
