"""Stopping a solve nobody waits for any more: a cancel token the caller trips, the pipeline checks.

A service caller goes away (a gRPC cancel, a deadline passed, the server shutting down) while its
solve is still working. The caller holds a :class:`Cancel` and trips it; the pipeline, which runs
under :func:`cancelling`, checks it between stages (:func:`check`) and hands its running CP-SAT
search to it (:func:`stopping`), so a trip stops the search at once through CP-SAT's own
``stop_search``, from any thread.

The token travels in a context variable rather than through every function's arguments: a solve
may run as many nested solves (one job at a time, several orders), and each of their searches
must stop with the outer call. ``solve(..., cancel=token)`` sets it; nothing else needs to.

Between two stage boundaries a stage may still run for seconds on a big request (validating,
normalising and compiling 16,384 nodes and 10,000 jobs cold took about 30 s on a loaded 2-core
machine), so the long loops inside the stages — over nodes, jobs, roles, classes, rules — iterate
through :func:`checked`, which looks at the token at every item: a Python attribute read, a few
milliseconds over a whole 16,384-node inventory.

The same token, given a clock, bounds a stage in time (:func:`bounded`, a :class:`Budget`): the
pipeline's normalise and compile, and each explanation's probe, stop within one item of their time
and say so (:class:`OutOfBudget`), while a caller gone still reads as :class:`Cancelled`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")


class Cancelled(Exception):
    """The solve was stopped because its caller no longer waits for it; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        # Where the solve was, for the log: each stage's milliseconds so far, the last one the stage
        # it was stopped in (filled in by the pipeline's stopwatch as the exception passes).
        self.stages_ms: dict[str, float] = {}
        super().__init__(f"solve cancelled: {reason}")


class Cancel:
    """A one-way switch: :meth:`trip` once, every registered stop runs, :attr:`reason` stays set."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stops: dict[int, Callable[[], None]] = {}
        self._next = 0
        self.reason: str | None = None

    @property
    def tripped(self) -> bool:
        return self.reason is not None

    def trip(self, reason: str) -> None:
        """Mark the solve cancelled and stop whatever search is running now. Safe from any thread,
        and from gRPC's callback threads; a second trip keeps the first reason."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            stops = list(self._stops.values())
        for stop in stops:
            stop()

    def check(self) -> None:
        if self.reason is not None:
            raise Cancelled(self.reason)

    @contextmanager
    def stop_with(self, stop: Callable[[], None]) -> Iterator[None]:
        """Run ``stop`` on a trip while the block runs (at once if already tripped)."""
        with self._lock:
            key = self._next
            self._next += 1
            self._stops[key] = stop
            tripped = self.reason is not None
        if tripped:
            stop()
        try:
            yield
        finally:
            with self._lock:
                del self._stops[key]


_CURRENT: ContextVar[Cancel | None] = ContextVar("topoplace_cancel", default=None)


@contextmanager
def cancelling(cancel: Cancel | None) -> Iterator[None]:
    """Make ``cancel`` the token of every stage run in this block (None: keep the outer one)."""
    if cancel is None:
        yield
        return
    token = _CURRENT.set(cancel)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> Cancel | None:
    """The token of the solve running in this context (None outside a service)."""
    return _CURRENT.get()


@contextmanager
def own_token() -> Iterator[Cancel]:
    """A token for a part of the current solve that may have to stop on its own (a thread the
    solve no longer waits for) as well as with the solve: tripped by itself, or when the current
    token trips, for as long as the block runs. Run the part under :func:`cancelling` it."""
    token = Cancel()
    outer = _CURRENT.get()
    if outer is None:
        yield token
        return
    with outer.stop_with(lambda: token.trip(outer.reason or "cancelled")):
        yield token


def check() -> None:
    """Raise :class:`Cancelled` if the current solve's caller has gone; a no-op outside a service."""
    cancel = _CURRENT.get()
    if cancel is not None:
        cancel.check()


def checked(items: Iterable[T]) -> Iterator[T]:
    """``items`` one by one, raising :class:`Cancelled` before the next item once the current solve's
    caller has gone; plain iteration outside a service. For a stage's long loops: the token is read
    once, then only its ``reason`` per item."""
    cancel = _CURRENT.get()
    if cancel is None:
        yield from items
        return
    for item in items:
        if cancel.reason is not None:
            raise Cancelled(cancel.reason)
        yield item


@contextmanager
def stopping(stop: Callable[[], None]) -> Iterator[None]:
    """Within the block, a trip of the current token calls ``stop`` (e.g. a CpSolver's
    ``stop_search``); afterwards, raise :class:`Cancelled` if it was tripped."""
    cancel = _CURRENT.get()
    if cancel is None:
        yield
        return
    with cancel.stop_with(stop):
        yield
    cancel.check()


# --------------------------------------------------------------------------- budgets


class OutOfBudget(Exception):
    """A stage run :func:`bounded` did not end before its time; ``why`` says so, for the answer."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


class Budget(Cancel):
    """The caller's token and a clock in one: reads as tripped when the caller's token is, or once
    ``time.perf_counter()`` passes ``until``. Every stage loop already asks its token per item
    (:func:`checked`), so a stage run under a budget stops within one item of its
    time without a timer thread. Only :attr:`reason` is read through: a search's stop registered on
    this token (``stopping``) is not called at ``until``, so a budget is for stages before the search."""

    def __init__(self, caller: Cancel | None, until: float, why: str) -> None:
        super().__init__()
        self._caller, self._until, self._why = caller, until, why

    @property  # type: ignore[override]
    def reason(self) -> str | None:
        if self._own is not None:
            return self._own
        if self._caller is not None and self._caller.reason is not None:
            return self._caller.reason
        return self._why if time.perf_counter() >= self._until else None

    @reason.setter
    def reason(self, value: str | None) -> None:
        self._own = value

    @property
    def expired(self) -> bool:
        """The budget's own time passed (not the caller's cancel)."""
        caller_gone = self._caller is not None and self._caller.reason is not None
        return not caller_gone and self._own is None and time.perf_counter() >= self._until


@contextmanager
def bounded(until: float, why: str) -> Iterator[None]:
    """Run the block under a :class:`Budget` ending at ``until``: :class:`OutOfBudget` when it is the
    budget that stopped it, :class:`Cancelled` as ever when the caller went away."""
    budget = Budget(current(), until, why)
    try:
        with cancelling(budget):
            yield
    except Cancelled:
        if budget.expired:
            raise OutOfBudget(why) from None
        raise
