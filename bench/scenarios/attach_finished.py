"""`attach_finished`: attach from scratch to a finished 10,000-event run, time to `done`.

The run is a 9,994-word message with fake model delay 0: `run`/`queued`, the input `message`,
`run`/`running`, 9,994 tokens, the reply `message`, `run`/`succeeded` and `done` make 10,000
events (checked with XLEN). Each attach opens a new connection, and the time runs from
before the connect to the `done` event. Compared with reading as many entries with XRANGE
straight from Redis.
"""

from __future__ import annotations

import time

from bench.api import TERMINAL_STATUSES, Api, words
from bench.context import BenchContext
from bench.report import Target, summary
from bench.sse import TERMINAL, SseStream

from .sizes import ATTACH_EVENTS

NAME = "attach_finished"
NEEDS = ("redis",)
OTHER_EVENTS = 6  # queued, input message, running, reply message, succeeded, done


async def _attach(base_url: str, path: str) -> tuple[float, int]:
    start = time.perf_counter()
    events = 0
    async with await SseStream.open(base_url, path) as sse:
        async for batch in sse.batches():
            events += len(batch)
            if batch[-1].event in TERMINAL:
                return (time.perf_counter() - start) * 1000, events
    raise AssertionError(f"the stream ended after {events} events without a terminal event")


async def run(ctx: BenchContext) -> None:
    from stream_store.keys import KeySpace

    async with ctx.cluster(NAME) as (namespace, cluster):
        server = await cluster.server()
        await cluster.ready_worker()
        async with Api(server.url) as api:
            submitted = await api.submit(words(ATTACH_EVENTS - OTHER_EVENTS), delay_ms=0)
            run = await api.wait_status(submitted["run_id"], TERMINAL_STATUSES, timeout_s=300)
        redis = namespace.redis()
        try:
            length = await redis.xlen(KeySpace(namespace.prefix).run_events(run["run_id"]))
        finally:
            await redis.aclose()
        await _attach(server.url, run["stream_url"])  # warm-up
        times = []
        for _ in range(ctx.size(5, 3)):
            elapsed, events = await _attach(server.url, run["stream_url"])
            if events != length:
                raise AssertionError(f"attach received {events} events of {length}")
            times.append(elapsed)
    stats = summary(times)
    ctx.figure(
        NAME,
        f"attach → done, {length:,} events, median",
        stats["median"],
        "ms",
        baseline=ctx.baseline("redis", "xrange_10k_ms"),
        baseline_label="XRANGE",
        targets=[Target("<=", 150)],
        stats=stats,
    )
    ctx.note(NAME, events=length, status=run["status"], times_ms=times)
