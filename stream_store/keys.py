"""The Redis key layout: every key runstream writes is spelled here and nowhere else.

Per-run keys carry the run id in a hash tag (`{run_id}`) so that a Redis Cluster keeps all of a
run's keys on one slot and the append script can touch them atomically. Per-caller keys carry
the owner the same way (`{owner}`), so one script can take a caller's and a token's slot.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KeySpace"]


@dataclass(frozen=True)
class KeySpace:
    """Keys under one prefix; tests give each test its own prefix."""

    prefix: str = "runstream"

    def run_events(self, run_id: str) -> str:
        """Stream: the run's event log (XADD by the worker, XRANGE/XREAD by servers)."""
        return f"{self.prefix}:run:{{{run_id}}}:events"

    def run_record(self, run_id: str) -> str:
        """Hash: live state of the run (owner, thread, status, attempt, last event id)."""
        return f"{self.prefix}:run:{{{run_id}}}:record"

    def run_cancel(self, run_id: str) -> str:
        """String: set when a cancel was requested, so a worker starting late still sees it."""
        return f"{self.prefix}:run:{{{run_id}}}:cancel"

    def run_repair(self, run_id: str) -> str:
        """String with a short TTL: one reaper at a time writes a run's outcome from Postgres."""
        return f"{self.prefix}:run:{{{run_id}}}:repair"

    def caller_submits(self, owner: str) -> str:
        """Sorted set: the caller's submits of the last minute, scored by Redis time (ms)."""
        return f"{self.prefix}:caller:{{{owner}}}:submits"

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
        return f"{self.prefix}:queue:health-check"

    def workers(self) -> str:
        """Sorted set: ids of workers that beat lately, scored by their last beat (unix ms)."""
        return f"{self.prefix}:workers"

    def worker_beat(self, worker_id: str) -> str:
        """String with a TTL: a live worker's last heartbeat (`stream_store.workers.WorkerBeat`)."""
        return f"{self.prefix}:worker:{worker_id}:beat"

    def queue(self) -> str:
        """The arq queue (a sorted set) that workers of this deployment poll."""
        return f"{self.prefix}:queue"
