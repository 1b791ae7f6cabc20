"""`worker_kill`: SIGKILL the worker executing a run → first token of the run's next attempt.

One server and two workers, product defaults (lease, reaper interval). Each round submits a
run (300 tokens at 20 ms), waits for its 10th to 60th token (at random: kills fall at any
point of the reapers' 1 s cycle) at an attached SSE client, SIGKILLs the worker whose log says
it started the run, and times the kill until the first `token` after the
stream's `retry` (the new attempt's first token, on the surviving worker). The run is read to
its terminal event, and a new worker replaces the killed one before the next round.
"""

from __future__ import annotations

import asyncio
import random
import time

from bench.api import Api, words
from bench.context import BenchContext
from bench.launcher import Process
from bench.report import Target, summary
from bench.sse import TERMINAL, SseStream

NAME = "worker_kill"
NEEDS: tuple[str, ...] = ()
TOKENS = 300
TOKEN_DELAY_MS = 20
KILL_AFTER_TOKENS = (10, 60)  # at 20 ms a token: a kill anywhere in one reaper interval


async def _holder(workers: list[Process], run_id: str, timeout_s: float = 10) -> Process:
    """The worker whose log says it started `run_id`."""
    deadline = time.monotonic() + timeout_s
    while True:
        for worker in workers:
            if any(
                run_id in line and "run started" in line for line in worker.output().splitlines()
            ):
                return worker
        if time.monotonic() > deadline:
            raise AssertionError(f"no worker logged starting run {run_id}")
        await asyncio.sleep(0.02)


async def _kill_round(
    api: Api, url: str, workers: list[Process], kill_after: int
) -> tuple[float, Process]:
    """One run, its worker killed mid-stream; seconds from the kill to the retry's first token."""
    run = await api.submit(words(TOKENS), delay_ms=TOKEN_DELAY_MS)
    tokens = 0
    killed_at = recovered_at = 0.0
    retried = terminal = False
    victim: Process | None = None
    async with await SseStream.open(url, run["stream_url"]) as sse:
        async for batch in sse.batches():
            for event in batch:
                if event.event == b"token":
                    tokens += 1
                    if retried and not recovered_at:
                        recovered_at = time.perf_counter()
                elif event.event == b"retry":
                    retried = True
                terminal = terminal or event.event in TERMINAL
            if victim is None and tokens >= kill_after:
                victim = await _holder(workers, run["run_id"])
                victim.kill()
                killed_at = time.perf_counter()
    if not (victim and recovered_at and terminal):
        raise AssertionError(f"run {run['run_id']}: no kill, no retried token or no end")
    return recovered_at - killed_at, victim


async def run(ctx: BenchContext) -> None:
    kills = ctx.size(7, 3)
    recoveries: list[float] = []
    rng = random.Random(12)
    async with ctx.cluster(NAME) as (_, cluster):
        server = await cluster.server()
        workers = await cluster.workers(2)
        async with Api(server.url) as api:
            for _ in range(kills):
                kill_after = rng.randint(*KILL_AFTER_TOKENS)
                seconds, victim = await _kill_round(api, server.url, workers, kill_after)
                recoveries.append(seconds * 1000)
                workers.remove(victim)
                workers.append(await cluster.ready_worker())
    stats = summary(recoveries)
    for stat, target_ms in (("median", 1500.0), ("max", None)):
        ctx.figure(
            NAME,
            f"SIGKILL → first token of the next attempt, {stat}",
            stats[stat],
            "ms",
            targets=[Target("<=", target_ms)] if target_ms else [],
            stats=stats,
        )
    ctx.note(NAME, kills=kills, recoveries_ms=recoveries)
