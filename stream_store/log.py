"""The per-run event log on Redis streams, and the live run record beside it.

Costs, in Redis commands: `append` is one EVALSHA (XADD + HSET, plus two EXPIREs on the
terminal event), and `append_batch` one EVALSHA for any number of events; `read_range` is one
XRANGE per page; `read_live` is one XREAD over any number of runs. Appends are fenced: the
script refuses a write whose attempt is not the record's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from .errors import Fenced, StoreUnavailable, StreamGone
from .events import TERMINAL_EVENTS
from .keys import KeySpace

__all__ = ["EventLog", "StoredEvent"]

_NOW_MS = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""

# KEYS: record, events. ARGV: attempt, event, data, status ('' = unchanged), ttl_s ('' = keep),
# settled ('1' = Postgres already recorded this attempt's outcome).
# Nothing is ever appended after the terminal event (`ended`), whoever tries: a run has one.
# Refused when another attempt owns the run, or when the writer's lease has run out: a worker
# that was paused past its lease cannot write even before anyone has taken the run over. The
# events that report an outcome Postgres accepted from this attempt are exempt from the lease
# (not from the attempt check): the outcome is decided, and its stream must say so.
_APPEND = (
    _NOW_MS
    + """
local rec = redis.call('HMGET', KEYS[1], 'attempt', 'lease_until', 'ended')
if not rec[1] then return redis.error_reply('GONE run record missing') end
if rec[3] then return redis.error_reply('FENCED the stream has its terminal event') end
if rec[1] ~= ARGV[1] then return redis.error_reply('FENCED attempt ' .. rec[1]) end
if ARGV[6] ~= '1' and rec[2] and tonumber(rec[2]) < now then
  return redis.error_reply('FENCED lease expired')
end
local id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[2], 'd', ARGV[3], 'a', ARGV[1])
redis.call('HSET', KEYS[1], 'last_event_id', id)
if ARGV[2] == 'done' or ARGV[2] == 'error' then redis.call('HSET', KEYS[1], 'ended', '1') end
if ARGV[2] == 'retry' then redis.call('HSET', KEYS[1], 'retry_attempt', ARGV[1]) end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'status', ARGV[4])
  if ARGV[4] ~= 'running' then redis.call('HDEL', KEYS[1], 'lease_until') end
end
if ARGV[5] ~= '' then
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  redis.call('EXPIRE', KEYS[2], ARGV[5])
end
return id
"""
)

# KEYS: record, events. ARGV: attempt, then event and data for each event. The same fence as
# `_APPEND`, for a batch of events that change nothing but the stream (tokens, messages):
# one round trip for all the events a run produced while the previous batch was in flight.
_APPEND_BATCH = (
    _NOW_MS
    + """
local rec = redis.call('HMGET', KEYS[1], 'attempt', 'lease_until', 'ended')
if not rec[1] then return redis.error_reply('GONE run record missing') end
if rec[3] then return redis.error_reply('FENCED the stream has its terminal event') end
if rec[1] ~= ARGV[1] then return redis.error_reply('FENCED attempt ' .. rec[1]) end
if rec[2] and tonumber(rec[2]) < now then return redis.error_reply('FENCED lease expired') end
local id
for i = 2, #ARGV, 2 do
  id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[i], 'd', ARGV[i + 1], 'a', ARGV[1])
end
redis.call('HSET', KEYS[1], 'last_event_id', id)
return id
"""
)

# KEYS: record, events. ARGV: owner, thread_id, attempt, event, data, status.
_OPEN = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HGET', KEYS[1], 'last_event_id')
end
local id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[4], 'd', ARGV[5], 'a', ARGV[3])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'thread_id', ARGV[2], 'attempt', ARGV[3],
           'first_id', id, 'last_event_id', id, 'status', ARGV[6])
if ARGV[4] == 'retry' then redis.call('HSET', KEYS[1], 'retry_attempt', ARGV[3]) end
return id
"""

# KEYS: record. ARGV: attempt, lease_ms. Returns the attempt that last started executing.
_CLAIM = (
    _NOW_MS
    + """
local rec = redis.call('HMGET', KEYS[1], 'attempt', 'started_attempt')
if not rec[1] then return redis.error_reply('GONE run record missing') end
if tonumber(rec[1]) > tonumber(ARGV[1]) then
  return redis.error_reply('FENCED attempt ' .. rec[1])
end
redis.call('HSET', KEYS[1], 'attempt', ARGV[1], 'started_attempt', ARGV[1],
           'lease_until', now + tonumber(ARGV[2]))
return tonumber(rec[2] or '0')
"""
)

