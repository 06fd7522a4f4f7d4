"""One call run in a forked child process, its result read back by a deadline.

A solve's stages are Python, and Python threads share one interpreter lock: a placer drawn on a
thread beside the model's build (also Python) only takes turns with it, and on two cores half of
the machine waits. A child forked from the solving process has the request in its memory already
(nothing is sent, nothing is copied until written) and an interpreter of its own, so it works on the
spare core while the parent builds the model. It answers through a pipe, pickled, once, when its call
returns.

The parent never waits past the deadline it gives :meth:`Forked.result` (but to read to its end an
answer that has begun to come), nor past its caller's cancel, and :meth:`Forked.stop`
kills and reaps the child wherever the solve ends (answered, cancelled, failed): a child that hangs
or dies costs its own answer, never the parent's. The child must not touch what other threads of
the parent may hold at the fork (a lock, a gRPC channel, a log handler): only the parent's threads
hold those, and the child has none of them. It leaves by ``os._exit``, so nothing of the parent's
(atexit hooks, buffered output, gRPC's shutdown) runs twice. Fork handlers registered by libraries
still run in it: gRPC core's, on by default, killed such children of a gRPC server, and the service
turns them off before gRPC starts (``solver/service/__init__.py``).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Generic, TypeVar

from solver.domain import cancel as cancellation

T = TypeVar("T")

# How much of the child's answer is read at a time.
_CHUNK = 1 << 20
# How long an answer that has begun to come is waited for past the caller's deadline, between two
# reads: the child is writing it then, milliseconds for a plan.
READ_ON_S = 0.1
# How often a wait for the child looks at the caller's cancel token.
CHECK_EVERY_S = 0.05


class Forked(Generic[T]):
    """``work()`` running in a forked child; see the module docstring."""

    def __init__(self, pid: int, fd: int) -> None:
        self._pid: int | None = pid  # None once waited for, or handed to the reaper (_reap)
        self._fd: int | None = fd  # the pipe's read end; None once closed
        self._data = bytearray()
        self._last_read = 0.0  # when the last part of the answer came
        self._value: T | None = None
        self.error: str | None = None  # why the child ended without an answer, when it did

    @classmethod
    def start(cls, work: Callable[[], T]) -> Forked[T] | None:
        """``work()`` in a child forked now; None where processes cannot be forked."""
        if not hasattr(os, "fork"):
            return None
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: answer, and leave without running anything of the parent's
            code = 1
            try:
                os.close(read)
                signal.signal(signal.SIGINT, signal.SIG_DFL)  # a terminal's ^C ends it at once
                try:
                    answer: tuple[bool, object] = (True, work())
                except Exception as exc:  # said to the parent, which carries on without it
                    answer = (False, f"{type(exc).__name__}: {exc}")
                data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
                view = memoryview(data)
                while view:
                    view = view[os.write(write, view) :]
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        return cls(pid, read)

    def result(self, until: float) -> T | None:
        """The child's answer, waiting for it up to ``until`` (``time.perf_counter()``); None when it
        has not answered by then or ended without an answer (an error, a kill). Raises
        ``Cancelled`` when the caller's cancel token trips while it waits."""
        limit = until
        while self._fd is not None:  # closed once the answer is read whole, or the child stopped
            # Looked at once even when ``until`` has passed: an answer (or an end) already there is
            # taken. Once it has begun to come, it is read to its end past ``until``, each read
            # waited for :data:`READ_ON_S` at most: a pipe holds 64 KiB, a 500-job plan is 130-180
            # KiB, and the child writes the rest only as this side reads (a 1 s call at 4,096 nodes
            # lost its child's plan, the better one, to a look that found its first 64 KiB).
            if self._data:
                limit = max(limit, self._last_read + READ_ON_S)
            left = max(0.0, limit - time.perf_counter())
            # In slices, the caller's cancel token looked at between them: a caller gone stops the
            # wait at once (solver.domain.cancel), not when the child's time is over.
            ready, _, _ = select.select([self._fd], [], [], min(left, CHECK_EVERY_S))
            if not ready:
                cancellation.check()
                if time.perf_counter() >= limit:
                    return None
                continue
            chunk = os.read(self._fd, _CHUNK)
            if chunk:
                self._data += chunk
                self._last_read = time.perf_counter()
                continue
            self._finish()  # the child closed its end: answered whole, or died
        return self._value

    def running(self) -> bool:
        """Whether the child has not answered yet, nor died, nor been stopped."""
        return self._fd is not None

    def stop(self) -> None:
        """Kill the child if it still runs, and have it reaped; its answer, if read whole, stays.
        Reaped on a thread of its own (:func:`_reap`): the kernel takes down a child's copy of a
        large process before its parent's wait returns, 15-20 ms at 1 GB, and an answer waiting on
        that left a served 5 s call at 16,384 nodes 0.18 s later than without the child."""
        if self._pid is not None:
            with suppress(ProcessLookupError):  # ended already: the kill finds it a zombie
                os.kill(self._pid, signal.SIGKILL)
            _reap(self._pid)
            self._pid = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _finish(self) -> None:
        """The child closed its end: its answer whole (a pickle that reads), or it ended without
        one, and then how (it is waited for here: it has ended)."""
        data, self._data = bytes(self._data), bytearray()
        try:
            ok, value = pickle.loads(data)
        except Exception:  # nothing or a part: it ended before its answer was written whole
            assert self._pid is not None
            _, status = os.waitpid(self._pid, 0)
            self._pid = None
            code = os.waitstatus_to_exitcode(status)
            self.error = f"the child ended with {code} before it answered"
        else:
            if ok:
                self._value = value
            else:
                self.error = value
        self.stop()

    def __del__(self) -> None:  # a handle dropped unstopped still leaves no child behind
        if self._pid is not None or self._fd is not None:
            self.stop()


def _reap(pid: int) -> None:
    """Wait for child ``pid`` on a daemon thread, so that it leaves no zombie and nobody waits."""

    def wait() -> None:
        with suppress(ChildProcessError):
            os.waitpid(pid, 0)

    threading.Thread(target=wait, name=f"reap-{pid}", daemon=True).start()
