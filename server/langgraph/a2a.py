"""LangGraph's A2A endpoint, `/a2a/{assistant_id}`, as `langgraph-api` serves it
(`langgraph_api/api/a2a.py`): each assistant is an A2A agent, spoken to in JSON-RPC over HTTP.

A message is a run of the caller's on the message's context (its thread; a new one without a
`contextId`), recorded, queued and resumable like any, counted against their submits, reaching
its assistant through the one door (`server.access`): `message/send` answers the task once the
run ended, `message/stream` sends its status and artifact events as SSE. `tasks/get` and
`tasks/cancel` read and cancel the run a task id (`{context_id}:{run_id}`) names; another
caller's is "Task not found", as an unknown one. The agent card is served at LangGraph's paths.

As LangGraph's, a protocol error is a JSON-RPC error in a 200; an unknown assistant is one too.
An error of sign-in, of the project's auth handlers or of the caller's budgets keeps its HTTP
status (401, 403, 429), as on `/mcp`. What is left out is in docs/langgraph.md, "A2A".
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, Literal

import msgspec
import structlog
from litestar import Request, Response, delete, get, post
from litestar.response import Stream

from server.access.assistants import allowed_assistant
from server.access.runs import reach_run
from server.callers.auth import Caller
from server.callers.budgets import QUERY
from server.callers.quotas import CallerQuotas
from server.errors import ApiError
from server.inputs import InvalidId
from server.resources import Resources
from stream_store.assistant_ids import run_assistant_id
from stream_store.assistant_records import AssistantRecord
from stream_store.errors import Conflict, NotFound, StoreUnavailable
from stream_store.run_records import RunRecord
from wire.run_status import RunStatus

from . import a2a_tasks as tasks
from .follow import SSE_HEADERS, StreamCut, TranslatedDialect, langgraph_attachment, outcome_at_end
from .graph_schemas import graph_schemas
from .request_keys import RequestStamp
from .statuses import run_status, thread_status
from .stream import LangGraphStream
from .submit import submit
from .views import registered_graph, thread_state
from .wire import RunCreate

__all__ = ["A2A_ROUTES"]

logger = structlog.get_logger()

PARSE_ERROR = -32700  # JSON-RPC's error codes, and A2A's own
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005

MAX_HISTORY_LENGTH = 10
HISTORY_SCOPE_HEADER = "LangGraph-A2A-History-Scope"
HISTORY_SCOPE_EXTENSION = "https://langchain.com/a2a/extensions/history-scope/v1"
MODES = ["application/json", "text/plain"]  # the card's input and output modes
STREAM_MODES = ["messages", "values"]  # what a streamed message's run streams, as LangGraph's

# A2A 0.x's slash names (what the `a2a-sdk` sends), answered in the spec's lowercase form
_ALIASES = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
}
_SERVED = frozenset({"SendMessage", "SendStreamingMessage", "GetTask", "CancelTask"})
_NOT_SERVED = frozenset({"ListTasks", "GetExtendedAgentCard"})  # LangGraph's; not here yet

Answer = dict[str, Any]  # {"result": ...} or {"error": ...}


def _error(code: int, message: str, **data: Any) -> Answer:
    return {"error": {"code": code, "message": message, **({"data": data} if data else {})}}


def _json(content: Any, status: int = 200) -> Response[bytes]:
    return Response(msgspec.json.encode(content), status_code=status, media_type="application/json")


def _rpc_error(code: int, message: str, request_id: Any = None) -> Response[bytes]:
    return _json({"jsonrpc": "2.0", "id": request_id, **_error(code, message)})


def _accepts(accept: str, media_type: str) -> bool:
    for media_range in accept.split(","):
        candidate = media_range.split(";", 1)[0].strip().lower()
        if candidate in ("*/*", media_type):
            return True
        if candidate.endswith("/*") and media_type.startswith(candidate[:-1]):
            return True
    return False


# characters some SSE readers take for a line's end, escaped in the JSON as LangGraph's are
_LINE_BREAKS = (
    (b"\xc2\x85", b"\\u0085"),
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
)


def _sse(data: Any) -> bytes:
    """One `message` event of an A2A stream."""
    encoded = msgspec.json.encode(data)
    for raw, escaped in _LINE_BREAKS:
        encoded = encoded.replace(raw, escaped)
    return b"event: message\r\ndata: " + encoded + b"\r\n\r\n"


@dataclass(frozen=True)
class _Call:
    """One JSON-RPC request to one assistant's endpoint, by one caller."""

    resources: Resources
    quotas: CallerQuotas
    caller: Caller
    assistant_id: str
    headers: dict[str, str]
    legacy: bool  # a slash-named method: answered in the spec's lowercase form
    stamp: RequestStamp  # what the runs it makes record of the request

    def shaped(self, data: Any) -> Any:
        return tasks.spec_format(data) if self.legacy else data


