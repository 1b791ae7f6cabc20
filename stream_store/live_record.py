"""The live run record: the Redis hash beside a run's stream, typed, and what its lease
scripts answer.

The hash (`<prefix>:run:{<run_id>}:record`, docs/architecture.md section 2) is written only by
the stream scripts (`scripts/*.lua`, called by `log.py`); Python reads it as a `LiveRecord`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from wire.events import RunStatus

__all__ = ["Claimed", "LiveRecord", "TakeOver"]


@dataclass(frozen=True, slots=True)
class LiveRecord:
    """The hash beside a run's stream: who may read it, which attempt may write it, how far
    it got."""

    owner: str
    thread_id: str
    status: RunStatus
    attempt: int  # the attempt that may write; bumped by a take-over
    first_id: str  # the stream's first event (a stream rebuilt after Redis lost it starts anew)
    last_event_id: str
    retry_attempt: int  # the last attempt whose `retry` event was written
    ended: bool  # the terminal event is written: nothing more ever is
    lease_until: int | None  # Redis time (ms) the running attempt's lease ends; None: no lease

    @classmethod
    def from_hash(cls, raw: Mapping[bytes, bytes]) -> LiveRecord:
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        return cls(
            owner=fields.get("owner", ""),
            thread_id=fields.get("thread_id", ""),
            status=RunStatus(fields.get("status", RunStatus.QUEUED)),
            attempt=int(fields.get("attempt", 0)),
            first_id=fields.get("first_id", "0-0"),
            last_event_id=fields.get("last_event_id", "0-0"),
            retry_attempt=int(fields.get("retry_attempt", 0)),
            ended=fields.get("ended") == "1",
            lease_until=int(fields["lease_until"]) if "lease_until" in fields else None,
        )


class Claimed(StrEnum):
    """What `EventLog.claim` did after taking the lease."""

    RUNNING = "running"  # the `running` event is written
    CANCELLED = "cancelled"  # a cancel was requested: nothing written
    RETRY = "retry"  # the attempt's `retry` announcement comes first: nothing written


class TakeOver(StrEnum):
    """What `EventLog.take_over` found."""

    TAKEN = "taken"  # attempt + 1 now owns the run (also when an earlier take-over did it)
    ALIVE = "alive"  # its lease still runs, or its holder is not among the gone: leave it
    MISSING = "missing"  # the record is gone: expired, deleted, or lost by Redis
    STALE = "stale"  # the record is at another attempt: the run already moved on
