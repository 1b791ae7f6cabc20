"""Fair scheduling of the worker's job slots between callers (issue 9).

The queue holds ready jobs oldest first, so one caller's backlog of runs would hold every slot
until it drained, and another caller's run would wait behind all of it. `FairOrder` reorders
the window of ready job ids a worker reads (`runner/job_loop.py`) before it claims them: the
next free slot goes to the owner with the fewest runs in progress (on any worker), the oldest
job first within an owner. A caller alone uses every slot; a caller who starts waiting gets the
next slot that frees.

Only the order changes: each job is still claimed with its in-progress key, so a job is run
once, and every id read is still offered, so nothing queued is skipped. A job's owner is read
from its run's Redis record (`KeySpace.run_of_job`); a job whose record is
missing is ordered as one more owner, never dropped.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from arq.constants import in_progress_key_prefix

from stream_store.connections import StoreRedis
from stream_store.keys import KeySpace

__all__ = ["WINDOW_MIN", "FairOrder", "ReadyJob", "fair_order", "window_size"]

# The fewest ready jobs a worker reads at a time. Fairness holds among the jobs it reads, and a
# caller's backlog is bounded by `RUNSTREAM_MAX_ACTIVE_RUNS` (50 by default): 1000 sees twenty
# callers' full backlogs ahead of a newcomer.
WINDOW_MIN = 1000


def window_size(max_jobs: int, max_active_runs: int) -> int:
    """How many ready job ids a worker reads per poll (`JobLoop.read_limit`)."""
    return max(WINDOW_MIN, 5 * max_jobs, max_active_runs + max_jobs)


@dataclass(frozen=True)
class ReadyJob:
    job_id: bytes
    owner: str
    in_progress: bool


def fair_order(jobs: Sequence[ReadyJob]) -> list[bytes]:
    """The ids of the jobs not in progress, in the order free slots should take them.

    `jobs` is in queue order (oldest first). Water-filling: each next job goes to the owner with
    the fewest jobs in progress plus already placed, ties to the owner whose next job is oldest.
    """
    busy: dict[str, int] = defaultdict(int)
    waiting: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
    for position, job in enumerate(jobs):
        if job.in_progress:
            busy[job.owner] += 1
        else:
            waiting[job.owner].append((position, job.job_id))
    heap = [(busy[owner], queue[0][0], owner) for owner, queue in waiting.items()]
    heapq.heapify(heap)
    taken: dict[str, int] = defaultdict(int)
    ordered: list[bytes] = []
    while heap:
        load, _, owner = heapq.heappop(heap)
        queue = waiting[owner]
        ordered.append(queue[taken[owner]][1])
        taken[owner] += 1
        if taken[owner] < len(queue):
            heapq.heappush(heap, (load + 1, queue[taken[owner]][0], owner))
    return ordered


class FairOrder:
    """Reads the owners and in-progress flags of a window of job ids, in one round trip."""

    def __init__(self, redis: StoreRedis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys

    async def order(self, job_ids: Sequence[bytes]) -> list[bytes]:
        if len(job_ids) < 2:
            return list(job_ids)
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                decoded = job_id.decode()
                pipe.hget(self.keys.run_record(self.keys.run_of_job(decoded)), "owner")
                pipe.exists(in_progress_key_prefix + decoded)
            replies = await pipe.execute()
        jobs = [
            ReadyJob(
                job_id=job_id,
                owner=owner.decode() if isinstance(owner, bytes) else "",
                in_progress=bool(in_progress),
            )
            for job_id, owner, in_progress in zip(
                job_ids, replies[0::2], replies[1::2], strict=True
            )
        ]
        return fair_order(jobs)