@dataclass(frozen=True)
class _Task:
    """A task as its latest run shows it."""

    task_id: str
    context_id: str
    run: RunRecord
    state: str
    runs: list[RunRecord]  # the context's

    @property
    def timestamp(self) -> str:
        run = self.run
        return (run.finished_at or run.started_at or run.created_at).isoformat()


@dataclass(frozen=True)
class _Message:
    """A checked `message/send` or `message/stream`: the run it asks for."""

    message: dict[str, Any]
    context_id: str
    task_id: str | None  # the task it continues; None: a new one
    body: RunCreate
    history_length: int | None
    history_scope: Literal["context", "task"]


# -- the card ---------------------------------------------------------------------------------


async def _assistant(
    resources: Resources, caller: Caller, assistant_id: str
) -> AssistantRecord | str:
    """The endpoint's assistant, or why there is none (the door's refusals raise)."""
    try:
        return await allowed_assistant(resources, caller, assistant_id)
    except NotFound:
        return f"Assistant '{assistant_id}' not found"


async def _schemas(resources: Resources, assistant: AssistantRecord) -> dict[str, Any]:
    graph = await resources.graph_for_reading(registered_graph(resources, assistant))
    return graph_schemas(graph)


def _base_url(request: Request[Any, Any, Any], assistant_id: str) -> str:
    scheme = request.headers.get("x-forwarded-proto") or request.url.scheme
    host, port = request.url.hostname or "localhost", request.url.port
    path = (
        request.url.path.removesuffix("/.well-known/agent-card.json")
        .removesuffix("/.well-known/agent.json")
        .removesuffix(f"/a2a/{assistant_id}")
    )
    default_port = (scheme == "http" and port == 80) or (scheme == "https" and port == 443)
    return f"{scheme}://{host}{'' if not port or default_port else f':{port}'}{path}"


