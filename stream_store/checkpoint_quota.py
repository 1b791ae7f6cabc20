"""How many checkpoints a thread, and how many bytes of them a caller, may gain outside a run
(`RUNSTREAM_MAX_THREAD_CHECKPOINTS`, `RUNSTREAM_MAX_CHECKPOINT_BYTES`).

A state write adds a checkpoint and a copy duplicates every checkpoint of a thread: one copy of
a thread with 40 state writes duplicated 21.7 MB in 0.6 s, and nothing stopped a caller doing it
again. The check runs in the write's own transaction, under the caller's advisory lock held to
its end, so writes at once cannot pass a cap together. Runs are never stopped by it: a run
mid-answer has no good place to stop, and what a run writes is bounded by its own limits.

Bytes are the checkpointer's rows as Postgres keeps them (`pg_column_size`, after compression):
checkpoints with their metadata, channel blobs and pending writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from .errors import QuotaExceeded
from .owner_caps import count_locked

__all__ = ["CheckpointQuota"]

_BYTES_OF_THREADS = (
    "(SELECT coalesce(sum(pg_column_size(c.checkpoint) + pg_column_size(c.metadata)), 0)"
    " FROM checkpoints c WHERE c.thread_id IN ({threads}))"
    " + (SELECT coalesce(sum(pg_column_size(b.blob)), 0)"
    " FROM checkpoint_blobs b WHERE b.thread_id IN ({threads}))"
    " + (SELECT coalesce(sum(pg_column_size(w.blob)), 0)"
    " FROM checkpoint_writes w WHERE w.thread_id IN ({threads}))"
)
_OWNED = "SELECT t.thread_id::text FROM runstream_threads t WHERE t.owner = %(owner)s"
_USAGE = (
    "SELECT (SELECT count(*) FROM checkpoints WHERE thread_id = %(thread)s) AS thread_checkpoints,"
    f" {_BYTES_OF_THREADS.format(threads='%(thread)s')} AS thread_bytes,"
    f" {_BYTES_OF_THREADS.format(threads=_OWNED)} AS owner_bytes"
)


@dataclass(frozen=True, slots=True)
class CheckpointQuota:
    """The two caps (0: no limit), checked before a write outside a run adds checkpoints."""

    max_per_thread: int
    max_owner_bytes: int

    async def check(
        self, conn: AsyncConnection[DictRow], owner: str, thread_id: str, *, copy: bool
    ) -> None:
        """Refuse a state write to `thread_id` (`copy` False: one checkpoint more) or a copy of
        it (`copy` True: all of its checkpoints again, on a new thread) past a cap, in `conn`'s
        transaction.

        Raises:
            QuotaExceeded: 413 `too_many_checkpoints` or `checkpoints_full`.
        """
        if not self.max_per_thread and not self.max_owner_bytes:
            return
        usage = await count_locked(
            conn, owner, "checkpoints", _USAGE, {"thread": thread_id, "owner": owner}
        )
        count, thread_bytes = int(usage["thread_checkpoints"]), int(usage["thread_bytes"])
        owner_bytes = int(usage["owner_bytes"])
        full = count > self.max_per_thread if copy else count >= self.max_per_thread
        if self.max_per_thread and full:
            raise QuotaExceeded(
                f"thread {thread_id} has {count} checkpoints and RUNSTREAM_MAX_THREAD_CHECKPOINTS"
                f" allows {self.max_per_thread}; prune it (strategy keep_latest) first",
                code="too_many_checkpoints",
            )
        adding = thread_bytes if copy else 0
        if self.max_owner_bytes and owner_bytes + adding >= self.max_owner_bytes:
            what = f", the copy {adding} more," if copy else ""
            raise QuotaExceeded(
                f"your threads' checkpoints hold {owner_bytes} bytes{what} and"
                f" RUNSTREAM_MAX_CHECKPOINT_BYTES allows {self.max_owner_bytes};"
                " delete or prune threads first",
                code="checkpoints_full",
            )
