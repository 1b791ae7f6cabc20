"""The Redis key layout: every key runstream writes is spelled here and nowhere else.

Every script's keys share one hash tag, so that on a Redis Cluster they are on one slot:

- a run's keys share `{run_id}` on one Redis. On a cluster (`shards` > 0) they share their
  shard's tag instead, `{<prefix>:s<k>}` with k = crc32(run_id) mod `shards`: a server's stream
  reader then blocks one XREAD per shard that has runs watched, not one per run;
- a caller's keys share `{owner}`, so one script can take a caller's and a token's slot;
- on a cluster the deployment's own keys (the arq queue, its job ids, the workers' beats)
  share `{<prefix>}`, the slot of arq's MULTI/WATCH transactions and of the presence check.

On one Redis the names are those runstream always used.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

__all__ = ["KeySpace"]


@dataclass(frozen=True)
class KeySpace:
    """Keys under one prefix; tests give each test its own prefix. `shards` is 0 on one Redis,
    the number of run shards on a Redis Cluster (`RUNSTREAM_REDIS_CLUSTER_SHARDS`)."""

    prefix: str = "runstream"
    shards: int = 0

    def shard(self, run_id: str) -> int:
        """The group of runs whose streams one XREAD can read: 0 for all on one Redis."""
        return zlib.crc32(run_id.encode()) % self.shards if self.shards else 0

    def _run(self, run_id: str) -> str:
        if self.shards:
            return f"{self.prefix}:run:{{{self.prefix}:s{self.shard(run_id)}}}:{run_id}"
        return f"{self.prefix}:run:{{{run_id}}}"

    def _deployment(self) -> str:
        return f"{{{self.prefix}}}" if self.shards else self.prefix

    def job_id(self, run_id: str, dispatch: int) -> str:
        """The arq job id of a run's dispatch (on a cluster, in the queue's slot)."""
        tag = f"{{{self.prefix}}}" if self.shards else ""
        return f"{tag}{run_id}:{dispatch}"

    @staticmethod
    def run_of_job(job_id: str) -> str:
        """The run id in a job id made by `job_id`."""
        return job_id.rpartition("}")[2].partition(":")[0]

    def run_events(self, run_id: str) -> str:
        """Stream: the run's event log (XADD by the worker, XRANGE/XREAD by servers)."""
        return f"{self._run(run_id)}:events"

    def run_record(self, run_id: str) -> str:
        """Hash: live state of the run (owner, thread, status, attempt, last event id)."""
        return f"{self._run(run_id)}:record"

    def run_cancel(self, run_id: str) -> str:
        """String: set when a cancel was requested, so a worker starting late still sees it."""
        return f"{self._run(run_id)}:cancel"

    def run_repair(self, run_id: str) -> str:
        """String with a short TTL: one reaper at a time writes a run's outcome from Postgres."""
        return f"{self._run(run_id)}:repair"

    def caller_window(self, owner: str, budget: str) -> str:
        """Sorted set: the caller's requests of one budget (`submits`, `writes`, `queries`) in
        the last minute, scored by Redis time (ms)."""
        return f"{self.prefix}:caller:{{{owner}}}:{budget}"

    def caller_streams(self, owner: str) -> str:
        """Sorted set: the caller's open SSE connections, scored by when each lapses (ms)."""
        return f"{self.prefix}:caller:{{{owner}}}:streams"

    def token_streams(self, owner: str, token_digest: str) -> str:
        """Sorted set: the SSE connections opened with one stream token (named by its digest)."""
        return f"{self.prefix}:caller:{{{owner}}}:token:{token_digest}:streams"

    def cancel_channel(self) -> str:
        """Pub/sub channel on which servers tell workers to stop a running run."""
        return f"{self.prefix}:cancel"

    def wake_channel(self) -> str:
        """Pub/sub channel on which a queued run wakes idle workers (instead of a poll)."""
        return f"{self.prefix}:queue:wake"

    def worker_health(self) -> str:
        """String: arq's health-check line for the workers of this deployment."""
        return f"{self._deployment()}:queue:health-check"

    def workers(self) -> str:
        """Sorted set: ids of workers that beat lately, scored by their last beat (unix ms)."""
        return f"{self._deployment()}:workers"

    def worker_beat(self, worker_id: str) -> str:
        """String with a TTL: a live worker's last heartbeat (`stream_store.workers.WorkerBeat`)."""
        return f"{self._deployment()}:worker:{worker_id}:beat"

    def reaper_turn(self) -> str:
        """String with a TTL of one reaper interval: the worker whose pass it is. Whoever sets
        it (SET NX) runs the pass; the rest skip theirs, so passes do not multiply with
        workers."""
        return f"{self._deployment()}:reaper:turn"

    def reaper_heads_after(self) -> str:
        """String: the thread id after which the next pass looks at queued runs (a keyset
        cursor; missing: from the start)."""
        return f"{self._deployment()}:reaper:heads-after"

    def queue(self) -> str:
        """The arq queue (a sorted set) that workers of this deployment poll."""
        return f"{self._deployment()}:queue"
