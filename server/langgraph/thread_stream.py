"""The thread-level stream (`GET /threads/{thread_id}/stream`, SDK `threads.join_stream`): the
runs of a thread one after another, each as its own LangGraph stream, then the thread's next
runs as they are created, until the client goes away (LangGraph: "remains open indefinitely").

Each run's part is what joining that run's stream gives (`follow.py`, `stream.LangGraphStream`):
its `metadata` first, its frames, its `end` or `error`; then LangGraph's "run_done" event,
`metadata` `{"status": "run_done", "run_id"}`. The mode `run_modes` (the default) gives each run
in the modes it was created with; `lifecycle` gives only the `metadata` events (a run's first, a
retried attempt's, its run_done), as LangGraph's does. `state_update` is refused.

**Event ids.** A frame's id is `<run_id>:<its id in the run's stream>`, and a run's opening
`metadata` has `<run_id>:0-0`. `Last-Event-ID` resumes exactly after it: the rest of that run
(or the next run, when that frame ended its LangGraph stream), then the runs created after it.
Without `Last-Event-ID` the stream starts with the runs not yet over (queued or running), each
from its start; with `-` (or `-1`), with every run of the thread. A run whose events are no
longer kept is skipped; so, after an id naming a run that is gone (rolled back or deleted), are
the runs already over.

While no run is followed, the stream waits on the process's thread watcher
(`server/streaming/thread_watch.py`), which looks for all waiting thread streams at once, every
`thread_watch.POLL_S`, for threads with a run newer than those their viewers have read; it wakes
this one when its thread has one (or is gone), and the stream reads its thread's runs again.
A run is read from its start, so none of its events is missed by that delay.

A run part whose replay passes `RUNSTREAM_MAX_REPLAY_BYTES` ends with an `error`, and so does
the thread stream: the client rejoins after the last frame it got.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

import structlog

from server import inputs
from server.callers.auth import Caller
from server.callers.quotas import CallerQuotas
from server.errors import ApiError
from server.resources import Resources
from server.streaming.attach import Attachment
from server.streaming.event_stream import EventStream
from stream_store.errors import StreamGone
from stream_store.run_records import RunRecord
from stream_store.thread_records import ThreadRecord

# the run stream's own attachment and dialect: a run's part here is exactly that stream
from .conversions import run_assistant_id
from .follow import SSE_HEADERS, StreamCut, TranslatedDialect, langgraph_attachment, modes_of
from .rejoin import catch_up, resume_point
from .statuses import is_over
from .stream import LangGraphStream

__all__ = ["THREAD_STREAM_MODES", "thread_stream_response"]

logger = structlog.get_logger()

THREAD_STREAM_MODES = ("run_modes", "lifecycle")
HEARTBEAT_S = 5.0  # LangGraph's keep-alive interval, kept while no run is followed
RUN_ID_SEPARATOR = ":"  # between the run id and the run stream's id in a frame id


def _run_modes_asked(asked: Sequence[str]) -> bool:
    """True for `run_modes` (the default), False for `lifecycle` alone.

    Raises:
        ApiError: 422 for `state_update` or a mode LangGraph does not name.
    """
    modes = {mode for mode in asked if mode}
    if "state_update" in modes:
        raise ApiError(
            422,
            "invalid_request",
            "thread stream mode 'state_update' is not served; use 'run_modes' (the runs'"
            " values and updates) or 'lifecycle'",
        )
    if unknown := modes - set(THREAD_STREAM_MODES):
        raise ApiError(
            422,
            "invalid_request",
            f"thread stream mode {sorted(unknown)[0][:40]!r} is not one of run_modes, lifecycle",
        )
    return not modes or "run_modes" in modes


@dataclass
class _Start:
    """Where a thread stream starts: the runs it does not follow, and a run it resumes in."""

    skipped: set[str] = field(default_factory=set)
    run: RunRecord | None = None
    after: str = "0-0"  # in `run`'s stream
    partly_sent: tuple[str, int] | None = None
    opened: bool = False  # the client has `run`'s opening `metadata`


def _over(run: RunRecord) -> bool:
    """The run's LangGraph stream is over (to LangGraph a run ends at an interrupt)."""
    return is_over(run.status)


def _start(runs: list[RunRecord], last_event_id: str | None) -> _Start:
    """Where to start for `Last-Event-ID` (see the module docstring).

    Raises:
        ApiError: 400 for an id that is not a thread stream's.
    """
    value = (last_event_id or "").strip()
    if value in ("-", "-1", "0"):
        return _Start()
    if not value:
        return _Start(skipped={r.run_id for r in runs if _over(r)})
    run_id, separator, in_run = value.partition(RUN_ID_SEPARATOR)
    try:
        if not separator:
            raise ApiError(400, "invalid_id", "no run id")
        run_id = inputs.object_id(run_id, "run")
        after, partly_sent = resume_point(in_run)
    except ApiError:
        raise ApiError(
            400,
            "invalid_last_event_id",
            f"Last-Event-ID {value[:120]!r} is not a thread stream's (<run id>:<event id>)",
        ) from None
    ids = [r.run_id for r in runs]
    if run_id not in ids:
        return _Start(skipped={r.run_id for r in runs if _over(r)})
    place = ids.index(run_id)
    return _Start(set(ids[:place]), runs[place], after, partly_sent, opened=True)


