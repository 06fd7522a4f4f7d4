"""The errors the pipeline raises: bad input (with every problem and its path) and broken results."""

from __future__ import annotations

from solver.domain.model import Frozen


class Problem(Frozen):
    """One thing wrong with a request: where (a dotted path such as
    ``inventory.nodes[3].gpus[1].pcie_switch``, or ``FILE:LINE:COL`` for files) and why, in a sentence."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class InvalidRequest(ValueError):
    """The request cannot be solved as given. Carries every problem found, not just the first."""

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems) or "invalid request")


class VerificationFailed(RuntimeError):
    """The solver produced a placement the independent verifier refuses. Always a bug in topoplace:
    the service answers INTERNAL and never hands the placement out."""

    def __init__(self, violations: tuple[str, ...]) -> None:
        self.violations = violations
        super().__init__("placement failed verification: " + "; ".join(violations))
