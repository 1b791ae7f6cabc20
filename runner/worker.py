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
from arq.constants import (
    in_progress_key_prefix,
    job_key_prefix,
    result_key_prefix,
    retry_key_prefix,
)
from arq.utils import timestamp_ms, to_ms
from arq.worker import Worker, func
from opentelemetry.trace import TracerProvider
from prometheus_client import start_http_server
from redis.exceptions import RedisError

from stream_store.connections import RedisClients, open_redis_clients
from stream_store.errors import StoreUnavailable
from stream_store.keys import KeySpace
from stream_store.leases import LeaseKeeper
from stream_store.metrics import GraphLabels, WorkerMetrics
from stream_store.queue import EXECUTE_RUN
from stream_store.services import open_services
from stream_store.settings import Settings
from stream_store.tracing import make_tracer
from stream_store.workers import BEAT_INTERVAL_S, WorkerBeat, WorkerPresence, WorkerRegistry

from .execute import execute_run
from .graph_registry import GraphRegistry
from .recovery import reap_forever
from .scheduling import FairOrder, window_size
from .state import WorkerState
from .store_index import check_embeddings, store_options
from .sweeps import sweep_items_forever, sweep_threads_forever
from .tools import ToolLedger

__all__ = ["build_worker"]

logger = structlog.get_logger()

_START_JOBS = (files("stream_store") / "scripts" / "start_jobs.lua").read_text()


