"""LangGraph's run routes: create, stream, wait, join, list, get, cancel, delete.

One engine, two dialects: a run made here is a runstream run (the same records, stream,
workers and lifecycle as `/v1`) whose request also asks the worker for LangGraph's `values`
and `updates` events; its stream is translated per viewer by `stream.LangGraphStream`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import msgspec
import structlog
from litestar import Controller, Request, Response, delete, get, post
from litestar.params import Parameter
from litestar.response import Stream

from stream_store.errors import Conflict, NotFound, redis_errors
from stream_store.events import RunStatus, parse_event_id
from stream_store.log import StoredEvent
from stream_store.quotas import CallerQuotas
from stream_store.records import TITLE_CHARS, NewRun, RunRecord
from stream_store.schemas import InputMessage
from stream_store.tracing import run_attributes, traceparent_of

from .. import inputs
from ..attach import REPLAY_PAGE, Attachment, check_resume_point
from ..auth import Caller
from ..errors import ApiError
from ..fanout import Frame
from ..resources import Resources
from ..runs import owned_run
from .command import checked_command
from .stream import LangGraphStream, split_frame_id
from .views import graph_of_assistant, run_view, thread_state
from .wire import (
    MAX_PAGE,
    BulkCancel,
    Run,
    RunCreate,
    engine_messages,
    run_status,
    stream_modes,
)

__all__ = ["BulkCancelController", "RunsController", "StatelessRunsController"]

logger = structlog.get_logger()

SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
WAIT_PING = b"\n"  # leading whitespace keeps the JSON answer valid; LangGraph sends the same
RECORDED_MODES = ("values", "updates")  # what the worker records beyond runstream's events


class StreamCut(Exception):
    """Raised after the headers went out, so the server aborts the connection: a LangGraph
    client then reconnects, where a clean end would tell it the run finished."""


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "invalid_request", message)


def _text_content(content: Any) -> str:
    """A message's text: runstream's graphs take text, given as a string or text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        for b in content
    ):
        return "".join(b["text"] for b in content)
    raise _unprocessable("message content must be text (a string, or blocks of type 'text')")


def _new_run(
    resources: Resources, caller: Caller, body: RunCreate, thread_id: str | None
) -> NewRun:
    """The runstream run a LangGraph request asks for, checked as `/v1` checks its own."""
    graph = graph_of_assistant(resources, body.assistant_id)
    try:
        modes = stream_modes(body.stream_mode)
    except ValueError as exc:
        raise _unprocessable(str(exc)) from None
    command = (
        checked_command(
            body.command,
            resources.graphs.get(graph, resources.checkpointer),
            resources.settings.max_resume_bytes,
        )
        if body.command
        else {}
    )
    if "resume" in command and thread_id is None:
        raise ApiError(400, "invalid_request", "You must provide a thread_id when resuming.")
    steers = "update" in command or "goto" in command  # the command is the graph's input
    if steers and body.input:
        raise _unprocessable(
            "give input or command.update/command.goto, not both: the command is the input"
        )
    raw = body.input.get("messages") if isinstance(body.input, dict) else body.input
    if isinstance(body.input, dict) and set(body.input) - {"messages"}:
        raise _unprocessable("runstream's graphs take input {'messages': [...]} only")
    try:
        messages = engine_messages(raw) if raw is not None else []
    except ValueError as exc:
        raise _unprocessable(str(exc)) from None
    if not messages and not command:
        raise _unprocessable("input.messages needs at least one message (or a command)")
    for message in messages:
        message["content"] = _text_content(message["content"])
    checked = msgspec.convert(messages, list[InputMessage])
    inputs.input_messages(checked, resources.settings)
    configurable = {**((body.config or {}).get("configurable") or {}), **(body.context or {})}
    inputs.configurable(configurable, resources.graphs, graph)
    metadata = body.metadata or {}
    inputs.metadata(metadata, resources.settings)
    first_user = next((m["content"] for m in messages if m["role"] == "user"), None)
    kwargs = {
        "input": body.input,
        "command": command or None,
        "config": body.config or {},
        "context": body.context or {},
        "stream_mode": modes,
        "on_disconnect": body.on_disconnect,
        "resumable": True,  # every runstream run is
    }
    return NewRun(
        owner=caller.owner,
        graph=graph,
        input={"messages": messages},
        thread_id=thread_id,
        config={"configurable": configurable},
        metadata=metadata,
        multitask=body.multitask_strategy,
        title=first_user[:TITLE_CHARS] if isinstance(first_user, str) else None,
        max_active_runs=resources.settings.max_active_runs,
        stream_modes=[m for m in modes if m in RECORDED_MODES],
        kwargs=kwargs,
        resume={"value": command["resume"]} if "resume" in command else None,
        supersede_interrupted=True,
        create_thread=body.if_not_exists == "create",
    )


