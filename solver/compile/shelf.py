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
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from solver.compile import Compiled
from solver.compile.objective import holds_in, release_holds
from solver.domain.cancel import Cancel, Cancelled, cancelling, check
from solver.domain.model import Policy
from solver.reduce.normalise import Normalised

__all__ = ["Build", "behind", "clear", "put", "take", "wait_behind"]

log = structlog.get_logger("topoplace.compile")

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
    the fabric's switches, every policy field the model reads, and the inventory's largest node —
    the packing tier's ruler, which a node no class holds (it can take no role) still sets: without
    it, a model built beside a larger node answered with that node's packing values (found by the
    enumerator's differential test, session 30). Nodes unchanged since the last request are the
    same objects (``solver.service.wire`` converts a node's bytes once), so the usual comparison is
    by identity."""
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
        and a.largest == b.largest
    )


def take(problem: Normalised, policy: Policy) -> Compiled | None:
    """The kept model if it is the one ``problem`` under ``policy`` would build, off the shelf
    until :func:`put` gives it back; ``None`` otherwise."""
    global _kept
    with _lock:
        kept = _kept
    # Compared outside the lock: fresh but equal nodes take 70 ms to compare at 16,384 nodes.
    if kept is None or not same_model(kept.problem, kept.policy, problem, policy):
        return None
    with _lock:
        if _kept is not kept:
            return None  # another request took it meanwhile (or a newer model replaced it)
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
    """Forget the kept model, and stop a build left running (tests; a service told its cluster is
    gone)."""
    global _kept, _behind
    with _lock:
        _kept, behind, _behind = None, _behind, None
    if behind is not None:
        behind.stop("the shelf was cleared")


class Build:
    """A model built on a thread of its own, so that a request that cannot wait for it does not
    throw it away. Loaded, a 16,384-node compile ran 2.85 s against a 2 s estimate and was cut on
    every call, each of them then answered by the model-free greedy; left to finish, the model is
    on the shelf for the next request. The request that started the build takes the model if it is
    done in time (:meth:`wait`); otherwise the build goes on and puts it on the shelf itself. One
    build runs behind at a time: a newer one stops the older."""

    def __init__(
        self, problem: Normalised, policy: Policy, build: Callable[[Normalised, Policy], Compiled]
    ) -> None:
        self.problem, self.policy = problem, policy
        self._build = build
        self._token = Cancel()
        self._done = threading.Event()
        self._compiled: Compiled | None = None
        self._error: Exception | None = None
        self._claimed = False  # the request waiting took the model
        self._thread = threading.Thread(target=self._run, name="topoplace-build", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with cancelling(self._token):
                compiled = self._build(self.problem, self.policy)
            error = None
        except Cancelled:
            compiled, error = None, None
        except Exception as exc:  # raised where the model is waited for; logged if nobody waits
            compiled, error = None, exc
        global _kept, _behind
        with _lock:
            self._compiled, self._error = compiled, error
            self._done.set()
            if _behind is self:
                _behind = None
            if error is not None and not self._claimed:
                log.error("model_build_failed", error=repr(error))
            if self._claimed or compiled is None or self._token.tripped:
                return
            # Nobody waited for it: kept for the next request, bare as it was built.
            _kept = _Kept(self.problem, self.policy, compiled)

    def wait(self, until: float) -> Compiled | None:
        """The model, if it is built by ``until`` (``time.perf_counter()``); otherwise ``None``, and
        the build goes on behind (stopping any other build left behind). The caller's own
        cancellation stops both."""
        global _behind
        while not self._done.is_set():
            left = until - time.perf_counter()
            if left <= 0:
                break
            self._done.wait(min(left, 0.05))
            try:
                check()
            except Cancelled:
                self.stop("the request that waited for it was cancelled")  # no work for a caller gone
                raise
        with _lock:
            if self._done.is_set():
                self._claimed = True
                if self._error is not None:
                    raise self._error
                return self._compiled
            older, _behind = _behind, self
        if older is not None and older is not self:
            older.stop("a newer build took its place")
        return None

    def stop(self, why: str) -> None:
        self._token.trip(why)


_behind: Build | None = None


def wait_behind(timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the build left behind, if any, to end; whether none runs now
    (tests; a service about to stop)."""
    with _lock:
        running = _behind
    return running is None or running._done.wait(timeout_s)


def behind(problem: Normalised, policy: Policy) -> Build | None:
    """The build left running behind, if it builds the model ``problem`` under ``policy`` needs:
    a request may wait for it instead of starting its own."""
    with _lock:
        running = _behind
    if running is not None and same_model(running.problem, running.policy, problem, policy):
        return running
    return None


def _model_fields(policy: Policy) -> dict[str, object]:
    return {k: v for k, v in policy.__dict__.items() if k not in SEARCH_ONLY}
