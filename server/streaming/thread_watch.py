"""One watcher per server process for the thread streams waiting for their thread's next run
(`server/langgraph/thread_stream.py`).

A waiting thread stream registers its thread and the newest `created_at` among the runs it has
read. Every `POLL_S` one task asks Postgres, in one statement for every thread watched in the
process, which of them have a run created after what their viewers have read, or are gone, and
wakes only those threads' viewers, which then read their thread again. Ten thousand idle
viewers cost two statements a second, not a read of the runs and of the thread each per poll.

Comparing `created_at` misses no run: the submit locks the thread's row before it inserts the
run, stamped with `clock_timestamp()` (`stream_store/run_submit.py`), so a thread's runs are
stamped in the order they commit, and a run a viewer has not read is newer than every run it
has read. (A wall clock stepped back between two submits on one thread would break that order.)
The run is then read from its start, so the interval only delays it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime

import structlog

from stream_store.thread_records import ThreadRecords

__all__ = ["POLL_S", "ThreadWatch"]

logger = structlog.get_logger()

POLL_S = 0.5  # how often the process looks for new runs of the threads its viewers wait on


class _Waiter:
    """One viewer waiting on its thread: the newest run it has read, and its wake-up."""

    __slots__ = ("seen", "woken")

    def __init__(self, seen: datetime | None) -> None:
        self.seen = seen
        self.woken = asyncio.Event()

    def behind(self, newest: datetime | None) -> bool:
        return newest is not None and (self.seen is None or newest > self.seen)


class ThreadWatch:
    """The process's watcher (see the module); start it in the app's lifespan, stop it on
    shutdown. `closing` tells when the server is stopping: every waiting viewer is woken then,
    to end its response."""

    def __init__(
        self, threads: ThreadRecords, *, closing: Callable[[], bool], poll_s: float = POLL_S
    ) -> None:
        self._threads = threads
        self._closing = closing
        self._poll_s = poll_s
        self._waiters: dict[str, set[_Waiter]] = {}
        self._watching = asyncio.Event()  # set while a viewer waits
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    @property
    def stopped(self) -> bool:
        """The watcher was stopped: nothing will wake a viewer any more."""
        return self._stopped

    @property
    def waiting(self) -> int:
        """How many viewers wait now."""
        return sum(map(len, self._waiters.values()))

    async def start(self) -> None:
        self._stopped = False
        self._task = asyncio.create_task(self._watch(), name="runstream-thread-watch")

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._wake_all()

    async def wait(self, thread_id: str, seen: datetime | None, timeout_s: float) -> bool:
        """Until the thread has a run created after `seen` (None: any run), or is gone, or the
        watcher stops or the server is stopping: True (the caller reads the thread again and
        looks which); False after `timeout_s` without."""
        if self._stopped or self._closing():
            return True
        waiter = _Waiter(seen)
        waiters = self._waiters.setdefault(thread_id, set())
        waiters.add(waiter)
        self._watching.set()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(timeout_s, 0.0)):
                    await waiter.woken.wait()
            return waiter.woken.is_set()
        finally:
            waiters.discard(waiter)
            if not waiters and self._waiters.get(thread_id) is waiters:
                del self._waiters[thread_id]

    async def _watch(self) -> None:
        while True:
            if not self._waiters:
                self._watching.clear()
                await self._watching.wait()
            await asyncio.sleep(self._poll_s)
            if self._closing():
                self._wake_all()
                continue
            try:
                await self._look()
            except Exception as exc:  # Postgres away: the viewers wait for the next look
                logger.warning("looking for the threads' new runs failed", error=str(exc))

    async def _look(self) -> None:
        """One statement for every watched thread; wake the viewers behind their thread."""
        threads = list(self._waiters)
        if not threads:
            return
        marks = [_oldest(self._waiters[thread_id]) for thread_id in threads]
        for thread_id, gone, newest in await self._threads.threads_with_new_runs(threads, marks):
            for waiter in self._waiters.get(thread_id, ()):
                if gone or waiter.behind(newest):
                    waiter.woken.set()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.woken.set()


def _oldest(waiters: set[_Waiter]) -> datetime | None:
    """The oldest mark among a thread's viewers (None when one of them has read no run)."""
    marks = [waiter.seen for waiter in waiters]
    if any(mark is None for mark in marks):
        return None
    return min(mark for mark in marks if mark is not None)