async def _submit(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    body: RunCreate,
    thread_id: str | None,
) -> RunRecord:
    new = _new_run(resources, caller, body, thread_id)
    # The run's trace, as for `/v1` (server/runs.py): every attempt is a child of this span.
    with resources.tracer.start_as_current_span("submit run") as span:
        new.traceparent = traceparent_of(span)
        await quotas.take_submit(caller.owner)
        try:
            created = await resources.lifecycle.submit(new)
        except Conflict as exc:
            if exc.code == "thread_busy":
                raise Conflict(
                    "Thread is already running a task. Wait for it to finish or choose a"
                    " different multitask strategy.",
                    code="thread_busy",
                ) from None
            raise
        except NotFound:
            raise NotFound("Thread or assistant not found.") from None
        run = created.run
        span.set_attributes(run_attributes(run))
        structlog.contextvars.bind_contextvars(run_id=run.run_id, thread_id=run.thread_id)
        logger.info("run submitted", dialect="langgraph")
    return run


def _paths(run: RunRecord) -> dict[str, str]:
    base = f"/threads/{run.thread_id}/runs/{run.run_id}"
    return {"Location": f"{base}/stream", "Content-Location": base}


def _modes_of(run: RunRecord, asked: list[str] | None) -> list[str]:
    """The run's modes a join asked for (none asked: all of them). As in LangGraph,
    `messages` and `messages-tuple` each ask for whichever of the two the run streams, and a
    mode the run does not stream gives nothing."""
    recorded: list[str] = list(run.kwargs.get("stream_mode") or ["values"])
    if not asked:
        return recorded
    wants_messages = any(m.startswith("messages") for m in asked)
    return [m for m in recorded if m in asked or (wants_messages and m.startswith("messages"))]


async def _owned_run(
    resources: Resources, caller: Caller, thread_id: str, run_id: str
) -> RunRecord:
    """The caller's run, which LangGraph's paths name under its thread."""
    run = await owned_run(resources, run_id, caller)
    if run.thread_id != inputs.object_id(thread_id, "thread"):
        raise NotFound(f"run {run_id} not found")
    return run


_U64 = 2**64 - 1


def _id_before(event_id: str) -> str:
    """The stream position just before `event_id`: reading after it starts at `event_id`."""
    ms, seq = parse_event_id(event_id)
    return f"{ms}-{seq - 1}" if seq else f"{ms - 1}-{_U64}"


def _after(last_event_id: str | None) -> tuple[str, tuple[str, int] | None]:
    """Where to resume for LangGraph's `Last-Event-ID` (absent, `-1`, `-` or `0`: from the
    start), and for a frame id (`<event id>.<n>`, stream.py) the event the client has part of,
    with how many of its frames."""
    if last_event_id is None or last_event_id.strip() in ("", "-1", "-", "0"):
        return "0-0", None
    try:
        event_id, frames_sent = split_frame_id(last_event_id.strip())
    except ValueError:
        event_id, frames_sent = last_event_id, None  # refused by `inputs.event_id`, naming it
    event_id = inputs.event_id(event_id)
    if frames_sent is None or event_id == "0-0":
        return event_id, None
    return _id_before(event_id), (event_id, frames_sent)


