"""A2A's task shapes as LangGraph's server makes them from runs (`langgraph_api/api/a2a.py`):
a task is a run, its id `{context_id}:{run_id}` (the context is the run's thread); a message's
parts are a graph's input; the thread's messages are the task's history.

Everything here is built in A2A 1.0's form (`ROLE_AGENT`, `TASK_STATE_COMPLETED`, a send's
task under `{"task": ...}`), as LangGraph's answers to its 1.0 method names; `spec_format` is
the older form (`agent`, `completed`, the task itself) it answers the slash names with.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from stream_store.assistant_ids import run_assistant_id
from stream_store.run_records import RunRecord

from .statuses import run_status

__all__ = [
    "TERMINAL_STATES",
    "A2AInputError",
    "Role",
    "agent_message",
    "graph_input",
    "history",
    "input_schema_error",
    "interrupt_artifact",
    "make_task_id",
    "message_start_ids",
    "now",
    "parse_task_id",
    "reply_parts",
    "response_artifact",
    "resume_command",
    "spec_format",
    "streamed_message",
    "task_id_of_run",
    "task_state",
]

Role = Literal["ROLE_AGENT", "ROLE_USER"]

TERMINAL_STATES = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)
_STATES = {  # LangGraph's run status -> the task's state
    "pending": "TASK_STATE_SUBMITTED",
    "running": "TASK_STATE_WORKING",
    "success": "TASK_STATE_COMPLETED",
    "interrupted": "TASK_STATE_CANCELED",  # a cancelled run, to LangGraph
    "error": "TASK_STATE_FAILED",
    "timeout": "TASK_STATE_FAILED",
}
_LEGACY_ROLES = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
_LEGACY_STATES = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
}
_USER_TYPES = {"human", "humanmessage", "humanmessagechunk"}
_AGENT_TYPES = {"ai", "aimessage", "aimessagechunk"}
_CHAT_TYPES = {"chat", "chatmessage", "chatmessagechunk"}


class A2AInputError(ValueError):
    """A message's parts that no graph input can be made of (A2A's -32005)."""


def now() -> str:
    return datetime.now(UTC).isoformat()


def make_task_id(context_id: str, run_id: str) -> str:
    return f"{context_id}:{run_id}"


def parse_task_id(task_id: str) -> tuple[str, str]:
    """`(context_id, run_id)`; a bare run id has no context (`""`): the request's names it."""
    if ":" in task_id:
        context_id, run_id = task_id.split(":", 1)
        return context_id, run_id
    return "", task_id


def _a2a_metadata(run: RunRecord) -> dict[str, Any]:
    a2a = run.metadata.get("a2a")
    return a2a if isinstance(a2a, dict) else {}


def task_id_of_run(run: RunRecord) -> str:
    """The task a run is of: the one a message continued, else the one it started."""
    stored = _a2a_metadata(run).get("task_id")
    if isinstance(stored, str) and stored:
        return stored
    return make_task_id(run.thread_id, run.run_id)


def message_start_ids(runs: Sequence[RunRecord], assistant_id: str) -> dict[str, str]:
    """The task each of the assistant's runs on a context was sent for, by the id of the message
    that asked for it: in the thread's messages, where each task's turns begin."""
    starts: dict[str, str] = {}
    for run in runs:
        message_id = _a2a_metadata(run).get("message_id")
        if run_assistant_id(run) == assistant_id and isinstance(message_id, str):
            starts[message_id] = task_id_of_run(run)
    return starts


def task_state(run: RunRecord, thread_interrupted: bool) -> str:
    """The task's state from its run's LangGraph status; a run that ended at an `interrupt()`
    of the context's latest turn asks for input."""
    status = run_status(run.status)
    if status == "success" and thread_interrupted:
        return "TASK_STATE_INPUT_REQUIRED"
    return _STATES.get(status, "TASK_STATE_SUBMITTED")


def graph_input(parts: list[Any], role: str, message_id: str) -> dict[str, Any]:
    """A message's parts as the graph's input: each text part a message (with the A2A message's
    id), the data parts' objects merged in at the top. File parts are not served.

    Raises:
        A2AInputError: a part that is none of these, or nothing to send.
    """
    graph_role = "human" if role in ("ROLE_USER", "user") else "assistant"
    messages: list[dict[str, Any]] = []
    data: dict[str, Any] = {}
    for part in parts:
        if not isinstance(part, dict):
            raise A2AInputError(
                "Each message part must be an object. "
                "A2A agents support 'text', 'data', and 'file' parts only."
            )
        present = [key for key in ("text", "file", "data") if key in part]
        if len(present) > 1:
            raise A2AInputError(
                "Each message part must contain exactly one of 'text', 'file', or 'data'. "
                f"Got multiple: {present}."
            )
        if "text" in part:
            messages.append({"role": graph_role, "content": part["text"], "id": message_id})
        elif "file" in part:
            raise A2AInputError("File parts are not served by runstream's A2A endpoint")
        elif "data" in part:
            if not isinstance(part["data"], dict):
                raise A2AInputError("DataPart must contain a JSON object in the 'data' field")
            data.update(part["data"])
        else:
            raise A2AInputError(
                "Unsupported part type. A2A agents support 'text', 'data', and 'file' parts only."
            )
    if not messages and not data:
        raise A2AInputError("Message must contain at least one valid text, data, or file part")
    return {**({"messages": messages} if messages else {}), **data}


