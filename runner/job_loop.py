"""The worker's loop over the run queue: read it when woken, claim fairly, run each job once.

runstream owns every step of a job's way through the queue: its enqueue
(`stream_store/scripts/enqueue_job.lua`), the wake-up (`KeySpace.wake_channel`), the fair order
between callers (`scheduling.py`), the claim (`stream_store/scripts/start_jobs.lua`), the run
and the end of the job. It keeps arq's layout in Redis, through arq's public modules only (its
key prefixes in `arq.constants`, its job format in `arq.jobs`): the queue, a job's key, its
in-progress key, its try counter and the health-check line are read by `runstream status`,
the reapers and the deployment metrics as before (docs/architecture.md, "Libraries' private
parts").

A job is tried once (`max_tries`): a run's fate is decided by runstream, not by the queue. A
job whose worker died is claimed again once its in-progress key expires, finds its tries used
up, and is dropped; the reaper re-queues the run itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from functools import partial
from importlib.resources import files
from typing import Any

import structlog
from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix, retry_key_prefix
from arq.jobs import DeserializationError, JobDef, deserialize_job
from arq.utils import timestamp_ms
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from stream_store.connections import open_redis_clients
from stream_store.keys import KeySpace
from stream_store.settings import Settings

from .scheduling import FairOrder

__all__ = ["Hook", "JobFunction", "JobLoop"]

logger = structlog.get_logger()

JobFunction = Callable[..., Coroutine[Any, Any, Any]]  # (ctx, *args, **kwargs), as arq's
Hook = Callable[[dict[str, Any]], Awaitable[None]]  # on_startup / on_shutdown, given `ctx`

_START_JOBS = (files("stream_store") / "scripts" / "start_jobs.lua").read_text()

RETRY_KEY_TTL_S = 88_400  # a job's try counter outlives the job by a day, as arq's does
IN_PROGRESS_EXTRA_S = 10.0  # a claim outlives the job's timeout by this much, as arq's does
HEALTH_CHECK_INTERVAL_S = 3600.0  # arq's default: `runstream status` reads the beats instead
# Bounds on the steps of `close`, so that no one step can keep a stopping worker alive: the
# cancelled jobs' hand-backs, then `on_shutdown` (its threads join with their own timeouts).
STOP_JOBS_S = 15.0
SHUTDOWN_HOOK_S = 30.0
STOP_STEP_S = 5.0  # the reader's end, the health key's deletion, the pool's close


# Per job, the keys `start_jobs.lua` claims and reads: arq's in-progress key, job, try counter
# (their prefixes; the script builds them from the job ids it reads from the queue itself)
_JOB_KEY_PREFIXES = (in_progress_key_prefix, job_key_prefix, retry_key_prefix)


@dataclass(frozen=True)
class _Started:
    """A job `start_jobs.lua` claimed for this worker, with what it read of it."""

    job_id: str
    score: int
    raw: bytes | None  # arq's serialized job; None when its key expired
    job_try: int


@dataclass
class JobCounts:
    """What the health-check line reports, as arq's `j_complete`, `j_failed`, `j_retried`."""

    complete: int = 0
    failed: int = 0
    retried: int = 0  # put back in the queue for another try


