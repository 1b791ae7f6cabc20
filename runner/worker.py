"""The worker of `runstream worker`: its start-up, shut-down, pub/sub listener and heartbeat.

The queue itself is read by `JobLoop` (`runner/job_loop.py`). The worker process owns its
connections (`Services`, on the Redis client the loop already has) and passes them to jobs as
one typed `WorkerState` in the loop's `ctx` (`ctx["state"]`). A job is tried once: a run's fate
is decided by runstream, not by the queue's bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
import structlog
from opentelemetry.trace import TracerProvider
from prometheus_client import start_http_server
from redis.exceptions import RedisError

from project.store_index import check_embeddings, store_options
from project.webhooks import Resolver, resolve_host
from stream_store.connections import RedisClients
from stream_store.errors import StoreUnavailable
from stream_store.leases import LeaseKeeper
from stream_store.metrics import GraphLabels, WorkerMetrics
from stream_store.queue import EXECUTE_RUN
from stream_store.services import open_services
from stream_store.settings import Settings
from stream_store.tracing import make_tracer
from stream_store.workers import BEAT_INTERVAL_S, WorkerBeat, WorkerPresence, WorkerRegistry

from .execute import execute_run
from .graph_registry import GraphRegistry
from .job_loop import JobLoop
from .recovery import reap_forever
from .scheduling import window_size
from .state import WorkerState
from .sweeps import sweep_items_forever, sweep_threads_forever
from .webhooks import deliver_webhooks_forever

__all__ = ["build_worker"]

logger = structlog.get_logger()


async def startup(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx["settings"]
    clients: RedisClients = ctx["redis_clients"]
    graphs = ctx.get("graphs") or GraphRegistry.from_settings(settings)
    store = store_options(graphs.project)
    await check_embeddings(store, graphs.project)
    stack = contextlib.AsyncExitStack()
    if clients.store is not clients.queue:  # a cluster client, beside the loop's queue client
        stack.push_async_callback(clients.store.aclose)
    services = await stack.enter_async_context(
        open_services(
            settings,
            pool_size=max(4, min(settings.worker_concurrency, 10)),
            redis=clients,  # on one Redis, the loop's own client: no second one
            tracer=ctx["tracer"],
            store=store,
        )
    )
    worker_id = uuid.uuid4().hex[:12]
    # Open before the first claim; closed after the runs are handed back and the beat said
    # goodbye (the stack unwinds in reverse), so a stopping worker never looks dead.
    presence = WorkerPresence(clients.queue_url, worker_id)  # where the reapers list clients
    await presence.start()
    stack.push_async_callback(presence.stop)
    url, _ = settings.require_services()
    leases = LeaseKeeper(url, clients.keys, lease_s=settings.lease_s, cluster=clients.cluster)
    await leases.start()
    stack.push_async_callback(leases.stop)
    state = WorkerState(
        services=services,
        graphs=graphs,
        wake=ctx["wake"],
        metrics=WorkerMetrics(GraphLabels(graphs.names()), concurrency=settings.worker_concurrency),
        leases=leases,
        worker_id=worker_id,
        exit_stack=stack,
    )
    state.metrics.track_attempts(lambda: len(state.attempts))
    state.metrics.watch_pool(services.pool)
    if settings.worker_metrics_port:
        try:
            await _serve_metrics(state, settings.host, settings.worker_metrics_port)
        except BaseException:  # the port is taken, say: nothing opened may outlive the failure
            await stack.aclose()
            raise
    sweeps = (
        sweep_items_forever(state),
        sweep_threads_forever(state),
        # LangGraph's webhooks, beside the runs, never in them
        deliver_webhooks_forever(state, ctx.get("resolve") or resolve_host),
    )
    for background in (reap_forever(state), _listen(state), _beat(state, presence.name), *sweeps):
        stack.push_async_callback(_stop, asyncio.create_task(background))
    ctx["state"] = state
    logger.info(
        "worker ready",
        queue=services.keys.queue(),
        model=settings.model,
        graphs=graphs.names(),
        concurrency=settings.worker_concurrency,
    )


async def shutdown(ctx: dict[str, Any]) -> None:
    state = ctx.pop("state", None)
    if isinstance(state, WorkerState):
        await state.exit_stack.aclose()  # background tasks first, then the services


async def _serve_metrics(state: WorkerState, host: str, port: int) -> None:
    """The worker's /metrics, on prometheus_client's own HTTP server: a daemon thread, so a
    scrape never waits on the event loop (the metrics it reads are thread-safe)."""
    httpd, _ = start_http_server(port, addr=host, registry=state.metrics.registry)

    async def stop() -> None:
        await asyncio.to_thread(httpd.shutdown)
        httpd.server_close()

    state.exit_stack.push_async_callback(stop)
    logger.info("worker metrics served", url=f"http://{host}:{httpd.server_port}/metrics")


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _listen(state: WorkerState) -> None:
    """Wake the worker when a run is queued; cancel runs a server asked to stop.

    Resubscribes after errors; a wake-up lost meanwhile costs one idle poll, nothing more.
    """
    keys = state.services.keys
    cancel_channel, wake_channel = keys.cancel_channel(), keys.wake_channel()
    while True:
        try:
            pubsub = state.services.clients.queue.pubsub(ignore_subscribe_messages=True)
            async with pubsub:
                await pubsub.subscribe(cancel_channel, wake_channel)
                state.wake.set()  # anything queued while unsubscribed
                async for message in pubsub.listen():
                    if message["channel"].decode() == wake_channel:
                        state.wake.set()
                        continue
                    attempt = state.attempts.get(message["data"].decode())
                    if attempt is not None:
                        logger.info("cancelling run", run_id=attempt.run_id)
                        attempt.cancel()
        except RedisError as exc:
            logger.warning("pub/sub listener lost redis, retrying", error=str(exc))
            await asyncio.sleep(1)


async def _beat(state: WorkerState, connection_name: str) -> None:
    """Tell `runstream status` and the reapers this worker is alive, which runs it executes and
    the name of its presence connection; say goodbye when stopped, so it does not linger there
    until its beat expires."""
    services = state.services
    registry = WorkerRegistry(services.clients.queue, services.keys)
    started_at = datetime.now(UTC)
    me = WorkerBeat(
        worker_id=state.worker_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        concurrency=services.settings.worker_concurrency,
        started_at=started_at,
        beat_at=started_at,
        run_ids=[],
        connection_name=connection_name,
    )
    try:
        while True:
            now = datetime.now(UTC)
            try:
                await registry.beat(
                    msgspec.structs.replace(me, beat_at=now, run_ids=[*state.attempts])
                )
            except StoreUnavailable as exc:
                logger.warning("worker heartbeat failed; retrying", error=str(exc))
            await asyncio.sleep(BEAT_INTERVAL_S)
    finally:
        with contextlib.suppress(StoreUnavailable, TimeoutError):
            async with asyncio.timeout(1):
                await registry.forget(me.worker_id)


def build_worker(
    settings: Settings,
    *,
    tracer_provider: TracerProvider | None = None,
    graphs: GraphRegistry | None = None,
    resolve: Resolver | None = None,
) -> JobLoop:
    """The worker's loop over this deployment's queue, configured from `settings`.

    `graphs`: loaded already (`runstream worker` loads them first, to refuse a bad project
    with one line); None: loaded from `settings` when the worker starts.

    `tracer_provider` (stream_store/tracing.py) turns traces on; its owner shuts it down.

    `resolve`: how webhook hosts are looked up (None: the system's resolver); tests give their
    own, to point a name wherever they need.
    """
    return JobLoop(
        {EXECUTE_RUN: execute_run},
        settings=settings,
        on_startup=startup,
        on_shutdown=shutdown,
        max_jobs=settings.worker_concurrency,
        job_timeout_s=settings.job_timeout_s,
        idle_poll_s=settings.poll_delay_s,
        grace_s=settings.shutdown_grace_s,
        read_limit=window_size(settings.worker_concurrency, settings.max_active_runs),
        ctx={"tracer": make_tracer(tracer_provider), "graphs": graphs, "resolve": resolve},
    )