def resume_command(
    message: Mapping[str, Any],
    parts: list[Any],
    graph_input: dict[str, Any],
    task_id: str | None,
    waiting: bool,
) -> dict[str, Any]:
    """The `Command` a message answers a waiting task with, as LangGraph's: the message's own
    `command`, else a data part's `resume`, else (for a task that waits) its text; `{}`: none,
    `{"error": ...}`: why it cannot be one. What answers the interrupt leaves `graph_input`."""
    command = message.get("command")
    if command is not None:
        if not isinstance(command, dict):
            return {"error": "command must be an object"}
        if command.get("resume") and not message.get("contextId"):
            return {"error": "contextId is required when resuming a task with command.resume"}
        if command.get("resume") and task_id is None:
            return {"error": "taskId is required when resuming a task"}
        return dict(command)
    resumes = [
        part["data"]["resume"]
        for part in parts
        if isinstance(part, dict)
        and isinstance(part.get("data"), dict)
        and "resume" in part["data"]
    ]
    if len(resumes) > 1:
        return {"error": "Only one resume value is allowed in data parts"}
    if resumes:
        if task_id is None:
            return {"error": "contextId and taskId are required when resuming a task"}
        if not waiting:
            return {"error": "Task is not awaiting input"}
        graph_input.pop("resume", None)
        return {"resume": resumes[0]}
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    if not texts or task_id is None or not waiting:
        return {}
    graph_input.pop("messages", None)
    return {"resume": "\n".join(texts)}


def input_schema_error(
    assistant_id: str, graph: str, schemas: Mapping[str, Any], parts: list[Any]
) -> str | None:
    """Why the graph cannot take a text message (its input has no `messages`), if it cannot."""
    if not any(isinstance(part, dict) and ("text" in part or "file" in part) for part in parts):
        return None
    schema = schemas.get("input_schema") or schemas.get("state_schema")
    if not schema:
        return (
            f"Assistant '{assistant_id}' has no input schema defined. A2A conversational agents"
            " using text or file parts must have an input schema with a 'messages' field."
        )
    properties = schema.get("properties") or {}
    if "messages" in properties:
        return None
    return (
        f"Assistant '{assistant_id}' (graph '{graph}') does not support A2A conversational"
        " messages. Graph input schema must include a 'messages' field to accept text or file"
        f" parts. Available input fields: {list(properties)}"
    )


def _label(value: Any) -> str:
    return value.lower().replace("_", "").replace("-", "") if isinstance(value, str) else ""


def _role_of(message: Mapping[str, Any]) -> Role | None:
    """A LangChain message's A2A role; None for what is not a turn (system, tool)."""
    kind, role = _label(message.get("type")), _label(message.get("role"))
    by_type: Role | None = None
    if kind:
        if kind in _USER_TYPES:
            by_type = "ROLE_USER"
        elif kind in _AGENT_TYPES:
            by_type = "ROLE_AGENT"
        elif kind not in _CHAT_TYPES:
            return None
    by_role: Role | None = None
    if role:
        if role in ("human", "user"):
            by_role = "ROLE_USER"
        elif role in ("agent", "assistant"):
            by_role = "ROLE_AGENT"
        else:
            return None
    if by_type and by_role and by_type != by_role:
        return None
    return by_type or by_role


def _text_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"kind": "text", "text": content}]
    if content is None:
        return []
    if not isinstance(content, list):
        return [{"kind": "text", "text": str(content)}]
    texts = [
        block if isinstance(block, str) else block.get("text", "")
        for block in content
        if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
    ]
    return (
        [{"kind": "text", "text": "".join(t for t in texts if isinstance(t, str))}] if texts else []
    )


def _has_text(parts: list[dict[str, Any]]) -> bool:
    return any(part.get("text") for part in parts)


