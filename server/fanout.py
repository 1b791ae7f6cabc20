"""One Redis reader per server process, fanning run events out to every viewer.

A single task issues one `XREAD BLOCK` over the streams of all runs that have viewers in this
process, frames each event once, and offers the shared frame to each viewer's bounded queue.
Thousands of viewers therefore cost one blocked Redis connection, not one each. When a run
gains its first viewer the reader is woken with `CLIENT UNBLOCK` so the new stream joins the
next read at once.

The seam rule (no gap, no duplicate): `subscribe` returns only after the run's feed has a
cursor, and the feed delivers every event after that cursor. A viewer subscribes first, then
replays from Redis; replay covers everything up to the cursor, the queue everything after,
and the viewer drops what it has already sent by id.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import structlog
from litestar.response import ServerSentEventMessage
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from redis.exceptions import RedisError

from stream_store.log import EventLog, StoredEvent
from stream_store.metrics import FanoutMetrics

__all__ = ["Frame", "StreamFollower", "Viewer", "sse_frame"]

logger = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class Frame:
    """An event with its SSE bytes, encoded once and shared by all viewers."""

    id: str
    event: str
    terminal: bool
    data: bytes  # the `/v1` SSE frame
    stored: StoredEvent  # as read from Redis, for other dialects (`server.langgraph`)
    # Other dialects' encodings of this event, by dialect and form: made by the first viewer
    # that needs one, reused by the rest (a frozen Frame, a mutable cache).
    renders: dict[str, bytes] = field(default_factory=dict)


def sse_frame(event: StoredEvent) -> Frame:
    message = ServerSentEventMessage(id=event.id, event=event.event, data=event.data.decode())
    return Frame(
        id=event.id, event=event.event, terminal=event.terminal, data=message.encode(), stored=event
    )


class Viewer:
    """One attached client: a bounded queue of live frames.

    When the queue fills, the viewer is `lagging`: its queued frames are dropped, it gets
    `None` next, and it catches up by reading the stream from Redis after the last event it
    sent (see `server.attach`), so a client that reads slower than the run writes falls back to
    paged reads instead of holding frames in memory. A client that stops reading altogether is
    cut off: the follower cancels a viewer's task when one write has been waiting on the client
    for the cut-off time (`RUNSTREAM_VIEWER_CUT_OFF_MS`), which closes the connection. The run
    and the other viewers never wait for it.
    """

    __slots__ = ("_swept_write", "_waited_s", "closed", "lagging", "queue", "task", "writes")

    def __init__(self, size: int) -> None:
        self.queue: asyncio.Queue[Frame | None] = asyncio.Queue(maxsize=size)
        self.lagging = False
        self.closed = False
        # The response loop counts its writes and sets this odd while one waits on the client.
        self.writes = 0
        self._swept_write = -1
        self._waited_s = 0.0
        self.task = asyncio.current_task()

    def offer(self, frame: Frame) -> None:
        if self.lagging or self.closed:
            return
        try:
            self.queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.lagging = True
            self._end_queue()

    def write_started(self) -> None:
        self.writes += 1

    def write_ended(self) -> None:
        self.writes += 1

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
        """End the viewer's response: it gets `None` next (it may reconnect and replay)."""
        self.closed = True
        self._end_queue()

    def _end_queue(self) -> None:
        with contextlib.suppress(asyncio.QueueEmpty):
            while not self.queue.empty():
                self.queue.get_nowait()
        self.queue.put_nowait(None)


@dataclass
class _Feed:
    cursor: str = ""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    viewers: set[Viewer] = field(default_factory=set)


