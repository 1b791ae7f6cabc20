"""`soak` (only with `--soak MINUTES`): steady small runs for M minutes; memory over time.

One server and one worker with RUNSTREAM_STREAM_TTL=30 s. Every 50 ms a run of 20 tokens at
5 ms/token is submitted (20 runs/s) and read to `done` by one viewer in this process. Server
and worker RSS are sampled every 10 s; growth is measured from the end of the warm-up (the
first minute, or half the soak if it is shorter) to the end. Redis `used_memory` is read at
the start, at its peak and after the streams' TTL has passed (it is the whole Redis's memory:
other users of the same Redis show up in it).

The spec gives this scenario no targets; the ones here are the bench's own: RSS growth after
warm-up at most 5 %, no failed run, and no run stream left after the TTL.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.api import Api, words
from bench.context import BenchContext
from bench.report import Target
from bench.sse import TERMINAL, SseStream

NAME = "soak"
NEEDS: tuple[str, ...] = ()
RATE_PER_S = 20
TTL_S = 30
SAMPLE_S = 10
MB = 1024 * 1024


async def _used_memory(redis: object) -> int:
    info = await redis.info("memory")  # type: ignore[attr-defined]
    return int(info["used_memory"])


async def _runs_left(redis: Any, prefix: str, run_ids: list[str]) -> int:
    """How many of the runs still have their stream or record in Redis."""
    from stream_store.keys import KeySpace

    keys = KeySpace(prefix)
    left = 0
    for start in range(0, len(run_ids), 500):
        async with redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids[start : start + 500]:
                pipe.exists(keys.run_events(run_id), keys.run_record(run_id))
            left += sum(1 for found in await pipe.execute() if found)
    return left


async def run(ctx: BenchContext) -> None:
    minutes = ctx.soak_minutes or 1.0
    duration_s = minutes * 60
    warmup_s = min(60.0, duration_s / 2)
    samples: list[dict[str, float]] = []
    run_ids: list[str] = []
    outcome = {"submitted": 0, "done": 0, "failed": 0}
    async with ctx.cluster(NAME) as (namespace, cluster):
        server = await cluster.server(RUNSTREAM_STREAM_TTL=str(TTL_S))
        worker = await cluster.ready_worker(RUNSTREAM_STREAM_TTL=str(TTL_S))
        redis = namespace.redis()
        try:
            start_memory = await _used_memory(redis)
            started = time.monotonic()

            async def sample() -> None:
                while True:
                    samples.append(
                        {
                            "t": time.monotonic() - started,
                            "server_rss": server.process.rss(),
                            "worker_rss": worker.rss(),
                            "redis_used": await _used_memory(redis),
                        }
                    )
                    await asyncio.sleep(SAMPLE_S)

            sampler = asyncio.create_task(sample())
            in_flight = asyncio.Semaphore(200)
            async with Api(server.url, connections=50) as api:

                async def one() -> None:
                    async with in_flight:
                        try:
                            run = await api.submit(words(20), delay_ms=5)
                            run_ids.append(run["run_id"])
                            async with await SseStream.open(server.url, run["stream_url"]) as sse:
                                async for batch in sse.batches():
                                    if batch[-1].event in TERMINAL:
                                        outcome["done"] += 1
                                        return
                        except Exception:
                            pass
                        outcome["failed"] += 1

                tasks = []
                while (elapsed := time.monotonic() - started) < duration_s:
                    tasks.append(asyncio.create_task(one()))
                    outcome["submitted"] += 1
                    next_at = outcome["submitted"] / RATE_PER_S
                    await asyncio.sleep(max(0.0, next_at - elapsed))
                await asyncio.gather(*tasks)
            load_s = time.monotonic() - started
            await asyncio.sleep(SAMPLE_S)  # one more sample after the load
            sampler.cancel()
            peak_memory = max(s["redis_used"] for s in samples)
            await asyncio.sleep(TTL_S + 5)
            after_memory = await _used_memory(redis)
            left = await _runs_left(redis, namespace.prefix, run_ids)
        finally:
            await redis.aclose()

    warm = [s for s in samples if s["t"] >= warmup_s] or samples[-1:]
    for key, label in (("server_rss", "server"), ("worker_rss", "worker")):
        growth = (samples[-1][key] - warm[0][key]) / warm[0][key] * 100
        ctx.figure(
            NAME,
            f"{label} RSS growth after warm-up",
            growth,
            "%",
            targets=[Target("<=", 5)],
            notes=f"{warm[0][key] / MB:.0f} MB at {warm[0]['t']:.0f} s, "
            f"{samples[-1][key] / MB:.0f} MB at {samples[-1]['t']:.0f} s",
        )
    rate = outcome["done"] / load_s
    ctx.figure(NAME, "runs completed/s", rate, "/s", notes=f"asked {RATE_PER_S}")
    ctx.figure(NAME, "runs failed", outcome["failed"], "", targets=[Target("<=", 0)])
    ctx.figure(NAME, "Redis used_memory at start", start_memory / MB, "MB")
    ctx.figure(NAME, "Redis used_memory peak", peak_memory / MB, "MB")
    ctx.figure(
        NAME,
        "Redis used_memory after TTL",
        after_memory / MB,
        "MB",
        baseline=start_memory / MB,
        baseline_label="MB at start",
    )
    ctx.figure(NAME, "runs still in Redis after TTL", left, "", targets=[Target("<=", 0)])
    ctx.note(NAME, minutes=minutes, ttl_s=TTL_S, outcome=outcome, samples=samples)