def reply_parts(outcome: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The reply of the turn: the parts of the last agent message after the last user one (the
    outcome itself as text when it has no messages), as LangGraph's `_extract_a2a_response`."""
    messages = outcome.get("messages")
    if "__error__" in outcome or not isinstance(messages, list) or not messages:
        return [{"kind": "text", "text": str(dict(outcome))}]
    turn = list(messages)
    for index in range(len(turn) - 1, -1, -1):
        if isinstance(turn[index], dict) and _role_of(turn[index]) == "ROLE_USER":
            turn = turn[index + 1 :]
            break
    for message in reversed(turn):
        if isinstance(message, dict) and _role_of(message) == "ROLE_AGENT" and "content" in message:
            parts = _text_parts(message["content"])
            if _has_text(parts):
                return parts
    return [{"kind": "text", "text": ""}]


def response_artifact(parts: list[dict[str, Any]], assistant_id: str) -> dict[str, Any]:
    return {
        "artifactId": str(uuid.uuid4()),
        "name": "Assistant Response",
        "description": f"Response from assistant {assistant_id}",
        "parts": parts,
    }


def interrupt_artifact(interrupts: list[Any]) -> dict[str, Any]:
    """The interrupts a task stopped at, as LangGraph's artifact: each `{"id", "value"}`, and
    its `response_schema` when the graph gave one."""
    parts = []
    for interrupt in interrupts:
        found = interrupt if isinstance(interrupt, dict) else {}
        data = {"id": found.get("id"), "value": found.get("value")}
        if (schema := found.get("response_schema")) is not None:
            data["response_schema"] = schema
        parts.append({"kind": "data", "data": data})
    return {
        "artifactId": str(uuid.uuid4()),
        "name": "Interrupt",
        "description": "Agent requires input to continue",
        "parts": parts,
    }


def agent_message(text: str, task_id: str, context_id: str | None = None) -> dict[str, Any]:
    """A status's message of the agent's (LangGraph's leave the context out of some)."""
    message: dict[str, Any] = {
        "kind": "message",
        "role": "ROLE_AGENT",
        "parts": [{"kind": "text", "text": text}],
        "messageId": str(uuid.uuid4()),
        "taskId": task_id,
    }
    if context_id is not None:
        message["contextId"] = context_id
    return message


def streamed_message(items: list[Any], task_id: str, context_id: str) -> dict[str, Any] | None:
    """A `messages/*` event's messages as the agent's message of a `working` status: their
    text joined; None when they hold no text (LangGraph sends nothing then)."""
    texts = []
    for item in items:
        if isinstance(item, dict) and _role_of(item) is not None:
            texts.append("".join(p["text"] for p in _text_parts(item.get("content"))))
    text = "".join(texts)
    if not text:
        return None
    return {
        "kind": "message",
        "role": "ROLE_AGENT",
        "parts": [{"kind": "text", "text": text}],
        "messageId": str(uuid.uuid4()),
        "taskId": task_id,
        "contextId": context_id,
    }


def history(
    messages: list[Any],
    task_id: str,
    context_id: str,
    starts: Mapping[str, str],
    *,
    length: int | None = None,
    scope: Literal["context", "task"] = "context",
) -> list[dict[str, Any]]:
    """The context's messages as A2A messages, each with the task it was a turn of: a message
    that asked for a task begins its turns (by its id, `message_start_ids`); those before any
    belong to `task_id` (to none when only the task's are asked for, `scope="task"`)."""
    current: str | None = task_id if scope == "context" else None
    converted: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        started = starts.get(message.get("id") or "")
        if started is not None:
            current = started
        role = _role_of(message)
        if current is None or role is None:
            continue
        parts = _text_parts(message.get("content", ""))
        if role == "ROLE_AGENT" and not _has_text(parts):
            continue
        converted.append(
            {
                "kind": "message",
                "role": role,
                "parts": parts or [{"kind": "text", "text": ""}],
                "messageId": message.get("id") or str(uuid.uuid4()),
                "taskId": current,
                "contextId": context_id,
            }
        )
    if scope == "task":
        converted = [message for message in converted if message["taskId"] == task_id]
    if length is None:
        return converted
    return converted[-length:] if length else []


def spec_format(data: Any) -> Any:
    """`data` in the form LangGraph answers A2A's slash-named methods in: lowercase roles and
    states, and a send's task itself rather than under `{"task": ...}`."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key == "role" and isinstance(value, str):
                out[key] = _LEGACY_ROLES.get(value, value)
            elif key == "state" and isinstance(value, str):
                out[key] = _LEGACY_STATES.get(value, value)
            elif key == "result" and isinstance(value, dict) and list(value) == ["task"]:
                out[key] = spec_format(value["task"])
            else:
                out[key] = spec_format(value)
        return out
    if isinstance(data, list):
        return [spec_format(item) for item in data]
    return data
