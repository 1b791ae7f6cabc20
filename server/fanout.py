"""One Redis reader per server process, fanning run events out to every viewer.

A single task issues one `XREAD BLOCK` over the streams of all runs that have viewers in this
process (on a Redis Cluster, one task per shard of runs: `KeySpace.shard`), frames each event
once, and appends the shared frame to the run's feed: one bounded buffer per run that every
viewer of the run reads by position. Thousands of viewers therefore
cost one blocked Redis connection and one append per event, not a queue each. When a run gains
its first viewer the reader is woken with `CLIENT UNBLOCK` so the new stream joins the next read
at once.

The seam rule (no gap, no duplicate): `subscribe` returns only after the run's feed has a
cursor, and places the viewer at the feed's head, so it reads every event after that cursor.
A viewer subscribes first, then replays from Redis; replay covers everything up to the cursor,
the feed everything after, and the viewer drops what it has already sent by id. When the feed's
buffer holds every event after the viewer's last one up to its place, the replay is read from
the buffer instead (`RunFeed.history`): the same events, without a read of the stream.

Waiting is cheap too: a viewer with nothing to read parks one future on its feed, and the
follower resolves the feed's futures once per batch read (for a run with many viewers, once
per short window: `COALESCE_S`). Keep-alive pings come from one ticker per process that wakes a
feed when one of its viewers has been quiet for its ping interval, not from a timer per wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from litestar.response import ServerSentEventMessage
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from redis.exceptions import RedisError

from stream_store.events import parse_event_id
from stream_store.log import EventLog, StoredEvent
from stream_store.metrics import FanoutMetrics

__all__ = ["Frame", "RunFeed", "StreamFollower", "Viewer", "sse_frame"]

logger = structlog.get_logger()

MAX_PING_TICK_S = 1.0  # the ticker looks at least this often; a ping is late by at most a tick
# A run with this many viewers in the process wakes them at most once per window, so that each
# write carries the events of a window rather than one: with a thousand viewers, a write per
# viewer per event is most of the server's work. Runs with fewer viewers wake them at once.
COALESCE_VIEWERS = 100
COALESCE_S = 0.025


@dataclass(slots=True)
class Frame:
    """An event with its SSE bytes, encoded once and shared by all viewers; never changed once
    made but for `renders` (not frozen: a frozen dataclass costs a microsecond more to make)."""

    id: str
    event: str
    terminal: bool
    data: bytes  # the `/v1` SSE frame
    stored: StoredEvent  # as read from Redis, for other dialects (`server.langgraph`)
    position: tuple[int, int]  # the id, parsed once for every viewer's comparisons
    # Other dialects' encodings of this event, by dialect and form: made by the first viewer
    # that needs one, reused by the rest.
    renders: dict[str, bytes] = field(default_factory=dict)


def sse_frame(event: StoredEvent) -> Frame:
    return Frame(
        id=event.id,
        event=event.event,
        terminal=event.terminal,
        data=_sse_bytes(event),
        stored=event,
        position=parse_event_id(event.id),
    )


def _sse_bytes(event: StoredEvent) -> bytes:
    """The event as Litestar's `ServerSentEventMessage` encodes it, built directly for the
    usual one-line JSON (a quarter of the cost: this runs once per event read or replayed)."""
    data = event.data
    if b"\n" in data or b"\r" in data or "\n" in event.event or "\r" in event.event:
        message = ServerSentEventMessage(id=event.id, event=event.event, data=data.decode())
        return message.encode()  # one `data:` line per line, line breaks in names removed
    return b"id: %s\r\nevent: %s\r\ndata: %s\r\n\r\n" % (
        event.id.encode(),
        event.event.encode(),
        data,
    )


class RunFeed:
    """One run's live frames in this process: a buffer its viewers read by position.

    Positions count frames since the feed began; `base` is the position of `frames[0]`. The
    buffer keeps at least the newest `size` frames (it is trimmed to `size` when it reaches
    twice that), which is as far as a viewer may fall behind before it catches up from Redis.

    The buffer holds every event after `floor` (an event id, parsed) up to the head, so it can
    also serve a new viewer's replay from memory when the viewer resumes after `floor`. A
    viewer that replays the stream from its start through `floor` from Redis hands the feed
    what it read (`add_history`), and the viewers after it replay from memory instead of
    each reading the stream again.
    """

    __slots__ = (
        "_timer",
        "base",
        "cursor",
        "floor",
        "frames",
        "ready",
        "size",
        "viewers",
        "waiters",
    )

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.cursor = ""  # the id of the newest event read into the feed
        self.floor = (0, 0)  # set with the first cursor: the buffer starts after it
        self.ready = asyncio.Event()
        self.viewers: set[Viewer] = set()
        self.frames: list[Frame] = []
        self.base = 0
        self.waiters: list[asyncio.Future[None]] = []
        self._timer: asyncio.TimerHandle | None = None

    @property
    def head(self) -> int:
        return self.base + len(self.frames)

    def start_at(self, cursor: str) -> None:
        """Begin after `cursor`, the newest event when the feed opened ("0-0": none)."""
        self.cursor = cursor
        self.floor = parse_event_id(cursor)

    def append(self, frame: Frame) -> None:
        self.cursor = frame.id
        self.frames.append(frame)
        if len(self.frames) >= 2 * self.size:
            dropped = len(self.frames) - self.size
            self.floor = self.frames[dropped - 1].position
            del self.frames[:dropped]
            self.base += dropped

    def add_history(self, frames: list[Frame]) -> None:
        """Take `frames`, read from Redis, as the events before the buffer: the stream from its
        first event through `floor`. Refused (nothing changes) unless they end exactly at
        `floor` and fit the buffer's bound."""
        if (
            not frames
            or self.floor == (0, 0)
            or frames[-1].position != self.floor
            or len(frames) + len(self.frames) >= 2 * self.size
        ):
            return
        self.frames[:0] = frames
        self.base -= len(frames)
        self.floor = (0, 0)

    def history(
        self, after: tuple[int, int], first_id: str, position: int
    ) -> tuple[list[Frame], Frame] | None:
        """The events after `after` up to feed position `position` (a viewer's, where its live
        frames begin), from memory, and the newest of the events up to there; None when the
        buffer does not hold them all.

        `first_id` is the stream's first event as the viewer was told: a buffer that holds the
        stream from its start serves only a viewer of the same stream (Redis may have lost it
        and the workers started it again).
        """
        if after < self.floor or position < self.base:
            return None
        held = self.frames[: position - self.base]
        if not held or (self.floor == (0, 0) and held[0].id != first_id):
            return None
        start = len(held)
        while start > 0 and held[start - 1].position > after:
            start -= 1
        return held[start:], held[-1]

    def frames_arrived(self) -> None:
        """Wake the viewers for new frames: at once, or for a run with many viewers, at the end
        of the coalescing window that the first of them opened."""
        if len(self.viewers) < COALESCE_VIEWERS:
            self.wake()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(COALESCE_S, self.wake)

    def wake(self) -> None:
        """Resume every viewer waiting on the feed (new frames, a close, or a ping due)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class Viewer:
    """One attached client: its position in the run's feed.

    A viewer more than the feed's size behind its head is `lagging`: `take` gives it `None`,
    and it catches up by replaying after the last event it sent (see `server.attach`; from
    Redis unless the feed's buffer still holds it all), so a client that reads slower than the
    run writes falls back to paged reads instead of holding frames in memory. A client that
    stops reading altogether is cut off: the follower cancels a viewer's task when one write
    has been waiting on the client for the cut-off time (`RUNSTREAM_VIEWER_CUT_OFF_MS`), which
    closes the connection. The run and the other viewers never wait for it.
    """

    __slots__ = (
        "_swept_write",
        "_waited_s",
        "closed",
        "feed",
        "lagging",
        "ping_interval_s",
        "position",
        "quiet_since",
        "task",
        "writes",
    )

    def __init__(self, feed: RunFeed, ping_interval_s: float | None = None) -> None:
        self.feed = feed
        self.position = feed.head
        self.lagging = False
        self.closed = False
        self.ping_interval_s = ping_interval_s  # None: no pings
        self.quiet_since = time.monotonic()  # the last write's end
        # The response loop counts its writes and sets this odd while one waits on the client.
        self.writes = 0
        self._swept_write = -1
        self._waited_s = 0.0
        self.task = asyncio.current_task()

    def take(self) -> list[Frame] | None:
        """The frames after the viewer's position (maybe none), or None: it is closed, or it
        fell too far behind (`lagging`) and must catch up from Redis, then `rejoin`."""
        if self.closed or self.lagging:
            return None
        feed = self.feed
        head = feed.head
        if head - self.position > feed.size or self.position < feed.base:
            self.lagging = True
            return None
        if self.position == head:
            return []
        frames = feed.frames[self.position - feed.base :]
        self.position = head
        return frames

    async def wait(self) -> None:
        """Until the feed has news for its viewers (or a ping is due)."""
        waiter = asyncio.get_running_loop().create_future()
        self.feed.waiters.append(waiter)
        await waiter  # its own future: cancelling this task leaves the other viewers waiting

    def rejoin(self) -> None:
        """Take live frames again from the feed's head (a lagging viewer, before it replays
        what it missed from Redis: the replay reads at least up to the head's event)."""
        self.lagging = False
        self.position = self.feed.head

    def ping_due(self, now: float) -> bool:
        interval = self.ping_interval_s
        return interval is not None and now - self.quiet_since >= interval

    def write_started(self) -> None:
        self.writes += 1

    def write_ended(self) -> None:
        self.writes += 1
        self.quiet_since = time.monotonic()

    def swept(self, interval_s: float) -> float:
        """How long the current write has waited on the client, counted in sweeps.

        Each sweep that finds the same write still waiting adds one interval, however late the
        sweep ran: a stall of this process (a busy machine) never counts against the client.
        """
        if self.writes % 2 == 0 or self.writes != self._swept_write:
            self._swept_write = self.writes
            self._waited_s = 0.0
        else:
            self._waited_s += interval_s
        return self._waited_s

    def close(self) -> None:
        """End the viewer's response: `take` gives it `None` next (it may reconnect and
        replay)."""
        self.closed = True
        self.feed.wake()


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
