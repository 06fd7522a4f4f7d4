"""The last model built, kept for the next request that would build the same one.

A scheduler asks again and again about one cluster: Volcano every session, the Slurm agent at every
submit, a what-if sweep with one inventory. When nothing that shapes the model has changed since
the last request, building it again is the largest cost of the call before any search: 1.8-2.3 s
of a 5 s call at 16,384 nodes x 500 jobs (issue 18 item 4: "repeated requests on one cluster reuse
what they can instead of rebuilding"). The search leaves its marks on the model (each settled
tier held at its value, an objective, a hint); they are taken off before the model goes back on
the shelf, so a reused model admits exactly the plans a fresh compile's model admits.

One model is kept, not several: at 16,384 nodes it holds about a quarter of a million variables,
and a service serves one cluster. A request takes the model off the shelf while it uses it, so two
requests never search one model at once (the second builds its own).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from solver.compile import Compiled
from solver.compile.objective import holds_in, release_holds
from solver.domain.model import Policy
from solver.reduce.normalise import Normalised

__all__ = ["put", "take"]

# Policy fields that bound or steer the search, never the model: requests that differ only in them
# share one model.
SEARCH_ONLY = frozenset({"time_limit_s", "seed", "deterministic", "workers", "order_shuffles"})


@dataclass(frozen=True)
class _Kept:
    problem: Normalised
    policy: Policy
    compiled: Compiled


_lock = threading.Lock()
_kept: _Kept | None = None


def same_model(a: Normalised, pa: Policy, b: Normalised, pb: Policy) -> bool:
    """Whether compiling ``a`` under ``pa`` builds the model compiling ``b`` under ``pb`` builds:
    the node classes (shape, leaf, NVLink domain, nodes), the roles, shapes and conflicts, the jobs,
    the fabric's switches and every policy field the model reads. Nodes unchanged since the last
    request are the same objects (``solver.service.wire`` converts a node's bytes once), so the
    usual comparison is by identity."""
    ra, rb = a.request, b.request
    return (
        _model_fields(pa) == _model_fields(pb)
        and len(a.classes) == len(b.classes)
        and a.roles == b.roles
        and a.shapes == b.shapes
        and a.conflicts == b.conflicts
        and a.shape_rails == b.shape_rails
        and a.pooled_from == b.pooled_from
        and ra.jobs == rb.jobs
        and ra.inventory.switches == rb.inventory.switches
        and all(ca is cb or ca == cb for ca, cb in zip(a.classes, b.classes, strict=True))
    )


def take(problem: Normalised, policy: Policy) -> Compiled | None:
    """The kept model if it is the one ``problem`` under ``policy`` would build, off the shelf
    until :func:`put` gives it back; ``None`` otherwise."""
    global _kept
    with _lock:
        kept = _kept
        if kept is None or not same_model(kept.problem, kept.policy, problem, policy):
            return None
        _kept = None
        return kept.compiled


def put(problem: Normalised, policy: Policy, compiled: Compiled) -> None:
    """Keep ``compiled`` for the next request, the search's marks taken off: its tier holds let
    go, the objective and the hint cleared. A model the search changed otherwise is not kept."""
    global _kept
    model = compiled.model
    release_holds(model)
    model.clear_objective()
    model.clear_hints()
    if len(model.proto.constraints) != compiled.constraints + holds_in(model):
        return  # a constraint this module does not know how to take off: the next request builds anew
    with _lock:
        _kept = _Kept(problem, policy, compiled)


def clear() -> None:
    """Forget the kept model (tests; a service told its cluster is gone)."""
    global _kept
    with _lock:
        _kept = None


def _model_fields(policy: Policy) -> dict[str, object]:
    return {k: v for k, v in policy.__dict__.items() if k not in SEARCH_ONLY}
