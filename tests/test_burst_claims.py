"""Runs starting together in one worker (a burst, issue 23) claim together: their Postgres
claims go as one statement and their Redis starts as one pipeline, each caller getting its
own answer exactly as it would alone; a batch that fails fails each of its callers, and the
next batch is sent as usual."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from stream_store.connections import PgPool, open_pg_pool
from stream_store.errors import Fenced, StoreUnavailable, StreamGone
from stream_store.keys import KeySpace
from stream_store.live_record import Claimed
from stream_store.log import EventLog
from stream_store.run_records import RunRecord, RunRecords
from stream_store.settings import Settings
from tests.processes import TcpProxy
from wire.events import RunStatus

RUNNING = b'{"status":"running","attempt":1}'


class CountedCheckouts:
    """The pool, counting the connections taken from it (each claim batch takes one)."""

    def __init__(self, pool: PgPool) -> None:
        self.pool = pool
        self.checkouts = 0

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[DictRow]]:
        self.checkouts += 1
        async with self.pool.connection() as conn:
            yield conn


class ImpatientCheckouts:
    """The pool, its connections giving up on a row lock after 100 ms (a real Postgres error)."""

    def __init__(self, pool: PgPool) -> None:
        self.pool = pool

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[DictRow]]:
        async with self.pool.connection() as conn:
            await conn.execute("SET lock_timeout = '100ms'")
            try:
                yield conn
            finally:
                await conn.execute("RESET lock_timeout")


class CountedPipelines(Redis):
    """A Redis client counting its pipelines (each start batch is one)."""

    pipelines = 0

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        self.pipelines += 1
        return super().pipeline(transaction, shard_hint)


@pytest.fixture
async def pool(settings: Settings) -> AsyncIterator[PgPool]:
    opened = await open_pg_pool(settings, max_size=3)
    yield opened
    await opened.close()


async def _run_in(pool: PgPool, status: RunStatus, attempt_traceparent: str | None = None) -> str:
    """A run of a thread of its own, recorded in `status`."""
    thread_id, run_id = str(uuid.uuid4()), str(uuid.uuid4())
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO runstream_threads (thread_id, owner) VALUES (%s, 'o')", (thread_id,)
        )
        await conn.execute(
            "INSERT INTO runstream_runs (run_id, thread_id, owner, graph, status, input,"
            " attempt_traceparent) VALUES (%s, %s, 'o', 'chat', %s, '{}', %s)",
            (run_id, thread_id, status, attempt_traceparent),
        )
    return run_id


async def test_claims_arriving_together_are_one_statement_and_each_gets_its_own_run(
    pool: PgPool,
) -> None:
    queued = [await _run_in(pool, RunStatus.QUEUED, f"00-previous-{i}") for i in range(8)]
    running = await _run_in(pool, RunStatus.RUNNING)
    cancelled = await _run_in(pool, RunStatus.CANCELLED)
    source = CountedCheckouts(pool)
    records = RunRecords(source)
    try:
        claims = [*queued, running, cancelled, queued[0]]  # queued[0] twice: one wins
        won = await asyncio.gather(
            *(records.claim_run(run_id, f"00-attempt-{run_id}") for run_id in claims)
        )
    finally:
        await records.aclose()
    assert source.checkouts == 1  # one statement for the eleven claims
    for i, (run_id, run) in enumerate(zip(queued, won[:8], strict=True)):
        assert run is not None and run.run_id == run_id
        assert run.status is RunStatus.RUNNING and run.claimed_at is not None
        assert run.attempt_traceparent == f"00-previous-{i}"  # the previous attempt's
        assert run.thread_has_checkpoints is False
    assert won[8:] == [None, None, None]  # already running, ended, claimed by its first claim
    after = await RunRecords(pool).get_runs([*queued, cancelled])
    assert {run.run_id: run.status for run in after} == {
        **dict.fromkeys(queued, RunStatus.RUNNING),
        cancelled: RunStatus.CANCELLED,
    }
    assert {run.attempt_traceparent for run in after if run.run_id in queued} == {
        f"00-attempt-{run_id}" for run_id in queued
    }


async def test_a_claim_alone_is_sent_at_once(pool: PgPool) -> None:
    records = RunRecords(pool)
    try:
        run_id = await _run_in(pool, RunStatus.QUEUED)
        run = await asyncio.wait_for(records.claim_run(run_id), 5)
        assert run is not None and run.status is RunStatus.RUNNING
        assert await records.claim_run(run_id) is None  # the claim is the same rule alone
    finally:
        await records.aclose()


async def test_a_failed_claim_statement_fails_each_of_its_claims_and_the_next_one_claims(
    pool: PgPool,
) -> None:
    """A claim statement that fails (here: a row lock it gave up on) claims none of its runs,
    and each claim waiting on it gets the same error; the next batch claims them."""
    locked, free = await _run_in(pool, RunStatus.QUEUED), await _run_in(pool, RunStatus.QUEUED)
    records = RunRecords(ImpatientCheckouts(pool))
    try:
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT 1 FROM runstream_runs WHERE run_id = %s FOR UPDATE", (locked,)
            )
            failed = await asyncio.gather(
                records.claim_run(locked), records.claim_run(free), return_exceptions=True
            )
        assert isinstance(failed[0], StoreUnavailable) and failed[1] is failed[0]
        assert [run.status for run in await RunRecords(pool).get_runs([locked, free])] == [
            RunStatus.QUEUED,
            RunStatus.QUEUED,
        ]
        won = await asyncio.gather(records.claim_run(locked), records.claim_run(free))
    finally:
        await records.aclose()
    assert all(isinstance(run, RunRecord) and run.status is RunStatus.RUNNING for run in won)


async def _open_in_redis(events: EventLog, attempt: int = 1) -> str:
    run_id = str(uuid.uuid4())
    data = b'{"status":"queued","attempt":%d}' % attempt
    await events.open(run_id, owner="o", thread_id="t", attempt=attempt, event="run", data=data)
    return run_id


async def test_starts_arriving_together_are_one_pipeline_and_each_gets_its_own_verdict(
    settings: Settings,
) -> None:
    redis = CountedPipelines.from_url(settings.redis_url or "")
    events = EventLog(redis, KeySpace(settings.redis_prefix), stream_ttl_s=600)
    try:
        starting = [await _open_in_redis(events) for _ in range(5)]
        cancel_requested = await _open_in_redis(events)
        await events.request_cancel(cancel_requested)
        retried = await _open_in_redis(events, attempt=2)  # its `retry` not written
        newer = await _open_in_redis(events, attempt=2)  # attempt 1 is fenced out
        missing = str(uuid.uuid4())
        redis.pipelines = 0
        starts = [(run_id, 1) for run_id in [*starting, cancel_requested]]
        starts += [(retried, 2), (newer, 1), (missing, 1)]
        verdicts = await asyncio.gather(
            *(events.claim(run_id, attempt, 5.0, RUNNING) for run_id, attempt in starts),
            return_exceptions=True,
        )
        assert redis.pipelines == 1  # one round trip for the nine starts
        assert verdicts[:7] == [Claimed.RUNNING] * 5 + [Claimed.CANCELLED, Claimed.RETRY]
        assert isinstance(verdicts[7], Fenced) and newer in str(verdicts[7])
        assert isinstance(verdicts[8], StreamGone) and missing in str(verdicts[8])
        for run_id in starting:  # each said `running` in its own stream
            stored = await events.read_range(run_id, "0-0")
            assert [(e.event, e.data) for e in stored][-1] == ("run", RUNNING)
        assert len(await events.read_range(newer, "0-0")) == 1  # nothing written
    finally:
        await events.aclose()
        await redis.aclose()


async def test_a_start_pipeline_redis_drops_fails_each_of_its_starts_and_the_next_one_starts(
    settings: Settings,
) -> None:
    real = urlsplit(str(settings.redis_url))
    proxy = TcpProxy(real.hostname or "127.0.0.1", real.port or 6379)
    await proxy.start()
    netloc = real.netloc.replace(f"{real.hostname}:{real.port}", f"127.0.0.1:{proxy.port}")
    redis = Redis.from_url(real._replace(netloc=netloc).geturl())
    events = EventLog(redis, KeySpace(settings.redis_prefix), stream_ttl_s=600)
    try:
        run_ids = [await _open_in_redis(events) for _ in range(3)]
        proxy.cut()  # Redis unreachable: open connections dropped, new ones refused
        failed = await asyncio.gather(
            *(events.claim(run_id, 1, 5.0, RUNNING) for run_id in run_ids),
            return_exceptions=True,
        )
        assert all(isinstance(error, StoreUnavailable) for error in failed), failed
        proxy.restore()
        started = await asyncio.gather(
            *(events.claim(run_id, 1, 5.0, RUNNING) for run_id in run_ids)
        )
        assert started == [Claimed.RUNNING] * 3
    finally:
        await events.aclose()
        await redis.aclose()
        await proxy.stop()


async def test_closing_fails_the_claims_still_waiting(pool: PgPool) -> None:
    """At shutdown a claim in flight, or waiting behind it, is answered, never left hanging."""
    locked = await _run_in(pool, RunStatus.QUEUED)
    records = RunRecords(pool)
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT 1 FROM runstream_runs WHERE run_id = %s FOR UPDATE", (locked,))
        in_flight = asyncio.ensure_future(records.claim_run(locked))
        await asyncio.sleep(0.1)  # its statement waits on the lock
        behind = asyncio.ensure_future(records.claim_run(locked))
        await records.aclose()
        for claim in (in_flight, behind):
            with pytest.raises(StoreUnavailable):
                await asyncio.wait_for(claim, 5)
