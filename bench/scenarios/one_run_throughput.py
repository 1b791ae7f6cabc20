"""`one_run_throughput`: one run of a 20,000-word message, model delay 0, one SSE viewer.

The viewer attaches right after the 202 and counts `token` events; the rate is tokens over
the time from the first token to `done` at the viewer. A viewer cut off for falling behind
reconnects with Last-Event-ID (counted). Compared with the in-process floor's rate, which is
taken over the whole stream (with no delay the model produces every token before the first is
consumed), so the rate over the whole run (submit to `done`) is reported next to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.api import Api, words
from bench.context import BenchContext
from bench.processes import Namespace
from bench.report import Target, summary
from bench.sse import TERMINAL, SseStream, event_position

from .sizes import THROUGHPUT_WORDS

NAME = "one_run_throughput"
NEEDS = ("floor", "redis")


@dataclass
class Viewed:
    run_id: str
    tokens: int
    seconds: float  # from the first token to done
    whole_s: float  # from before the POST to done
    first_token_s: float  # from before the POST to the first token
    reconnects: int
    ids: list[bytes]


async def _one(api: Api, base_url: str, text: str) -> Viewed:
    start = time.perf_counter()
    run = await api.submit(text, delay_ms=0)
    tokens, first, done, reconnects = 0, 0.0, 0.0, 0
    ids: list[bytes] = []
    last_id: bytes | None = None
    last = (0, 0)
    while not done:
        async with await SseStream.open(base_url, run["stream_url"], last_event_id=last_id) as sse:
            async for batch in sse.batches():
                now = time.perf_counter()
                for event in batch:
                    position = event_position(event.id)
                    if position <= last:
                        raise AssertionError(f"duplicate or reordered event {event.id!r}")
                    last = position
                    ids.append(event.id)
                    if event.event == b"token":
                        tokens += 1
                        first = first or now
                    elif event.event in TERMINAL:
                        done = now
                last_id = batch[-1].id
        if not done:
            reconnects += 1
            if reconnects > 50:
                raise AssertionError("the viewer kept being cut off")
    return Viewed(run["run_id"], tokens, done - first, done - start, first - start, reconnects, ids)


async def _explain_shortfall(namespace: Namespace, viewed: Viewed) -> str:
    """Compare what the viewer got with the run's stream in Redis."""
    from stream_store.keys import KeySpace

    redis = namespace.redis()
    try:
        entries = await redis.xrange(KeySpace(namespace.prefix).run_events(viewed.run_id))
    finally:
        await redis.aclose()
    stored = [entry_id for entry_id, _ in entries]
    names = {entry_id: fields[b"e"].decode() for entry_id, fields in entries}
    stored_tokens = sum(1 for name in names.values() if name == "token")
    missing = sorted(set(stored) - set(viewed.ids), key=event_position)
    where = [f"{m.decode()} ({names[m]}, #{stored.index(m)} of {len(stored)})" for m in missing[:5]]
    return (
        f"the viewer got {viewed.tokens} tokens ({len(viewed.ids)} events, "
        f"{viewed.reconnects} reconnects); the stream holds {stored_tokens} tokens "
        f"({len(stored)} events); missing at the viewer: {', '.join(where) or 'none'}"
    )


async def run(ctx: BenchContext) -> None:
    text = words(THROUGHPUT_WORDS)
    rates, whole_rates, firsts, reconnects = [], [], [], 0
    async with ctx.cluster(NAME) as (namespace, cluster):
        server = await cluster.server()
        await cluster.ready_worker()
        async with Api(server.url) as api:
            await _one(api, server.url, words(100))  # warm-up
            for _ in range(ctx.size(3, 1)):
                viewed = await _one(api, server.url, text)
                if viewed.tokens != THROUGHPUT_WORDS:
                    raise AssertionError(await _explain_shortfall(namespace, viewed))
                rates.append(viewed.tokens / viewed.seconds)
                whole_rates.append(viewed.tokens / viewed.whole_s)
                firsts.append(viewed.first_token_s * 1000)
                reconnects += viewed.reconnects
    stats = summary(rates)
    ctx.figure(
        NAME,
        "token events/s to one viewer",
        stats["median"],
        "/s",
        baseline=ctx.baseline("floor", "tokens_per_s"),
        baseline_label="floor",
        targets=[Target(">=", 20_000), Target(">=", 0.5, on="ratio")],
        stats=stats,
    )
    whole = summary(whole_rates)
    ctx.figure(
        NAME,
        "token events/s, submit → done",
        whole["median"],
        "/s",
        baseline=ctx.baseline("floor", "tokens_per_s"),
        baseline_label="floor",
        targets=[Target(">=", 0.85, on="ratio")],  # issue 12
        stats=whole,
        notes="the whole run, as the floor is measured (its tokens over start to end)",
    )
    script = ctx.baseline("redis", "append_script_per_s")
    ctx.note(
        NAME,
        words=THROUGHPUT_WORDS,
        reconnects=reconnects,
        rates=rates,
        first_token_ms=summary(firsts),
        ratio_to_append_script=stats["median"] / script if script else None,
        note="the message is 20,000 words, well under RUNSTREAM_MAX_BODY_BYTES (1 MiB)",
    )