# KEYS: record. ARGV: attempt, lease_ms.
_RENEW = (
    _NOW_MS
    + """
local rec = redis.call('HMGET', KEYS[1], 'attempt', 'lease_until')
if not rec[1] then return redis.error_reply('GONE run record missing') end
if rec[1] ~= ARGV[1] then return redis.error_reply('FENCED attempt ' .. rec[1]) end
if not rec[2] or tonumber(rec[2]) < now then
  return redis.error_reply('FENCED lease expired')
end
redis.call('HSET', KEYS[1], 'lease_until', now + tonumber(ARGV[2]))
return 1
"""
)

# KEYS: record. ARGV: the attempt Postgres says is running, '1' to ignore the lease (hand-back).
# 'alive' (lease still held), 'missing' (record lost), 'taken' (fenced: attempt+1 now owns it;
# idempotent, so a reaper that died half-way can be finished by another), 'stale' otherwise.
_TAKE_OVER = (
    _NOW_MS
    + """
local rec = redis.call('HMGET', KEYS[1], 'attempt', 'lease_until')
if not rec[1] then return 'missing' end
local current, seen = tonumber(rec[1]), tonumber(ARGV[1])
if current == seen + 1 then return 'taken' end
if current ~= seen then return 'stale' end
if ARGV[2] ~= '1' and rec[2] and tonumber(rec[2]) >= now then return 'alive' end
redis.call('HSET', KEYS[1], 'attempt', seen + 1)
redis.call('HDEL', KEYS[1], 'lease_until')
return 'taken'
"""
)


