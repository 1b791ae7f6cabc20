"""Following a run in LangGraph's dialect: its events as LangGraph's SSE stream (`/stream`),
or its outcome once it ends (`/wait`, `/join`).

Both attach to the run's stream as `/v1` does (`server.streaming.attach`); the stream is translated
per viewer by `stream.LangGraphStream`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

import anyio
import msgspec
import structlog
from litestar.params import Parameter

from server.callers.auth import Caller
from server.callers.quotas import CallerQuotas
from server.resources import Resources
from server.streaming.attach import Attachment, ReplayBound, check_resume_point
from server.streaming.event_stream import EventStream
from server.streaming.feed import Frame
from stream_store.errors import Conflict
from stream_store.run_records import RunRecord
from stream_store.run_status import WORKING
from wire.events import RunStatus, parse_event_id

from .conversions import run_assistant_id
from .rejoin import catch_up
from .stream import LangGraphStream
from .views import streamed_interrupt, thread_state

__all__ = [
    "SSE_HEADERS",
    "StreamCut",
    "StreamModeQuery",
    "TranslatedDialect",
    "langgraph_attachment",
    "modes_of",
    "outcome_at_end",
    "run_paths",
    "stream_response",
    "wait_response",
]

logger = structlog.get_logger()

# `?stream_mode=` of the routes that stream (repeatable: several modes in one request).
StreamModeQuery = Annotated[list[str] | None, Parameter(query="stream_mode", required=False)]

SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
WAIT_PING = b"\n"  # leading whitespace keeps the JSON answer valid; LangGraph sends the same
ROLLBACK_WAIT_S = 5.0  # how long `cancel?wait=true&action=rollback` waits for the rollback


class StreamCut(Exception):
    """Raised after the headers went out, so the server aborts the connection: a LangGraph
    client then reconnects, where a clean end would tell it the run finished."""


def run_paths(run: RunRecord) -> dict[str, str]:
    """The headers that name a run's stream and the run, which the SDKs reconnect with."""
    base = f"/threads/{run.thread_id}/runs/{run.run_id}"
    return {"Location": f"{base}/stream", "Content-Location": base}


def modes_of(run: RunRecord, asked: list[str] | None) -> list[str]:
    """The run's modes a join asked for (none asked: all of them). As in LangGraph,
    `messages` and `messages-tuple` each ask for whichever of the two the run streams, and a
    mode the run does not stream gives nothing."""
    recorded: list[str] = list(run.kwargs.get("stream_mode") or ["values"])
    if not asked:
        return recorded
    wants_messages = any(m.startswith("messages") for m in asked)
    return [m for m in recorded if m in asked or (wants_messages and m.startswith("messages"))]


class _Quiet:
    """A dialect that writes nothing but keep-alives: `/wait` and `/join` answer at the end."""

    ping = WAIT_PING

    def __init__(self, translator: LangGraphStream) -> None:
        self.translator = translator

    def render(self, frame: Frame) -> bytes:
        return b""

    def ends_after(self, frame: Frame) -> bool:
        return self.translator.ends_after(frame.stored)

    def begin_replay(self) -> None:
        pass

    def end_replay(self) -> bytes:
        return b""


class TranslatedDialect:
    """An attachment's frames as one LangGraph viewer's SSE events (its `LangGraphStream`)."""

    ping = LangGraphStream.heartbeat

    def __init__(self, translator: LangGraphStream) -> None:
        self.translator = translator

    def render(self, frame: Frame) -> bytes:
        return self.translator.render(frame.stored, shared=frame.renders)

    def ends_after(self, frame: Frame) -> bool:
        return self.translator.ends_after(frame.stored)

    def begin_replay(self) -> None:
        self.translator.begin_replay()

    def end_replay(self) -> bytes:
        return self.translator.end_replay()


def _translator(run: RunRecord, modes: list[str]) -> LangGraphStream:
    return LangGraphStream(
        run_id=run.run_id,
        thread_id=run.thread_id,
        graph=run.graph,
        assistant_id=run_assistant_id(run),
        modes=modes,
        metadata=run.metadata,
    )


