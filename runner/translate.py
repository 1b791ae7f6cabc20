"""LangGraph's stream (`messages`, `updates`, `custom` modes) turned into protocol events.

The one rule kept here: every token of a message carries that message's id, and a message the
model did not stream still reaches clients as one token before its `message` event, so that
concatenated tokens always equal the message's content.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage

from stream_store.events import MessageData, TokenData
from stream_store.messages import message_text, to_wire_message

__all__ = ["StreamTranslator"]


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
