"""Wire types of the event protocol (docs/protocol.md section 4, Events) and their one encoding.

An event is stored in the run's Redis stream as three fields: `e` (event name), `d` (the JSON
data, encoded once by the writer) and `a` (the attempt that wrote it). Servers never re-encode
`d`: each server frames the stored bytes once per event and shares the frame among viewers.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from .run_status import RunStatus

__all__ = [
    "LAST_POSITION",
    "TERMINAL_EVENTS",
    "CustomData",
    "DoneData",
    "ErrorData",
    "Event",
    "MessageData",
    "PendingData",
    "RetryData",
    "RunStatus",
    "RunStatusData",
    "TokenData",
    "UpdatesData",
    "ValuesData",
    "WireMessage",
    "decode_data",
    "encode_data",
    "is_event_id",
    "parse_event_id",
]


TERMINAL_EVENTS: frozenset[str] = frozenset({"done", "error"})

_EVENT_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")  # fullmatch: `$` would let "1-0\n" through


class WireBase(msgspec.Struct, omit_defaults=True):
    """Base of every wire type: absent optional fields are left out of the JSON."""


class WireMessage(WireBase):
    """A complete chat message as it appears in `message` events and thread reads."""

    id: str
    role: str
    content: Any
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class RunStatusData(WireBase):
    status: RunStatus
    attempt: int


class TokenData(WireBase):
    message_id: str
    text: str
    node: str | None = None  # the graph node whose model streamed it
    # the subgraph it came from (`node:task_id`, nested ones joined by `|`), only in LangGraph
    # API runs that asked for `stream_subgraphs`
    ns: str | None = None


class ValuesData(WireBase):
    """The graph's whole state after a step (LangGraph's `values` mode, when a run asks)."""

    values: Any


class UpdatesData(WireBase):
    """What each node of a step wrote (LangGraph's `updates` mode, when a run asks)."""

    updates: dict[str, Any]


class SubgraphData(WireBase):
    """A subgraph's `values`, `updates`, `custom`, `debug`, `tasks` or `checkpoints` part, when
    a LangGraph run asks for them (`stream_subgraphs`): `ns` is its namespace as LangGraph
    names it (`node:task_id`, nested ones joined by `|`)."""

    ns: str
    mode: str
    data: Any


class MessageData(WireBase):
    message: WireMessage


class PendingData(WireBase):
    interrupt: Any
    interrupt_id: str | None = None  # LangGraph's id of the interrupt


class RetryData(WireBase):
    attempt: int
    discard: list[str]


class DoneData(WireBase):
    status: Literal["succeeded", "cancelled"]
    output: WireMessage | None  # no default: sent as null, never left out


class ErrorData(WireBase):
    code: str
    message: str


CustomData = Any

EventName = Literal[
    "run",
    "token",
    "message",
    "custom",
    "values",
    "updates",
    "subgraph",
    "events",
    "debug",
    "tasks",
    "checkpoints",
    "pending",
    "retry",
    "done",
    "error",
]


class Event(WireBase):
    """One event of a run's stream as a client sees it."""

    id: str
    event: str
    data: Any


_encoder = msgspec.json.Encoder()


def encode_data(data: Any) -> bytes:
    """Encode event data to JSON once, at the writer."""
    return _encoder.encode(data)


def decode_data(raw: bytes) -> Any:
    return msgspec.json.decode(raw)


_U64 = 2**64 - 1
LAST_POSITION = (_U64, _U64)  # the last stream id Redis can hand out: nothing follows it


def is_event_id(value: str) -> bool:
    """True for a stream position as Redis could hand it out (`<ms>-<seq>`, each a u64)."""
    if not _EVENT_ID.fullmatch(value):
        return False
    ms, seq = parse_event_id(value)
    return ms <= _U64 and seq <= _U64


def parse_event_id(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq)
