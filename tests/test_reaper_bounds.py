"""The reaper's work does not grow with the backlog or the workers (issue 34): one worker at a
time takes a pass, a pass looks at one page of the queued runs and the next goes on after it,
and re-enqueueing a job that is already queued wakes nobody."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from runner.recovery import HEADS_PER_PASS, requeue_queued_heads, restore_interrupted, take_turn
from stream_store.services import Services, open_services
from stream_store.settings import Settings
from tests.conftest import schema_connection

# ten passes deep: a pass sees one page of it (3 are checked), the unbounded pass the rest
BACKLOG = 10 * HEADS_PER_PASS


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    # a long lease: no queued run here is old enough to count as stuck (a fresh job id)
    async with open_services(replace(settings, reaper_interval_s=0.5, lease_s=600)) as opened:
        yield opened


async def queue_backlog(
    settings: Settings, count: int, status: str = "queued", services: Services | None = None
) -> None:
    """`count` runs of `status`, each on a thread of its own, written straight to Postgres
    (as a backlog that built up while the workers were busy); with `services`, each with a
    record in Redis too, as a submit leaves it."""
    async with await schema_connection(settings) as conn:
        await conn.execute(
            "INSERT INTO runstream_threads (thread_id, owner)"
            " SELECT gen_random_uuid(), 'load' FROM generate_series(1, %s)",
            (count,),
        )
        await conn.execute(
            "INSERT INTO runstream_runs (run_id, thread_id, owner, graph, status, input)"
            " SELECT gen_random_uuid(), thread_id, owner, 'chat', %s, '{}'::jsonb"
            " FROM runstream_threads WHERE owner = 'load'",
            (status,),
        )
        await conn.commit()
        run_ids = [row[0] for row in await (await conn.execute(_RUN_IDS)).fetchall()]
    if services is not None:
        async with services.clients.queue.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hset(services.keys.run_record(run_id), "status", status)
            await pipe.execute()


_RUN_IDS = "SELECT run_id::text FROM runstream_runs"


async def queued_jobs(services: Services) -> int:
    return int(await services.clients.queue.zcard(services.keys.queue()))


@pytest.mark.slow
async def test_a_pass_looks_at_one_page_of_a_backlog_and_the_next_goes_on_after_it(
    services: Services, settings: Settings
) -> None:
    """Behind ten pages of queued runs a pass still looks at `HEADS_PER_PASS` of them; the next goes
    on after them, and after the last page the next pass starts again, queueing nothing
    twice."""
    await queue_backlog(settings, BACKLOG, services=services)
    took: list[float] = []
    for page in (1, 2, 3):
        started = time.perf_counter()
        assert await requeue_queued_heads(services) == HEADS_PER_PASS
        took.append(time.perf_counter() - started)
        assert await queued_jobs(services) == page * HEADS_PER_PASS
    started = time.perf_counter()
    rest = BACKLOG - 3 * HEADS_PER_PASS
    assert await requeue_queued_heads(services, limit=BACKLOG) == rest  # what every pass was
    unbounded = time.perf_counter() - started
    assert await queued_jobs(services) == BACKLOG
    assert await requeue_queued_heads(services) == HEADS_PER_PASS  # from the start again
    assert await queued_jobs(services) == BACKLOG
    print(  # figures for the record (this machine's, never asserted)
        f"\n{BACKLOG} queued: a pass of {HEADS_PER_PASS} took"
        f" {statistics.median(took) * 1000:.0f} ms (median of {len(took)});"
        f" one over the other {rest}: {unbounded * 1000:.0f} ms"
    )


async def test_re_enqueueing_a_queued_job_wakes_no_worker(
    services: Services, settings: Settings
) -> None:
    await queue_backlog(settings, 3, services=services)
    channel = services.keys.wake_channel()
    pubsub = services.clients.queue.pubsub()
    await pubsub.subscribe(channel)
    try:
        await pubsub.get_message(timeout=1)  # the subscription's confirmation
        await requeue_queued_heads(services)
        await requeue_queued_heads(services)  # the same three jobs, already queued
        woken = []
        while (message := await pubsub.get_message(timeout=0.3)) is not None:
            woken.append(message)
    finally:
        await pubsub.aclose()
    assert len(woken) == 3  # one per job actually queued


async def test_one_worker_at_a_time_takes_the_reapers_pass(services: Services) -> None:
    workers = [f"w{i}" for i in range(8)]
    turns = await asyncio.gather(*(take_turn(services, w) for w in workers))
    assert sum(turns) == 1
    assert not any([await take_turn(services, w) for w in workers])  # within the interval
    await asyncio.sleep(services.settings.reaper_interval_s + 0.1)
    turns = await asyncio.gather(*(take_turn(services, w) for w in workers))
    assert sum(turns) == 1


async def test_interrupted_runs_are_checked_a_page_at_a_time(
    services: Services, settings: Settings
) -> None:
    """Every interrupted run whose stream Redis lost gets it back, over several pages."""
    await queue_backlog(settings, 600, status="interrupted")
    await restore_interrupted(services)
    async with await schema_connection(settings) as conn:
        run_ids = [row[0] for row in await (await conn.execute(_RUN_IDS)).fetchall()]
    exists = await asyncio.gather(*(services.events.exists(r) for r in run_ids))
    assert all(exists) and len(run_ids) == 600
