"""The worker's own loop over the queue (`runner/job_loop.py`): a freed slot starts the next
job at once, a job runs once, and a stop ends in bounded time with the queue left clean."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from arq.constants import in_progress_key_prefix, job_key_prefix, retry_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms

from runner.job_loop import JobFunction, JobLoop
from stream_store.connections import RedisClients, open_redis_clients
from stream_store.settings import Settings

IDLE_POLL_S = 30.0  # longer than any test: a job that starts did so on a wake-up


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[RedisClients]:
    clients = await open_redis_clients(settings)
    yield clients
    await clients.queue.aclose()


async def enqueue(clients: RedisClients, name: str, *args: Any, age_ms: int = 0) -> str:
    """A job as `RunQueue.enqueue` writes one (without its wake-up), queued `age_ms` ago."""
    job_id = f"{uuid.uuid4()}:1"
    now = timestamp_ms() - age_ms
    async with clients.queue.pipeline(transaction=True) as tr:
        tr.psetex(job_key_prefix + job_id, 60_000, serialize_job(name, args, {}, None, now))
        tr.zadd(clients.keys.queue(), {job_id: now})
        await tr.execute()
    return job_id


async def left_behind(clients: RedisClients, job_id: str) -> list[str]:
    """The job's traces in Redis: its place in the queue and its keys."""
    traces = ["queue"] if await clients.queue.zscore(clients.keys.queue(), job_id) else []
    for prefix in (job_key_prefix, in_progress_key_prefix, retry_key_prefix):
        if await clients.queue.exists(prefix + job_id):
            traces.append(prefix)
    return traces


async def started(
    settings: Settings, function: JobFunction, *, max_jobs: int = 1
) -> tuple[JobLoop, asyncio.Task[None], list[str]]:
    """A loop running `function` as the job `job`; the list logs its hooks."""
    hooks: list[str] = []

    def hook(name: str) -> Callable[[dict[str, Any]], Awaitable[None]]:
        async def record(ctx: dict[str, Any]) -> None:
            hooks.append(name)

        return record

    loop = JobLoop(
        {"job": function},
        settings=settings,
        on_startup=hook("startup"),
        on_shutdown=hook("shutdown"),
        max_jobs=max_jobs,
        job_timeout_s=30,
        idle_poll_s=IDLE_POLL_S,
        grace_s=5,
        read_limit=100,
    )
    task = asyncio.create_task(loop.main())
    while not hooks:
        assert not task.done(), task
        await asyncio.sleep(0.01)
    return loop, task, hooks


async def test_a_freed_slot_starts_the_next_job_at_once_and_each_runs_once(
    settings: Settings, redis: RedisClients
) -> None:
    ran: list[tuple[str, str, int]] = []

    async def job(ctx: dict[str, Any], label: str) -> None:
        ran.append((label, ctx["job_id"], ctx["job_try"]))
        await asyncio.sleep(0.05)

    job_ids = [
        await enqueue(redis, "job", label, age_ms=age)
        for label, age in zip("abc", (30, 20, 10), strict=True)
    ]
    loop, task, hooks = await started(settings, job)  # one slot, three jobs
    began = time.monotonic()
    while len(ran) < 3:
        assert time.monotonic() - began < 5, ran
        await asyncio.sleep(0.01)
    await loop.close()
    await asyncio.wait({task})
    assert [label for label, _, _ in ran] == ["a", "b", "c"]
    assert [(job_id, job_try) for _, job_id, job_try in ran] == [(i, 1) for i in job_ids]
    assert [await left_behind(redis, job_id) for job_id in job_ids] == [[], [], []]
    assert hooks == ["startup", "shutdown"]


async def test_a_stop_cancels_a_job_past_the_grace_and_drops_it(
    settings: Settings, redis: RedisClients
) -> None:
    running = asyncio.Event()
    cancelled = asyncio.Event()

    async def job(ctx: dict[str, Any]) -> None:
        running.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job_id = await enqueue(redis, "job")
    loop, task, hooks = await started(settings, job)
    await asyncio.wait_for(running.wait(), 5)
    began = time.monotonic()
    await loop.close(grace_s=0.2)
    assert time.monotonic() - began < 3
    assert cancelled.is_set() and task.done() and not loop.tasks
    assert hooks == ["startup", "shutdown"] and loop.pool is None
    assert await left_behind(redis, job_id) == []  # tried once: not put back


async def test_a_job_claimed_again_after_its_worker_died_is_dropped_unrun(
    settings: Settings, redis: RedisClients
) -> None:
    ran: list[str] = []

    async def job(ctx: dict[str, Any]) -> None:
        ran.append(ctx["job_id"])

    job_id = await enqueue(redis, "job")
    await redis.queue.set(retry_key_prefix + job_id, 1)  # a try made by a worker now gone
    loop, task, _ = await started(settings, job)
    began = time.monotonic()
    while await redis.queue.zscore(redis.keys.queue(), job_id) is not None:
        assert time.monotonic() - began < 5
        await asyncio.sleep(0.01)
    await loop.close()
    await asyncio.wait({task})
    assert ran == [] and await left_behind(redis, job_id) == []
