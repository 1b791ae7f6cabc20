"""A thread's messages: as its checkpoints hold them, and as a run's input adds them.

The checkpoint side includes writes not yet checkpointed: LangGraph saves a finished task's
writes (`pending_writes`) before the step's checkpoint, and a run that resumes applies them
without running the task again. So a message is part of the thread once it is in the latest
checkpoint *or* in that checkpoint's pending writes.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.message import add_messages

from stream_store.records import RunRecord

__all__ = ["input_messages", "thread_messages"]


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