class _Quiet:
    """A dialect that writes nothing but keep-alives: `/wait` and `/join` answer at the end."""

    ping = WAIT_PING

    def __init__(self, translator: LangGraphStream) -> None:
        self.translator = translator

    def render(self, frame: Frame) -> bytes:
        return b""

    def ends_after(self, frame: Frame) -> bool:
        return self.translator.ends_after(frame.stored)


class _Translated:
    ping = LangGraphStream.heartbeat

    def __init__(self, translator: LangGraphStream) -> None:
        self.translator = translator

    def render(self, frame: Frame) -> bytes:
        return self.translator.render(frame.stored, shared=frame.renders)

    def ends_after(self, frame: Frame) -> bool:
        return self.translator.ends_after(frame.stored)


def _translator(run: RunRecord, modes: list[str]) -> LangGraphStream:
    return LangGraphStream(
        run_id=run.run_id,
        thread_id=run.thread_id,
        graph=run.graph,
        modes=modes,
        metadata=run.metadata,
    )


async def _attachment(resources: Resources, run: RunRecord, after: str, dialect: Any) -> Attachment:
    record = await resources.events.live_record(run.run_id)
    if record is not None and parse_event_id(after) < parse_event_id(record.first_id):
        after = "0-0"  # Redis lost the stream: the new one opens with a fresh `values`
    first_id = check_resume_point(run, record, after)
    return Attachment(
        resources.follower,
        resources.events,
        run_id=run.run_id,
        after=after,
        first_id=first_id,
        ping_interval_s=min(5.0, resources.settings.ping_interval_s),
        dialect=dialect,
    )


RECENT_EVENTS = 64  # how far back a resumed viewer looks first (`take_recent`)


async def _recent(resources: Resources, run_id: str, at: str) -> list[StoredEvent]:
    """Up to `RECENT_EVENTS` stored events up to and including `at`, newest first."""
    events = resources.events
    with redis_errors(run_id):
        entries = await events.redis.xrevrange(
            events.keys.run_events(run_id), max=at, min="-", count=RECENT_EVENTS
        )
    return [StoredEvent.from_entry(entry_id, fields) for entry_id, fields in entries]


async def _skip_to(
    resources: Resources, run_id: str, translator: LangGraphStream, after: str
) -> None:
    """Bring `translator` to the state of the viewer that sent the client the events up to
    `after`: from the few events before it when they tell (one read), else from all of them
    (a read of the stream from its start, writing nothing)."""
    if after == "0-0":
        return
    if translator.resumes_from_recent:
        recent = await _recent(resources, run_id, after)
        if translator.take_recent(recent, whole_stream=len(recent) < RECENT_EVENTS):
            return
    last = parse_event_id(after)
    cursor = "0-0"
    while True:
        page = await resources.events.read_range(run_id, cursor, count=REPLAY_PAGE)
        for event in page:
            if parse_event_id(event.id) > last:
                return
            translator.skip(event)
        if len(page) < REPLAY_PAGE:
            return
        cursor = page[-1].id


async def _stream(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    run: RunRecord,
    *,
    modes: list[str],
    after: str,
    cancel_on_disconnect: bool,
    partly_sent: tuple[str, int] | None = None,
) -> Stream:
    translator = _translator(run, modes)
    if partly_sent is not None:
        translator.resume_within(*partly_sent)
    attachment = await _attachment(resources, run, after, _Translated(translator))
    await _skip_to(resources, run.run_id, translator, attachment.last_id)
    slot = await quotas.take_stream_slot(caller.owner, None)

    async def frames() -> AsyncIterator[bytes]:
        finished = False
        try:
            if after == "0-0":
                yield translator.opening()
            async for chunk in attachment.frames():
                yield chunk
            finished = attachment.complete
        finally:
            if not finished and cancel_on_disconnect:
                await _cancel_quietly(resources, run)
        if not finished:
            raise StreamCut(f"stream of run {run.run_id} cut before its end")

    return Stream(
        quotas.hold(slot, frames()),
        media_type="text/event-stream; charset=utf-8",
        headers={**SSE_HEADERS, **_paths(run)},
    )


