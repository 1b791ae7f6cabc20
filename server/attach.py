"""Attaching a client to a run: replay from the stream, then follow it live, as SSE bytes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import structlog

from stream_store.events import parse_event_id
from stream_store.log import EventLog

from .fanout import StreamFollower, sse_frame

__all__ = ["attach"]

logger = structlog.get_logger()

PING = b": ping\n\n"  # a bare comment (Litestar's encoder would add an empty data line)
REPLAY_PAGE = 1000


async def _stream_was_reset(events: EventLog, run_id: str, first_id: str) -> bool:
    record = await events.record(run_id)
    return record.get("first_id", first_id) != first_id


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
    live events the replay already sent (see `server.fanout`).
    """
    viewer = await follower.subscribe(run_id)
    try:
        last = parse_event_id(after)
        cursor = after
        while True:
            page = await events.read_range(run_id, cursor, count=REPLAY_PAGE)
            for event in page:
                yield sse_frame(event).data
                cursor, last = event.id, parse_event_id(event.id)
                if event.terminal:
                    return
            if len(page) < REPLAY_PAGE:
                break
        newest = await events.last_event(run_id)
        if newest is not None and newest.terminal and parse_event_id(newest.id) <= last:
            return  # the client already has the terminal event: nothing will follow it
        while True:
            try:
                frame = await asyncio.wait_for(viewer.queue.get(), ping_interval_s)
            except TimeoutError:
                yield PING
                continue
            if frame is None:
                if viewer.overflowed:
                    logger.warning("viewer fell behind; disconnecting it", run_id=run_id)
                return
            position = parse_event_id(frame.id)
            if position <= last:
                continue
            if frame.event == "retry" and await _stream_was_reset(events, run_id, first_id):
                return  # Redis lost the stream; on reconnect the client learns it (410)
            yield frame.data
            last = position
            if frame.terminal:
                return
    finally:
        follower.unsubscribe(run_id, viewer)
