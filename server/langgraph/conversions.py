"""Pure conversions between LangGraph's wire values and runstream's: assistant ids, stream
modes and messages (docs/langgraph.md); statuses are in statuses.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import convert_to_messages

from stream_store.assistant_ids import assistant_id_for, run_assistant_id

__all__ = [
    "STREAM_MODES",
    "assistant_id_for",
    "engine_messages",
    "run_assistant_id",
    "stream_modes",
    "to_langchain_dict",
]

# The stream modes runstream's events can serve; `tools` and `lifecycle` need graph internals
# the worker does not store.
STREAM_MODES: tuple[str, ...] = (
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "events",
    "debug",
    "tasks",
    "checkpoints",
)


def stream_modes(value: str | list[str] | None) -> list[str]:
    """The requested stream modes, in order, without repeats; none means `["values"]`.

    Empty strings are dropped (Python's SDK sends `stream_mode=` for "no mode").

    Raises:
        ValueError: a mode runstream cannot serve; the message names it and the supported ones.
    """
    requested = [value] if isinstance(value, str) else list(value or [])
    modes: list[str] = []
    for mode in requested:
        if not mode or mode in modes:
            continue
        if mode not in STREAM_MODES:
            supported = ", ".join(STREAM_MODES)
            raise ValueError(f"stream mode {mode!r} is not supported; use one of: {supported}")
        modes.append(mode)
    return modes or ["values"]


_INPUT_ROLES = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
}


def engine_messages(messages: Any, where: str = "input.messages") -> list[dict[str, Any]]:
    """runstream input messages (`{"role", "content", "id"?, "tool_calls"?, "tool_call_id"?,
    "name"?}`) from a LangGraph run's messages (at `where`): one message or a list of them.

    A message is in a LangChain shape: `{"type": "human", "content": ...}`, `{"role": "user",
    ...}` (role, as in LangChain, wins over type), or a bare string (a human message); content
    is a string or a list of content blocks. AI messages may carry `tool_calls` (LangChain's
    or OpenAI's form, kept in LangChain's) and tool messages need their `tool_call_id`: a
    client answering a dangling tool call (agent-chat-ui) sends both kinds as input.

    Raises:
        ValueError: any other shape or role, naming the message at fault.
    """
    if messages is None:
        return []
    items = messages if isinstance(messages, list) else [messages]
    return [_engine_message(message, f"{where}[{i}]") for i, message in enumerate(items)]


def _engine_message(message: Any, where: str) -> dict[str, Any]:
    if isinstance(message, str):
        return {"role": "user", "content": message}
    if not isinstance(message, dict):
        raise ValueError(f"{where} must be a message object or a string")
    kind = message.get("role", message.get("type"))
    if not isinstance(kind, str) or kind not in _INPUT_ROLES:
        roles = ", ".join(_INPUT_ROLES)
        raise ValueError(f"{where} needs a role (or type) among {roles}, got {kind!r}")
    role = _INPUT_ROLES[kind]
    content = message.get("content")
    if not isinstance(content, str) and not (
        isinstance(content, list) and all(isinstance(block, str | dict) for block in content)
    ):
        raise ValueError(f"{where}.content must be a string or a list of content blocks")
    converted: dict[str, Any] = {"role": role, "content": content}
    message_id = message.get("id")
    if message_id is not None:
        if not isinstance(message_id, str) or not message_id:
            raise ValueError(f"{where}.id must be a non-empty string")
        converted["id"] = message_id
    if isinstance(message.get("name"), str) and message["name"]:
        converted["name"] = message["name"]
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise ValueError(f"{where}: a tool message needs the tool_call_id it answers")
        converted["tool_call_id"] = call_id
    elif message.get("tool_calls"):
        if role != "assistant":
            raise ValueError(f"{where}: only AI messages carry tool_calls")
        converted["tool_calls"] = _tool_calls(message, where)
    return converted


def _tool_calls(message: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """An AI message's tool calls in LangChain's form, each with an id (a tool message
    answers it by that id), as LangChain reads them from either form."""
    raw = message["tool_calls"]
    if not isinstance(raw, list) or not all(isinstance(c, dict) and c.get("id") for c in raw):
        raise ValueError(f"{where}.tool_calls must be a list of tool calls, each with an id")
    try:
        (parsed,) = convert_to_messages([{"role": "assistant", "content": "", "tool_calls": raw}])
    except (ValueError, TypeError, KeyError, AttributeError, NotImplementedError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ValueError(f"{where}.tool_calls: {reason}") from None
    calls = getattr(parsed, "tool_calls", None) or []
    if len(calls) != len(raw):
        raise ValueError(f"{where}.tool_calls: each needs a name, args (an object) and an id")
    return [
        {"name": c["name"], "args": c["args"], "id": c["id"], "type": "tool_call"} for c in calls
    ]


_LANGCHAIN_TYPES = {"user": "human", "assistant": "ai", "system": "system", "tool": "tool"}


def to_langchain_dict(message: Mapping[str, Any]) -> dict[str, Any]:
    """A runstream wire message (`wire.events.WireMessage` as a dict) as LangGraph
    serialises a LangChain message, key order included."""
    kind = _LANGCHAIN_TYPES.get(message["role"], message["role"])
    converted: dict[str, Any] = {
        "content": message["content"],
        "additional_kwargs": {},
        "response_metadata": {},
        "type": kind,
        "name": None,
        "id": message["id"],
    }
    if kind == "ai":
        converted["tool_calls"] = [
            {**call, "type": call.get("type", "tool_call")}
            for call in message.get("tool_calls") or []
        ]
        converted["invalid_tool_calls"] = []
        converted["usage_metadata"] = None
    elif kind == "tool":
        converted["tool_call_id"] = message.get("tool_call_id")
        converted["artifact"] = None
        converted["status"] = "success"
    return converted