async def langgraph_attachment(
    resources: Resources, run: RunRecord, after: str, dialect: TranslatedDialect | _Quiet
) -> Attachment:
    """The run's events after `after` for a LangGraph viewer: a lost stream starts it over.
    Each replay writes at most `RUNSTREAM_MAX_REPLAY_BYTES`, then an `error` frame ends it."""
    record = await resources.events.live_record(run.run_id)
    if record is not None and parse_event_id(after) < parse_event_id(record.first_id):
        after = "0-0"  # Redis lost the stream: the new one opens with a fresh `values`
    first_id = check_resume_point(run, record, after)
    max_bytes = resources.settings.max_replay_bytes
    return Attachment(
        resources.follower,
        resources.events,
        run_id=run.run_id,
        after=after,
        first_id=first_id,
        ping_interval_s=min(5.0, resources.settings.ping_interval_s),
        dialect=dialect,
        replay_bound=ReplayBound(max_bytes, dialect.translator.replay_cut(max_bytes)),
    )


async def stream_response(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    run: RunRecord,
    *,
    modes: list[str],
    after: str,
    cancel_on_disconnect: bool,
    partly_sent: tuple[str, int] | None = None,
    opening: bool = True,
) -> EventStream:
    """The run's events after `after` (and the rest of `partly_sent`, an event the client has
    some frames of) as LangGraph's SSE frames, in the caller's stream slot; from the start,
    after the opening `metadata` unless the client had it (`opening`, `rejoin.opens`).

    The slot is taken first: a request refused for want of one reads nothing of the stream
    (a catch-up into a long run reads all of it); one refused after it gives it back."""
    slot = await quotas.take_stream_slot(caller.owner, None)
    try:
        translator = _translator(run, modes)
        if partly_sent is not None:
            translator.resume_within(*partly_sent)
        dialect = TranslatedDialect(translator)
        attachment = await langgraph_attachment(resources, run, after, dialect)
        await catch_up(resources, run.run_id, translator, attachment.last_id)
    except BaseException:
        quotas.give_back(slot)
        raise
    first = translator.opening() if opening and after == "0-0" else b""
    frames = _to_the_end(resources, run, attachment, cancel_on_disconnect, opening=first)
    return EventStream(
        quotas.hold(slot, frames),
        media_type="text/event-stream",  # Litestar adds "; charset=utf-8"
        headers={**SSE_HEADERS, **run_paths(run)},
    )


async def _to_the_end(
    resources: Resources,
    run: RunRecord,
    attachment: Attachment,
    cancel_on_disconnect: bool,
    *,
    opening: bytes = b"",
) -> AsyncGenerator[bytes]:
    """`opening`, then the attachment's chunks until the run's LangGraph stream ends. A client
    that goes away before that cancels the run when it asked for it (`on_disconnect=cancel`);
    a stream the server cuts (shutdown, Redis lost the stream) leaves the run alone and
    `StreamCut` aborts the connection, so that the client reconnects."""
    finished = False
    client_left = False
    try:
        if opening:
            yield opening
        async for chunk in attachment.frames():
            if chunk:
                yield chunk
        finished = attachment.complete
    except (asyncio.CancelledError, GeneratorExit):
        # the response's task cancelled on `http.disconnect` (server/streaming/event_stream.py), or
        # the generator closed after it; not a server that is stopping
        client_left = not resources.follower.closing
        raise
    finally:
        if client_left and cancel_on_disconnect:
            await _cancel_quietly(resources, run)
    if not finished:
        raise StreamCut(f"following run {run.run_id} cut before its end")


async def _cancel_quietly(resources: Resources, run: RunRecord) -> None:
    """Cancel `run` for a client that went away. It runs in the `finally` of a response the
    client's disconnect cancelled; asyncio delivers that cancel once, and the shield keeps an
    anyio cancel scope around the response (if one is ever added) from ending it early."""
    with anyio.CancelScope(shield=True):
        current = await resources.run_records.get_run(run.run_id, run.owner)
        if current is not None and current.status in WORKING:
            with contextlib.suppress(Conflict):
                await resources.lifecycle.cancel(current)
            logger.info("run cancelled: its client went away (on_disconnect=cancel)")


