"""SSE viewers in client processes, so that the load generator is not what a figure measures.

`ViewerLoad` spreads viewer targets (server URL, stream path) over a few spawned processes
(`/v1` streams by default; LangGraph join streams with `last_event_id=b"-1"` and
`terminal=LANGGRAPH_TERMINAL`).
Each runs many `bench.sse.follow` readers on one event loop (uvloop when installed) and opens
at most `connect_concurrency` connections at a time. The parent learns when every viewer has
received its first event (`attached()`), may then let the run go, and collects per-viewer
results, a merged latency histogram and the processes' own CPU time (`results()`). In `hold`
mode the viewers keep their connections open until `release()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import queue
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .sse import TERMINAL, ViewerResult, follow

__all__ = ["LoadResult", "ViewerLoad"]

Target = tuple[str, str]  # (server base URL, stream path with token)


def _cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _child_main(
    index: int,
    targets: list[Target],
    mode: str,
    connect_concurrency: int,
    timeout_s: float,
    to_parent: Any,
    release: Any,
    last_event_id: bytes | None,
    terminal: tuple[bytes, ...],
) -> None:
    gate = asyncio.Semaphore(connect_concurrency)
    firsts = [asyncio.Event() for _ in targets]

    async def viewer(i: int) -> ViewerResult:
        base_url, path = targets[i]
        async with gate:  # held until the viewer has its first event (or gave up)
            task = asyncio.create_task(
                follow(
                    base_url,
                    path,
                    on_first=firsts[i],
                    last_event_id=last_event_id,
                    terminal=terminal,
                )
            )
            waiter = asyncio.create_task(firsts[i].wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        return await task

    tasks = [asyncio.create_task(viewer(i)) for i in range(len(targets))]
    started = time.monotonic()
    while True:  # attached: every viewer has its first event or has ended
        attached = sum(1 for e in firsts if e.is_set())
        ended = sum(1 for t, e in zip(tasks, firsts, strict=True) if t.done() and not e.is_set())
        if attached + ended >= len(targets) or time.monotonic() - started > timeout_s:
            break
        await asyncio.sleep(0.02)
    to_parent.put(("attached", index, attached, len(targets) - attached, _cpu_now()))
    cpu_at_attach = _cpu_now()
    if mode == "hold":
        await asyncio.to_thread(release.wait)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        to_parent.put(("result", index, [], {}, 0.0, 0.0, _cpu_now() - cpu_at_attach))
        return
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    latency: Counter[int] = Counter()
    viewers = []
    first_live, last_at = 0.0, 0.0
    for task, (_, path) in zip(tasks, targets, strict=True):
        if task in done and task.exception() is None:
            result = task.result()
        else:
            result = ViewerResult(path, error="timed out" if task in pending else "crashed")
        latency.update(result.latency_ms)
        if result.first_live_at:
            first_live = min(first_live or result.first_live_at, result.first_live_at)
        last_at = max(last_at, result.last_at)
        viewers.append(
            (
                result.path,
                result.events,
                result.out_of_order,
                result.terminal,
                result.reconnects,
                result.error,
                result.last_id,
            )
        )
    cpu = _cpu_now() - cpu_at_attach
    to_parent.put(("result", index, viewers, dict(latency), first_live, last_at, cpu))


def _child(
    index: int,
    targets: list[Target],
    mode: str,
    connect_concurrency: int,
    timeout_s: float,
    to_parent: Any,
    release: Any,
    last_event_id: bytes | None = None,
    terminal: tuple[bytes, ...] = TERMINAL,
) -> None:
    _raise_nofile()
    run = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        run = uvloop.run
    run(
        _child_main(
            index,
            targets,
            mode,
            connect_concurrency,
            timeout_s,
            to_parent,
            release,
            last_event_id,
            terminal,
        )
    )


@dataclass
class ViewerOutcome:
    path: str
    events: int
    out_of_order: int
    terminal: bool
    reconnects: int
    error: str | None
    last_id: bytes


@dataclass
class LoadResult:
    viewers: list[ViewerOutcome]
    latency_ms: Counter[int]
    first_live_at: float  # time.time() of the first live event any viewer received
    last_at: float  # time.time() of the last event any viewer received
    cpu_s: float  # the client processes' CPU time from attached to done
    attach_s: float  # from start to every viewer attached
    attached: int
    failed: int
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def events(self) -> int:
        return sum(v.events for v in self.viewers)

    @property
    def window_s(self) -> float:
        return max(1e-9, self.last_at - self.first_live_at)


class ViewerLoad:
    """`targets` spread round-robin over `procs` client processes."""

    def __init__(
        self,
        targets: list[Target],
        *,
        procs: int,
        mode: str = "follow",
        connect_concurrency: int = 100,
        timeout_s: float = 300,
        last_event_id: bytes | None = None,
        terminal: tuple[bytes, ...] = TERMINAL,
    ) -> None:
        self.targets = targets
        self.last_event_id = last_event_id  # sent with each viewer's first request
        self.terminal = terminal  # the events that end a viewer's stream
        self.procs = max(1, min(procs, len(targets)))
        self.mode = mode
        self.timeout_s = timeout_s
        self._mp = multiprocessing.get_context("spawn")
        self._queue: Any = self._mp.Queue()
        self._release: Any = self._mp.Event()
        self._children: list[Any] = []
        self._connect_concurrency = connect_concurrency
        self._started = 0.0
        self._attach_s = 0.0
        self._attached = 0
        self._failed = 0
        self._early: list[tuple[Any, ...]] = []

    def start(self) -> None:
        self._started = time.monotonic()
        for index in range(self.procs):
            part = self.targets[index :: self.procs]
            child = self._mp.Process(
                target=_child,
                args=(
                    index,
                    part,
                    self.mode,
                    self._connect_concurrency,
                    self.timeout_s,
                    self._queue,
                    self._release,
                    self.last_event_id,
                    self.terminal,
                ),
                daemon=True,
            )
            child.start()
            self._children.append(child)

    async def _get(self, deadline: float) -> tuple[Any, ...]:
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError("client processes did not answer in time")
            try:
                return await asyncio.to_thread(self._queue.get, True, 0.5)
            except queue.Empty:
                if not any(child.is_alive() for child in self._children):
                    raise RuntimeError("every client process exited") from None

    async def attached(self) -> tuple[int, int]:
        """Wait until every viewer has its first event (or failed): (attached, failed)."""
        deadline = time.monotonic() + self.timeout_s + 60
        seen = 0
        while seen < self.procs:
            message = await self._get(deadline)
            if message[0] != "attached":
                self._early.append(message)
                continue
            seen += 1
            self._attached += message[2]
            self._failed += message[3]
        self._attach_s = time.monotonic() - self._started
        return self._attached, self._failed

    def release(self) -> None:
        self._release.set()

    async def results(self) -> LoadResult:
        deadline = time.monotonic() + self.timeout_s + 60
        messages = list(self._early)
        while len(messages) < self.procs:
            messages.append(await self._get(deadline))
        latency: Counter[int] = Counter()
        viewers: list[ViewerOutcome] = []
        first_live, last_at, cpu = 0.0, 0.0, 0.0
        for _, _, part, hist, part_first, part_last, part_cpu in messages:
            viewers += [ViewerOutcome(*v) for v in part]
            latency.update(hist)
            if part_first:
                first_live = min(first_live or part_first, part_first)
            last_at = max(last_at, part_last)
            cpu += part_cpu
        errors = Counter(v.error.split(":")[0] for v in viewers if v.error)
        return LoadResult(
            viewers,
            latency,
            first_live,
            last_at,
            cpu,
            self._attach_s,
            self._attached,
            self._failed,
            errors,
        )

    def stop(self) -> None:
        self._release.set()
        for child in self._children:
            child.join(10)
            if child.is_alive():
                child.kill()
                child.join(5)
        self._children.clear()
