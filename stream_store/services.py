"""The connections and storage components of one process, assembled the same way for the
server and the worker.

Opened at start-up by the entry point (the server's lifespan, the worker's `on_startup`) and
passed down; nothing in runstream opens a connection of its own elsewhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from langgraph.store.postgres.aio import AsyncPostgresStore
from opentelemetry.trace import NoOpTracer, Tracer

from .assistant_records import AssistantRecords
from .checkpoints import FencedPostgresSaver
from .connections import (
    PgPool,
    RedisClients,
    StoreRedis,
    check_search_path,
    open_pg_pool,
    open_redis_clients,
    session_pool,
)
from .cron_records import CronRecords
from .evaluations import Evaluations
from .keys import KeySpace
from .lifecycle import RunLifecycle
from .log import EventLog
from .migrations import migrate
from .queue import RunQueue
from .run_records import RunRecords
from .run_submit import RunSubmitter
from .settings import Settings
from .store import StoreOptions, open_store
from .thread_records import ThreadRecords
from .webhook_records import WebhookRecords

__all__ = ["Services", "open_services"]


@dataclass
class Services:
    settings: Settings
    keys: KeySpace
    clients: RedisClients  # `redis`, and the queue's client and node (others on a cluster)
    pool: PgPool
    checkpointer: FencedPostgresSaver  # fenced only inside a run (`attempt_fence`)
    store: AsyncPostgresStore  # LangGraph's store; each owner's view is `store.OwnerStore`
    store_options: StoreOptions  # its index and TTLs, for the views the server opens per query
    run_records: RunRecords
    thread_records: ThreadRecords
    cron_records: CronRecords  # LangGraph's crons (server/langgraph/crons.py)
    assistant_records: AssistantRecords  # LangGraph's assistants (server/langgraph/assistants.py)
    evaluations: Evaluations  # what graphs record of their own work (runner/evaluations.py)
    webhooks: WebhookRecords  # LangGraph's webhook deliveries (runner/webhooks.py)
    events: EventLog
    queue: RunQueue
    lifecycle: RunLifecycle
    tracer: Tracer  # runstream's spans (stream_store/tracing.py); no-op when traces are off

    @property
    def redis(self) -> StoreRedis:
        """The client for runs, records and quotas (not a field: Litestar, which injects the
        server's `Resources`, cannot type a union of two client classes)."""
        return self.clients.store


@contextlib.asynccontextmanager
async def open_services(
    settings: Settings,
    *,
    pool_size: int = 10,
    redis: RedisClients | None = None,
    tracer: Tracer | None = None,
    store: StoreOptions | None = None,
) -> AsyncIterator[Services]:
    """Open Redis (unless `redis` is given) and a migrated Postgres pool, the store as `store`
    says (the project's `store.index` and `store.ttl`); close what was opened, in reverse
    order."""
    store_options = store or StoreOptions()
    async with contextlib.AsyncExitStack() as stack:
        if redis is None:
            redis = await open_redis_clients(settings)
            stack.push_async_callback(redis.aclose)
        clients, keys = redis, redis.keys
        pool = await open_pg_pool(settings, max_size=pool_size)
        stack.push_async_callback(pool.close)
        async with session_pool(settings, pool) as migrating:
            await migrate(migrating, settings.database_schema, store_options)
        await check_search_path(settings, pool)
        run_records = RunRecords(pool)
        stack.push_async_callback(run_records.aclose)
        events = EventLog(
            clients.store,
            keys,
            settings.stream_ttl_s,
            interrupted_ttl_s=settings.interrupted_ttl_s,
            max_run_events=settings.max_run_events,
            max_run_stream_bytes=settings.max_run_stream_bytes,
        )
        stack.push_async_callback(events.aclose)
        queue = RunQueue(clients.queue, keys, run_records)
        stack.push_async_callback(queue.aclose)
        opened_store = await stack.enter_async_context(open_store(pool, store_options))
        yield Services(
            settings=settings,
            keys=keys,
            clients=clients,
            pool=pool,
            checkpointer=FencedPostgresSaver(pool),
            store=opened_store,
            store_options=store_options,
            run_records=run_records,
            thread_records=ThreadRecords(pool),
            cron_records=CronRecords(pool),
            assistant_records=AssistantRecords(pool),
            evaluations=Evaluations(pool),
            webhooks=WebhookRecords(pool),
            events=events,
            queue=queue,
            lifecycle=RunLifecycle(
                run_records,
                RunSubmitter(pool),
                events,
                queue,
                lease_s=settings.lease_s,
                max_attempts=settings.max_attempts,
            ),
            tracer=tracer or NoOpTracer(),
        )
