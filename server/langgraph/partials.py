"""Plain `messages` mode's frames, made only when sent.

A `messages/partial` holds all of its message's text so far, so making one at every token
costs the square of the message. A viewer that catches up (`LangGraphStream.skip`) or a replay
that leaves out the partials a later frame replaces makes none of those it does not send: a
frame's data is one of these until it goes out (`server/langgraph/stream.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from .conversions import to_langchain_dict

__all__ = ["Complete", "FrameData", "MessageText", "Partial", "replaces"]

_encode = msgspec.json.Encoder().encode


class MessageText:
    """A message's text in plain `messages` mode, as its tokens: joined only as far as a frame
    that is sent shows them. A catch-up (`skip`) and a coalescing replay never join the text of
    a frame they leave out; joining it at every token cost the square of the message."""

    __slots__ = ("_joined", "_joined_count", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self._joined = ""  # the text of the first `_joined_count` parts
        self._joined_count = 0

    def upto(self, count: int) -> str:
        """The text of the first `count` tokens: from the last join on, as frames go out in
        order."""
        if count < self._joined_count:
            return "".join(self.parts[:count])
        if count > self._joined_count:
            self._joined += "".join(self.parts[self._joined_count : count])
            self._joined_count = count
        return self._joined


@dataclass(slots=True)
class Partial:
    """A `messages/partial`'s data, encoded only if the frame is sent."""

    message_id: str
    text: MessageText
    count: int  # its tokens

    def encode(self) -> bytes:
        content = self.text.upto(self.count)
        return _encode(
            [to_langchain_dict({"id": self.message_id, "role": "assistant", "content": content})]
        )


@dataclass(slots=True)
class Complete:
    """A `messages/complete`'s message, encoded only if the frame is sent."""

    message: dict[str, Any]

    @property
    def message_id(self) -> str:
        return str(self.message["id"])

    def encode(self) -> bytes:
        return _encode([to_langchain_dict(self.message)])


FrameData = bytes | Partial | Complete  # a frame's data, or what makes it


def replaces(data: FrameData, held: Partial) -> bool:
    """A frame with `data` leaves a client nothing of the `held` partial before it."""
    return isinstance(data, (Partial, Complete)) and data.message_id == held.message_id