async def startup(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx["settings"]
    clients: RedisClients = ctx["redis_clients"]
    graphs = ctx.get("graphs") or GraphRegistry.from_settings(settings)
    store = store_options(graphs.project)
    await check_embeddings(store, graphs.project)
    stack = contextlib.AsyncExitStack()
    if clients.store is not clients.queue:  # a cluster client beside arq's (which arq closes)
        stack.push_async_callback(clients.store.aclose)
    services = await stack.enter_async_context(
        open_services(
            settings,
            pool_size=max(4, min(settings.worker_concurrency, 10)),
            redis=clients,  # on one Redis, arq's own client: the worker needs no second one
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
        ledger=ToolLedger(services.pool),
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
    sweeps = (sweep_items_forever(state), sweep_threads_forever(state))
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


class RunWorker(Worker):
    """arq's Worker, reading the queue when woken rather than on a fixed poll.

    arq sleeps `poll_delay` between reads of the queue, which alone would be most of a run's
    time to first token. Here a read happens when a run is queued (the wake channel) or a job
    slot frees up; `idle_poll_s` is only the fallback for a lost wake-up or a deferred job.
    The jobs it reads are started in a fair order between callers (`runner/scheduling.py`).

    It connects in `main`: only then is it known whether Redis is a cluster, and with that
    the queue's name and node (`stream_store.connections.RedisClients`).
    """

    def __init__(self, *args: Any, idle_poll_s: float, settings: Settings, **kwargs: Any) -> None:
        self.keys = KeySpace(settings.redis_prefix)
        super().__init__(*args, poll_delay=0, queue_name=self.keys.queue(), **kwargs)
        self.idle_poll_s = idle_poll_s
        self.wake = asyncio.Event()
        self.wake.set()  # read the queue at once on start
        self.ctx["wake"] = self.wake
        self.ctx["settings"] = settings

    async def main(self) -> None:
        if self._pool is None:
            clients = await open_redis_clients(self.ctx["settings"])
            self._pool = clients.queue
            self.ctx["redis_clients"] = clients
            self.keys = clients.keys
            self.queue_name = clients.keys.queue()
            self.health_check_key = clients.keys.worker_health()
        self._start_jobs = self.pool.register_script(_START_JOBS)
        self._fair_order = FairOrder(self.ctx["redis_clients"].store, self.keys)
        await super().main()

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
            if str(exc).startswith("MOVED"):  # a Redis Cluster moved the queue's slot
                logger.error(
                    "the queue's slot moved to another Redis node (a reshard):"
                    " restart the workers to follow it",
                    error=str(exc),
                )
            else:
                logger.warning("reading the queue failed; retrying", error=str(exc))
            await asyncio.sleep(1)

    def _release_sem_dec_counter_on_complete(self) -> None:
        super()._release_sem_dec_counter_on_complete()
        self.wake.set()  # a slot is free: a run waiting in the queue can start now

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """Claim and start the ready jobs read, one caller's backlog not ahead of the others'.

        arq's own `start_jobs`, with its per-job WATCH transaction (four round trips each, one
        job after the other), made one script call for all the jobs there are slots for
        (`scripts/start_jobs.lua`), each claim as atomic: a job is started once, by one worker.
        A burst of runs is then claimed in one round trip, not one per run on an event loop
        already busy streaming the first ones.
        """
        if len(job_ids) > self.max_jobs - self.job_counter:  # else every one is tried anyway
            job_ids = await self._fair_order.order(job_ids)
        taken: list[str] = []
        for job_id_b in job_ids:
            await self.sem.acquire()
            if self.job_counter >= self.max_jobs:
                self.sem.release()
                break
            self.job_counter += 1
            taken.append(job_id_b.decode())
        if not taken:
            return
        timeout_ms = int(self.in_progress_timeout_s * 1000)
        keys = [self.queue_name, *(in_progress_key_prefix + job_id for job_id in taken)]
        try:
            scores = await self._start_jobs(keys=keys, args=[timeout_ms, timestamp_ms(), *taken])
        except BaseException:
            for _ in taken:
                self.job_counter -= 1
                self.sem.release()
            raise
        for job_id, score in zip(taken, scores, strict=True):
            if score is None:  # in progress elsewhere, finished, or deferred
                self.job_counter -= 1
                self.sem.release()
                continue
            task = self.loop.create_task(self.run_job(job_id, int(float(score))))
            task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
            self.tasks[job_id] = task

    # arq's two ends of a job, without the ZREM of its abort set `arq:abort`: a key outside the
    # queue's slot, so a Redis Cluster refuses the whole MULTI; runstream never aborts through
    # arq (`allow_abort_jobs` is off), so nothing is ever in that set.

    async def finish_job(
        self,
        job_id: str,
        finish: bool,
        result_data: bytes | None,
        result_timeout_s: float | None,
        keep_result_forever: bool,
        incr_score: int | None,
        keep_in_progress: float | None,
    ) -> None:
        async with self.pool.pipeline(transaction=True) as tr:
            in_progress_key = in_progress_key_prefix + job_id
            delete_keys = [in_progress_key] if keep_in_progress is None else []
            if keep_in_progress is not None:
                tr.pexpire(in_progress_key, to_ms(keep_in_progress))
            if finish:
                if result_data:
                    expire = None if keep_result_forever else result_timeout_s
                    tr.set(result_key_prefix + job_id, result_data, px=to_ms(expire))
                delete_keys += [retry_key_prefix + job_id, job_key_prefix + job_id]
                tr.zrem(self.queue_name, job_id)
            elif incr_score:
                tr.zincrby(self.queue_name, incr_score, job_id)
            if delete_keys:
                tr.delete(*delete_keys)
            await tr.execute()

    async def finish_failed_job(self, job_id: str, result_data: bytes | None) -> None:
        async with self.pool.pipeline(transaction=True) as tr:
            tr.delete(
                retry_key_prefix + job_id, in_progress_key_prefix + job_id, job_key_prefix + job_id
            )
            tr.zrem(self.queue_name, job_id)
            if result_data is not None and (self.keep_result_forever or self.keep_result_s > 0):
                expire = 0 if self.keep_result_forever else self.keep_result_s
                tr.set(result_key_prefix + job_id, result_data, px=to_ms(expire))
            await tr.execute()


def build_worker(
    settings: Settings,
    *,
    handle_signals: bool = True,
    tracer_provider: TracerProvider | None = None,
    graphs: GraphRegistry | None = None,
) -> RunWorker:
    """An arq Worker for this deployment's queue, configured from `settings`.

    `graphs`: loaded already (`runstream worker` loads them first, to refuse a bad project
    with one line); None: loaded from `settings` when the worker starts.

    `tracer_provider` (stream_store/tracing.py) turns traces on; its owner shuts it down.
    """
    return RunWorker(
        functions=[func(execute_run, name=EXECUTE_RUN, max_tries=1)],
        settings=settings,
        on_startup=startup,
        on_shutdown=shutdown,
        handle_signals=handle_signals,
        job_completion_wait=settings.shutdown_grace_s,  # a float works, despite its int hint
        max_jobs=settings.worker_concurrency,
        job_timeout=settings.job_timeout_s,
        idle_poll_s=settings.poll_delay_s,
        queue_read_limit=window_size(settings.worker_concurrency, settings.max_active_runs),
        keep_result=0,  # outcomes live in Postgres; arq keeps nothing per run
        max_tries=1,
        ctx={"tracer": make_tracer(tracer_provider), "graphs": graphs},
        log_results=False,
    )
