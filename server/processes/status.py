"""`runstream status`: the whole deployment as an operator sees it, read from the services.

Not through the HTTP API (that shows one caller's runs): it connects to Redis and Postgres
with the settings `serve` uses and reports their round trips, the live workers (their
heartbeats, `stream_store.workers`), the queue, and the runs stuck past their lease. A run is
stuck when the reaper would take it over: `running` in Postgres for a lease since its claim,
and its live record in Redis holds no unexpired lease for that attempt (`take_over.lua`).
Every live worker's reaper retries such runs within a second, so a stuck run that stays
means no worker is reaping.

Only reads, a handful of indexed queries and Redis commands: safe against production.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar
from urllib.parse import urlsplit

import msgspec
from psycopg import AsyncConnection
from psycopg.errors import UndefinedTable
from psycopg.rows import DictRow

from stream_store.connections import RedisClients, connect_pg, open_redis_clients
from stream_store.log import EventLog
from stream_store.run_records import RunRecords
from stream_store.settings import Settings
from stream_store.workers import WorkerBeat, WorkerRegistry

__all__ = [
    "DeploymentStatus",
    "QueueState",
    "ServiceHealth",
    "StuckRun",
    "gather_status",
]

_TIMEOUT_S = 3.0
T = TypeVar("T")


class ServiceHealth(msgspec.Struct, kw_only=True):
    url: str  # without credentials
    ok: bool
    rtt_ms: float | None = None  # one PING / SELECT 1 on an open connection
    error: str | None = None


class QueuedRun(msgspec.Struct, kw_only=True):
    run_id: str
    thread_id: str
    owner: str
    graph: str
    attempt: int
    created_at: datetime
    queued_at: datetime  # since this attempt was queued


class QueueState(msgspec.Struct, kw_only=True):
    queued: int  # runs in status `queued`
    waiting_on_thread: int  # of those, behind a running or interrupted run of their thread
    running: int
    interrupted: int
    jobs: int | None  # jobs in the arq queue, waiting or in progress (None: Redis is down)
    oldest_queued: QueuedRun | None


class StuckRun(msgspec.Struct, kw_only=True):
    run_id: str
    thread_id: str
    owner: str
    attempt: int
    claimed_at: datetime
    reason: str  # `lease expired`, `live record missing`, `taken over by attempt N`
    lease_expired_s: float | None  # how long ago the lease ran out, when it did


class DeploymentStatus(msgspec.Struct, kw_only=True):
    healthy: bool  # Redis and Postgres both answered
    checked_at: datetime
    redis_prefix: str
    database_schema: str
    lease_s: float
    redis: ServiceHealth
    postgres: ServiceHealth
    workers: list[WorkerBeat] | None  # None: Redis is down
    queue: QueueState | None  # None: Postgres is down
    stuck: list[StuckRun] | None  # None: either is down


class _OneConnection:
    """The command's one connection, lent as a pool's would be (`ConnectionSource`): the
    rules of which runs count as what are `RunRecords`' queries, not this report's."""

    def __init__(self, conn: AsyncConnection[DictRow]) -> None:
        self._conn = conn

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection[DictRow]]:
        yield self._conn


def _safe_url(url: str) -> str:
    """The URL without user and password: status output is pasted into tickets."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


async def _timed(check: Callable[[], Awaitable[T]]) -> tuple[T, float]:
    start = time.perf_counter()
    async with asyncio.timeout(_TIMEOUT_S):
        value = await check()
    return value, (time.perf_counter() - start) * 1000


def _failure(exc: BaseException) -> str:
    """One line: what an operator needs to act on (drivers' messages run over several)."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {_TIMEOUT_S:g} s"
    if isinstance(exc, UndefinedTable):
        return "no runstream tables in this schema (`runstream migrate` creates them)"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


async def _queue_state(run_records: RunRecords, jobs: int | None) -> QueueState:
    oldest = await run_records.oldest_queued()
    return QueueState(
        **await run_records.active_counts(),
        jobs=jobs,
        oldest_queued=msgspec.convert(oldest, QueuedRun, from_attributes=True) if oldest else None,
    )


async def _stuck(run_records: RunRecords, clients: RedisClients, lease_s: float) -> list[StuckRun]:
    candidates = await run_records.running_claimed_before(lease_s)
    if not candidates:
        return []
    # read-only here: the TTL is never used
    events = EventLog(clients.store, clients.keys, stream_ttl_s=0)
    seconds, micros = await clients.queue.time()
    now_ms = seconds * 1000 + micros // 1000
    stuck = []
    for run in candidates:
        if run.claimed_at is None:  # never: the query compares it
            continue
        record = await events.live_record(run.run_id)
        expired_s: float | None = None
        if record is None:
            reason = "live record missing"
        elif record.attempt != run.attempt:
            reason = f"taken over by attempt {record.attempt}, not yet requeued"
        elif record.lease_until is None or record.lease_until < now_ms:
            reason = "lease expired"
            if record.lease_until is not None:
                expired_s = (now_ms - record.lease_until) / 1000
        else:
            continue  # its worker renews the lease: alive
        stuck.append(
            StuckRun(
                run_id=run.run_id,
                thread_id=run.thread_id,
                owner=run.owner,
                attempt=run.attempt,
                claimed_at=run.claimed_at,
                reason=reason,
                lease_expired_s=expired_s,
            )
        )
    return stuck


async def gather_status(settings: Settings) -> DeploymentStatus:
    """Check both services and read what they hold; a service that is down leaves its parts
    None instead of failing the whole report."""
    redis_url, database_url = settings.require_services()
    redis_health = ServiceHealth(url=_safe_url(redis_url), ok=False)
    pg_health = ServiceHealth(url=_safe_url(database_url), ok=False)
    workers: list[WorkerBeat] | None = None
    jobs: int | None = None
    queue: QueueState | None = None
    stuck: list[StuckRun] | None = None
    clients: RedisClients | None = None
    try:
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                clients = await open_redis_clients(settings)
            keys = clients.keys
            _, redis_health.rtt_ms = await _timed(clients.queue.ping)
            async with asyncio.timeout(_TIMEOUT_S):
                workers = await WorkerRegistry(clients.queue, keys).alive()
                jobs = int(await clients.queue.zcard(keys.queue()))
            redis_health.ok = True
        except Exception as exc:
            redis_health.error = _failure(exc)
        try:
            async with asyncio.timeout(_TIMEOUT_S):
                conn = await connect_pg(settings)
        except Exception as exc:
            pg_health.error = _failure(exc)
        else:
            async with conn:
                run_records = RunRecords(_OneConnection(conn))
                try:
                    _, pg_health.rtt_ms = await _timed(lambda: conn.execute("SELECT 1"))
                    async with asyncio.timeout(_TIMEOUT_S):
                        queue = await _queue_state(run_records, jobs)
                        if clients is not None and redis_health.ok:
                            stuck = await _stuck(run_records, clients, settings.lease_s)
                    pg_health.ok = True
                except Exception as exc:  # also a schema not migrated yet
                    pg_health.error = _failure(exc)
    finally:
        if clients is not None:
            await clients.aclose()
    return DeploymentStatus(
        healthy=redis_health.ok and pg_health.ok,
        checked_at=datetime.now(UTC),
        redis_prefix=settings.redis_prefix,
        database_schema=settings.database_schema,
        lease_s=settings.lease_s,
        redis=redis_health,
        postgres=pg_health,
        workers=workers,
        queue=queue,
        stuck=stuck,
    )
