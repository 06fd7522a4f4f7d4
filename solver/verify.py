"""Independent checker of a placement. (Being written; see tests/test_verify.py.)"""

from __future__ import annotations

from solver.model import SolveRequest, SolveResult


def verify(request: SolveRequest, result: SolveResult) -> tuple[str, ...]:
    """Every way ``result`` breaks the rules of ``request``, one sentence each; empty when valid."""
    raise NotImplementedError
