"""The run queue: arq jobs that name a run; Postgres says what the run is.

A job carries the run id, and the run's `traceparent` when it is traced (the worker's span of
the attempt, its claim included, continues the submit's trace). Its arq job id is
`<run_id>:<dispatch>`, so enqueueing the same dispatch twice (a race between two finishers
handing a thread its next run) is a no-op. Each enqueue also publishes on the wake channel:
workers pick the job up at once instead of at their next poll (arq only polls).
"""

from __future__ import annotations

from typing import Any

from arq.connections import ArqRedis

from .errors import redis_errors
from .keys import KeySpace
from .records import Records, RunRecord

__all__ = ["EXECUTE_RUN", "RunQueue"]

EXECUTE_RUN = "execute_run"


class RunQueue:
    def __init__(self, redis: ArqRedis, keys: KeySpace, records: Records) -> None:
        self.redis = redis
        self.records = records
        self.queue_name = keys.queue()
        self.wake_channel = keys.wake_channel()

    async def enqueue(self, run: RunRecord) -> None:
        traced: dict[str, Any] = {"traceparent": run.traceparent} if run.traceparent else {}
        with redis_errors(run.run_id):
            await self.redis.enqueue_job(
                EXECUTE_RUN, run.run_id, _job_id=run.job_id, _queue_name=self.queue_name, **traced
            )
            await self.redis.publish(self.wake_channel, run.run_id)

    async def dispatch_next(self, thread_id: str) -> None:
        """Hand the thread's next queued run (multitask `enqueue`) to the workers, if it may go."""
        following = await self.records.next_queued(thread_id)
        if following is not None:
            await self.enqueue(following)
