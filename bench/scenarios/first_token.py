"""`first_token`: submit → first `token` event at an SSE client attached right after the 202.

One server, one worker, product defaults. Sequential runs of a two-word message with fake
model delay 0, each on a new thread; the client attaches to `stream_url` as soon as the 202
arrives and reads to `done`. The first few runs warm the processes up and are not counted.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from bench.api import Api
from bench.context import BenchContext
from bench.report import Target, summary
from bench.sse import TERMINAL, SseStream

from .sizes import TTFT_TEXT

NAME = "first_token"
NEEDS = ("floor",)
WARMUP = 3


class AttachedRun(NamedTuple):
    """One run as a client attached right after its 202 saw it."""

    run_id: str
    submitted: float  # Unix seconds, before the POST: comparable with what the product records
    accepted_ms: float  # POST → 202 (a monotonic clock, as the next)
    first_token_ms: float  # POST → the first `token` event


async def attached_run(api: Api, server_url: str, text: str) -> AttachedRun:
    """Submit a run of `text`, attach to its stream right after the 202 and read it to its end.

    Raises:
        AssertionError: the stream had no token or no terminal event.
    """
    submitted, start = time.time(), time.perf_counter()
    run = await api.submit(text, delay_ms=0)
    accepted = time.perf_counter()
    first = 0.0
    terminal = False
    async with await SseStream.open(server_url, run["stream_url"]) as sse:
        async for batch in sse.batches():
            now = time.perf_counter()
            for event in batch:
                if event.event == b"token" and not first:
                    first = now
                terminal = terminal or event.event in TERMINAL
    if not (first and terminal):
        raise AssertionError(f"run {run['run_id']}: no token or no terminal event")
    return AttachedRun(run["run_id"], submitted, (accepted - start) * 1000, (first - start) * 1000)


async def one_first_token(api: Api, server_url: str, text: str) -> tuple[float, float]:
    """(submit → first token, POST → 202) in ms of one run of `text` (`attached_run`)."""
    run = await attached_run(api, server_url, text)
    return run.first_token_ms, run.accepted_ms


async def first_token_times(server_url: str, n: int) -> tuple[list[float], list[float]]:
    """(submit → first token, POST → 202) in ms of `n` sequential runs, after `WARMUP` more."""
    totals, posts = [], []
    async with Api(server_url) as api:
        for i in range(WARMUP + n):
            total, post = await one_first_token(api, server_url, TTFT_TEXT)
            if i >= WARMUP:
                totals.append(total)
                posts.append(post)
    return totals, posts


async def run(ctx: BenchContext) -> None:
    n = ctx.size(50, 15)
    async with ctx.cluster(NAME) as (_, cluster):
        server = await cluster.server()
        await cluster.ready_worker()
        totals, posts = await first_token_times(server.url, n)
    stats, post_stats = summary(totals), summary(posts)
    floor = ctx.baseline("floor", "ttft_ms")
    # issue 5's times, and issue 12's ratios to the in-process floor
    for stat, target_ms, target_ratio in (("median", 15, 5), ("p99", 50, 8)):
        ctx.figure(
            NAME,
            f"submit → first token, {stat}",
            stats[stat],
            "ms",
            baseline=floor,
            baseline_label="floor",
            targets=[Target("<=", target_ms), Target("<=", target_ratio, on="ratio")],
            stats=stats,
        )
    ctx.figure(NAME, "POST /v1/runs → 202, median", post_stats["median"], "ms", stats=post_stats)
    ctx.note(NAME, runs=n, warmup_runs=WARMUP, totals_ms=totals, post_ms=posts)
