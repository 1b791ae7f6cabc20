"""A thread's messages as its checkpoints hold them, including writes not yet checkpointed.

LangGraph saves a finished task's writes (`pending_writes`) before the step's checkpoint; a
run that resumes applies them without running the task again. So a message is part of the
thread once it is in the latest checkpoint *or* in that checkpoint's pending writes.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.message import add_messages

__all__ = ["thread_messages"]


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
