"""Attaching a client to a run: replay from the stream, then follow it live, as SSE bytes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import structlog

from stream_store.errors import StreamGone
from stream_store.events import parse_event_id
from stream_store.log import EventLog, LiveRecord
from stream_store.records import RunRecord

from .errors import ApiError
from .fanout import StreamFollower, sse_frame

__all__ = ["attach", "check_resume_point"]

logger = structlog.get_logger()

PING = b": ping\n\n"  # a bare comment (Litestar's encoder would add an empty data line)
REPLAY_PAGE = 1000
MAX_CHUNK = 64 * 1024  # bytes per write when coalescing queued frames


def check_resume_point(run: RunRecord, record: LiveRecord | None, after: str) -> str:
    """Every rule on where a viewer may resume (docs/protocol.md, "Reconnecting"), in one place.

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


async def _stream_was_reset(events: EventLog, run_id: str, first_id: str) -> bool:
    record = await events.live_record(run_id)
    return record is not None and record.first_id != first_id


async def attach(
    follower: StreamFollower,
    events: EventLog,
    run_id: str,
    after: str,
    ping_interval_s: float,
    first_id: str,
) -> AsyncIterator[bytes]:
    """SSE frames of every event after `after`, ending after the terminal event.

    Subscribes before replaying, so nothing appended during the replay is missed, and skips
    live events the replay already sent (see `server.fanout`). A viewer that falls behind the
    live feed replays from Redis again, the same way, without leaving the connection.
    """
    loop = asyncio.get_running_loop()
    viewer = await follower.subscribe(run_id)
    try:
        last_id = after
        while True:
            while True:  # replay: everything after `last_id` that Redis has now
                page = await events.read_range(run_id, last_id, count=REPLAY_PAGE)
                if page:
                    viewer.writing_since = loop.time()
                    yield b"".join(sse_frame(event).data for event in page)
                    viewer.writing_since = None
                    last_id = page[-1].id
                    if page[-1].terminal:
                        return
                if len(page) < REPLAY_PAGE:
                    break
            last = parse_event_id(last_id)
            newest = await events.last_event(run_id)
            if newest is not None and newest.terminal and parse_event_id(newest.id) <= last:
                return  # the client already has the terminal event: nothing will follow it
            while True:  # live, until the end or until the viewer falls behind
                try:
                    if viewer.queue.empty():
                        async with asyncio.timeout(ping_interval_s):  # cheaper than wait_for
                            frame = await viewer.queue.get()
                    else:
                        frame = viewer.queue.get_nowait()
                except TimeoutError:
                    viewer.writing_since = loop.time()
                    yield PING
                    viewer.writing_since = None
                    continue
                # Whatever else is already queued goes out in the same write: one send per burst
                # rather than one per event, which is most of the cost of a fast run.
                chunk = bytearray()
                ended = False
                while frame is not None:
                    position = parse_event_id(frame.id)
                    if position > last:
                        if frame.event == "retry" and await _stream_was_reset(
                            events, run_id, first_id
                        ):
                            ended = True  # Redis lost the stream; on reconnect: 410
                            break
                        chunk += frame.data
                        last, last_id = position, frame.id
                        if frame.terminal:
                            ended = True
                            break
                    if viewer.queue.empty() or len(chunk) >= MAX_CHUNK:
                        break
                    frame = viewer.queue.get_nowait()
                if chunk:
                    viewer.writing_since = loop.time()
                    yield bytes(chunk)
                    viewer.writing_since = None
                if ended:
                    return
                if frame is None:
                    break
            if not viewer.lagging or await _stream_was_reset(events, run_id, first_id):
                return  # closed (server shutdown), or Redis lost the stream: the client reconnects
            viewer.lagging = False  # take live frames again, then replay what was missed
    finally:
        follower.unsubscribe(run_id, viewer)