class JobLoop:
    """Reads the queue when woken or every `idle_poll_s`, and runs up to `max_jobs` jobs.

    A read happens when a run is queued (`wake`, set by the worker's pub/sub listener) or a
    job slot frees up; `idle_poll_s` is only the fallback for a lost wake-up or a deferred
    job. When more jobs are ready than slots are free, they are started in a fair order between
    callers. All of them are claimed in one script call, each claim atomic: a job is started
    once, by one worker.

    It connects in `main`: only then is it known whether Redis is a cluster, and with that
    the queue's name and node (`stream_store.connections.RedisClients`). `pool` is the client
    of the queue's node; jobs get `ctx` with the settings, the wake event, the Redis clients,
    what `on_startup` added, and the job's own `job_id`, `job_try`, `enqueue_time`, `score`.
    """

    def __init__(
        self,
        functions: Mapping[str, JobFunction],
        *,
        settings: Settings,
        on_startup: Hook,
        on_shutdown: Hook,
        max_jobs: int,
        job_timeout_s: float,
        idle_poll_s: float,
        grace_s: float,
        read_limit: int,
        max_tries: int = 1,
        health_check_interval_s: float = HEALTH_CHECK_INTERVAL_S,
        ctx: dict[str, Any] | None = None,
    ) -> None:
        self.functions = dict(functions)
        self.settings = settings
        self.on_startup = on_startup
        self.on_shutdown = on_shutdown
        self.max_jobs = max_jobs
        self.job_timeout_s = job_timeout_s
        self.in_progress_timeout_s = job_timeout_s + IN_PROGRESS_EXTRA_S
        self.idle_poll_s = idle_poll_s
        self.grace_s = grace_s  # how long running jobs may go on after a stop signal
        self.read_limit = read_limit
        self.max_tries = max_tries
        self.health_check_interval_s = health_check_interval_s
        self.wake = asyncio.Event()
        self.wake.set()  # read the queue at once on start
        self.ctx: dict[str, Any] = {**(ctx or {}), "settings": settings, "wake": self.wake}
        self.pool: ArqRedis | None = None
        self.keys = KeySpace(settings.redis_prefix)
        self.tasks: dict[str, asyncio.Task[None]] = {}  # the running jobs, by job id
        self.counts = JobCounts()
        self._claim: AsyncScript | None = None  # start_jobs.lua, once connected
        self._fair_order: FairOrder | None = None
        self._main: asyncio.Task[None] | None = None
        self._stopping = False
        self._closed = False
        self._health_at = -float("inf")

    def run(self, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> None:
        """`runstream worker`: serve on a new event loop until SIGTERM or SIGINT."""
        loop = (loop_factory or asyncio.new_event_loop)()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.serve())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    async def serve(self) -> None:
        """Run `main` until SIGTERM or SIGINT (or its own end), then `close`."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        signals = (signal.SIGINT, signal.SIGTERM)
        for signum in signals:
            loop.add_signal_handler(signum, stop.set)
        main = self._main = asyncio.create_task(self.main())
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({main, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            await self.close()
            for signum in signals:
                loop.remove_signal_handler(signum)
        if main.done() and not main.cancelled():
            main.result()  # a failed start-up, say: the process exits with it

    async def main(self) -> None:
        """Connect, start up (`on_startup`), then read the queue until `close`."""
        self._main = asyncio.current_task()
        clients = await open_redis_clients(self.settings)
        self.pool, self.keys = clients.queue, clients.keys
        self.ctx["redis_clients"] = clients
        self._claim = self.pool.register_script(_START_JOBS)
        self._fair_order = FairOrder(clients.store, self.keys)
        await self.on_startup(self.ctx)
        while not self._stopping:
            if not self.wake.is_set():  # else straight on: a wait costs a turn of a busy loop
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self.idle_poll_s)
            self.wake.clear()  # before reading: a wake-up during the read triggers another read
            if self._stopping:
                break
            try:
                await self._read()
                await self._record_health()
            except RedisError as exc:
                # Out of reach, or refusing writes at `maxmemory`: the jobs' bookkeeping is
                # stale at worst, and the runs' own state is fenced. Read the queue again.
                if str(exc).startswith("MOVED"):  # a Redis Cluster moved the queue's slot
                    logger.error(
                        "the queue's slot moved to another Redis node (a reshard):"
                        " restart the workers to follow it",
                        error=str(exc),
                    )
                else:
                    logger.warning("reading the queue failed; retrying", error=str(exc))
                await asyncio.sleep(1)

    async def close(self, grace_s: float | None = None) -> None:
        """Stop: no more reads; the running jobs get `grace_s` (default: the configured grace)
        to finish, then are cancelled (a run hands itself back); then `on_shutdown`, then the
        pool is closed. Every step is bounded: a stuck one is logged, not waited on forever."""
        if self._closed:
            return
        self._closed = self._stopping = True
        grace_s = self.grace_s if grace_s is None else grace_s
        await self._stop_reading()
        running = [task for task in self.tasks.values() if not task.done()]
        logger.info("worker stopping", running=len(running), grace_s=grace_s)
        if running and grace_s > 0:
            await asyncio.wait(running, timeout=grace_s)
        left = [task for task in running if not task.done()]
        for task in left:
            task.cancel()
        if left:
            _, stuck = await asyncio.wait(left, timeout=STOP_JOBS_S)
            if stuck:
                logger.error("jobs did not stop; leaving them", jobs=len(stuck))
        pool, self.pool = self.pool, None
        if pool is not None:
            with contextlib.suppress(RedisError, TimeoutError):
                async with asyncio.timeout(STOP_STEP_S):
                    await pool.delete(self.keys.worker_health())
        try:
            async with asyncio.timeout(SHUTDOWN_HOOK_S):
                await self.on_shutdown(self.ctx)
        except TimeoutError:
            logger.error("the worker's shutdown did not finish in time", after_s=SHUTDOWN_HOOK_S)
        finally:
            if pool is not None:
                with contextlib.suppress(RedisError, TimeoutError):
                    async with asyncio.timeout(STOP_STEP_S):
                        await pool.aclose()
        logger.info("worker stopped", **asdict(self.counts))

    async def _stop_reading(self) -> None:
        """End `main`'s task: cancelled, and woken in case a cancel is lost (Python 3.11: one
        that lands as a `wait_for` completes), when it sees `_stopping` at its next turn."""
        main, current = self._main, asyncio.current_task()
        if main is None or main is current:
            return
        self.wake.set()
        deadline = time.monotonic() + STOP_STEP_S
        while not main.done() and time.monotonic() < deadline:
            main.cancel()
            await asyncio.wait({main}, timeout=0.5)
        if not main.done():
            logger.error("the queue reader did not stop; leaving it")

    async def _read(self) -> None:
        """Start the ready jobs there are free slots for, one caller's backlog not ahead of
        the others'."""
        free = self.max_jobs - len(self.tasks)
        if free <= 0:
            return
        assert self._fair_order is not None
        # One round trip: the script reads the queue and starts what is due (a busy worker's
        # loop takes a turn of every running graph per round trip, tens of ms in a burst).
        read = await self._start_jobs(free)
        if len(read) == 1:  # more due than slots free: the fair order chooses, then they start
            chosen = (await self._fair_order.order(read[0]))[:free]
            read = await self._start_jobs(free, [job_id.decode() for job_id in chosen])
        job_ids, claims = read
        taken = [job_id.decode() for job_id in job_ids]
        for job_id, claim in zip(taken, claims, strict=True):
            if claim is None:  # in progress elsewhere, finished, or deferred
                continue
            score, raw, job_try = claim
            started = _Started(job_id, int(float(score)), raw, int(job_try))
            task = asyncio.create_task(self._run(started), name=job_id)
            self.tasks[job_id] = task
            task.add_done_callback(partial(self._ended, job_id))

    async def _start_jobs(self, free: int, job_ids: Sequence[str] = ()) -> list[Any]:
        """`start_jobs.lua`: start `job_ids`, or, with none, the due jobs if they fit in `free`
        slots; its reply, {ids, claims} or, when more are due than fit, {ids}."""
        assert self.pool is not None and self._claim is not None
        keys = [self.keys.queue()]
        for job_id in job_ids:
            keys += [prefix + job_id for prefix in _JOB_KEY_PREFIXES]
        args: list[str | int] = [
            int(self.in_progress_timeout_s * 1000),
            timestamp_ms(),
            RETRY_KEY_TTL_S,
            free,
            self.read_limit,
            *_JOB_KEY_PREFIXES,
            *job_ids,
        ]
        reply: list[Any] = await self._claim(keys=keys, args=args)
        return reply

    def _ended(self, job_id: str, task: asyncio.Task[None]) -> None:
        """A slot is free: a run waiting in the queue can start now."""
        self.tasks.pop(job_id, None)
        self.wake.set()
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.error("job bookkeeping failed", job_id=job_id, error=repr(exc))

    async def _run(self, started: _Started) -> None:
        """One claimed job: its function under the job timeout, then the end of the job."""
        assert self.pool is not None
        pool = self.pool
        job_id, job_try = started.job_id, started.job_try
        job = self._job(job_id, started.raw, job_try, pool)
        if job is None:
            self.counts.failed += 1
            await asyncio.shield(self._finish(pool, job_id, again=False))
            return
        ctx = {
            **self.ctx,
            "job_id": job_id,
            "job_try": job_try,
            "enqueue_time": job.enqueue_time,
            "score": started.score,
        }
        # A task of its own, as arq runs a job: the job may cancel and uncancel its own task
        # (`runner/execute.py`) without confusing the timeout around it.
        function = self.functions[job.function]
        running = asyncio.create_task(function(ctx, *job.args, **job.kwargs))
        again = False
        try:
            await asyncio.wait_for(running, self.job_timeout_s)
        except asyncio.CancelledError:
            again = job_try < self.max_tries  # the worker is stopping: a try left, put it back
            self.counts.retried += again
            self.counts.failed += not again
            raise
        except TimeoutError:
            logger.error("job timed out", job_id=job_id, timeout_s=self.job_timeout_s)
            self.counts.failed += 1
        except Exception:
            logger.exception("job failed", job_id=job_id, function=job.function)
            self.counts.failed += 1
        else:
            self.counts.complete += 1
        finally:
            await asyncio.shield(self._finish(pool, job_id, again=again))

    def _job(self, job_id: str, raw: bytes | None, job_try: int, pool: ArqRedis) -> JobDef | None:
        """The job to run, or None (logged) when it is not to run: gone, unreadable, of an
        unknown function, or tried `max_tries` times already."""
        if raw is None:
            logger.warning("job expired", job_id=job_id)
            return None
        try:
            job = deserialize_job(raw, deserializer=pool.job_deserializer)
        except DeserializationError:
            logger.exception("job unreadable", job_id=job_id)
            return None
        if job.function not in self.functions:
            logger.warning("job of an unknown function", job_id=job_id, function=job.function)
            return None
        if job_try > self.max_tries:
            logger.warning("job tried too often; dropped", job_id=job_id, tries=job_try)
            return None
        return job

    async def _finish(self, pool: ArqRedis, job_id: str, *, again: bool) -> None:
        """arq's end of a job in one MULTI on the queue's slot: done, it leaves the queue with
        its keys; `again`, only its claim goes, and the next read starts it anew. No result is
        kept (outcomes live in Postgres), and nothing touches arq's abort set: a key outside
        the queue's slot, so a Redis Cluster would refuse the whole MULTI."""
        in_progress_key = in_progress_key_prefix + job_id
        try:
            async with pool.pipeline(transaction=True) as tr:
                if again:
                    tr.delete(in_progress_key)
                else:
                    tr.delete(in_progress_key, retry_key_prefix + job_id, job_key_prefix + job_id)
                    tr.zrem(self.keys.queue(), job_id)
                await tr.execute()
        except RedisError as exc:  # its claim expires; the next read drops it (tries used up)
            logger.warning("recording the job's end failed", job_id=job_id, error=str(exc))

    async def _record_health(self) -> None:
        """arq's health-check line, under the same key and in the same format."""
        now = time.monotonic()
        if now - self._health_at < self.health_check_interval_s:
            return
        assert self.pool is not None
        self._health_at = now
        queued = await self.pool.zcard(self.keys.queue())
        counts = self.counts
        line = (
            f"{datetime.now():%b-%d %H:%M:%S} j_complete={counts.complete}"
            f" j_failed={counts.failed} j_retried={counts.retried}"
            f" j_ongoing={len(self.tasks)} queued={queued}"
        )
        ttl_ms = int((self.health_check_interval_s + 1) * 1000)
        await self.pool.psetex(self.keys.worker_health(), ttl_ms, line.encode())
