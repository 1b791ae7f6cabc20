"""`redis`: what one Python process gets from Redis directly (redis.asyncio with hiredis).

XADD in a tight loop, unpipelined and pipelined in batches of 100; XREAD of the stream back in
COUNT 1000 batches; XRANGE of a 10,000-entry stream (what attaching to a finished run reads);
and runstream's own append script (one EVALSHA per event, what the worker pays per token).
"""

from __future__ import annotations

import time
import uuid

from redis import utils as redis_utils

from bench.context import BenchContext
from bench.report import summary

from .sizes import ATTACH_EVENTS

NAME = "redis"
NEEDS: tuple[str, ...] = ()

BATCH = 100
READ_COUNT = 1000


def _fields(i: int) -> dict[str, str]:
    return {"e": "token", "d": f'{{"message_id":"{uuid.UUID(int=i)}","text":" w{i}"}}', "a": "1"}


async def run(ctx: BenchContext) -> None:
    from stream_store.log import EventLog

    async with ctx.cluster(NAME) as (namespace, _):
        redis = namespace.redis()
        keys = EventLogKeys(namespace.prefix)
        try:
            single_n = ctx.size(20_000, 5_000)
            key = keys.stream()
            start = time.perf_counter()
            for i in range(single_n):
                await redis.xadd(key, _fields(i))  # type: ignore[arg-type]
            single = single_n / (time.perf_counter() - start)

            piped_n = ctx.size(200_000, 50_000)
            key = keys.stream()
            start = time.perf_counter()
            for base in range(0, piped_n, BATCH):
                async with redis.pipeline(transaction=False) as pipe:
                    for i in range(base, base + BATCH):
                        pipe.xadd(key, _fields(i))  # type: ignore[arg-type]
                    await pipe.execute()
            piped = piped_n / (time.perf_counter() - start)

            start = time.perf_counter()
            cursor, read = "0-0", 0
            while True:
                response = await redis.xread({key: cursor}, count=READ_COUNT)
                if not response:
                    break
                entries = response[0][1]
                read += len(entries)
                cursor = entries[-1][0]
            xread_rate = read / (time.perf_counter() - start)
            if read != piped_n:
                raise AssertionError(f"XREAD read {read} of {piped_n} entries")

            key = keys.stream()
            for base in range(0, ATTACH_EVENTS, BATCH):
                async with redis.pipeline(transaction=False) as pipe:
                    for i in range(base, min(base + BATCH, ATTACH_EVENTS)):
                        pipe.xadd(key, _fields(i))  # type: ignore[arg-type]
                    await pipe.execute()
            xrange_ms = []
            for _ in range(5):
                start = time.perf_counter()
                cursor, read = "-", 0
                while True:
                    entries = await redis.xrange(key, min=cursor, max="+", count=READ_COUNT)
                    if not entries:
                        break
                    read += len(entries)
                    cursor = "(" + entries[-1][0].decode()
                xrange_ms.append((time.perf_counter() - start) * 1000)
            xrange_stats = summary(xrange_ms)

            from stream_store.keys import KeySpace

            events = EventLog(redis, KeySpace(namespace.prefix), stream_ttl_s=600)
            run_id = str(uuid.uuid4())
            await events.open(
                run_id, owner="bench", thread_id=run_id, attempt=1, event="run", data=b"{}"
            )
            script_n = ctx.size(20_000, 5_000)
            start = time.perf_counter()
            for i in range(script_n):
                await events.append(run_id, 1, "token", _fields(i)["d"].encode())
            script = script_n / (time.perf_counter() - start)
        finally:
            await redis.aclose()

    ctx.baselines[NAME] = {
        "xadd_per_s": single,
        "xadd_pipelined_per_s": piped,
        "xread_per_s": xread_rate,
        "xrange_10k_ms": xrange_stats["median"],
        "append_script_per_s": script,
    }
    ctx.figure(NAME, "XADD/s, unpipelined", single, "/s")
    ctx.figure(NAME, f"XADD/s, pipelined x{BATCH}", piped, "/s")
    ctx.figure(NAME, f"XREAD entries/s (COUNT {READ_COUNT})", xread_rate, "/s")
    ctx.figure(
        NAME,
        f"XRANGE {ATTACH_EVENTS:,} entries, median",
        xrange_stats["median"],
        "ms",
        stats=xrange_stats,
    )
    ctx.figure(NAME, "append script (EVALSHA)/s, unpipelined", script, "/s")
    ctx.note(NAME, hiredis=redis_utils.HIREDIS_AVAILABLE, unpipelined_n=single_n, piped_n=piped_n)


class EventLogKeys:
    """Fresh stream keys under the namespace's prefix, spelled by `stream_store.keys`."""

    def __init__(self, prefix: str) -> None:
        from stream_store.keys import KeySpace

        self._keys = KeySpace(prefix)

    def stream(self) -> str:
        return self._keys.run_events(f"bench-{uuid.uuid4()}")
