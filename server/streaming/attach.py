"""Attaching a client to a run: replay from the stream, then follow it live, as SSE bytes."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from litestar.types import HTTPResponseBodyEvent, Send

from server.errors import ApiError
from stream_store.errors import StreamGone
from stream_store.live_record import LiveRecord
from stream_store.log import EventLog
from stream_store.run_records import RunRecord
from wire.events import parse_event_id

from .event_stream import BODY_SEND
from .fanout import StreamFollower
from .feed import Frame, RunFeed, Viewer, sse_frame

__all__ = [
    "Attachment",
    "BlockedWrite",
    "Dialect",
    "ReplayBound",
    "RunstreamDialect",
    "check_resume_point",
]

logger = structlog.get_logger()

PING = b": ping\n\n"  # a bare comment (Litestar's encoder would add an empty data line)
REPLAY_PAGE = 1000
MAX_CHUNK = 64 * 1024  # bytes per write when coalescing a burst of live frames


Burst = tuple[bytes, int]  # one write of live frames, and its oldest event's append time (ms)


@dataclass(slots=True)
class BlockedWrite:
    """A direct write the client's socket could not take at once: the server's `send` waits
    on `blocked` (uvicorn's flow control), and the viewer's task finishes it, then `rest`."""

    sending: Coroutine[Any, Any, None]
    blocked: Any  # what the send yielded: the future it waits on
    oldest_ms: int
    rest: list[Burst]

    async def finish(self) -> None:
        """Drive the send to its end, as a task would (it cannot be awaited: it was started)."""
        blocked = self.blocked
        while True:
            if blocked is not None:
                blocked._asyncio_future_blocking = False  # taken, as a task takes it
            try:
                if blocked is None:
                    await asyncio.sleep(0)  # a bare yield: the send only gave way to the loop
                else:
                    await blocked
            except BaseException:
                self.sending.close()
                raise
            try:
                blocked = self.sending.send(None)
            except StopIteration:
                return


class Dialect(Protocol):
    """How a viewer's frames are written, and which event ends its response.

    A replay's frames are rendered between `begin_replay` and `end_replay`: a dialect may hold
    some back until it sees what follows them (LangGraph's plain `messages` mode leaves out the
    partials a later frame replaces); `end_replay` answers what it still holds."""

    ping: bytes

    def render(self, frame: Frame) -> bytes: ...

    def ends_after(self, frame: Frame) -> bool: ...

    def begin_replay(self) -> None: ...

    def end_replay(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class ReplayBound:
    """The most bytes one replay may write (RUNSTREAM_MAX_REPLAY_BYTES), and the frame that
    ends a response whose replay would pass it."""

    max_bytes: int
    closing: bytes


class RunstreamDialect:
    """`/v1`'s events, as stored: the frames the follower encoded once for all viewers."""

    ping = PING

    def render(self, frame: Frame) -> bytes:
        return frame.data

    def ends_after(self, frame: Frame) -> bool:
        return frame.terminal

    def begin_replay(self) -> None:
        pass

    def end_replay(self) -> bytes:
        return b""


def check_resume_point(run: RunRecord, record: LiveRecord | None, after: str) -> str:
    """Whether a viewer may resume a run's stream after `after` (docs/protocol.md,
    "Reconnecting"): the rule both dialects apply once they have read the client's
    `Last-Event-ID` (`inputs.last_event_id`) as a stored event's id (`/v1`: `inputs.event_id`;
    LangGraph's ids, frame ids among them: `langgraph.rejoin.resume_point`).

    Returns the stream's first id, which `attach` watches for a reset.

    Raises:
        StreamGone: the stream expired, or `after` is from before the stream Redis lost
            and the workers rebuilt (410: the client must start over or read the thread).
        ApiError: `after` is later than the newest event (400: not an id of this run).
    """
    pointer = (
        f"read the outcome at /v1/runs/{run.run_id} and the messages at /v1/threads/{run.thread_id}"
    )
    if record is None:
        raise StreamGone(f"the events of run {run.run_id} are no longer kept; {pointer}")
    if parse_event_id(after) > parse_event_id(record.last_event_id):
        raise ApiError(
            400,
            "invalid_last_event_id",
            f"Last-Event-ID {after} is after the newest event of run {run.run_id}"
            f" ({record.last_event_id})",
        )
    if after != "0-0" and parse_event_id(after) < parse_event_id(record.first_id):
        raise StreamGone(
            f"run {run.run_id}'s stream was lost and started again at {record.first_id}; "
            f"attach without Last-Event-ID to read it from its start, or {pointer}"
        )
    return record.first_id


def _end_history_loading(feed: RunFeed, loading: asyncio.Future[None] | None) -> None:
    """The replay that read the stream's start for `feed` is done with it (the history handed
    over, or not): the viewers waiting for it go on."""
    if loading is None:
        return
    if feed.history_loading is loading:
        feed.history_loading = None
    if not loading.done():
        loading.set_result(None)


class Attachment:
    """One viewer's SSE response: a replay (from Redis, or from the feed's buffer when it holds
    every event the viewer lacks), then live frames from the follower, until the terminal event.

    Subscribes before replaying, so nothing appended during the replay is missed, and skips
    live events the replay already sent (see `server.streaming.fanout`). A viewer that falls behind
    the live feed replays again, the same way, without leaving the connection. A replay that
    would write more than `replay_bound` ends the response with the bound's closing frame
    instead (`cut`). Every
    write that waits on the client is marked (`Viewer.write_started`), so the follower can cut
    off a client that stopped reading. Live frames are mostly written without waking the
    viewer's task (`_live`).
    """

    def __init__(
        self,
        follower: StreamFollower,
        events: EventLog,
        *,
        run_id: str,
        after: str,
        first_id: str,
        ping_interval_s: float,
        dialect: Dialect | None = None,
        replay_bound: ReplayBound | None = None,
    ) -> None:
        self.dialect: Dialect = dialect or RunstreamDialect()
        self.replay_bound = replay_bound
        self.follower = follower
        self.events = events
        self.run_id = run_id
        self.first_id = first_id  # a `retry` with another first id: Redis lost the stream
        self.ping_interval_s = ping_interval_s
        self.last_id = after
        self.last = parse_event_id(after)
        self.ended = False  # the terminal event is sent, or the stream was reset
        self.complete = False  # the dialect's last event is sent: the response may end cleanly
        self.cut = False  # a replay reached `replay_bound`: its closing frame ended the response
        self._replayed = 0  # bytes the current replay wrote
        # Live frames written without the viewer's task (`_write_directly`) leave it these:
        self._send: Send | None = None
        self._viewer: Viewer | None = None
        self._blocked: BlockedWrite | None = None  # a write to finish
        self._left: list[Frame] = []  # frames from a `retry` on, which need a look at Redis

    async def frames(self) -> AsyncIterator[bytes]:
        viewer = await self.follower.subscribe(self.run_id, self.ping_interval_s)
        try:
            while not self.ended:
                for phase in (self._replay(viewer), self._live(viewer)):
                    async for data in phase:
                        viewer.write_started()
                        yield data
                        viewer.write_ended()
                    if self.ended:
                        return
                if not viewer.lagging or await self._stream_was_reset():
                    return  # closed (server shutdown), or Redis lost the stream: it reconnects
                viewer.rejoin()  # take live frames again, then replay what was missed
        finally:
            self.follower.unsubscribe(self.run_id, viewer)

    async def _replay(self, viewer: Viewer) -> AsyncIterator[bytes]:
        """Everything after `last_id` up to where the viewer's live frames begin, a page per
        write, then what the dialect held back; within `replay_bound`."""
        self._replayed = 0
        self.dialect.begin_replay()
        try:
            async for chunk in self._replayed_pages(viewer):
                yield chunk
        finally:
            held = self.dialect.end_replay()
        if held and not self.ended:
            yield self._bounded(held)

    async def _replayed_pages(self, viewer: Viewer) -> AsyncIterator[bytes]:
        """The replay's frames, a page per write: from the feed's memory when it holds all of
        it, else from Redis."""
        feed = viewer.feed
        held = feed.history(self.last, self.first_id, viewer.position)
        if held is None and self.last_id == "0-0" and feed.history_loading is not None:
            # another viewer is reading the stream's start for the feed: wait for it rather
            # than read it again (a run's viewers mostly arrive together)
            await asyncio.shield(feed.history_loading)
            held = feed.history(self.last, self.first_id, viewer.position)
        if held is not None:
            frames, newest_held = held
            for start in range(0, len(frames), REPLAY_PAGE):
                chunk = self._render(frames[start : start + REPLAY_PAGE])
                if chunk:
                    yield chunk
                if self.ended:
                    return
            if not frames and self.dialect.ends_after(newest_held):
                self.ended = self.complete = True  # the client has the last event already
            return
        # A replay from the stream's start hands the feed what it read, up to where the feed's
        # own frames begin, for the viewers after it (`RunFeed.add_history`), as soon as it has
        # read that far: before its own client is written to.
        history: list[Frame] | None = None
        loading: asyncio.Future[None] | None = None
        if self.last_id == "0-0" and feed.floor != (0, 0) and feed.history_loading is None:
            history = []
            loading = feed.history_loading = feed.loop.create_future()
        read = False
        try:
            while True:
                page = await self.events.read_range(self.run_id, self.last_id, count=REPLAY_PAGE)
                read = read or bool(page)
                frames = [sse_frame(event) for event in page]
                if history is not None:
                    floor = feed.floor
                    history += [frame for frame in frames if frame.position <= floor]
                    if len(history) > feed.size:
                        history = None  # more than the buffer may hold
                    elif len(page) < REPLAY_PAGE or (frames and frames[-1].position >= floor):
                        feed.add_history(history)
                        history = None
                    if history is None:
                        _end_history_loading(feed, loading)
                        loading = None
                chunk = self._render(frames)
                if chunk:
                    yield chunk
                if self.ended or len(page) < REPLAY_PAGE:
                    break
        finally:
            _end_history_loading(feed, loading)
        if read:
            return  # had the newest event been the end, and sent, this replay would have read it
        newest = await self.events.last_event(self.run_id)
        if (
            newest is not None
            and self.dialect.ends_after(sse_frame(newest))
            and parse_event_id(newest.id) <= self.last
        ):
            # the client already has the last event: nothing follows it
            self.ended = self.complete = True

    def _render(self, frames: list[Frame]) -> bytes:
        """Replayed `frames` as one write, up to the dialect's last event or the replay's
        bound; the viewer's place moves on."""
        chunk = bytearray()
        for frame in frames:
            chunk += self._bounded(self.dialect.render(frame))
            if self.cut:
                break
            self.last_id, self.last = frame.id, frame.position
            if self.dialect.ends_after(frame):
                self.ended = self.complete = True
                break
        return bytes(chunk)

    def _bounded(self, data: bytes) -> bytes:
        """`data`, when the replay's bound leaves room for it; else the bound's closing frame,
        which ends the response (a client resumes after the last frame it got)."""
        bound = self.replay_bound
        if bound is None:
            return data
        self._replayed += len(data)
        if self._replayed <= bound.max_bytes:
            return data
        self.ended = self.complete = self.cut = True
        return bound.closing

    async def _live(self, viewer: Viewer) -> AsyncIterator[bytes]:
        """Live frames, whatever the feed holds past the viewer per write (a burst), until the
        end or until `take` gives None (it fell behind, or the server is shutting down); a ping
        when the follower's ticker finds it quiet for its interval.

        While it waits, the viewer writes new frames directly from the follower's wake-up
        (`_write_directly`) when the response's `send` is known (`BODY_SEND`): the task is
        woken only for what needs it (a write the client's socket cannot take yet, a `retry`,
        the end, a ping, falling behind, a close)."""
        metrics = self.follower.metrics
        send = BODY_SEND.get()
        # its calls are driven by hand (`_write_directly`): only a coroutine function's will do
        self._send = send if inspect.iscoroutinefunction(send) else None
        if self._send is not None:
            self._viewer = viewer
            viewer.direct = self._write_directly
        try:
            while True:
                # what a direct write left to the task first, else the frames past the viewer
                bursts: list[Burst] = []
                if self._blocked is not None:
                    blocked, self._blocked = self._blocked, None
                    await blocked.finish()  # marked as a write by `_write_directly`
                    viewer.write_ended()
                    metrics.delivered(blocked.oldest_ms)
                    bursts = blocked.rest
                if self._left:
                    left, self._left = self._left, []
                    bursts = bursts + await self._bursts(left)
                if not bursts and not self.ended:
                    frames = viewer.take()
                    if frames is None:
                        return
                    if not frames:
                        if viewer.ping_due(time.monotonic()):
                            yield self.dialect.ping
                        else:
                            await viewer.wait()
                        continue
                    bursts = await self._bursts(frames)
                for chunk, oldest_ms in bursts:
                    yield chunk  # resumed once the write is done
                    metrics.delivered(oldest_ms)
                if self.ended:
                    return
        finally:
            viewer.direct = None

    def _write_directly(self) -> bool:
        """Write the frames past the waiting viewer's position through the response's `send`,
        from the follower's wake-up instead of the viewer's task (a task's wake-up and the
        layers it resumes cost more than the write). True: the viewer may go on waiting.

        A send that does not finish at once (the client's socket is full) is left to the
        task (`BlockedWrite`), as are frames from a `retry` on and the end of the stream; a
        send that fails closes the viewer, whose client then reconnects and replays.
        """
        assert self._send is not None and self._viewer is not None
        viewer = self._viewer
        frames = viewer.take()
        if frames is None:
            return False
        bursts, self._left = self._bursts_until_check(frames)
        for index, (chunk, oldest_ms) in enumerate(bursts):
            body: HTTPResponseBodyEvent = {
                "type": "http.response.body",
                "body": chunk,
                "more_body": True,
            }
            sending: Coroutine[Any, Any, None] = self._send(body)  # type: ignore[assignment]
            try:
                blocked = sending.send(None)
            except StopIteration:
                self.follower.metrics.delivered(oldest_ms)
                continue
            except Exception:
                logger.warning("a direct write failed; closing the viewer", exc_info=True)
                viewer.closed = True
                return False
            self._blocked = BlockedWrite(sending, blocked, oldest_ms, bursts[index + 1 :])
            viewer.write_started()  # its task ends it: the cut-off counts the wait
            return False
        if bursts:
            viewer.wrote()
        return not (self.ended or self._left)

    async def _bursts(self, frames: list[Frame]) -> list[Burst]:
        """`frames` as few writes (`_bursts_until_check`), looking at Redis at each `retry`:
        when the stream was reset there, the viewer's stream ends."""
        bursts, left = self._bursts_until_check(frames)
        while left:
            if await self._stream_was_reset():
                self.ended = True  # Redis lost the stream; on reconnect: 410
                break
            more, left = self._bursts_until_check(left, checked=left[0])
            bursts += more
        return bursts

    def _bursts_until_check(
        self, frames: list[Frame], checked: Frame | None = None
    ) -> tuple[list[Burst], list[Frame]]:
        """`frames` as few writes (up to `MAX_CHUNK` bytes each), each with its oldest event's
        append time (Redis ms; its delivery is timed): one send per burst rather than one per
        event, which is most of the cost of a fast run. Frames the replay sent already are
        skipped. Stops before a `retry` frame other than `checked` and returns the frames from
        it on: whether Redis lost the stream there takes a look at Redis."""
        bursts: list[Burst] = []
        chunk = bytearray()
        oldest = 0
        left: list[Frame] = []
        for index, frame in enumerate(frames):
            if frame.position <= self.last:  # sent by the replay already
                continue
            if frame.event == "retry" and frame is not checked:
                left = frames[index:]
                break
            if not chunk:
                oldest = frame.position[0]
            chunk += self.dialect.render(frame)
            self.last_id, self.last = frame.id, frame.position
            if self.dialect.ends_after(frame):
                self.ended = self.complete = True
                break
            if len(chunk) >= MAX_CHUNK:
                bursts.append((bytes(chunk), oldest))
                chunk.clear()
        if chunk:
            bursts.append((bytes(chunk), oldest))
        return bursts, left

    async def _stream_was_reset(self) -> bool:
        record = await self.events.live_record(self.run_id)
        return record is not None and record.first_id != self.first_id
