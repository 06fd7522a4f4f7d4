"""Go's ``math/rand`` (the pre-1.20 seeded global source), re-implemented from its published algorithm.

Why it exists: FGD's simulator (Weng et al., ATC'23) derives the arrival order of the Alibaba openb trace
and the random node ranks from Go's ``math/rand`` seeded with 42..51. Reproducing its published allocation
ratios seed by seed needs the same pseudo-random sequence, so this module implements the generator Go
documents: an additive lagged Fibonacci generator (length 607, tap 273) whose state is seeded by a
Park-Miller LCG (``seedrand``) XOR-ed with Go's fixed ``rngCooked`` table. The table itself is data, read
from ``go_math_rand_cooked.txt`` next to the trace (607 values, lower 63 bits: enough, since every draw
the simulator makes goes through ``Int63``, whose low 63 bits depend only on the low 63 bits of the state).

Only the methods the simulator's procedure uses are here: ``int63``, ``int31``, ``int31n``, ``intn``,
``shuffle`` (Lemire's multiply-shift with rejection, as Go's ``Rand.Shuffle`` uses) and ``perm``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

RNG_LEN = 607
RNG_TAP = 273
MASK63 = (1 << 63) - 1
MASK64 = (1 << 64) - 1
INT32_MAX = (1 << 31) - 1

# shared/ sits beside the repository (on developer machines and in CI alike); TOPOPLACE_OPENB overrides.
OPENB_DIR = Path(
    os.environ.get("TOPOPLACE_OPENB", Path(__file__).resolve().parents[2].parent / "shared/data/openb")
)
DEFAULT_COOKED = OPENB_DIR / "go_math_rand_cooked.txt"


def load_cooked(path: Path = DEFAULT_COOKED) -> tuple[int, ...]:
    """The 607 cooked values, one per non-comment line."""
    values = tuple(
        int(line) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")
    )
    if len(values) != RNG_LEN:
        raise ValueError(f"{path}: expected {RNG_LEN} cooked values, found {len(values)}")
    return values


def _seedrand(x: int) -> int:
    """One step of the Park-Miller minimal-standard LCG (x * 48271 mod 2^31-1), Schrage's method."""
    hi, lo = divmod(x, 44488)
    x = 48271 * lo - 3399 * hi
    return x + INT32_MAX if x < 0 else x


class GoRand:
    """A seeded Go ``math/rand.Rand``; the same seed gives Go's sequence."""

    def __init__(self, seed: int, cooked: tuple[int, ...] | None = None) -> None:
        table = cooked if cooked is not None else load_cooked()
        seed %= INT32_MAX
        if seed < 0:
            seed += INT32_MAX
        if seed == 0:
            seed = 89482311
        x = seed
        vec = [0] * RNG_LEN
        for i in range(-20, RNG_LEN):
            x = _seedrand(x)
            if i >= 0:
                u = (x << 40) & MASK64
                x = _seedrand(x)
                u ^= (x << 20) & MASK64
                x = _seedrand(x)
                u ^= x
                u ^= table[i]
                vec[i] = u & MASK63
        self._vec = vec
        self._tap = 0
        self._feed = RNG_LEN - RNG_TAP

    def int63(self) -> int:
        """A non-negative 63-bit integer (Go's ``Int63``)."""
        self._tap -= 1
        if self._tap < 0:
            self._tap += RNG_LEN
        self._feed -= 1
        if self._feed < 0:
            self._feed += RNG_LEN
        x = (self._vec[self._feed] + self._vec[self._tap]) & MASK63
        self._vec[self._feed] = x
        return x

    def int31(self) -> int:
        return self.int63() >> 32

    def uint32(self) -> int:
        return self.int63() >> 31

    def int31n(self, n: int) -> int:
        """Uniform in [0, n) by rejection (Go's exported ``Int31n``, used by ``Intn`` and ``Perm``)."""
        if n <= 0:
            raise ValueError("invalid argument to int31n")
        if n & (n - 1) == 0:
            return self.int31() & (n - 1)
        limit = INT32_MAX - (1 << 31) % n
        v = self.int31()
        while v > limit:
            v = self.int31()
        return v % n

    def _int31n_lemire(self, n: int) -> int:
        """Go's unexported ``int31n`` (multiply-shift with rejection), used by ``Shuffle``."""
        prod = self.uint32() * n
        low = prod & 0xFFFFFFFF
        if low < n:
            thresh = ((1 << 32) - n) % n
            while low < thresh:
                prod = self.uint32() * n
                low = prod & 0xFFFFFFFF
        return prod >> 32

    def intn(self, n: int) -> int:
        if n > INT32_MAX:
            raise ValueError("intn beyond 31 bits is not needed here")
        return self.int31n(n)

    def shuffle(self, n: int, swap: Callable[[int, int], None]) -> None:
        """Fisher-Yates from the end, as Go's ``Rand.Shuffle`` (n < 2^31)."""
        for i in range(n - 1, 0, -1):
            swap(i, self._int31n_lemire(i + 1))

    def perm(self, n: int) -> list[int]:
        """Go's ``Rand.Perm``: a permutation of 0..n-1 built by inside-out insertion."""
        m = [0] * n
        for i in range(n):
            j = self.intn(i + 1)
            m[i] = m[j]
            m[j] = i
        return m
