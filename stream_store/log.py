"""The per-run event log on Redis streams, and the live run record beside it.

Costs, in Redis commands: `append` is one EVALSHA (XADD + HSET, plus two EXPIREs on the
terminal event); `read_range` is one XRANGE per page; `read_live` is one XREAD over any number
of runs. Appends are fenced: the script refuses a write whose attempt is not the record's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from .errors import Fenced, StoreUnavailable, StreamGone
from .events import TERMINAL_EVENTS
from .keys import KeySpace

__all__ = ["EventLog", "StoredEvent"]

# KEYS: record, events. ARGV: attempt, event, data, status ('' = unchanged), ttl_s ('' = keep).
_APPEND = """
local current = redis.call('HGET', KEYS[1], 'attempt')
if not current then return redis.error_reply('GONE run record missing') end
if current ~= ARGV[1] then return redis.error_reply('FENCED attempt ' .. current) end
local id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[2], 'd', ARGV[3], 'a', ARGV[1])
redis.call('HSET', KEYS[1], 'last_event_id', id)
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'status', ARGV[4]) end
if ARGV[5] ~= '' then
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  redis.call('EXPIRE', KEYS[2], ARGV[5])
end
return id
"""

# KEYS: record, events. ARGV: owner, thread_id, attempt, event, data, status.
_OPEN = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HGET', KEYS[1], 'last_event_id')
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'thread_id', ARGV[2], 'attempt', ARGV[3])
local id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[4], 'd', ARGV[5], 'a', ARGV[3])
redis.call('HSET', KEYS[1], 'last_event_id', id, 'status', ARGV[6])
return id
"""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event as read back from the stream; `data` is the JSON the writer encoded."""

    id: str
    event: str
    data: bytes
    attempt: int

    @property
    def terminal(self) -> bool:
        return self.event in TERMINAL_EVENTS

    @classmethod
    def from_entry(cls, entry_id: bytes, fields: Mapping[bytes, bytes]) -> StoredEvent:
        return cls(
            id=entry_id.decode(),
            event=fields[b"e"].decode(),
            data=fields[b"d"],
            attempt=int(fields[b"a"]),
        )


class EventLog:
    """Append, read and follow the event streams of runs (one instance per process)."""

    def __init__(self, redis: Redis, keys: KeySpace, stream_ttl_s: int) -> None:
        self.redis = redis
        self.keys = keys
        self.stream_ttl_s = stream_ttl_s
        self._append = redis.register_script(_APPEND)
        self._open = redis.register_script(_OPEN)

    async def open(
        self, run_id: str, *, owner: str, thread_id: str, attempt: int, event: str, data: bytes
    ) -> str:
        """Create the run record and write the stream's first event; a no-op if it exists."""
        keys = [self.keys.run_record(run_id), self.keys.run_events(run_id)]
        args: list[str | bytes | int] = [owner, thread_id, attempt, event, data, "queued"]
        try:
            result = await self._open(keys=keys, args=args)
        except RedisError as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        return result.decode() if isinstance(result, bytes) else str(result)

    async def append(
        self,
        run_id: str,
        attempt: int,
        event: str,
        data: bytes,
        *,
        status: str | None = None,
    ) -> str:
        """Append one event as `attempt`; returns its id.

        Raises:
            Fenced: another attempt owns the run.
            StreamGone: the run record is gone (expired or deleted).
        """
        ttl = str(self.stream_ttl_s) if event in TERMINAL_EVENTS else ""
        keys = [self.keys.run_record(run_id), self.keys.run_events(run_id)]
        try:
            result = await self._append(keys=keys, args=[attempt, event, data, status or "", ttl])
        except ResponseError as exc:
            message = str(exc)
            if message.startswith("FENCED"):
                raise Fenced(f"run {run_id}: {message}") from exc
            if message.startswith("GONE"):
                raise StreamGone(f"run {run_id}: {message}") from exc
            raise StoreUnavailable(f"redis: {exc}") from exc
        except RedisError as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        return result.decode() if isinstance(result, bytes) else str(result)

    async def read_range(self, run_id: str, after: str, count: int = 1000) -> list[StoredEvent]:
        """Up to `count` events strictly after `after` ("0-0" reads from the start)."""
        try:
            entries = await self.redis.xrange(
                self.keys.run_events(run_id), min=f"({after}", max="+", count=count
            )
        except RedisError as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        return [StoredEvent.from_entry(entry_id, fields) for entry_id, fields in entries]

    async def last_event(self, run_id: str) -> StoredEvent | None:
        """The newest event, or None when the stream does not exist."""
        try:
            entries = await self.redis.xrevrange(self.keys.run_events(run_id), count=1)
        except RedisError as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        return StoredEvent.from_entry(*entries[0]) if entries else None

    async def record(self, run_id: str) -> dict[str, str]:
        """The live run record (empty when the stream expired or was never written)."""
        try:
            raw: dict[bytes, bytes] = await self.redis.hgetall(  # type: ignore[misc]
                self.keys.run_record(run_id)
            )
        except RedisError as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        return {k.decode(): v.decode() for k, v in raw.items()}

    async def request_cancel(self, run_id: str) -> None:
        """Flag the run as cancelled and tell every worker; the one running it stops it."""
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.set(self.keys.run_cancel(run_id), b"1", ex=self.stream_ttl_s)
                pipe.publish(self.keys.cancel_channel(), run_id.encode())
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc

    async def cancel_requested(self, run_id: str) -> bool:
        try:
            return bool(await self.redis.exists(self.keys.run_cancel(run_id)))
        except RedisError as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc

    async def delete(self, run_ids: Iterable[str]) -> None:
        """Remove runs' streams and records for good (thread deletion)."""
        keys: list[Any] = []
        for run_id in run_ids:
            keys += [
                self.keys.run_events(run_id),
                self.keys.run_record(run_id),
                self.keys.run_cancel(run_id),
            ]
        if not keys:
            return
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.delete(key)
                await pipe.execute()
        except RedisError as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