async def _card(
    request: Request[Any, Any, Any], resources: Resources, caller: Caller, assistant_id: str | None
) -> Response[bytes]:
    """The assistant's agent card, as LangGraph's: an unknown one is a 400 naming it."""

    def refused(message: str) -> Response[bytes]:
        return _json({"error": {"code": INVALID_PARAMS, "message": message}}, 400)

    if not assistant_id:
        return refused("Missing required query parameter: assistant_id")
    try:
        assistant_id = str(uuid.UUID(assistant_id))
    except ValueError:
        return refused(
            f"Failed to get assistant '{assistant_id}': Invalid assistant ID: must be a UUID"
        )
    assistant = await _assistant(resources, caller, assistant_id)
    if isinstance(assistant, str):
        return refused(assistant)
    schemas = await _schemas(resources, assistant)
    schema = schemas.get("input_schema") or schemas.get("state_schema") or {}
    properties = schema.get("properties") or {}
    name = assistant.name or assistant.graph
    description = assistant.description or f"{name} assistant"
    url = f"{_base_url(request, assistant_id)}/a2a/{assistant_id}"
    history_scope = {
        "uri": HISTORY_SCOPE_EXTENSION,
        "description": "Choose task-only or full-context response history",
        "required": False,
        "params": {
            "header": HISTORY_SCOPE_HEADER,
            "values": ["context", "task"],
            "default": "context",
            "methods": ["SendMessage", "GetTask", "ListTasks"],
        },
    }
    skill = {
        "id": f"{assistant_id}-main",
        "name": f"{name} Capabilities",
        "description": description,
        "tags": ["assistant", "langgraph"],
        "examples": [],
        "inputModes": MODES,
        "outputModes": MODES,
        "metadata": {
            "inputSchema": {
                "required": schema.get("required") or [],
                "properties": sorted(properties),
                "supportsA2A": "messages" in properties,
            }
        },
    }
    return _json(
        {
            "name": name,
            "description": description,
            "url": url,
            "supportedInterfaces": [
                {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "capabilities": {
                "streaming": True,
                "pushNotifications": False,
                "stateTransitionHistory": False,
                "extensions": [history_scope],
            },
            "defaultInputModes": MODES,
            "defaultOutputModes": MODES,
            "skills": [skill],
            "version": version("runstream"),
        }
    )


# -- tasks ------------------------------------------------------------------------------------


async def _resolve(call: _Call, task_id: str, context_id: str | None) -> _Task | None:
    """The caller's task `task_id` of this assistant; None: not theirs, not this assistant's,
    or not there (the door's refusals raise)."""
    parsed_context, run_id = tasks.parse_task_id(task_id)
    if parsed_context and context_id and parsed_context != context_id:
        return None
    context_id = context_id or parsed_context
    if not context_id:
        return None
    resources, owner = call.resources, call.caller.owner
    try:
        anchor = await reach_run(resources, call.caller, run_id, thread_id=context_id)
    except (NotFound, InvalidId):
        return None
    if run_assistant_id(anchor) != call.assistant_id:
        return None
    if tasks.task_id_of_run(anchor) not in (task_id, tasks.make_task_id(context_id, run_id)):
        return None
    runs = await resources.run_records.thread_runs(anchor.thread_id, owner)
    latest, is_latest = anchor, False
    for run in reversed(runs):
        if run_assistant_id(run) != call.assistant_id:
            continue
        if run.run_id == anchor.run_id or tasks.task_id_of_run(run) == task_id:
            latest, is_latest = run, run.run_id == runs[-1].run_id
            break
    thread = await resources.thread_records.get_thread(anchor.thread_id, owner, latest_run=True)
    interrupted = is_latest and thread is not None and thread_status(thread) == "interrupted"
    return _Task(task_id, anchor.thread_id, latest, tasks.task_state(latest, interrupted), runs)


async def _messages(resources: Resources, run: RunRecord) -> list[Any]:
    thread = await resources.thread_records.get_thread(run.thread_id, run.owner)
    if thread is None:
        return []
    state = await thread_state(resources, thread)
    values = state.values if isinstance(state.values, dict) else {}
    messages = values.get("messages")
    return messages if isinstance(messages, list) else []


def _history_length(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return "historyLength must be a non-negative integer"
    if value > MAX_HISTORY_LENGTH:
        return f"historyLength cannot exceed {MAX_HISTORY_LENGTH}"
    return None


def _history_scope(options: dict[str, Any], call: _Call) -> Literal["context", "task"] | None:
    scope = options.get("historyScope")
    if scope is None:
        scope = call.headers.get(HISTORY_SCOPE_HEADER.lower(), "context")
    if scope == "context":
        return "context"
    return "task" if scope == "task" else None


def _task_params(params: dict[str, Any]) -> tuple[str, str | None] | Answer:
    task_id, context_id = params.get("id"), params.get("contextId")
    if not task_id:
        return _error(INVALID_PARAMS, "Missing required parameter: id (task_id)")
    if not isinstance(task_id, str) or (context_id is not None and not isinstance(context_id, str)):
        return _error(INVALID_PARAMS, "Task id and contextId must be strings")
    return task_id, context_id


async def _get_task(call: _Call, params: dict[str, Any]) -> Answer:
    checked = _task_params(params)
    if isinstance(checked, dict):
        return checked
    task_id, context_id = checked
    scope = _history_scope(params, call)
    task = await _resolve(call, task_id, context_id)
    if task is None:
        where = f" in context '{context_id}'" if context_id else ""
        return _error(TASK_NOT_FOUND, f"Task not found: {task_id}{where}")
    length = params.get("historyLength")
    if problem := _history_length(length):
        return _error(INVALID_PARAMS, problem)
    if scope is None:
        return _error(INVALID_PARAMS, "historyScope must be 'context' or 'task'")
    answer: dict[str, Any] = {
        "kind": "task",
        "id": task.task_id,
        "contextId": task.context_id,
        "status": {"state": task.state, "timestamp": task.timestamp},
    }
    if length != 0:
        starts = tasks.message_start_ids(task.runs, call.assistant_id)
        converted = tasks.history(
            await _messages(call.resources, task.run),
            task.task_id,
            task.context_id,
            starts,
            scope=scope,
        )
        # the context as it was when the task's turns ended: a later task's are not its
        ends = [i for i, message in enumerate(converted) if message["taskId"] == task.task_id]
        converted = converted[: ends[-1] + 1] if ends else converted
        answer["history"] = converted[-length:] if length is not None else converted
    if task.state == "TASK_STATE_COMPLETED":
        answer["status"]["message"] = tasks.agent_message(
            "Task completed successfully", task.task_id
        )
    elif task.state == "TASK_STATE_FAILED":
        status = run_status(task.run.status)
        answer["status"]["message"] = tasks.agent_message(
            f"Task failed with status: {status}", task.task_id
        )
    return {"result": answer}


async def _until_ended(resources: Resources, run: RunRecord) -> None:
    """Once the run's stream ended (a cancel waits for it, as LangGraph's `wait=True`)."""
    try:
        await outcome_at_end(resources, run)
    except StreamCut:
        logger.warning("a2a_cancel_stream_cut", run_id=run.run_id)


async def _cancel_task(call: _Call, params: dict[str, Any]) -> Answer:
    checked = _task_params(params)
    if isinstance(checked, dict):
        return checked
    task_id, context_id = checked
    task = await _resolve(call, task_id, context_id)
    if task is None:
        return _error(TASK_NOT_FOUND, f"Task not found: {task_id}")
    if task.state in tasks.TERMINAL_STATES:
        return _error(TASK_NOT_CANCELABLE, "Task is not cancelable in its current state")
    waiting = task.state == "TASK_STATE_INPUT_REQUIRED"  # a run stopped at its interrupt()
    if not waiting and run_status(task.run.status) not in ("pending", "running"):
        return _error(TASK_NOT_CANCELABLE, "Task has no active run to cancel")
    shown = {"action": "interrupt", "metadata": {"run_ids": [task.run.run_id], "status": None}}
    run = await reach_run(
        call.resources, call.caller, task.run.run_id, "update", shown, thread_id=task.context_id
    )
    try:
        run = await call.resources.lifecycle.cancel(run)
    except Conflict:
        return _error(TASK_NOT_CANCELABLE, "Task is not cancelable in its current state")
    await _until_ended(call.resources, run)
    logger.info("a2a_task_cancelled", run_id=run.run_id, thread_id=run.thread_id)
    return {
        "result": {
            "kind": "task",
            "id": task_id,
            "contextId": task.context_id,
            "status": {
                "state": "TASK_STATE_CANCELED",
                "timestamp": tasks.now(),
                "message": tasks.agent_message("Task was canceled", task_id),
            },
        }
    }


# -- messages ---------------------------------------------------------------------------------


async def _checked_message(
    call: _Call, params: dict[str, Any], *, streaming: bool
) -> _Message | Answer:
    """The run a message asks for, checked in the order LangGraph's checks go, or the error."""
    length: int | None = None
    scope: Literal["context", "task"] | None = "context"
    if not streaming:
        options = params.get("configuration")
        options = {} if options is None else options
        if not isinstance(options, dict):
            return _error(INVALID_PARAMS, "Invalid params: 'configuration' must be an object")
        length = options.get("historyLength")
        if problem := _history_length(length):
            return _error(INVALID_PARAMS, problem)
        scope = _history_scope(options, call)
        if scope is None:
            return _error(INVALID_PARAMS, "historyScope must be 'context' or 'task'")
    message = params.get("message")
    if not message:
        return _error(INVALID_PARAMS, "Missing 'message' in params")
    message_id = message.get("messageId")
    if not message_id:
        return _error(INVALID_PARAMS, "Missing required 'messageId' in message")
    role = message.get("role")
    if not role:
        return _error(INVALID_PARAMS, "Missing required 'role' in message")
    parts = message.get("parts", [])
    if not isinstance(parts, list) and not streaming:
        return _error(INVALID_PARAMS, "Invalid params: 'parts' must be an array")
    if not parts:
        return _error(INVALID_PARAMS, "Message must contain at least one part")
    assistant = await _assistant(call.resources, call.caller, call.assistant_id)
    if isinstance(assistant, str):
        return _error(INVALID_PARAMS, assistant)
    schemas = await _schemas(call.resources, assistant)
    if problem := tasks.input_schema_error(call.assistant_id, assistant.graph, schemas, parts):
        return _error(INVALID_PARAMS, problem)
    context_id, task_id = message.get("contextId"), message.get("taskId")
    if context_id is not None and not isinstance(context_id, str):
        return _error(INVALID_PARAMS, "contextId must be a string")
    if task_id is not None and not isinstance(task_id, str):
        return _error(INVALID_PARAMS, "taskId must be a string")
    waiting = False  # the task stopped at an interrupt() and waits for an answer
    if task_id is not None:
        task = await _resolve(call, task_id, context_id)
        if task is None:
            return _error(TASK_NOT_FOUND, f"Task not found: {task_id}")
        if task.state in tasks.TERMINAL_STATES:
            return _error(UNSUPPORTED_OPERATION, "A terminal task cannot accept another message")
        waiting = task.state == "TASK_STATE_INPUT_REQUIRED"
        context_id = task.context_id
    try:
        graph_input = tasks.graph_input(parts, str(role), str(message_id))
    except tasks.A2AInputError as exc:
        return _error(CONTENT_TYPE_NOT_SUPPORTED, str(exc))
    command = tasks.resume_command(message, parts, graph_input, task_id, waiting)
    if "error" in command:
        return _error(INVALID_PARAMS, command["error"])
    a2a = {"message_id": str(message_id), **({"task_id": task_id} if task_id else {})}
    run_context = params.get("context")
    try:
        body = msgspec.convert(
            {
                "assistant_id": call.assistant_id,
                "input": graph_input or None,
                **({"command": command} if command else {}),
                "metadata": {"a2a": a2a},
                "if_not_exists": "create",
                **({"context": run_context} if run_context is not None else {}),
                **({"stream_mode": STREAM_MODES} if streaming else {}),
            },
            RunCreate,
        )
    except msgspec.ValidationError as exc:
        return _error(INVALID_PARAMS, f"Invalid request: {exc}")
    return _Message(
        message, context_id or str(uuid.uuid4()), task_id, body, length, scope or "context"
    )


async def _submitted(call: _Call, asked: _Message) -> RunRecord | Answer:
    """The message's run, recorded; a refusal of the run LangGraph maps to a JSON-RPC error
    is one (a refusal of sign-in, the auth handlers or the budgets raises)."""
    try:
        return await submit(
            call.resources, call.quotas, call.caller, asked.body, asked.context_id, call.stamp
        )
    except NotFound:
        return _error(
            INVALID_PARAMS,
            f"Thread '{asked.context_id}' not found. Please create the thread first before"
            " sending messages to it.",
            thread_id=asked.context_id,
            error_type="thread_not_found",
        )
    except ApiError as exc:
        if exc.status in (401, 403, 429) or exc.status >= 500:
            raise
        prefix = "Invalid request" if exc.status == 400 else "Failed to create run"
        return _error(INVALID_PARAMS, f"{prefix}: {exc.message}")
    except Conflict as exc:
        return _error(INVALID_PARAMS, f"Failed to create run: {exc.message}")


def _new_task_id(asked: _Message, run: RunRecord) -> str:
    return asked.task_id or tasks.make_task_id(run.thread_id, run.run_id)


async def _send(call: _Call, params: dict[str, Any]) -> Answer:
    asked = await _checked_message(call, params, streaming=False)
    if isinstance(asked, dict):
        return asked
    run = await _submitted(call, asked)
    if isinstance(run, dict):
        return run
    task_id, context_id = _new_task_id(asked, run), run.thread_id
    try:
        outcome = await outcome_at_end(call.resources, run)
    except StreamCut:
        raise StoreUnavailable(f"run {run.run_id}'s stream was cut before its end") from None
    data_only = not asked.body.command and "messages" not in (asked.body.input or {})
    if data_only and "__error__" not in outcome:
        # as LangGraph's: the outcome of a message of data parts is read with the run's messages
        outcome = {**outcome, "messages": outcome.get("messages") or []}
    runs = await call.resources.run_records.thread_runs(context_id, call.caller.owner)
    task: dict[str, Any] = {"kind": "task", "id": task_id, "contextId": context_id}
    if asked.history_length != 0:
        task["history"] = tasks.history(
            outcome.get("messages") or [],
            task_id,
            context_id,
            tasks.message_start_ids(runs, call.assistant_id),
            length=asked.history_length,
            scope=asked.history_scope,
        )
    if "__error__" in outcome:
        text = f"Error executing assistant: {outcome['__error__']['error']}"
        task["status"] = {
            "state": "TASK_STATE_FAILED",
            "message": tasks.agent_message(text, task_id, context_id),
        }
    elif "__interrupt__" in outcome:
        task["status"] = {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": tasks.now()}
        task["artifacts"] = [tasks.interrupt_artifact(outcome["__interrupt__"])]
    else:
        task["status"] = {"state": "TASK_STATE_COMPLETED", "timestamp": tasks.now()}
        parts = tasks.reply_parts(outcome)
        task["artifacts"] = [tasks.response_artifact(parts, call.assistant_id)]
    return {"result": {"task": task}}


def _frames(chunk: bytes) -> list[tuple[str, Any]]:
    """The LangGraph SSE frames in `chunk` (whole frames, as the translator renders them); a
    keep-alive is one named `""`."""
    frames: list[tuple[str, Any]] = []
    for block in chunk.split(b"\r\n\r\n"):
        if block.startswith(b":"):
            frames.append(("", None))  # a comment: the keep-alive
        if not block or block.startswith(b":"):
            continue
        event, data = "", b""
        for line in block.split(b"\r\n"):
            if line.startswith(b"event: "):
                event = line[7:].decode()
            elif line.startswith(b"data: "):
                data = line[6:]
        frames.append((event, msgspec.json.decode(data) if data else None))
    return frames


async def _stream(call: _Call, params: dict[str, Any], rpc_id: Any) -> Stream:
    """The task's events as SSE, as LangGraph's `message/stream` sends them: the submitted task,
    a `working` status per streamed message, then the reply's artifact and the final status
    (or a failed one with the error's text). A refused message is one error event.

    Litestar's own `Stream`, not `EventStream`: that one lets a live viewer write the run's
    LangGraph frames to the socket itself, and these are turned into A2A's first."""

    def one(answer: Answer) -> Stream:
        async def frames() -> AsyncIterator[bytes]:
            yield _sse(call.shaped({"jsonrpc": "2.0", "id": rpc_id, **answer}))

        return Stream(frames(), media_type="text/event-stream", headers=SSE_HEADERS)

    asked = await _checked_message(call, params, streaming=True)
    if isinstance(asked, dict):
        return one(asked)
    run = await _submitted(call, asked)
    if isinstance(run, dict):
        return one(run)
    slot = await call.quotas.take_stream_slot(call.caller.owner, None)
    try:
        translator = LangGraphStream(
            run_id=run.run_id,
            thread_id=run.thread_id,
            graph=run.graph,
            assistant_id=run_assistant_id(run),
            modes=STREAM_MODES,
            metadata=run.metadata,
        )
        attachment = await langgraph_attachment(
            call.resources, run, "0-0", TranslatedDialect(translator)
        )
    except BaseException:
        call.quotas.give_back(slot)
        raise
    task_id, context_id = _new_task_id(asked, run), run.thread_id

    def event(result: Any) -> bytes:
        return _sse(call.shaped({"jsonrpc": "2.0", "id": rpc_id, "result": result}))

    def status(state: str, *, final: bool, message: Any = None, at: bool = True) -> bytes:
        shown = {"state": state, **({"message": message} if message else {})}
        if at:
            shown["timestamp"] = tasks.now()
        return event(
            {
                "taskId": task_id,
                "contextId": context_id,
                "kind": "status-update",
                "status": shown,
                "final": final,
            }
        )

    async def frames() -> AsyncIterator[bytes]:
        opening = {"kind": "message", **asked.message, "taskId": task_id, "contextId": context_id}
        submitted = {"state": "TASK_STATE_SUBMITTED", "timestamp": tasks.now()}
        first = {"kind": "task", "id": task_id, "contextId": context_id, "history": [opening]}
        yield event({"task": {**first, "status": submitted}})
        result: Any = None
        error: Any = None
        working = False
        async for chunk in attachment.frames():
            for name, data in _frames(chunk):
                if not name:
                    yield LangGraphStream.heartbeat  # a keep-alive
                    continue
                if name == "metadata" and not working:  # a retry's: the run works again
                    working = True
                    yield status("TASK_STATE_WORKING", final=False, at=False)
                elif name == "values":
                    result, error = data, None
                elif name == "error":
                    error = data
                elif name.startswith("messages") and isinstance(data, list) and data:
                    error = None
                    message = tasks.streamed_message(data, task_id, context_id)
                    if message is not None:
                        yield status("TASK_STATE_WORKING", final=False, message=message)
        if not attachment.complete:
            raise StreamCut(f"following run {run.run_id} cut before its end")
        ended = await call.resources.run_records.get_run(run.run_id, run.owner)
        if ended is not None and ended.status == RunStatus.INTERRUPTED and error is None:
            asked_for = [{"id": ended.interrupt_id, "value": ended.interrupt}]
            result = {**(result if isinstance(result, dict) else {}), "__interrupt__": asked_for}
        failure = None
        if isinstance(error, dict):
            text = error.get("message")
            failure = tasks.agent_message(str(text or ""), task_id, context_id)
        if error:
            state = "TASK_STATE_FAILED"
        elif isinstance(result, dict) and "__interrupt__" in result:
            state = "TASK_STATE_INPUT_REQUIRED"
        else:
            state = "TASK_STATE_COMPLETED"
        if state == "TASK_STATE_COMPLETED" and isinstance(result, dict):
            artifact = tasks.response_artifact(tasks.reply_parts(result), call.assistant_id)
            yield event(
                {
                    "taskId": task_id,
                    "contextId": context_id,
                    "kind": "artifact-update",
                    "artifact": artifact,
                    "append": False,
                    "lastChunk": True,
                }
            )
        if state == "TASK_STATE_INPUT_REQUIRED":
            artifact = tasks.interrupt_artifact(result["__interrupt__"])
            yield event(
                {
                    "taskId": task_id,
                    "contextId": context_id,
                    "kind": "artifact-update",
                    "artifact": artifact,
                }
            )
        yield status(state, final=True, message=failure)

    return Stream(
        call.quotas.hold(slot, frames()), media_type="text/event-stream", headers=SSE_HEADERS
    )


# -- the endpoint -----------------------------------------------------------------------------


async def _answer(call: _Call, method: str, params: dict[str, Any]) -> Answer:
    if method == "SendMessage":
        return await _send(call, params)
    if method == "GetTask":
        return await _get_task(call, params)
    if method == "CancelTask":
        return await _cancel_task(call, params)
    return _error(UNSUPPORTED_OPERATION, f"{method} is not served by runstream")


@post(
    "/a2a/{assistant_id:str}",
    status_code=200,
    tags=["langgraph"],
    summary="A2A over JSON-RPC: the assistant as an agent, a message a run",
    dependencies=QUERY,
)
async def a2a_post(
    assistant_id: str,
    request: Request[Any, Any, Any],
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    stamp: RequestStamp,
) -> Response[bytes] | Stream:
    try:
        message = msgspec.json.decode(await request.body())
    except msgspec.DecodeError:
        return _rpc_error(PARSE_ERROR, "Invalid JSON payload")
    if not isinstance(message, dict):
        return _rpc_error(INVALID_REQUEST, "Invalid message format: expected object")
    request_id, method = message.get("id"), message.get("method")
    if message.get("jsonrpc") != "2.0":
        return _rpc_error(
            INVALID_REQUEST,
            "Invalid JSON-RPC message: missing or invalid jsonrpc version",
            request_id,
        )
    legacy = False
    if isinstance(method, str) and method in _ALIASES:
        method, legacy = _ALIASES[method], True
    if request_id is not None and (
        isinstance(request_id, bool) or not isinstance(request_id, str | int | float)
    ):
        return _rpc_error(
            INVALID_REQUEST, "Invalid JSON-RPC request: 'id' must be a string, number, or null"
        )
    if method is not None and not isinstance(method, str):
        return _rpc_error(METHOD_NOT_FOUND, "Method not found: method must be a string", request_id)
    if method is not None and method not in _SERVED | _NOT_SERVED:
        return _rpc_error(METHOD_NOT_FOUND, f"Method not found: {method}", request_id)
    params = message.get("params", {})
    sending = method in ("SendMessage", "SendStreamingMessage")
    if sending and not isinstance(params, dict):
        return _rpc_error(INVALID_PARAMS, "Invalid params: must be an object", request_id)
    if sending and (not isinstance(params.get("message"), dict) or not params["message"]):
        return _rpc_error(INVALID_PARAMS, "Missing or invalid 'message' in params", request_id)
    accept = request.headers.get("accept", "")
    if method == "SendStreamingMessage" and not _accepts(accept, "text/event-stream"):
        return _json({"error": "Accept header must include text/event-stream for streaming"}, 400)
    if method != "SendStreamingMessage" and not _accepts(accept, "application/json"):
        return _json({"error": "Accept header must include application/json"}, 400)
    if request_id is None or not method:
        if request_id is not None and ("result" in message or "error" in message):
            return Response(b"", status_code=202)  # a response to nothing the server asked
        return _rpc_error(
            INVALID_REQUEST,
            "Invalid JSON-RPC request: missing 'method' field"
            if request_id is not None
            else "Invalid message format: must be a JSON-RPC request or notification",
            request_id,
        )
    try:
        assistant_id = str(uuid.UUID(assistant_id))
    except ValueError:
        return _rpc_error(INVALID_PARAMS, "Invalid assistant ID: must be a UUID", request_id)
    headers = {key.lower(): value for key, value in request.headers.items()}
    call = _Call(resources, quotas, caller, assistant_id, headers, legacy, stamp)
    params = params if isinstance(params, dict) else {}
    if method == "SendStreamingMessage":
        return await _stream(call, params, request_id)
    answer = await _answer(call, method, params)
    return _json(call.shaped({"jsonrpc": "2.0", "id": request_id, **answer}))


@get("/a2a/{assistant_id:str}", tags=["langgraph"], summary="The assistant's A2A agent card")
async def a2a_card(
    assistant_id: str, request: Request[Any, Any, Any], resources: Resources, caller: Caller
) -> Response[bytes]:
    return await _card(request, resources, caller, assistant_id)


@get(
    [
        "/a2a/{assistant_id:str}/.well-known/agent-card.json",
        "/a2a/{assistant_id:str}/.well-known/agent.json",
    ],
    tags=["langgraph"],
    summary="The assistant's A2A agent card, at its well-known path",
)
async def a2a_well_known_card(
    assistant_id: str, request: Request[Any, Any, Any], resources: Resources, caller: Caller
) -> Response[bytes]:
    return await _card(request, resources, caller, assistant_id)


@get(
    "/.well-known/agent-card.json",
    tags=["langgraph"],
    summary="An assistant's A2A agent card (`?assistant_id=`)",
)
async def agent_card(
    request: Request[Any, Any, Any],
    resources: Resources,
    caller: Caller,
    assistant_id: str | None = None,
) -> Response[bytes]:
    return await _card(request, resources, caller, assistant_id)


@delete("/a2a/{assistant_id:str}", status_code=405, tags=["langgraph"], include_in_schema=False)
async def a2a_delete(assistant_id: str, caller: Caller) -> Response[bytes]:
    """No sessions to end: 405, as LangGraph's."""
    return Response(b"", status_code=405)


A2A_ROUTES = (a2a_post, a2a_card, a2a_well_known_card, agent_card, a2a_delete)