@dataclass
class _RunPart:
    """One run's part of the thread stream, ready to follow."""

    attachment: Attachment
    opening: bytes  # `metadata`, when the run is read from its start


async def _run_part(
    resources: Resources,
    run: RunRecord,
    run_modes: bool,
    after: str = "0-0",
    partly_sent: tuple[str, int] | None = None,
    *,
    opened: bool = False,
) -> _RunPart | None:
    """`run`'s part after `after` (and after its opening, when `opened`); None when there is
    nothing more of it to send (its events are no longer kept, or the client has its last
    frame).

    Raises:
        ApiError: 400 for an `after` later than the run's newest event.
    """
    translator = LangGraphStream(
        run_id=run.run_id,
        thread_id=run.thread_id,
        graph=run.graph,
        assistant_id=run_assistant_id(run),
        modes=modes_of(run, None) if run_modes else [],
        metadata=run.metadata,
        id_prefix=run.run_id + RUN_ID_SEPARATOR,
        thread_mode="run_modes" if run_modes else "lifecycle",
    )
    if partly_sent is not None:
        translator.resume_within(*partly_sent)
    try:
        attachment = await langgraph_attachment(
            resources, run, after, TranslatedDialect(translator)
        )
    except StreamGone:
        return None
    await catch_up(resources, run.run_id, translator, attachment.last_id)
    if translator.ended:
        return None
    opening = translator.opening() if attachment.last_id == "0-0" and not opened else b""
    return _RunPart(attachment, opening)


async def _next_run(
    resources: Resources, thread: ThreadRecord, skipped: set[str]
) -> AsyncGenerator[RunRecord | bytes]:
    """Heartbeats while the thread has no run left to follow, then that run; returns when the
    thread is gone, and raises `StreamCut` when the server shuts down.

    Between reads of the thread it waits on the thread watcher, registered only inside each
    `wait` and never across a `yield`: a client that leaves leaves no registration behind."""
    quiet_since = time.monotonic()
    while True:
        if resources.follower.closing or resources.thread_watch.stopped:
            raise StreamCut(f"thread stream of {thread.thread_id} cut: the server is stopping")
        runs = await resources.run_records.thread_runs(thread.thread_id, thread.owner)
        upcoming = [run for run in runs if run.run_id not in skipped]
        if upcoming:
            yield upcoming[0]
            return
        if await resources.thread_records.get_thread(thread.thread_id, thread.owner) is None:
            return
        # Any run not read above is newer than all of these (see
        # `server/streaming/thread_watch.py`).
        seen = max((run.created_at for run in runs), default=None)
        while not await resources.thread_watch.wait(
            thread.thread_id, seen, quiet_since + HEARTBEAT_S - time.monotonic()
        ):
            yield LangGraphStream.heartbeat
            quiet_since = time.monotonic()


async def _thread_frames(
    resources: Resources,
    thread: ThreadRecord,
    run_modes: bool,
    start: _Start,
    first: _RunPart | None,
) -> AsyncGenerator[bytes]:
    skipped = start.skipped
    part = first
    while True:
        if part is not None:
            if part.opening:
                yield part.opening
            async for chunk in part.attachment.frames():
                if chunk:
                    yield chunk
            if not part.attachment.complete:
                raise StreamCut(f"thread stream of {thread.thread_id} cut in a run")
            if part.attachment.cut:
                return  # its replay passed RUNSTREAM_MAX_REPLAY_BYTES: it ended with an `error`
        run: RunRecord | None = None
        async for found in _next_run(resources, thread, skipped):
            if isinstance(found, bytes):
                yield found
            else:
                run = found
        if run is None:
            return  # the thread was deleted: nothing more will come
        skipped.add(run.run_id)
        part = await _run_part(resources, run, run_modes)


def _location(thread: ThreadRecord, run_modes: bool) -> str:
    """The stream's own URL, which the SDKs reconnect to (with the modes: they drop queries)."""
    query = "" if run_modes else "?" + urlencode({"stream_mode": "lifecycle"})
    return f"/threads/{thread.thread_id}/stream{query}"


async def thread_stream_response(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    thread: ThreadRecord,
    *,
    modes: Sequence[str],
    last_event_id: str | None,
) -> EventStream:
    """The thread's runs as one SSE stream (see the module docstring), in the caller's stream
    slot. The run it resumes in is checked before the response starts (400 for an id past its
    newest event), after the slot is taken: a request refused for want of one reads nothing
    of that run's stream; one refused after it gives it back."""
    run_modes = _run_modes_asked(modes)
    runs = await resources.run_records.thread_runs(thread.thread_id, thread.owner)
    start = _start(runs, last_event_id)
    slot = await quotas.take_stream_slot(caller.owner, None)
    first = None
    if start.run is not None:
        start.skipped.add(start.run.run_id)
        try:
            first = await _run_part(
                resources, start.run, run_modes, start.after, start.partly_sent, opened=start.opened
            )
        except BaseException:
            quotas.give_back(slot)
            raise
    logger.info("thread stream joined", thread_id=thread.thread_id, run_modes=run_modes)
    frames = _thread_frames(resources, thread, run_modes, start, first)
    return EventStream(
        quotas.hold(slot, frames),
        media_type="text/event-stream",  # Litestar adds "; charset=utf-8"
        headers={**SSE_HEADERS, "Location": _location(thread, run_modes)},
    )
