"""A thread's messages: as its checkpoints hold them, as a run's input adds them, and as the
wire shows them.

The checkpoint side includes writes not yet checkpointed: LangGraph saves a finished task's
writes (`pending_writes`) before the step's checkpoint, and a run that resumes applies them
without running the task again. So a message is part of the thread once it is in the latest
checkpoint *or* in that checkpoint's pending writes.

Reading them needs the checkpointer and LangChain's message types, not any graph: the server
reads threads without importing the graphs' code paths.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.message import add_messages
from pydantic import BaseModel

from wire.events import WireMessage

from .run_records import RunRecord

__all__ = [
    "input_messages",
    "message_text",
    "state_to_json",
    "thread_messages",
    "to_wire_message",
]

_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}


def message_text(content: Any) -> str:
    """The text of a message's content (a string, or a list of content blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return ""


def to_wire_message(message: BaseMessage) -> WireMessage:
    tool_calls = None
    if isinstance(message, AIMessage) and message.tool_calls:
        tool_calls = [dict(call) for call in message.tool_calls]
    return WireMessage(
        id=message.id or str(uuid.uuid4()),
        role=_ROLES.get(message.type, message.type),
        content=message.content,
        tool_calls=tool_calls,
        tool_call_id=getattr(message, "tool_call_id", None),
    )


def _encode_object(value: Any) -> Any:
    if isinstance(value, BaseModel):  # LangChain's messages among them
        return value.model_dump(mode="json")
    return repr(value)  # anything else a graph keeps in its state: shown, never fatal


def state_to_json(state: Any) -> Any:
    """A graph's state (or a node's update) as JSON values, messages as LangChain dicts.

    This is the shape LangGraph's own server gives `values`, `updates` and thread state.
    """
    return msgspec.to_builtins(state, enc_hook=_encode_object)


async def thread_messages(checkpointer: BaseCheckpointSaver, thread_id: str) -> list[BaseMessage]:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    saved = await checkpointer.aget_tuple(config)  # type: ignore[arg-type]
    if saved is None:
        return []
    messages: list[Any] = list(saved.checkpoint["channel_values"].get("messages", []))
    for _task_id, channel, value in saved.pending_writes or []:
        if channel == "messages":
            messages = list(add_messages(messages, value))
    return messages


def input_messages(run: RunRecord) -> list[BaseMessage]:
    """The run's input messages; their ids were fixed at submit, so a retry repeats them."""
    messages = convert_to_messages(run.input.get("messages", []))
    for message in messages:
        if message.id is None:
            message.id = str(uuid.uuid4())
    return messages