async def _cancel_quietly(resources: Resources, run: RunRecord) -> None:
    """Cancel `run` for a client that went away. It runs in the `finally` of a response the
    client's disconnect cancelled (Litestar cancels the body's task group), so it is shielded:
    unshielded, its first await would be cancelled too and the run would go on."""
    with anyio.CancelScope(shield=True):
        current = await resources.records.get_run(run.run_id, run.owner)
        if current is not None and current.status in (RunStatus.QUEUED, RunStatus.RUNNING):
            with contextlib.suppress(Conflict):
                await resources.lifecycle.cancel(current)
            logger.info("run cancelled: its client went away (on_disconnect=cancel)")


async def _outcome(resources: Resources, run: RunRecord) -> dict[str, Any]:
    """What `/wait` and `/join` answer: the thread's values, or the run's error."""
    run = await resources.records.get_run(run.run_id, run.owner) or run
    if run.status == "failed":
        error = run.error or {}
        kind, _, text = str(error.get("message", "")).partition(": ")
        return {"__error__": {"error": kind or error.get("code", "error"), "message": text}}
    thread = await resources.records.get_thread(run.thread_id, run.owner)
    if thread is None:
        return {}
    state = await thread_state(resources, thread)
    values: dict[str, Any] = dict(state.values) if isinstance(state.values, dict) else {}
    if state.interrupts:
        values["__interrupt__"] = state.interrupts
    return values


ROLLBACK_WAIT_S = 5.0  # how long `cancel?wait=true&action=rollback` waits for the rollback


async def _rolled_back(resources: Resources, run: RunRecord) -> None:
    """Return once a cancelled run's rollback removed it, or after `ROLLBACK_WAIT_S`. The run's
    `end` is written before its rollback (the outcome first), and a LangGraph client takes the
    answer to a waiting cancel as "the thread is back as it was"."""
    with anyio.move_on_after(ROLLBACK_WAIT_S):
        # the rollback is another process's (the worker's), so nothing here can be awaited
        for _ in range(int(ROLLBACK_WAIT_S / 0.02)):
            if await resources.records.get_run(run.run_id, run.owner) is None:
                return
            await anyio.sleep(0.02)


async def _wait(
    resources: Resources,
    run: RunRecord,
    cancel_on_disconnect: bool,
    *,
    rollback: bool = False,
) -> Stream:
    attachment = await _attachment(resources, run, "0-0", _Quiet(_translator(run, [])))

    async def body() -> AsyncIterator[bytes]:
        finished = False
        try:
            async for chunk in attachment.frames():
                if chunk:
                    yield chunk
            finished = attachment.complete
        finally:
            if not finished and cancel_on_disconnect:
                await _cancel_quietly(resources, run)
        if not finished:
            raise StreamCut(f"wait on run {run.run_id} cut before its end")
        if rollback:
            await _rolled_back(resources, run)
        yield msgspec.json.encode(await _outcome(resources, run))

    base = f"/threads/{run.thread_id}/runs/{run.run_id}"
    return Stream(
        body(),
        media_type="application/json",
        headers={"Location": f"{base}/join", "Content-Location": base, "Cache-Control": "no-store"},
    )


StreamModeQuery = Annotated[list[str] | None, Parameter(query="stream_mode", required=False)]


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "yes", "1")


async def _create(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    data: RunCreate,
    thread_id: str | None,
) -> Response[Run]:
    run = await _submit(resources, quotas, caller, data, thread_id)
    return Response(run_view(run), headers={"Content-Location": _paths(run)["Content-Location"]})


async def _create_stream(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    data: RunCreate,
    thread_id: str | None,
) -> Stream:
    run = await _submit(resources, quotas, caller, data, thread_id)
    return await _stream(
        resources,
        quotas,
        caller,
        run,
        modes=_modes_of(run, None),
        after="0-0",
        cancel_on_disconnect=data.on_disconnect == "cancel",
    )


async def _create_wait(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    data: RunCreate,
    thread_id: str | None,
) -> Stream:
    run = await _submit(resources, quotas, caller, data, thread_id)
    return await _wait(resources, run, data.on_disconnect == "cancel")


