"""The arq worker of `runstream worker`: its start-up, shut-down, pub/sub listener and heartbeat.

The worker process owns its connections (`Services`, on the Redis client arq already has) and
passes them to jobs as one typed `WorkerState` in arq's `ctx` (`ctx["state"]`). Jobs are not
retried by arq (`max_tries=1`): a run's fate is decided by runstream, not by arq's bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any

import msgspec
import structlog
from arq.constants import in_progress_key_prefix
from arq.utils import timestamp_ms
from arq.worker import Worker, func
from opentelemetry.trace import TracerProvider
from prometheus_client import start_http_server
from redis.exceptions import RedisError

from stream_store.connections import open_redis
from stream_store.errors import StoreUnavailable
from stream_store.keys import KeySpace
from stream_store.metrics import GraphLabels, WorkerMetrics
from stream_store.queue import EXECUTE_RUN
from stream_store.services import open_services
from stream_store.settings import Settings
from stream_store.tracing import make_tracer
from stream_store.workers import BEAT_INTERVAL_S, WorkerBeat, WorkerPresence, WorkerRegistry

from .execute import execute_run
from .graphs import GraphRegistry
from .recovery import reap_forever
from .scheduling import FairOrder, window_size
from .state import WorkerState
from .tools import ToolLedger

__all__ = ["build_worker"]

logger = structlog.get_logger()

_START_JOB = (files("stream_store") / "scripts" / "start_job.lua").read_text()


async def startup(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx["settings"]
    stack = contextlib.AsyncExitStack()
    services = await stack.enter_async_context(
        open_services(
            settings,
            pool_size=max(4, min(settings.worker_concurrency, 10)),
            redis=ctx["redis"],  # arq's own client: the worker needs no second one
            tracer=ctx["tracer"],
        )
    )
    graphs = GraphRegistry(settings.graphs)
    graphs.validate()
    worker_id = uuid.uuid4().hex[:12]
    # Open before the first claim; closed after the runs are handed back and the beat said
    # goodbye (the stack unwinds in reverse), so a stopping worker never looks dead.
    presence = WorkerPresence(settings.require_services()[0], worker_id)
    await presence.start()
    stack.push_async_callback(presence.stop)
    state = WorkerState(
        services=services,
        graphs=graphs,
        ledger=ToolLedger(services.pool),
        wake=ctx["wake"],
        metrics=WorkerMetrics(GraphLabels(graphs.names()), concurrency=settings.worker_concurrency),
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
    for background in (reap_forever(state), _listen(state), _beat(state, presence.name)):
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
    logger.info("worker stopped")


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
            pubsub = state.services.redis.pubsub(ignore_subscribe_messages=True)
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
    registry = WorkerRegistry(services.redis, services.keys)
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


class RunWorker(Worker):
    """arq's Worker, reading the queue when woken rather than on a fixed poll.

    arq sleeps `poll_delay` between reads of the queue, which alone would be most of a run's
    time to first token. Here a read happens when a run is queued (the wake channel) or a job
    slot frees up; `idle_poll_s` is only the fallback for a lost wake-up or a deferred job.
    The jobs it reads are started in a fair order between callers (`runner/scheduling.py`).
    """

    def __init__(self, *args: Any, idle_poll_s: float, keys: KeySpace, **kwargs: Any) -> None:
        super().__init__(*args, poll_delay=0, **kwargs)
        self.idle_poll_s = idle_poll_s
        self.keys = keys
        self.wake = asyncio.Event()
        self.wake.set()  # read the queue at once on start
        self.ctx["wake"] = self.wake
        self._start_job = self.pool.register_script(_START_JOB)

    async def _poll_iteration(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), self.idle_poll_s)
        self.wake.clear()  # before reading: a wake-up during the read triggers another read
        try:
            await super()._poll_iteration()
        except RedisError as exc:
            # arq ends its loop (and so this worker, with every run it holds) when Redis fails
            # it: out of reach, or refusing writes at `maxmemory`. Its bookkeeping of a job is
            # then stale at worst, and the runs' own state is fenced: read the queue again.
            logger.warning("reading the queue failed; retrying", error=str(exc))
            await asyncio.sleep(1)

    def _release_sem_dec_counter_on_complete(self) -> None:
        super()._release_sem_dec_counter_on_complete()
        self.wake.set()  # a slot is free: a run waiting in the queue can start now

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """Claim and start the ready jobs read, one caller's backlog not ahead of the others'.

        arq's own `start_jobs`, with its per-job WATCH transaction (four round trips) made one
        script call (`scripts/start_job.lua`), as atomic: a job is started once, by one worker.
        """
        if len(job_ids) > self.max_jobs - self.job_counter:  # else every one is tried anyway
            job_ids = await FairOrder(self.pool, self.keys).order(job_ids)
        timeout_ms = int(self.in_progress_timeout_s * 1000)
        for job_id_b in job_ids:
            await self.sem.acquire()
            if self.job_counter >= self.max_jobs:
                self.sem.release()
                return
            self.job_counter += 1
            job_id = job_id_b.decode()
            keys = [in_progress_key_prefix + job_id, self.queue_name]
            score = await self._start_job(keys=keys, args=[job_id, timeout_ms, timestamp_ms()])
            if score is None:  # in progress elsewhere, finished, or deferred
                self.job_counter -= 1
                self.sem.release()
                continue
            task = self.loop.create_task(self.run_job(job_id, int(float(score))))
            task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
            self.tasks[job_id] = task


def build_worker(
    settings: Settings,
    *,
    handle_signals: bool = True,
    tracer_provider: TracerProvider | None = None,
) -> RunWorker:
    """An arq Worker for this deployment's queue, configured from `settings`.

    `tracer_provider` (stream_store/tracing.py) turns traces on; its owner shuts it down.
    """
    keys = KeySpace(settings.redis_prefix)
    return RunWorker(
        functions=[func(execute_run, name=EXECUTE_RUN, max_tries=1)],
        queue_name=keys.queue(),
        redis_pool=open_redis(settings),
        on_startup=startup,
        on_shutdown=shutdown,
        handle_signals=handle_signals,
        job_completion_wait=settings.shutdown_grace_s,  # a float works, despite its int hint
        max_jobs=settings.worker_concurrency,
        job_timeout=settings.job_timeout_s,
        idle_poll_s=settings.poll_delay_s,
        keys=keys,
        queue_read_limit=window_size(settings.worker_concurrency, settings.max_active_runs),
        keep_result=0,  # outcomes live in Postgres; arq keeps nothing per run
        max_tries=1,
        health_check_key=keys.worker_health(),
        ctx={"settings": settings, "tracer": make_tracer(tracer_provider)},
        log_results=False,
    )
