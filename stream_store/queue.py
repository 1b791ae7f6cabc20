"""The run queue: arq jobs that name a run; Postgres says what the run is.

A job carries the run id, and the run's `traceparent` when it is traced (the worker's span of
the attempt, its claim included, continues the submit's trace). Its arq job id is
`<run_id>:<dispatch>` (`KeySpace.job_id`), so enqueueing the same dispatch twice (a race
between two finishers handing a thread its next run) is a no-op. Each enqueue also publishes
on the wake channel: workers pick the job up at once instead of at their next poll (arq only
polls).
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from arq.connections import ArqRedis
from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms

from .batch_sender import BatchSender
from .keys import KeySpace
from .run_records import RunRecord, RunRecords

__all__ = ["EXECUTE_RUN", "RunQueue"]

EXECUTE_RUN = "execute_run"

_ENQUEUE_JOB = (files("stream_store") / "scripts" / "enqueue_job.lua").read_text()


class RunQueue:
    def __init__(self, redis: ArqRedis, keys: KeySpace, run_records: RunRecords) -> None:
        self.redis = redis  # the queue's node (`RedisClients.queue`)
        self.run_records = run_records
        self.keys = keys
        self.queue_name = keys.queue()
        self.wake_channel = keys.wake_channel()
        # Every run's job is queued with the others' of that moment (a burst of submits).
        self._enqueues = BatchSender(redis, redis.register_script(_ENQUEUE_JOB), "the queue")

    async def aclose(self) -> None:
        """Stop sending (process shutdown); callers still waiting get StoreUnavailable."""
        await self._enqueues.aclose()

    async def enqueue(self, run: RunRecord) -> None:
        """Queue the run's job and wake the workers, unless its job is queued or running
        already (a job that ended left no key, so it is queued again: the claim, queued runs
        only, keeps a run from running twice).

        One script call (`scripts/enqueue_job.lua`) does what `ArqRedis.enqueue_job` and a
        PUBLISH would in five round trips; the job is serialized as arq's own.
        """
        traced: dict[str, Any] = {"traceparent": run.traceparent} if run.traceparent else {}
        now = timestamp_ms()
        job = serialize_job(
            EXECUTE_RUN, (run.run_id,), traced, None, now, serializer=self.redis.job_serializer
        )
        job_id = self.keys.job_id(run.run_id, run.dispatch)
        keys = [job_key_prefix + job_id, result_key_prefix + job_id, self.queue_name]
        args: list[str | int | bytes] = [
            job_id,
            now,
            self.redis.expires_extra_ms,
            job,
            self.wake_channel,
            run.run_id,
        ]
        await self._enqueues.send(run.run_id, keys, args)

    async def dispatch_next(self, thread_id: str) -> None:
        """Hand the thread's next queued run (multitask `enqueue`) to the workers, if it may go."""
        following = await self.run_records.next_queued(thread_id)
        if following is not None:
            await self.enqueue(following)
