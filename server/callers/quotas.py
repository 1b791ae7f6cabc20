"""Per-caller quotas kept in Redis, so that every server process counts against the same numbers.

Most per-caller limits live here (docs/security.md, "Per-caller limits"):

- requests per minute, in three budgets (`Budget`): submits (runs and threads), other writes,
  and the queries a caller shapes (store, searches, history). Each is a sliding log per caller
  (`scripts/take_window.lua`), one EVALSHA per request; a request refused here is not counted;
- open SSE connections, per caller and per stream token: sorted sets of connection ids scored
  by when each lapses (`scripts/take_stream_slot.lua`). A slot is taken at attach (one EVALSHA),
  renewed by its server every ping interval together with all of the process's other slots (one
  EVALSHA per set, pipelined: `scripts/renew_stream_slots.lua`) and given back when the
  response ends (ZREM, batched). A server that dies holding slots stops renewing them: they
  lapse `SLOT_TTL_PINGS` ping intervals later and the next attach prunes them.

The third, queued and running runs, is counted in Postgres inside the submit's transaction
(`RunSubmitter.create_run`): Postgres holds run status, so that count cannot drift.

No library: Litestar's `RateLimitMiddleware` is not atomic across processes (get, then set,
under an in-process lock) and `limits` brings its own Redis pool and key names; neither counts
open connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import Enum
from importlib.resources import files
from typing import Any

import structlog
from redis.exceptions import RedisError

from stream_store import limits
from stream_store.connections import StoreRedis, pipelined_script, register_script
from stream_store.errors import LimitReached, StoreUnavailable, redis_errors
from stream_store.keys import KeySpace
from stream_store.settings import Settings

__all__ = [
    "SLOT_TTL_PINGS",
    "Budget",
    "CallerQuotas",
    "CountedRequest",
    "StreamSlot",
    "open_caller_quotas",
]

logger = structlog.get_logger()

# A slot lapses this many ping intervals after its last renewal: its server renews every
# interval, so two renewals can fail (a slow Redis) before an open connection stops counting.
SLOT_TTL_PINGS = 3
# How long a stopping server tries to give its slots back (they lapse anyway).
_GIVE_BACK_ON_STOP_S = 2.0

_SCRIPTS = files("server.callers") / "scripts"
# `now_ms()`: Redis's clock, the one leases are measured on (the storage's shared preamble)
_CLOCK = (files("stream_store") / "scripts" / "_fence.lua").read_text()
_TAKE_WINDOW = f"{_CLOCK}\n{(_SCRIPTS / 'take_window.lua').read_text()}"
_TAKE_SLOT = f"{_CLOCK}\n{(_SCRIPTS / 'take_stream_slot.lua').read_text()}"
_RENEW_SLOTS = f"{_CLOCK}\n{(_SCRIPTS / 'renew_stream_slots.lua').read_text()}"


class Budget(Enum):
    """A per-minute budget of one caller's requests: the value names its Redis key."""

    SUBMITS = "submits"  # runs, threads, assistants and crons created
    WRITES = "writes"  # every other write: store puts, copies, state writes, patches, deletes
    QUERIES = "queries"  # queries the caller shapes: store reads, searches, counts, history


# Each budget's setting, and the code of its 429.
_BUDGET_SETTING = {
    Budget.SUBMITS: ("RUNSTREAM_MAX_SUBMITS_PER_MINUTE", "too_many_submits"),
    Budget.WRITES: ("RUNSTREAM_MAX_WRITES_PER_MINUTE", "too_many_writes"),
    Budget.QUERIES: ("RUNSTREAM_MAX_QUERIES_PER_MINUTE", "too_many_queries"),
}


@dataclass(frozen=True, slots=True)
class CountedRequest:
    """One request's place in its caller's window of a budget."""

    key: str
    member: str


@dataclass(frozen=True, slots=True)
class StreamSlot:
    """One open SSE connection's place in its caller's set (and its token's, if it has one)."""

    connection_id: str
    keys: tuple[str, ...]


