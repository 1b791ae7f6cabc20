"""LangGraph's stream (`messages`, `updates`, `custom` modes) turned into protocol events.

The one rule kept here: every token of a message carries that message's id, and a message the
model did not stream still reaches clients as one token before its `message` event, so that
concatenated tokens always equal the message's content.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage

from stream_store.events import MessageData, TokenData, WireMessage

__all__ = ["StreamTranslator", "to_wire_message"]

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


class StreamTranslator:
    """Stateful per execution: remembers which messages already streamed tokens."""

    def __init__(self) -> None:
        self.streamed: set[str] = set()

    def translate(self, mode: str, chunk: Any) -> Iterator[tuple[str, Any]]:
        """Yield `(event, data)` pairs for one item of `graph.astream(stream_mode=[...])`."""
        if mode == "messages":
            message, _meta = chunk
            yield from self._token(message)
        elif mode == "updates":
            if (chunk.get("__metadata__") or {}).get("cached"):
                # Writes a previous attempt saved, applied without re-running the node: the
                # stream already has these messages, or the retry re-sent them whole.
                return
            for node, update in chunk.items():
                if node.startswith("__") or not isinstance(update, dict):
                    continue
                messages = update.get("messages")
                if isinstance(messages, BaseMessage):
                    messages = [messages]
                for message in messages or []:
                    if isinstance(message, BaseMessage) and message.type != "remove":
                        yield from self.complete(message)
        elif mode == "custom":
            yield "custom", chunk

    def _token(self, message: Any) -> Iterator[tuple[str, Any]]:
        if not isinstance(message, AIMessage) or not message.id:
            return
        text = message_text(message.content)
        if not text:
            return
        if isinstance(message, AIMessageChunk) or message.id not in self.streamed:
            self.streamed.add(message.id)
            yield "token", TokenData(message_id=message.id, text=text)

    def complete(self, message: BaseMessage) -> Iterator[tuple[str, Any]]:
        """Events for a whole message: its `message`, after one token if none streamed."""
        if isinstance(message, AIMessage) and message.id and message.id not in self.streamed:
            text = message_text(message.content)
            if text:
                self.streamed.add(message.id)
                yield "token", TokenData(message_id=message.id, text=text)
        yield "message", MessageData(message=to_wire_message(message))