class RunsController(Controller):
    path = "/threads/{thread_id:str}/runs"
    tags = ["langgraph"]

    @post("/", status_code=200, summary="Create a background run")
    async def create(
        self,
        thread_id: str,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
    ) -> Response[Run]:
        thread_id = inputs.object_id(thread_id, "thread")
        return await _create(resources, quotas, caller, data, thread_id)

    @post("/stream", status_code=200, summary="Create a run and stream it")
    async def create_stream(
        self,
        thread_id: str,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
    ) -> Stream:
        thread_id = inputs.object_id(thread_id, "thread")
        return await _create_stream(resources, quotas, caller, data, thread_id)

    @post("/wait", status_code=200, summary="Create a run and wait for its outcome")
    async def create_wait(
        self,
        thread_id: str,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
    ) -> Stream:
        thread_id = inputs.object_id(thread_id, "thread")
        return await _create_wait(resources, quotas, caller, data, thread_id)

    @get("/", summary="A thread's runs, newest first")
    async def list_runs(
        self,
        thread_id: str,
        resources: Resources,
        caller: Caller,
        limit: Annotated[int, Parameter(ge=1, le=MAX_PAGE)] = 10,
        offset: Annotated[int, Parameter(ge=0)] = 0,
        status: Annotated[str | None, Parameter(query="status", required=False)] = None,
    ) -> list[Run]:
        thread_id = inputs.object_id(thread_id, "thread")
        if await resources.records.get_thread(thread_id, caller.owner) is None:
            raise NotFound(f"thread {thread_id} not found")
        runs = [
            run_view(r)
            for r in reversed(await resources.records.thread_runs(thread_id, caller.owner))
        ]
        if status:
            runs = [r for r in runs if r.status == status]
        return runs[offset : offset + limit]

    @get("/{run_id:str}", summary="A run")
    async def read(self, thread_id: str, run_id: str, resources: Resources, caller: Caller) -> Run:
        return run_view(await _owned_run(resources, caller, thread_id, run_id))

    @get("/{run_id:str}/join", summary="Wait for a run's outcome")
    async def join(
        self,
        thread_id: str,
        run_id: str,
        resources: Resources,
        caller: Caller,
        cancel_on_disconnect: Annotated[str | None, Parameter(required=False)] = None,
    ) -> Stream:
        run = await _owned_run(resources, caller, thread_id, run_id)
        return await _wait(resources, run, _flag(cancel_on_disconnect))

    @get("/{run_id:str}/stream", summary="Join a run's stream (Last-Event-ID resumes)")
    async def join_stream(
        self,
        request: Request[Any, Any, Any],
        thread_id: str,
        run_id: str,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        stream_mode: StreamModeQuery = None,
        cancel_on_disconnect: Annotated[str | None, Parameter(required=False)] = None,
        last_event_id: Annotated[
            str | None, Parameter(query="last_event_id", required=False)
        ] = None,
    ) -> Stream:
        run = await _owned_run(resources, caller, thread_id, run_id)
        header = request.headers.get("last-event-id")
        after, partly_sent = _after(header if header is not None else last_event_id)
        asked = [m for m in (stream_mode or []) if m]
        return await _stream(
            resources,
            quotas,
            caller,
            run,
            modes=_modes_of(run, asked),
            after=after,
            cancel_on_disconnect=_flag(cancel_on_disconnect),
            partly_sent=partly_sent,
        )

    @post("/{run_id:str}/cancel", status_code=202, summary="Cancel a run")
    async def cancel(
        self,
        thread_id: str,
        run_id: str,
        resources: Resources,
        caller: Caller,
        wait: Annotated[str | None, Parameter(required=False)] = None,
        action: Annotated[str | None, Parameter(required=False)] = None,
    ) -> Response[Any] | Stream:
        run = await _owned_run(resources, caller, thread_id, run_id)
        if run.status.terminal or run.status == RunStatus.INTERRUPTED:
            # an engine run paused at interrupt() is, to LangGraph, a run that ended (`success`)
            status = run_status(run.status)
            raise NotFound(f"No matching runs to cancel: run {run_id} is {status}")
        try:
            # `rollback` (LangGraph): the run goes too, with the checkpoints it wrote
            run = await resources.lifecycle.cancel(run, rollback=action == "rollback")
        except Conflict:
            raise NotFound(f"No matching runs to cancel: run {run_id} already ended") from None
        if _flag(wait):
            return await _wait(resources, run, False, rollback=action == "rollback")
        return Response(None, status_code=202)

    @delete("/{run_id:str}", status_code=204, summary="Delete a finished run")
    async def delete_run(
        self, thread_id: str, run_id: str, resources: Resources, caller: Caller
    ) -> None:
        run = await _owned_run(resources, caller, thread_id, run_id)
        if run.status == RunStatus.INTERRUPTED:
            # LangGraph's run ended at its interrupt (`success`); runstream's waits: end it
            with contextlib.suppress(Conflict):
                run = await resources.lifecycle.cancel(run)
        if run.status.active:
            raise Conflict(f"run {run_id} is {run.status}; cancel it first", code="run_active")
        await resources.records.delete_run(run.run_id, caller.owner)
        await resources.events.delete([run.run_id])


