"""`sse_floor`: the server CPU one SSE write costs, in uvicorn alone and in runstream.

Issue 12 asks for at most 6 µs of server CPU per delivered event. Where a run's viewers get one
event per write (a run with fewer than 100 viewers in the process: no coalescing window), that
figure is bounded below by what one write costs the server at all. This scenario measures it:

- **bare**: `bench/bare_sse.py`, a plain ASGI app under uvicorn with its defaults (httptools
  and uvloop, as `runstream serve` runs it), `VIEWERS` streams, `EVENTS` events broadcast
  10 ms apart; each viewer's task is woken per event (`task`, runstream's design) or every
  viewer is written to directly by the broadcasting task (`direct`, no wake-up at all);
- **runstream**: one run of `EVENTS` tokens with `VIEWERS` viewers, fake model delay 5 ms.

Each figure is the server process's CPU time over the stream (from /proc) divided by the
events delivered over all viewers. The viewers are raw sockets in this process that count
events. The bare figures are a floor for a Python ASGI server, not a target: what is left
above them is the framework's and runstream's own work per write.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time

import httpx

from bench.api import Api, words
from bench.context import BenchContext
from bench.launcher import Process, cpu_seconds, free_port

NAME = "sse_floor"
NEEDS: tuple[str, ...] = ()
VIEWERS = 99  # below the coalescing threshold (100 viewers of a run in a process)
DELAY_MS = 5


_MARK = b"event: token"


class _Viewer(asyncio.Protocol):
    """Sends its request (`Connection: close`) and counts `token` events until the server
    closes the connection after the response."""

    def __init__(self, request: bytes, done: asyncio.Future[int]) -> None:
        self.request = request
        self.done = done
        self.events = 0
        self.tail = b""  # shorter than a marker: one split between two reads counts once

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        seen = self.tail + data
        self.events += seen.count(_MARK)
        self.tail = seen[-(len(_MARK) - 1) :]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.events)


async def _viewers(port: int, path: str, count: int) -> list[asyncio.Future[int]]:
    loop = asyncio.get_running_loop()
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
    done = []
    for _ in range(count):
        future: asyncio.Future[int] = loop.create_future()
        await loop.create_connection(functools.partial(_Viewer, request, future), "127.0.0.1", port)
        done.append(future)
    return done


async def _bare(mode: str, events: int) -> tuple[float, int]:
    """(server CPU µs per write, events delivered) of the bare server in `mode`."""
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "bench.bare_sse:app", "--port", str(port)]
    argv += ["--no-access-log", "--log-level", "warning"]  # uvicorn's defaults, as serve's
    process = Process(f"bare-{mode}", argv, {"BARE_SSE_MODE": mode, "PATH": ""})
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for _ in range(200):
                try:
                    await http.get("/cpu")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            done = await _viewers(port, "/sse", VIEWERS)
            await asyncio.sleep(0.5)
            cpu_before = cpu_seconds(process.pid)
            await http.post(f"/tick/{events}")
            delivered = sum(await asyncio.gather(*done))
            cpu = cpu_seconds(process.pid) - cpu_before
    finally:
        process.stop()
    return cpu * 1e6 / max(delivered, 1), delivered


async def _runstream(ctx: BenchContext, events: int) -> tuple[float, int]:
    async with ctx.cluster(NAME) as (_, cluster):
        server = await cluster.server()
        await cluster.ready_worker()
        port = int(server.url.rsplit(":", 1)[1])
        async with Api(server.url) as api:
            run = await api.submit(words(events), delay_ms=DELAY_MS)
            done = await _viewers(port, run["stream_url"], VIEWERS)
            cpu_before = cpu_seconds(server.process.pid)
            delivered = sum(await asyncio.gather(*done))
            cpu = cpu_seconds(server.process.pid) - cpu_before
    return cpu * 1e6 / max(delivered, 1), delivered


async def run(ctx: BenchContext) -> None:
    events = ctx.size(1000, 300)
    started = time.perf_counter()
    task_us, task_n = await _bare("task", events)
    direct_us, direct_n = await _bare("direct", events)
    served_us, served_n = await _runstream(ctx, events)
    ctx.figure(NAME, "bare uvicorn: CPU per write, viewer task woken", task_us, "µs")
    ctx.figure(NAME, "bare uvicorn: CPU per write, written directly", direct_us, "µs")
    ctx.figure(
        NAME,
        "runstream: CPU per delivered event, one per write",
        served_us,
        "µs",
        baseline=task_us,
        baseline_label="bare",
    )
    ctx.note(
        NAME,
        viewers=VIEWERS,
        events=events,
        delivered={"task": task_n, "direct": direct_n, "runstream": served_n},
        seconds=time.perf_counter() - started,
    )