class StreamFollower:
    """The per-process reader; start it in the app's lifespan, stop it on shutdown."""

    def __init__(
        self,
        reader: Redis,
        control: Redis,
        events: EventLog,
        *,
        queue_size: int,
        cut_off_s: float = 10.0,
        block_ms: int = 10_000,
        batch: int = 1000,
        metrics: FanoutMetrics | None = None,
    ) -> None:
        self._reader = reader  # a single-connection client: it blocks in XREAD
        self._control = control  # the shared client, used to unblock the reader
        self._events = events
        self._queue_size = queue_size
        self._cut_off_s = cut_off_s
        self.metrics = metrics or FanoutMetrics(CollectorRegistry())  # (unexposed)
        self._block_ms = block_ms
        self._batch = batch
        self._feeds: dict[str, _Feed] = {}
        self._changed = asyncio.Event()
        self._reader_id: int | None = None
        self._blocked = False
        self._generation = 0
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def viewer_count(self) -> int:
        return sum(len(feed.viewers) for feed in self._feeds.values())

    @property
    def run_count(self) -> int:
        return len(self._feeds)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="runstream-follower")
        self._sweeper = asyncio.create_task(self._cut_off_stalled(), name="runstream-sweeper")

    async def stop(self) -> None:
        for task in (self._task, self._sweeper):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for feed in self._feeds.values():
            for viewer in feed.viewers:
                viewer.close()
        await self._reader.aclose()

    def close_all(self) -> None:
        """End every viewer's response now (server shutdown): clients reconnect elsewhere."""
        self._closing = True
        for feed in self._feeds.values():
            for viewer in feed.viewers:
                viewer.close()

    async def subscribe(self, run_id: str) -> Viewer:
        """Join the run's feed; every event after the feed's cursor will reach the viewer."""
        feed = self._feeds.get(run_id)
        if feed is None:
            feed = self._feeds[run_id] = _Feed()
            try:
                newest = await self._events.last_event(run_id)
                feed.cursor = newest.id if newest else "0-0"
            except BaseException:
                del self._feeds[run_id]
                feed.ready.set()
                raise
            feed.ready.set()
            await self._wake()
        else:
            await feed.ready.wait()
        viewer = Viewer(self._queue_size)
        feed.viewers.add(viewer)
        if self._closing:
            viewer.close()
        return viewer

    def unsubscribe(self, run_id: str, viewer: Viewer) -> None:
        feed = self._feeds.get(run_id)
        if feed is None:
            return
        feed.viewers.discard(viewer)
        if not feed.viewers and feed.ready.is_set():
            del self._feeds[run_id]

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

    async def _wake(self) -> None:
        """Make the reader re-issue its XREAD with the new feed included.

        CLIENT UNBLOCK can overtake the XREAD it is meant to cut short (they travel on two
        connections), so it is retried for a few milliseconds until it lands or the read ends.
        """
        self._changed.set()
        generation = self._generation
        for _ in range(50):
            if not self._blocked or self._generation != generation or self._reader_id is None:
                return
            try:
                if await self._control.client_unblock(self._reader_id):
                    return
            except RedisError:
                return
            await asyncio.sleep(0.001)

    async def _run(self) -> None:
        while True:
            try:
                await self._read_forever()
            except asyncio.CancelledError:
                raise
            except RedisError as exc:
                logger.warning("stream reader lost redis; retrying", error=str(exc))
                self._reader_id = None
                await asyncio.sleep(0.5)

    async def _read_forever(self) -> None:
        if self._reader_id is None:
            self._reader_id = await self._reader.client_id()
        while True:
            self._changed.clear()
            streams = {
                self._events.keys.run_events(run_id): feed.cursor
                for run_id, feed in self._feeds.items()
                if feed.ready.is_set()
            }
            if not streams:
                await self._changed.wait()
                continue
            self._generation += 1
            self._blocked = True
            try:
                response = await self._reader.xread(
                    streams,  # type: ignore[arg-type]
                    count=self._batch,
                    block=None if self._changed.is_set() else self._block_ms,
                )
            finally:
                self._blocked = False
            for key, entries in response or []:
                run_id = _run_id_of(key)
                feed = self._feeds.get(run_id)
                if feed is None:
                    continue
                for entry_id, fields in entries:
                    frame = sse_frame(StoredEvent.from_entry(entry_id, fields))
                    feed.cursor = frame.id
                    for viewer in feed.viewers:
                        viewer.offer(frame)


def _run_id_of(key: bytes | str) -> str:
    text = key.decode() if isinstance(key, bytes) else key
    start = text.index("{") + 1
    return text[start : text.index("}", start)]
