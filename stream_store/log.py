"""The per-run event log on Redis streams, and the live run record beside it (`LiveRecord`).

Costs, in Redis commands: `append` is one EVALSHA (XADD + HSET, plus two EXPIREs on the
terminal event), an attempt's `appends` one EVALSHA per batch of any number of events
(pipelined with other runs' batches), `claim` one EVALSHA for an attempt's lease, cancel check
and `running` (pipelined with other runs' claims), `reserve` one EVALSHA for an append's checks,
writing nothing (before a server transition's commit); `read_range` is one XRANGE, as is each
page of `read_from_start` (the server's live reads are its own XREAD,
`server/streaming/fanout.py`). Appends are fenced: the script refuses a write whose attempt is
not the record's. `appends` are also bounded: a run's stream holds at most `max_run_events`
events and `max_run_stream_bytes` bytes of names and data (`StreamTooLarge` past either). It is
the one class that calls the stream scripts and reads a run's stream and record, so that the
key layout, the fence and the bounds are known in one place.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import msgspec
from redis.asyncio import RedisCluster

from wire.events import LAST_POSITION, TERMINAL_EVENTS, RunStatus, parse_event_id

from .append_sender import AppendSender, AttemptAppends, Written
from .batch_sender import BatchSender
from .connections import StoreRedis, register_script
from .errors import redis_errors
from .keys import KeySpace
from .limits import (
    DEFAULT_INTERRUPTED_TTL_S,
    DEFAULT_MAX_RUN_EVENTS,
    DEFAULT_MAX_RUN_STREAM_BYTES,
)
from .live_record import Claimed, LiveRecord, TakeOver
from .run_status import WORKING

__all__ = ["EventLog", "StoredEvent", "lua_source"]

# The Lua lives in .lua files in `scripts/`, each with its KEYS, ARGV and rules on top. The
# clock and the append fence are Lua functions in `_fence.lua`, composed in front of the
# scripts that call them. All are read once, at import.
_SCRIPTS = files("stream_store") / "scripts"
_FENCE = (_SCRIPTS / "_fence.lua").read_text()


def lua_source(name: str, *, fenced: bool = False) -> str:
    """The script `scripts/<name>`, after the preamble `_fence.lua` when `fenced`."""
    source = (_SCRIPTS / name).read_text()
    return f"{_FENCE}\n{source}" if fenced else source


_APPEND = lua_source("append.lua", fenced=True)
_APPEND_BATCH = lua_source("append_batch.lua", fenced=True)
_OPEN = lua_source("open.lua")
_CLAIM = lua_source("claim.lua", fenced=True)
_TAKE_OVER = lua_source("take_over.lua", fenced=True)
_REQUEST_CANCEL = lua_source("request_cancel.lua")
_RESERVE = lua_source("reserve.lua", fenced=True)


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

    def __init__(
        self,
        redis: StoreRedis,
        keys: KeySpace,
        stream_ttl_s: int,
        *,
        interrupted_ttl_s: int = DEFAULT_INTERRUPTED_TTL_S,
        max_run_events: int = DEFAULT_MAX_RUN_EVENTS,
        max_run_stream_bytes: int = DEFAULT_MAX_RUN_STREAM_BYTES,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.stream_ttl_s = stream_ttl_s  # from the terminal event on
        # From the `interrupted` status on, until a resume's `queued`: an abandoned interrupt
        # must not hold its stream for ever.
        self.interrupted_ttl_s = interrupted_ttl_s
        self.max_run_events = max_run_events
        self.max_run_stream_bytes = max_run_stream_bytes
        self._append = register_script(redis, _APPEND)
        # Every attempt's plain events go out together, from one task (`appends`).
        self._appends = AppendSender(redis, register_script(redis, _APPEND_BATCH))
        # Every submit's stream opens with the others' of that moment (a burst of submits).
        self._opens = BatchSender(redis, register_script(redis, _OPEN))
        # Every run's start goes out with the others starting at that moment (a burst).
        self._claims = BatchSender(redis, register_script(redis, _CLAIM))
        self._take_over = register_script(redis, _TAKE_OVER)
        self._request_cancel = register_script(redis, _REQUEST_CANCEL)
        self._reserve = register_script(redis, _RESERVE)

    async def _call(self, script: Any, run_id: str, keys: list[str], args: list[Any]) -> str:
        """Run one of the stream scripts; its reply as text (an event id or a verdict)."""
        with redis_errors(run_id):
            reply = await script(keys=keys, args=args)
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    async def aclose(self) -> None:
        """Stop sending batches (process shutdown); callers still waiting get StoreUnavailable."""
        await self._appends.aclose()
        await self._claims.aclose()
        await self._opens.aclose()

    async def open(
        self,
        run_id: str,
        *,
        owner: str,
        thread_id: str,
        attempt: int,
        event: str,
        data: bytes,
        status: str = RunStatus.QUEUED,
    ) -> str:
        """Create the run record and write the stream's first event; a no-op if it exists."""
        keys = [self.keys.run_record(run_id), self.keys.run_events(run_id)]
        args: list[str | bytes | int] = [owner, thread_id, attempt, event, data, status]
        return await self._opens.send(run_id, keys, args)

    async def append(
        self,
        run_id: str,
        attempt: int,
        event: str,
        data: bytes,
        *,
        status: str | None = None,
        settled: bool = False,
        expect_status: str | None = None,
    ) -> str:
        """Append one event as `attempt`; returns its id.

        `settled` marks events reporting an outcome Postgres already accepted from `attempt`;
        they are written even if the lease ran out meanwhile (never if the run changed hands).
        The stream's TTL follows the event: `stream_ttl_s` from the terminal event,
        `interrupted_ttl_s` from the `interrupted` status, none again from `queued` or
        `running` (resumed). Never refused for the run's bounds: these are the run's own
        status, retry and outcome events. With `expect_status`, only while the record's status
        is that one (a status written after its Postgres commit, which another process's
        status may have overtaken meanwhile).

        Raises:
            Fenced: another attempt owns the run, or its status is not `expect_status`.
            StreamGone: the run record is gone (expired or deleted).
        """
        ttl = ""
        if event in TERMINAL_EVENTS:
            ttl = str(self.stream_ttl_s)
        elif status == RunStatus.INTERRUPTED:
            ttl = str(self.interrupted_ttl_s)
        elif status in WORKING:
            ttl = "-1"  # a resumed run's stream lives until its end, even if `queued` was lost
        keys = [self.keys.run_record(run_id), self.keys.run_events(run_id)]
        return await self._call(
            self._append,
            run_id,
            keys,
            [
                attempt,
                event,
                data,
                status or "",
                ttl,
                "1" if settled else "",
                expect_status or "",
                RunStatus.RUNNING,  # the one status an attempt holds a lease in
            ],
        )

    async def reserve(self, run_id: str, attempt: int) -> None:
        """Check that `append` would take a status event of `attempt` now, writing nothing:
        inside a transition's Postgres transaction, whose event goes out after the commit. A
        refusal then rolls the transition back, and its viewers never see a status Postgres did
        not commit (docs/architecture.md section 5).

        Raises:
            Fenced: another attempt owns the run, or the stream has its terminal event.
            StreamGone: the run record is gone (expired or deleted).
            StoreUnavailable: Redis refused (at `maxmemory`, the append would be refused too).
        """
        keys = [self.keys.run_record(run_id)]
        await self._call(self._reserve, run_id, keys, [attempt])

    def appends(
        self, run_id: str, attempt: int, *, on_written: Written | None = None
    ) -> AttemptAppends:
        """The queue of `attempt`'s plain events (tokens, messages: non-terminal, no status
        change), appended in order in batches, each in one pipeline with the other runs' due
        at the same time (`stream_store/append_sender.py`). Fenced like `append` (never
        `settled`) and bounded: a batch past the stream's bound is refused (`StreamTooLarge`),
        the events of it that fitted appended, none after it. `on_written` is told of each
        batch written or refused."""
        keys = [self.keys.run_record(run_id), self.keys.run_events(run_id)]
        args: list[Any] = [attempt, self.max_run_events, self.max_run_stream_bytes]
        return AttemptAppends(self._appends, run_id, attempt, keys, args, on_written=on_written)

    async def lock_repair(self, run_id: str, ttl_s: float) -> bool:
        """Take the run's short repair lock: the reapers of several workers may find the same
        unsettled run at once, and only one of them should write its outcome."""
        key = self.keys.run_repair(run_id)
        with redis_errors(run_id):
            return bool(await self.redis.set(key, b"1", nx=True, px=int(ttl_s * 1000)))

    async def claim(
        self, run_id: str, attempt: int, lease_s: float, running: bytes, worker: str = ""
    ) -> Claimed:
        """Start `attempt` in one round trip, shared with the other runs starting at that moment
        (`BatchSender`): take the run's lease, noting the `worker` that holds it (its process
        gone, the reaper need not wait for the lease), check for a cancel request and append
        the `run` event of `running` (its data) unless the attempt is to be cancelled or its
        `retry` announcement is still to be written.

        Raises:
            Fenced: a newer attempt owns the run, or its stream has its terminal event.
            StreamGone: the run record is missing.
        """
        keys = [self.keys.run_record(run_id), self.keys.run_events(run_id)]
        keys.append(self.keys.run_cancel(run_id))
        args = [attempt, int(lease_s * 1000), worker, running, RunStatus.RUNNING]
        reply = await self._claims.send(run_id, keys, args)
        if reply in (Claimed.CANCELLED, Claimed.RETRY):
            return Claimed(reply)
        return Claimed.RUNNING

    async def take_over(
        self,
        run_id: str,
        attempt: int,
        *,
        force: bool = False,
        gone_workers: Sequence[str] = (),
    ) -> TakeOver:
        """Fence out `attempt` if its lease ran out, or, given `gone_workers`, only if its
        worker is among them (or, `force`, anyway)."""
        keys = [self.keys.run_record(run_id)]
        args = [attempt, "1" if force else "", *gone_workers]
        return TakeOver(await self._call(self._take_over, run_id, keys, args))

    async def message_ids(self, run_id: str) -> tuple[list[str], set[str]]:
        """Ids of the messages the stream has tokens or `message` events for, in order, and
        the subset that has its `message` event."""
        seen: dict[str, None] = {}
        completed: set[str] = set()
        async for event in self.read_from_start(run_id):
            if event.event == "token":
                seen[msgspec.json.decode(event.data)["message_id"]] = None
            elif event.event == "message":
                message_id = msgspec.json.decode(event.data)["message"]["id"]
                seen[message_id] = None
                completed.add(message_id)
        return list(seen), completed

    async def read_from_start(
        self, run_id: str, through: str | None = None, page: int = 1000
    ) -> AsyncIterator[StoredEvent]:
        """The run's events from the stream's start up to and including `through` (None: to
        its end), read a page of `page` at a time."""
        last = parse_event_id(through) if through is not None else None
        cursor = "0-0"
        while True:
            events = await self.read_range(run_id, cursor, count=page)
            for event in events:
                if last is not None and parse_event_id(event.id) > last:
                    return
                yield event
            if len(events) < page:
                return
            cursor = events[-1].id

    async def read_range(self, run_id: str, after: str, count: int = 1000) -> list[StoredEvent]:
        """Up to `count` events strictly after `after` ("0-0" reads from the start)."""
        if parse_event_id(after) == LAST_POSITION:
            return []  # Redis refuses an exclusive start there ("invalid start ID")
        with redis_errors(run_id):
            entries = await self.redis.xrange(
                self.keys.run_events(run_id), min=f"({after}", max="+", count=count
            )
        return [StoredEvent.from_entry(entry_id, fields) for entry_id, fields in entries]

    async def read_back(self, run_id: str, at: str, count: int) -> list[StoredEvent]:
        """Up to `count` events up to and including `at`, newest first."""
        with redis_errors(run_id):
            entries = await self.redis.xrevrange(
                self.keys.run_events(run_id), max=at, min="-", count=count
            )
        return [StoredEvent.from_entry(entry_id, fields) for entry_id, fields in entries]

    async def last_event(self, run_id: str) -> StoredEvent | None:
        """The newest event, or None when the stream does not exist."""
        with redis_errors(run_id):
            entries = await self.redis.xrevrange(self.keys.run_events(run_id), count=1)
        return StoredEvent.from_entry(*entries[0]) if entries else None

    async def live_record(self, run_id: str) -> LiveRecord | None:
        """The run's live record, or None when its stream expired or was never written."""
        with redis_errors(run_id):
            raw: dict[bytes, bytes] = await self.redis.hgetall(  # type: ignore[misc]
                self.keys.run_record(run_id)
            )
        return LiveRecord.from_hash(raw) if raw else None

    async def lease_held(self, run_id: str, record: LiveRecord) -> bool:
        """Whether the run's `record`'s lease still runs, on Redis's clock (as the scripts
        measure it: on a cluster, the clock of the record's node)."""
        if record.lease_until is None:
            return False
        with redis_errors(run_id):
            if isinstance(self.redis, RedisCluster):
                node = self.redis.get_node_from_key(self.keys.run_record(run_id))
                seconds, micros = await self.redis.time(target_nodes=node)
            else:
                seconds, micros = await self.redis.time()
        return record.lease_until >= seconds * 1000 + micros // 1000

    async def exists(self, run_id: str) -> bool:
        """Whether the run's record is in Redis (False after expiry or data loss)."""
        with redis_errors(run_id):
            return bool(await self.redis.exists(self.keys.run_record(run_id)))

    async def request_cancel(self, run_id: str) -> None:
        """Flag the run as cancelled and tell every worker; the one running it stops it.

        One script (`scripts/request_cancel.lua`): a Redis at `maxmemory` refuses the flag,
        and then must not publish either.
        """
        keys = [self.keys.run_cancel(run_id)]
        args = [self.stream_ttl_s, self.keys.cancel_channel(), run_id]
        await self._call(self._request_cancel, run_id, keys, args)

    async def cancel_requested(self, run_id: str) -> bool:
        with redis_errors(run_id):
            return bool(await self.redis.exists(self.keys.run_cancel(run_id)))

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
        with redis_errors():
            async with self.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.delete(key)
                await pipe.execute()