_BULK_STATUSES = {"pending": ["queued"], "running": ["running"], "all": ["queued", "running"]}


async def _bulk_targets(resources: Resources, caller: Caller, body: BulkCancel) -> list[RunRecord]:
    """The runs a bulk cancel names: all of them the caller's (404 naming the first that is
    not, and then nothing is cancelled), by id or by status."""
    thread_id = inputs.object_id(body.thread_id, "thread") if body.thread_id else None
    if body.status is not None:
        if body.run_ids:
            raise _unprocessable("give run_ids or status, not both")
        runs = await resources.records.working_runs(caller.owner, _BULK_STATUSES[body.status])
        return [r for r in runs if thread_id in (None, r.thread_id)]
    if not body.run_ids:
        raise _unprocessable("give thread_id and run_ids, or status")
    runs = []
    for run_id in body.run_ids:
        run = await owned_run(resources, run_id, caller)
        if thread_id not in (None, run.thread_id):
            raise NotFound(f"run {run_id} not found")
        runs.append(run)
    return runs


class BulkCancelController(Controller):
    path = "/runs/cancel"
    tags = ["langgraph"]

    @post("/", status_code=204, summary="Cancel runs by id or by status")
    async def cancel_many(
        self,
        data: BulkCancel,
        resources: Resources,
        caller: Caller,
        action: Annotated[str | None, Parameter(required=False)] = None,
    ) -> None:
        if action not in (None, "interrupt", "rollback"):
            raise _unprocessable("action must be interrupt or rollback")
        for run in await _bulk_targets(resources, caller, data):
            if not run.status.active or run.status == RunStatus.INTERRUPTED:
                continue  # over already (to LangGraph, an interrupted run is over too)
            with contextlib.suppress(Conflict):  # it ended meanwhile
                await resources.lifecycle.cancel(run, rollback=action == "rollback")
        logger.info("runs cancelled in bulk", thread_id=data.thread_id, status=data.status)


class StatelessRunsController(Controller):
    """`/runs/...`: each run gets a new thread, kept afterwards (runstream keeps every run)."""

    path = "/runs"
    tags = ["langgraph"]

    @post("/", status_code=200, summary="Create a background run on a new thread")
    async def create(
        self, data: RunCreate, resources: Resources, quotas: CallerQuotas, caller: Caller
    ) -> Response[Run]:
        return await _create(resources, quotas, caller, data, None)

    @post("/stream", status_code=200, summary="Stream a run on a new thread")
    async def create_stream(
        self, data: RunCreate, resources: Resources, quotas: CallerQuotas, caller: Caller
    ) -> Stream:
        return await _create_stream(resources, quotas, caller, data, None)

    @post("/wait", status_code=200, summary="Run on a new thread and wait for its outcome")
    async def create_wait(
        self, data: RunCreate, resources: Resources, quotas: CallerQuotas, caller: Caller
    ) -> Stream:
        return await _create_wait(resources, quotas, caller, data, None)
