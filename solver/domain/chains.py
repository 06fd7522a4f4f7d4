"""The words of a HAMi-style policy chain (``binpack,numa`` ...): what a request may say.

They live in the domain because validation must refuse an unknown word before any reduction runs;
``solver.reduce.policy`` rewrites the known ones into tiers and member rules.
"""

from __future__ import annotations

from collections.abc import Iterator

WORDS = ("binpack", "spread", "numa", "topology-aware", "mutex", "fragmentation", "fgd")


def words(chain: str) -> list[str]:
    """The chain's words, lower-cased, in order, blanks dropped."""
    return [w.strip().lower() for w in chain.split(",") if w.strip()]


def unknown_words(chain: str) -> Iterator[str]:
    yield from (w for w in words(chain) if w not in WORDS)