async def outcome_at_end(resources: Resources, run: RunRecord) -> dict[str, Any]:
    """What `/wait` answers, once the run's LangGraph stream ended: for a caller that answers in
    one piece rather than a stream (`/mcp`).

    Raises:
        StreamCut: the stream was cut before its end (shutdown, Redis lost it).
    """
    attachment = await langgraph_attachment(resources, run, "0-0", _Quiet(_translator(run, [])))
    async for _ in attachment.frames():
        pass
    if not attachment.complete:
        raise StreamCut(f"following run {run.run_id} cut before its end")
    return await _outcome(resources, run, True)


async def _outcome(
    resources: Resources, run: RunRecord, with_values: bool, stored: bool = False
) -> dict[str, Any]:
    """What `/wait` and `/join` answer: the thread's values (`with_values`), or the run's error.

    A run stopped at `interrupt()` adds `__interrupt__`: as LangGraph's last `values` part
    streamed it (each `Interrupt` whole, `response_schema` null when none), or, `stored`, as
    LangGraph's join of a run already over reads the thread (`api/runs.py`'s fallback): the
    thread's interrupts alone, `{"id", "value"}` each, without its values."""
    run = await resources.run_records.get_run(run.run_id, run.owner) or run
    if run.status == RunStatus.FAILED:
        error = run.error or {}
        kind, _, text = str(error.get("message", "")).partition(": ")
        return {"__error__": {"error": kind or error.get("code", "error"), "message": text}}
    if not with_values:
        return {}
    thread = await resources.thread_records.get_thread(run.thread_id, run.owner)
    if thread is None:
        return {}
    state = await thread_state(resources, thread)
    if stored and state.interrupts:
        return {"__interrupt__": state.interrupts}
    values: dict[str, Any] = dict(state.values) if isinstance(state.values, dict) else {}
    if state.interrupts:
        values["__interrupt__"] = [streamed_interrupt(i) for i in state.interrupts]
    return values


async def _rolled_back(resources: Resources, run: RunRecord) -> None:
    """Return once a cancelled run's rollback removed it, or after `ROLLBACK_WAIT_S`. The run's
    `end` is written before its rollback (the outcome first), and a LangGraph client takes the
    answer to a waiting cancel as "the thread is back as it was"."""
    with anyio.move_on_after(ROLLBACK_WAIT_S):
        # the rollback is another process's (the worker's), so nothing here can be awaited
        for _ in range(int(ROLLBACK_WAIT_S / 0.02)):
            if await resources.run_records.get_run(run.run_id, run.owner) is None:
                return
            await anyio.sleep(0.02)


async def wait_response(
    resources: Resources,
    run: RunRecord,
    cancel_on_disconnect: bool,
    *,
    rollback: bool = False,
    values: bool = True,
    stored: bool = False,
) -> EventStream:
    """Keep-alives until the run's LangGraph stream ends, then its outcome as JSON: 200 with
    the headers, as LangGraph's. A waiting cancel asks for no `values`: LangGraph's answer to
    it holds only what the run streamed after the cancel, which is nothing (`{}`). A join of a
    run already over answers as LangGraph's reads it from the thread (`stored`)."""
    attachment = await langgraph_attachment(resources, run, "0-0", _Quiet(_translator(run, [])))

    async def body() -> AsyncIterator[bytes]:
        async with contextlib.aclosing(
            _to_the_end(resources, run, attachment, cancel_on_disconnect)
        ) as chunks:
            async for chunk in chunks:
                yield chunk
        if rollback:
            await _rolled_back(resources, run)
        yield msgspec.json.encode(await _outcome(resources, run, values, stored))

    paths = run_paths(run)
    return EventStream(
        body(),
        status_code=200,  # also from `cancel?wait=1`, whose route answers 202 without `wait`
        media_type="application/json",
        headers={
            "Location": f"{paths['Content-Location']}/join",
            "Content-Location": paths["Content-Location"],
            "Cache-Control": "no-store",
        },
    )