def _store_error(run_id: str, exc: RedisError) -> Exception:
    """What a script's error means: fenced out, the run gone, or Redis not answering."""
    message = str(exc)
    if isinstance(exc, ResponseError) and message.startswith("FENCED"):
        return Fenced(f"run {run_id}: {message}")
    if isinstance(exc, ResponseError) and message.startswith("GONE"):
        return StreamGone(f"run {run_id}: {message}")
    return StoreUnavailable(f"redis: {exc}")


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
        self._append_batch = redis.register_script(_APPEND_BATCH)
        self._open = redis.register_script(_OPEN)
        self._claim = redis.register_script(_CLAIM)
        self._renew = redis.register_script(_RENEW)
        self._take_over = redis.register_script(_TAKE_OVER)
        # Batches of all runs waiting for the next pipeline (see `append_batch`).
        self._outbox: list[tuple[str, list[str], list[Any], asyncio.Future[str]]] = []
        self._sender: asyncio.Task[None] | None = None

    async def _call(self, script: Any, run_id: str, keys: list[str], args: list[Any]) -> Any:
        try:
            return await script(keys=keys, args=args)
        except RedisError as exc:
            raise _store_error(run_id, exc) from exc

    async def aclose(self) -> None:
        """Stop sending batches (process shutdown); callers still waiting get StoreUnavailable."""
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
        for *_, future in self._outbox:
            if not future.done():
                future.set_exception(StoreUnavailable("the event log is closed"))
        self._outbox.clear()

    async def open(
        self,
        run_id: str,
        *,
        owner: str,
        thread_id: str,
        attempt: int,
        event: str,
        data: bytes,
        status: str = "queued",
    ) -> str:
        """Create the run record and write the stream's first event; a no-op if it exists."""
        keys = [self.keys.run_record(run_id), self.keys.run_events(run_id)]
        args: list[str | bytes | int] = [owner, thread_id, attempt, event, data, status]
        result = await self._call(self._open, run_id, keys, args)
        return result.decode() if isinstance(result, bytes) else str(result)

    async def append(
        self,
        run_id: str,
        attempt: int,
        event: str,
        data: bytes,
        *,
        status: str | None = None,
        settled: bool = False,
    ) -> str:
        """Append one event as `attempt`; returns its id.

        `settled` marks events reporting an outcome Postgres already accepted from `attempt`;
        they are written even if the lease ran out meanwhile (never if the run changed hands).

        Raises:
            Fenced: another attempt owns the run.
            StreamGone: the run record is gone (expired or deleted).
        """
        ttl = str(self.stream_ttl_s) if event in TERMINAL_EVENTS else ""
        keys = [self.keys.run_record(run_id), self.keys.run_events(run_id)]
        result = await self._call(
            self._append,
            run_id,
            keys,
            [attempt, event, data, status or "", ttl, "1" if settled else ""],
        )
        return result.decode() if isinstance(result, bytes) else str(result)

    async def append_batch(
        self, run_id: str, attempt: int, events: Sequence[tuple[str, bytes]]
    ) -> str:
        """Append several non-terminal events that change no status, in order; returns the
        last id. Fenced like `append` (never `settled`).
        """
        if not events or any(event in TERMINAL_EVENTS or event == "retry" for event, _ in events):
            raise ValueError("append_batch takes a non-empty batch of plain events")
        keys = [self.keys.run_record(run_id), self.keys.run_events(run_id)]
        args: list[Any] = [attempt]
        for event, data in events:
            args += [event, data]
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._outbox.append((run_id, keys, args, future))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_outbox())
        return await future

    async def _send_outbox(self) -> None:
        """Send every waiting batch, of any run, in one pipeline per round trip.

        A worker with hundreds of runs would otherwise make one round trip per token per run;
        a pipeline costs the client a fraction of that per command. Each run has at most one
        batch in flight (its writer waits for it), so a run's events stay in order.
        """
        while self._outbox:
            batch, self._outbox = self._outbox, []
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for _, keys, args, _ in batch:
                        await self._append_batch(keys=keys, args=args, client=pipe)
                    results = await pipe.execute(raise_on_error=False)
            except RedisError as exc:
                results = [exc] * len(batch)
            for (run_id, _, _, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue  # its writer gave up waiting (cancelled)
                if isinstance(result, RedisError):
                    future.set_exception(_store_error(run_id, result))
                else:
                    future.set_result(result.decode() if isinstance(result, bytes) else str(result))

    async def lock_repair(self, run_id: str, ttl_s: float) -> bool:
        """Take the run's short repair lock: the reapers of several workers may find the same
        unsettled run at once, and only one of them should write its outcome."""
        try:
            key = self.keys.run_repair(run_id)
            return bool(await self.redis.set(key, b"1", nx=True, px=int(ttl_s * 1000)))
        except RedisError as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc

    async def claim(self, run_id: str, attempt: int, lease_s: float) -> int:
        """Take the run's lease as `attempt`; returns the attempt that started before this one.

        Raises:
            Fenced: a newer attempt owns the run.
        """
        keys = [self.keys.run_record(run_id)]
        return int(await self._call(self._claim, run_id, keys, [attempt, int(lease_s * 1000)]))

    async def renew(self, run_id: str, attempt: int, lease_s: float) -> None:
        """Extend the lease. Raises Fenced when it was lost (expired or taken over)."""
        keys = [self.keys.run_record(run_id)]
        await self._call(self._renew, run_id, keys, [attempt, int(lease_s * 1000)])

    async def take_over(self, run_id: str, attempt: int, *, force: bool = False) -> str:
        """Fence out `attempt` if its lease ran out (or, `force`, anyway).

        Returns 'taken' (attempt + 1 now owns the run), 'alive', 'missing' or 'stale'.
        """
        keys = [self.keys.run_record(run_id)]
        result = await self._call(self._take_over, run_id, keys, [attempt, "1" if force else ""])
        return result.decode() if isinstance(result, bytes) else str(result)

    async def message_ids(self, run_id: str) -> tuple[list[str], set[str]]:
        """Ids of the messages the stream has tokens or `message` events for, in order, and
        the subset that has its `message` event."""
        seen: dict[str, None] = {}
        completed: set[str] = set()
        cursor = "0-0"
        while True:
            page = await self.read_range(run_id, cursor, count=1000)
            for event in page:
                if event.event == "token":
                    seen[msgspec.json.decode(event.data)["message_id"]] = None
                elif event.event == "message":
                    message_id = msgspec.json.decode(event.data)["message"]["id"]
                    seen[message_id] = None
                    completed.add(message_id)
            if len(page) < 1000:
                return list(seen), completed
            cursor = page[-1].id

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

    async def exists(self, run_id: str) -> bool:
        """Whether the run's record is in Redis (False after expiry or data loss)."""
        try:
            return bool(await self.redis.exists(self.keys.run_record(run_id)))
        except RedisError as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc

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
                self.keys.run_repair(run_id),
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