class CallerQuotas:
    """The submit window and the SSE connection slots of every caller; one per server process.

    `start` runs the task that renews the slots of this process's open connections and gives
    back those of ended ones; `aclose` stops it and gives back what is left.
    """

    def __init__(self, redis: StoreRedis, keys: KeySpace, settings: Settings) -> None:
        self._redis = redis
        self._keys = keys
        self._per_minute = {
            Budget.SUBMITS: settings.max_submits_per_minute,
            Budget.WRITES: settings.max_writes_per_minute,
            Budget.QUERIES: settings.max_queries_per_minute,
        }
        self._per_caller = settings.max_sse_connections
        self._per_token = settings.max_sse_connections_per_token
        self._renew_s = settings.ping_interval_s
        self._slot_ttl_ms = max(1, math.ceil(SLOT_TTL_PINGS * settings.ping_interval_s * 1000))
        self._take_window = register_script(redis, _TAKE_WINDOW)
        self._take_slot = register_script(redis, _TAKE_SLOT)
        self._renew_slots = register_script(redis, _RENEW_SLOTS)
        self._held: dict[str, StreamSlot] = {}  # open connections of this process
        self._ended: list[StreamSlot] = []  # slots to give back
        self._wake = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None

    # -- requests per minute ---------------------------------------------------------------

    async def take_submit(self, owner: str) -> None:
        """Count one submit (a run, a thread, an assistant or a cron) of `owner`."""
        await self.take(owner, Budget.SUBMITS)

    async def take(self, owner: str, budget: Budget) -> CountedRequest | None:
        """Count one request of `owner` against `budget`; what was counted (None: the budget is
        off), which `uncount` takes back.

        Raises:
            LimitReached: `owner` made the budget's number of such requests in the last minute;
                `retry_after_s` is when the oldest of those leaves the window.
            StoreUnavailable: Redis did not answer.
        """
        limit = self._per_minute[budget]
        if not limit:
            return None
        counted = CountedRequest(self._keys.caller_window(owner, budget.value), uuid.uuid4().hex)
        with redis_errors():
            wait_ms = await self._take_window(
                keys=[counted.key], args=[limit, limits.SUBMIT_WINDOW_S * 1000, counted.member]
            )
        if wait_ms:
            setting, code = _BUDGET_SETTING[budget]
            raise LimitReached(
                f"{limit} {budget.value} in the last minute is the most allowed"
                f" ({setting}); retry after the Retry-After seconds",
                code=code,
                retry_after_s=math.ceil(int(wait_ms) / 1000),
            )
        return counted

    async def uncount(self, counted: CountedRequest) -> None:
        """Uncount a request that was refused: it changed nothing (the last one out takes the
        key with it). Best effort: if Redis does not answer, the count lapses with its minute."""
        with contextlib.suppress(RedisError):
            await self._redis.zrem(counted.key, counted.member)

    # -- SSE connections --------------------------------------------------------------------

    async def take_stream_slot(self, owner: str, token: str | None) -> StreamSlot | None:
        """A slot for one more SSE connection of `owner`, opened with `token` (None: an API key).

        Returns None when neither limit applies. A slot must then be passed to `hold`, which
        renews it and gives it back, or to `give_back`; one that is neither lapses on its own.

        Raises:
            LimitReached: `owner` has `RUNSTREAM_MAX_SSE_CONNECTIONS` open, or `token` has
                `RUNSTREAM_MAX_SSE_CONNECTIONS_PER_TOKEN`.
            StoreUnavailable: Redis did not answer.
        """
        sets: list[tuple[str, int, str]] = []  # key, limit, what it counts
        if self._per_caller:
            sets.append(
                (
                    self._keys.caller_streams(owner),
                    self._per_caller,
                    "for one caller (RUNSTREAM_MAX_SSE_CONNECTIONS)",
                )
            )
        if token and self._per_token:
            digest = hashlib.sha256(token.encode()).hexdigest()[:32]
            sets.append(
                (
                    self._keys.token_streams(owner, digest),
                    self._per_token,
                    "for one stream token (RUNSTREAM_MAX_SSE_CONNECTIONS_PER_TOKEN)",
                )
            )
        if not sets:
            return None
        slot = StreamSlot(uuid.uuid4().hex, tuple(key for key, _, _ in sets))
        with redis_errors():
            full = int(
                await self._take_slot(
                    keys=list(slot.keys),
                    args=[slot.connection_id, self._slot_ttl_ms, *(n for _, n, _ in sets)],
                )
            )
        if full:
            _, limit, scope = sets[full - 1]
            raise LimitReached(
                f"{limit} open event streams {scope} is the most allowed;"
                " close one, or retry after the Retry-After seconds",
                code="too_many_connections",
                retry_after_s=limits.SSE_RETRY_AFTER_S,
            )
        return slot

    async def hold(
        self, slot: StreamSlot | None, frames: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        """`frames`, with `slot` renewed while they flow and given back when they end.

        Giving back is synchronous here (the keeper task does the Redis part), so it happens
        however the response ends: finished, client gone, or cancelled by the server.
        """
        if slot is None:
            async for frame in frames:
                yield frame
            return
        self._held[slot.connection_id] = slot
        try:
            async for frame in frames:
                yield frame
        finally:
            self._held.pop(slot.connection_id, None)  # `aclose` may have taken it already
            self.give_back(slot)

    def give_back(self, slot: StreamSlot | None) -> None:
        """Give `slot` back (the keeper does the Redis part): for a request refused after it
        took its slot, before a response could `hold` it."""
        if slot is None:
            return
        self._ended.append(slot)
        self._wake.set()

    # -- the keeper -------------------------------------------------------------------------

    def start(self) -> None:
        self._keeper = asyncio.create_task(self._keep(), name="runstream-stream-slots")

    async def aclose(self) -> None:
        """Stop renewing; give back every slot of this process (its connections are ending)."""
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None
        self._ended.extend(self._held.values())
        self._held.clear()
        with contextlib.suppress(StoreUnavailable, TimeoutError):
            async with asyncio.timeout(_GIVE_BACK_ON_STOP_S):
                await self._give_back()

    async def _keep(self) -> None:
        loop = asyncio.get_running_loop()
        renew_at = loop.time() + self._renew_s
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(renew_at):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self._give_back()
                if loop.time() >= renew_at:
                    renew_at = loop.time() + self._renew_s
                    await self._renew()
            except StoreUnavailable as exc:  # the slots lapse on their own; try again later
                logger.warning("stream slots not renewed or given back", error=exc.message)
            except Exception:  # a bug: keep renewing the others rather than stop for good
                logger.exception("stream slots not renewed or given back")

    async def _give_back(self) -> None:
        ended, self._ended = self._ended, []
        if not ended:
            return
        with redis_errors():
            async with self._redis.pipeline(transaction=False) as pipe:
                for slot in ended:
                    for key in slot.keys:
                        pipe.zrem(key, slot.connection_id)
                await pipe.execute()

    async def _renew(self) -> None:
        by_key: dict[str, list[str]] = {}
        for slot in self._held.values():
            for key in slot.keys:
                by_key.setdefault(key, []).append(slot.connection_id)
        if not by_key:
            return
        calls: list[tuple[list[str], list[Any]]] = [
            ([key], [self._slot_ttl_ms, *connection_ids]) for key, connection_ids in by_key.items()
        ]
        with redis_errors():
            for reply in await pipelined_script(self._redis, self._renew_slots, calls):
                if isinstance(reply, RedisError):
                    raise reply


@contextlib.asynccontextmanager
async def open_caller_quotas(redis: StoreRedis, settings: Settings) -> AsyncIterator[CallerQuotas]:
    """The process's `CallerQuotas`, its keeper running; stopped (slots given back) at exit."""
    quotas = CallerQuotas(redis, KeySpace(settings.redis_prefix), settings)
    quotas.start()
    try:
        yield quotas
    finally:
        await quotas.aclose()
