"""A run's feed in one server process: one bounded buffer of framed events that every viewer
of the run reads by position, and each viewer's place in it.

The follower (`server/streaming/fanout.py`) appends to feeds; `server/streaming/attach.py` reads
them through a
`Viewer`. An event is framed once per process (`sse_frame`), whatever the number of viewers.

The seam rule (no gap, no duplicate): a viewer starts at the feed's head once the feed has a
cursor; the replay covers everything up to that cursor, the feed everything after. When the
buffer holds every event after a viewer's last one up to its place, the replay is read from the
buffer (`RunFeed.history`) instead of the stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from litestar.response import ServerSentEventMessage

from stream_store.log import StoredEvent
from wire.events import parse_event_id

__all__ = ["COALESCE_S", "COALESCE_VIEWERS", "Frame", "RunFeed", "Viewer", "sse_frame"]

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
    each reading the stream again; those that arrive while it reads wait for it
    (`history_loading`).
    """

    __slots__ = (
        "_timer",
        "base",
        "cursor",
        "floor",
        "frames",
        "history_loading",
        "loop",
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
        self.waiters: list[tuple[asyncio.Future[None], Viewer]] = []
        self._timer: asyncio.TimerHandle | None = None
        # kept: Python 3.11's `get_running_loop` makes a getpid(2) call, once per wait
        self.loop = asyncio.get_running_loop()
        # set while a viewer reads the stream's start for `add_history`; done when it is through
        self.history_loading: asyncio.Future[None] | None = None

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
        """Hand new frames to the viewers: at once, or for a run with many viewers, at the end
        of the coalescing window that the first of them opened."""
        if len(self.viewers) < COALESCE_VIEWERS:
            self.wake(frames=True)
        elif self._timer is None:
            self._timer = self.loop.call_later(COALESCE_S, self.wake, True)

    def wake(self, frames: bool = False) -> None:
        """Resume every viewer waiting on the feed (a close, or a ping due). For new frames
        (`frames`), a waiting viewer that writes directly (`Viewer.direct`) writes them here
        and goes on waiting, unless it needs its task (see `server.streaming.attach`)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters, self.waiters = self.waiters, []
        for waiter, viewer in waiters:
            if waiter.done():
                continue  # its task was cancelled
            if frames and viewer.direct is not None and viewer.direct():
                self.waiters.append((waiter, viewer))
            else:
                waiter.set_result(None)


class Viewer:
    """One attached client: its position in the run's feed.

    A viewer more than the feed's size behind its head is `lagging`: `take` gives it `None`,
    and it catches up by replaying after the last event it sent (see `server.streaming.attach`; from
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
        "direct",
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
        # While the viewer waits: writes the frames past its position without waking its task,
        # and says whether it may go on waiting (False: wake it).
        self.direct: Callable[[], bool] | None = None

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
        waiter = self.feed.loop.create_future()
        self.feed.waiters.append((waiter, self))
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

    def wrote(self) -> None:
        """A direct write ended as soon as it started: nothing waited on the client."""
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
