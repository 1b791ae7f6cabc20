"""One Redis reader per server process, fanning run events out to every viewer.

A single task issues one `XREAD BLOCK` over the streams of all runs that have viewers in this
process (on a Redis Cluster, one task per shard of runs: `KeySpace.shard`), frames each event
once, and appends the shared frame to the run's feed: one bounded buffer per run that every
viewer of the run reads by position. Thousands of viewers therefore
cost one blocked Redis connection and one append per event, not a queue each. When a run gains
its first viewer the reader is woken with `CLIENT UNBLOCK` so the new stream joins the next read
at once.

The seam rule (no gap, no duplicate) and the feeds themselves are in `server/streaming/feed.py`.

Waiting is cheap too: a viewer with nothing to read parks one future on its feed, and the
follower hands the feed's waiting viewers their new frames once per batch read (for a run with
many viewers, once per short window: `COALESCE_S`), mostly by writing them to each client
itself rather than waking each viewer's task (`Attachment._live`). Keep-alive pings come from
one ticker per process that wakes a feed when one of its viewers has been quiet for its ping
interval, not from a timer per wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from redis.exceptions import RedisError

from stream_store.log import EventLog, StoredEvent
from stream_store.metrics import FanoutMetrics

from .feed import RunFeed, Viewer, sse_frame

__all__ = ["StreamFollower"]

logger = structlog.get_logger()

MAX_PING_TICK_S = 1.0  # the ticker looks at least this often; a ping is late by at most a tick


class _ShardReader:
    """The blocked XREAD over the watched runs of one shard (`KeySpace.shard`): on one Redis
    all runs are in shard 0, on a Redis Cluster each shard is one slot of one node. It holds
    two connections to that node: one blocked in XREAD, one to cut the block short."""

    __slots__ = ("blocked", "changed", "control", "feeds", "generation", "reader", "reader_id")

    def __init__(self, url: str) -> None:
        self.connect(url)
        self.feeds: dict[str, RunFeed] = {}  # the shard's part of the follower's feeds
        self.changed = asyncio.Event()
        self.reader_id: int | None = None
        self.blocked = False
        self.generation = 0

    def connect(self, url: str) -> None:
        self.reader = Redis.from_url(url, single_connection_client=True)
        self.control = Redis.from_url(url)

    async def aclose(self) -> None:
        await self.reader.aclose()
        await self.control.aclose()


class StreamFollower:
    """The per-process reader; start it in the app's lifespan, stop it on shutdown.

    `node_url` gives the URL of the Redis node that owns a key (`RedisClients.node_url`): the
    configured URL on one Redis, which then has one shard and one blocked XREAD.
    """

    def __init__(
        self,
        node_url: Callable[[str], str],
        events: EventLog,
        *,
        queue_size: int,
        cut_off_s: float = 10.0,
        block_ms: int = 10_000,
        batch: int = 1000,
        metrics: FanoutMetrics | None = None,
    ) -> None:
        self._node_url = node_url
        self._events = events
        self._queue_size = queue_size
        self._cut_off_s = cut_off_s
        self.metrics = metrics or FanoutMetrics(CollectorRegistry())  # (unexposed)
        self._block_ms = block_ms
        self._batch = batch
        self._feeds: dict[str, RunFeed] = {}
        self._shards: dict[int, _ShardReader] = {}
        self._ping_tick_s = MAX_PING_TICK_S
        self._ping_tick_changed = asyncio.Event()
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def closing(self) -> bool:
        """The server is shutting down: every response that follows runs must end now."""
        return self._closing

    @property
    def viewer_count(self) -> int:
        return sum(len(feed.viewers) for feed in self._feeds.values())

    @property
    def run_count(self) -> int:
        return len(self._feeds)

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._cut_off_stalled(), name="runstream-sweeper"),
            asyncio.create_task(self._tick_pings(), name="runstream-ping-ticker"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.close_all()
        self._closing = False
        for shard in self._shards.values():
            await shard.aclose()
        self._shards.clear()

    def close_all(self) -> None:
        """End every viewer's response now (server shutdown): clients reconnect elsewhere."""
        self._closing = True
        for feed in self._feeds.values():
            for viewer in feed.viewers:
                viewer.close()

    async def subscribe(self, run_id: str, ping_interval_s: float | None = None) -> Viewer:
        """Join the run's feed; every event after the feed's cursor will reach the viewer.
        With `ping_interval_s`, the viewer is woken after each such quiet interval."""
        feed = self._feeds.get(run_id)
        if feed is None:
            feed = self._feeds[run_id] = RunFeed(self._queue_size)
            try:
                newest = await self._events.last_event(run_id)
                feed.start_at(newest.id if newest else "0-0")
            except BaseException:
                del self._feeds[run_id]
                feed.ready.set()
                raise
            feed.ready.set()
            shard = self._shard(run_id)
            shard.feeds[run_id] = feed
            await self._wake(shard)
        else:
            await feed.ready.wait()
        viewer = Viewer(feed, ping_interval_s)
        if ping_interval_s is not None and ping_interval_s / 4 < self._ping_tick_s:
            self._ping_tick_s = ping_interval_s / 4
            self._ping_tick_changed.set()
        feed.viewers.add(viewer)
        if self._closing:
            viewer.close()
        return viewer

    def unsubscribe(self, run_id: str, viewer: Viewer) -> None:
        feed = self._feeds.get(run_id)
        if feed is None or feed is not viewer.feed:
            return
        feed.viewers.discard(viewer)
        if not feed.viewers and feed.ready.is_set():
            del self._feeds[run_id]
            shard = self._shards.get(self._events.keys.shard(run_id))
            if shard is not None:
                shard.feeds.pop(run_id, None)

    def _shard(self, run_id: str) -> _ShardReader:
        """The reader of the run's shard, started with its first run."""
        number = self._events.keys.shard(run_id)
        shard = self._shards.get(number)
        if shard is None:
            shard = self._shards[number] = _ShardReader(self._shard_url(run_id))
            self._tasks.append(
                asyncio.create_task(self._run(shard), name=f"runstream-follower-{number}")
            )
        return shard

    def _shard_url(self, run_id: str) -> str:
        return self._node_url(self._events.keys.run_events(run_id))

    async def _cut_off_stalled(self) -> None:
        """Cancel viewers whose current write has waited on the client past the cut-off."""
        interval_s = self._cut_off_s / 4
        while True:
            await asyncio.sleep(interval_s)
            for feed in list(self._feeds.values()):
                for viewer in list(feed.viewers):
                    if viewer.swept(interval_s) < self._cut_off_s:
                        continue
                    if viewer.task is not None and not viewer.task.done():
                        logger.warning("cutting off a viewer that stopped reading")
                        viewer.task.cancel()
                        self.metrics.viewers_cut_off.inc()

    async def _tick_pings(self) -> None:
        """The process's one keep-alive clock: wake each feed with a viewer due a ping.

        It looks four times per shortest ping interval in use (at most `MAX_PING_TICK_S`
        apart), so a ping goes out after a quiet interval and at most a quarter of it later.
        """
        while True:
            self._ping_tick_changed.clear()
            now = time.monotonic()
            shortest = MAX_PING_TICK_S * 4
            for feed in list(self._feeds.values()):
                due = False
                for viewer in feed.viewers:
                    interval = viewer.ping_interval_s
                    if interval is None:
                        continue
                    shortest = min(shortest, interval)
                    due = due or now - viewer.quiet_since >= interval
                if due and feed.waiters:
                    feed.wake()
            self._ping_tick_s = shortest / 4
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._ping_tick_s):
                    await self._ping_tick_changed.wait()  # a viewer with a shorter interval

    async def _wake(self, shard: _ShardReader) -> None:
        """Make the shard's reader re-issue its XREAD with the new feed included.

        CLIENT UNBLOCK can overtake the XREAD it is meant to cut short (they travel on two
        connections), so it is retried for a few milliseconds until it lands or the read ends.
        """
        shard.changed.set()
        generation = shard.generation
        for _ in range(50):
            if not shard.blocked or shard.generation != generation or shard.reader_id is None:
                return
            try:
                if await shard.control.client_unblock(shard.reader_id):
                    return
            except RedisError:
                return
            await asyncio.sleep(0.001)

    async def _run(self, shard: _ShardReader) -> None:
        while True:
            try:
                await self._read_forever(shard)
            except asyncio.CancelledError:
                raise
            except RedisError as exc:
                logger.warning("stream reader lost redis; retrying", error=str(exc))
                shard.reader_id = None
                await asyncio.sleep(0.5)
                if shard.feeds:  # on a cluster, the shard's slot may have moved to another node
                    await self._reconnect(shard, next(iter(shard.feeds)))

    async def _reconnect(self, shard: _ShardReader, run_id: str) -> None:
        await shard.aclose()
        shard.connect(self._shard_url(run_id))

    async def _read_forever(self, shard: _ShardReader) -> None:
        if shard.reader_id is None:
            shard.reader_id = await shard.reader.client_id()
        keys = self._events.keys
        while True:
            shard.changed.clear()
            runs = {keys.run_events(run_id): run_id for run_id in shard.feeds}
            streams = {key: shard.feeds[run_id].cursor for key, run_id in runs.items()}
            if not streams:
                await shard.changed.wait()
                continue
            shard.generation += 1
            shard.blocked = True
            try:
                response = await shard.reader.xread(
                    streams,
                    count=self._batch,
                    block=None if shard.changed.is_set() else self._block_ms,
                )
            finally:
                shard.blocked = False
            for key, entries in response or []:
                feed = shard.feeds.get(runs[key.decode() if isinstance(key, bytes) else key])
                if feed is None:
                    continue
                for entry_id, fields in entries:
                    feed.append(sse_frame(StoredEvent.from_entry(entry_id, fields)))
                feed.frames_arrived()
