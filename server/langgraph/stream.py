"""A run's stored runstream events as LangGraph SSE frames, for one viewer.

runstream stores its own events (docs/protocol.md section 4); a LangGraph client wants
LangGraph's (docs/langgraph.md, "Streams"). `LangGraphStream` translates
one stored event at a time, so it serves a replay and live events alike. Its rules:

- Frames are framed as LangGraph's server frames them: CRLF line ends, one line of JSON.
- The `id:` of a stored event rides on the last frame it gives, so a client that reconnects
  after that id skips them all. The frames before it (plain `messages` mode's
  `messages/metadata`) carry `<id>.<n>`, their place in the event's frames: a client cut
  between them resumes with that id and gets the rest of the event's frames, never one twice
  (`split_frame_id`).
- Between a `retry` and the next `run` event, frames carry no `id:`: that window re-sends whole
  messages a dead attempt had cut off, which must not reach a client as message chunks (it
  would append them to the text it holds). A client cut inside the window resumes before the
  `retry`, so the viewer that serves it knows it is in the window.
- An assistant message with text always streamed `token`s before its `message` (protocol 4.3),
  in this connection or an earlier one; its `message` event is therefore never re-sent as a
  chunk, which a resumed viewer could not tell apart.
- `pending` becomes an `updates` `__interrupt__` only when the run's own recorded `updates`
  did not already carry it since the last `run` event.
- Nothing follows `end` or `error`, though a run's stored events can go on after the
  interrupt that ended its LangGraph stream.
- A replay (`begin_replay` .. `end_replay`: the events already stored when a viewer attached)
  in plain `messages` mode leaves out each `messages/partial` that the next frame replaces (a
  `messages/partial` or `messages/complete` of the same message): a client keeps the last
  frame of a message id, so it ends up holding what the frames one by one would have left it,
  for the size of the messages rather than its square. The frames sent keep their ids, so
  every id stays a resume point: the frames left out before it are replaced by one at or
  before it, and those after it are rendered again on a resume.

Kept whole: these rules are one viewer's state, which every event kind reads and changes; split
by event kind, no module would show what a frame depends on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import msgspec

from stream_store.log import StoredEvent
from stream_store.messages import message_text
from wire.events import RunStatus

from .conversions import assistant_id_for, to_langchain_dict
from .partials import Complete, FrameData, MessageText, Partial, replaces
from .statuses import run_status

__all__ = ["FRAME_ID_SEPARATOR", "LangGraphStream", "split_frame_id"]

FRAME_ID_SEPARATOR = "."  # between a stored event's id and a frame's place among its frames


def split_frame_id(value: str) -> tuple[str, int | None]:
    """A LangGraph `Last-Event-ID` as (the stored event's id, how many of its frames the client
    has), the count None when the id is a whole event's. The event id is not checked here.

    Raises:
        ValueError: a frame place that is not a small number.
    """
    event_id, dot, place = value.partition(FRAME_ID_SEPARATOR)
    if not dot:
        return value, None
    if not place.isdigit() or len(place) > 3:
        raise ValueError(f"not a frame id: {value[:80]!r}")
    return event_id, int(place) + 1


class _Token(msgspec.Struct):
    message_id: str
    text: str
    node: str | None = None  # the LangGraph node that streamed it
    ns: str | None = None  # the subgraph's namespace (`stream_subgraphs`)


class _Message(msgspec.Struct):
    message: dict[str, Any]


class _Values(msgspec.Struct):
    values: msgspec.Raw


class _Updates(msgspec.Struct):
    updates: dict[str, msgspec.Raw]


class _Subgraph(msgspec.Struct):
    ns: str
    mode: str
    data: msgspec.Raw


class _Pending(msgspec.Struct):
    interrupt: msgspec.Raw
    interrupt_id: str | None = None


class _Retry(msgspec.Struct):
    attempt: int
    discard: list[str]


class _Status(msgspec.Struct):
    status: str


class _Error(msgspec.Struct):
    code: str
    message: str


_token = msgspec.json.Decoder(_Token)
_message = msgspec.json.Decoder(_Message)
_values = msgspec.json.Decoder(_Values)
_updates = msgspec.json.Decoder(_Updates)
_pending = msgspec.json.Decoder(_Pending)
_subgraph = msgspec.json.Decoder(_Subgraph)
_retry = msgspec.json.Decoder(_Retry)
_status = msgspec.json.Decoder(_Status)
_error = msgspec.json.Decoder(_Error)
_encode = msgspec.json.Encoder().encode

# runstream's graph_error message is "<Type>: <text>"; LangGraph sends the two apart.
_TYPED_ERROR = re.compile(r"([A-Za-z_][\w.]*): (.*)", re.DOTALL)


_SHARED_TOKEN = "langgraph:messages-tuple"  # key of a token's frame in a live event's cache
# A token's `AIMessageChunk` around its text and id, as msgspec encodes the dict (key order
# kept); tests/test_langgraph_wire.py (TestMessages) checks what it decodes to.
_CHUNK_START = b'[{"content":'
_CHUNK_ID = (
    b',"additional_kwargs":{},"response_metadata":{},"type":"AIMessageChunk","name":null,"id":'
)
_CHUNK_END = (
    b',"tool_calls":[],"invalid_tool_calls":[],"usage_metadata":null,"tool_call_chunks":[]},'
)


def _frame(event: str, data: bytes, event_id: str | None) -> bytes:
    id_line = f"id: {event_id}\r\n".encode() if event_id else b""
    return b"event: " + event.encode() + b"\r\ndata: " + data + b"\r\n" + id_line + b"\r\n"


class LangGraphStream:
    """One viewer's translation of a run's stored events into LangGraph frames.

    Plain `messages` mode sends the text accumulated so far in each `messages/partial`, also
    after a resume (the resumed viewer `skip`s the events the client has); a replay sends a
    message's last one only (`begin_replay`). A subgraph's token (`stream_subgraphs`) is a
    `messages|<ns>` event in `messages-tuple` mode and an unnamed one in plain `messages` mode,
    as LangGraph names them. When both
    `messages` and `messages-tuple` are asked for, `messages-tuple` wins, as in LangGraph.
    """

    # LangGraph's keep-alive comment, every 5 s; the JS SDK's idle watchdog counts on them.
    heartbeat: ClassVar[bytes] = b": heartbeat\r\n\r\n"

    def __init__(
        self,
        run_id: str,
        thread_id: str,
        graph: str,
        modes: Sequence[str],
        metadata: Mapping[str, Any],
        *,
        id_prefix: str = "",
        thread_mode: Literal["run_modes", "lifecycle"] | None = None,
        assistant_id: str | None = None,  # a created assistant's; None: the graph's own
    ) -> None:
        self.run_id = run_id
        self._id_prefix = id_prefix  # before every frame id (the thread stream's run id)
        self._thread_mode = thread_mode  # in the thread stream: how the run's end is told
        self._modes = frozenset(modes)
        self._tuples = "messages-tuple" in self._modes
        self._messages = "messages" in self._modes and not self._tuples
        self._metadata = {
            **metadata,
            "run_id": run_id,
            "thread_id": thread_id,
            "graph_id": graph,
            "assistant_id": assistant_id or assistant_id_for(graph),
        }
        self._ended = False  # `end` or `error` went out: a LangGraph stream has nothing after
        self._resending = False  # between a `retry` and the next `run` event
        self._interrupt_sent = False  # an `updates` event since the last `run` had it
        self._announced: set[str] = set()  # ids that had their `messages/metadata` (plain mode)
        self._texts: dict[str, MessageText] = {}  # the messages streaming (plain mode)
        self._coalescing = False  # in a replay (`begin_replay`)
        self._held: tuple[Partial, str | None] | None = None  # a partial and its frame id
        self._partly_sent: tuple[str, int] | None = None  # (event id, its frames the client has)
        # by attempt, node and subgraph namespace
        self._meta_json: dict[tuple[int, str | None, str | None], bytes] = {}

    @property
    def ended(self) -> bool:
        """The LangGraph stream is over: its `end` or `error` went out (or was skipped)."""
        return self._ended

    def resume_within(self, event_id: str, frames_sent: int) -> None:
        """The client has the first `frames_sent` frames of stored event `event_id` (it resumed
        with a frame id): render only the rest of that event's frames."""
        self._partly_sent = (event_id, frames_sent)

    def opening(self, attempt: int = 1) -> bytes:
        """The `metadata` frame LangGraph sends first. Its id is `0-0` (in the thread stream
        `<prefix>0-0`), the point after it and before the run's first event: every part has
        an id, as in LangGraph's resumable streams, and a client that resumes after it gets
        the run's events without a second `metadata`."""
        opening_id = f"{self._id_prefix}0-0"
        return _frame("metadata", _encode({"run_id": self.run_id, "attempt": attempt}), opening_id)

    def render(self, event: StoredEvent, shared: dict[str, bytes] | None = None) -> bytes:
        """The frames for one stored event, possibly none.

        A token in `messages-tuple` form (most of a run's events) is the same for every viewer
        of the run outside a retry's resend: `shared`, the live event's cache, keeps the first
        viewer's bytes for the others, so a hundred viewers encode it once.
        """
        if (
            shared is not None
            and event.event == "token"
            and self._tuples
            and not (self._resending or self._ended)
        ):
            cached = _SHARED_TOKEN + self._id_prefix
            frame = shared.get(cached)
            if frame is None:
                frame = shared[cached] = self._render(event)
            return frame
        return self._render(event)

    def _render(self, event: StoredEvent) -> bytes:
        frames = self._frames(event)
        sent = 0
        if self._partly_sent is not None and self._partly_sent[0] == event.id:
            sent, self._partly_sent = self._partly_sent[1], None
        last = len(frames) - 1
        out = bytearray()
        for place, (name, data) in enumerate(frames):
            if place < sent:
                continue
            frame_id = self._frame_id(event.id, place, last)
            if self._held is not None:
                if not replaces(data, self._held[0]):
                    out += self._release()
                self._held = None
            if isinstance(data, Partial) and self._coalescing:
                self._held = (data, frame_id)  # sent if the next frame does not replace it
                continue
            out += _frame(name, data if isinstance(data, bytes) else data.encode(), frame_id)
        return bytes(out)

    def begin_replay(self) -> None:
        """The events rendered until `end_replay` are a replay's: in plain `messages` mode,
        each `messages/partial` is held back until the next frame tells whether it replaces
        it (module docstring)."""
        self._coalescing = True

    def end_replay(self) -> bytes:
        """The replay is over: the `messages/partial` it held back, if any; from here on
        every frame goes out as it comes."""
        self._coalescing = False
        out = self._release()
        self._held = None
        return out

    def _release(self) -> bytes:
        if self._held is None:
            return b""
        partial, frame_id = self._held
        return _frame("messages/partial", partial.encode(), frame_id)

    def replay_cut(self, max_bytes: int) -> bytes:
        """The `error` frame that ends a replay cut at `max_bytes` (RUNSTREAM_MAX_REPLAY_BYTES).
        It carries no id: the client resumes after the last frame it has."""
        message = (
            f"this stream's replay of run {self.run_id} passed {max_bytes} bytes"
            " (RUNSTREAM_MAX_REPLAY_BYTES); rejoin with the id of the last event received to"
            " go on from there, or read the thread's state"
        )
        return _frame("error", _encode({"error": "ReplayTooLarge", "message": message}), None)

    def _frame_id(self, event_id: str, place: int, last: int) -> str | None:
        if self._resending:
            return None
        frame_id = event_id if place == last else f"{event_id}{FRAME_ID_SEPARATOR}{place}"
        return self._id_prefix + frame_id

    def skip(self, event: StoredEvent) -> None:
        """Take in an event the client already has, as `render` would, writing nothing: a
        viewer that resumes after an id first skips the events up to it, so that it holds
        what the viewer that sent them held (the text of a `messages/partial`, the message
        ids announced, an interrupt already sent)."""
        self._frames(event)

    @property
    def resumes_from_recent(self) -> bool:
        """True when a resumed viewer can rebuild its state from the last few events before its
        resume point (`take_recent`) instead of all of them (`skip`). Plain `messages` mode
        cannot: the text of a `messages/partial` is all of its message's tokens so far."""
        return not self._messages

    def take_recent(self, recent: Sequence[StoredEvent], whole_stream: bool) -> bool:
        """Rebuild the state a viewer held at its resume point from `recent`: the events up to
        and including it, newest first (`whole_stream`: back to the stream's first). False when
        they are too few to tell, and the viewer must `skip` every event instead.

        Outside plain `messages` mode a viewer holds two things that span events:
        - whether the LangGraph stream ended: a client holds no id from after the event that
          ended it, so it ended exactly when the resume point is that event;
        - with `updates`, whether the interrupt went out in an `updates` since the last `run`
          event (then the `pending` that follows sends no second one).
        Nothing else: a client holds no id inside a retry's resend window (those frames carry
        none), so a resumed viewer is never in one.
        """
        if not recent:
            return True
        if self.ends_after(recent[0]):
            self._ended = True
            return True
        if "updates" not in self._modes:
            return True
        for event in recent:
            if event.event == "run":
                return True
            if event.event == "updates" and "__interrupt__" in _updates.decode(event.data).updates:
                self._interrupt_sent = True
                return True
        return whole_stream

    def ends_after(self, event: StoredEvent) -> bool:
        """True after the event that ends the LangGraph stream; a run ends at an interrupt."""
        if event.event in ("done", "error"):
            return True
        return event.event == "run" and _status.decode(event.data).status == RunStatus.INTERRUPTED

    def _frames(self, event: StoredEvent) -> list[tuple[str, FrameData]]:
        if self._ended:
            # The run ended at an interrupt, then its runstream stream went on: the new run
            # that resumed the thread ended it (`done`), or a `/v1` resume continued it.
            return []
        match event.event:
            case "token":
                return self._token(_token.decode(event.data), event.attempt)
            case "message":
                return self._message(_message.decode(event.data).message, event.attempt)
            case "values" if "values" in self._modes:
                return [("values", bytes(_values.decode(event.data).values))]
            case "updates" if "updates" in self._modes:
                updates = _updates.decode(event.data).updates
                self._interrupt_sent |= "__interrupt__" in updates
                return [("updates", _encode(updates))]
            case "custom" if "custom" in self._modes:
                return [("custom", event.data)]
            case "events" if "events" in self._modes:  # as stored: LangGraph's event whole
                return [("events", event.data)]
            case "debug" | "tasks" | "checkpoints" if event.event in self._modes:
                return [(event.event, event.data)]  # as stored: LangGraph's part whole
            case "subgraph":
                part = _subgraph.decode(event.data)
                if part.mode not in self._modes:
                    return []
                return [(f"{part.mode}|{part.ns}", bytes(part.data))]
            case "pending" if "updates" in self._modes and not self._interrupt_sent:
                pending = _pending.decode(event.data)
                # the `Interrupt` as LangGraph streams it; runstream's `pending` event does not
                # keep a `response_schema` (a graph's that gives one shows it in the `updates`)
                interrupt = {
                    "value": pending.interrupt,
                    "id": pending.interrupt_id,
                    "response_schema": None,
                }
                return [("updates", _encode({"__interrupt__": [interrupt]}))]
            case "retry":
                retry = _retry.decode(event.data)
                self._resending = True
                for message_id in retry.discard:
                    self._texts.pop(message_id, None)
                return [("metadata", _encode({"run_id": self.run_id, "attempt": retry.attempt}))]
            case "run":
                self._resending = False
                self._interrupt_sent = False
                if _status.decode(event.data).status == RunStatus.INTERRUPTED:
                    return self._closing(self._end("interrupted"))
                return []
            case "done":
                return self._closing(self._end(_status.decode(event.data).status))
            case "error":
                self._ended = True
                return self._closing(("error", self._error(_error.decode(event.data))))
        return []

    def _closing(self, last: tuple[str, FrameData]) -> list[tuple[str, FrameData]]:
        """The frames that end the LangGraph stream: `last` (`end` or `error`), and in the thread
        stream LangGraph's `metadata` `{"status": "run_done"}` after it; in its `lifecycle`
        mode that alone (the mode gives only `metadata` events)."""
        if self._thread_mode is None:
            return [last]
        done: tuple[str, FrameData] = (
            "metadata",
            _encode({"status": "run_done", "run_id": self.run_id}),
        )
        return [done] if self._thread_mode == "lifecycle" else [last, done]

    def _token(self, token: _Token, attempt: int) -> list[tuple[str, FrameData]]:
        if self._resending:
            return []
        if self._tuples:
            # `[AIMessageChunk, metadata]` as msgspec encodes the two dicts, put together from
            # constant parts and the run's metadata encoded once (most events are tokens)
            # (a subgraph's token: `messages|<ns>`, its metadata's `checkpoint_ns` the ns)
            meta = self._meta_json.get((attempt, token.node, token.ns))
            if meta is None:
                meta = self._meta_json[(attempt, token.node, token.ns)] = _encode(
                    self._meta(attempt, token.node, token.ns)
                )
            chunk = b"".join(
                (_CHUNK_START, _encode(token.text), _CHUNK_ID, _encode(token.message_id))
            )
            name = f"messages|{token.ns}" if token.ns else "messages"
            return [(name, chunk + _CHUNK_END + meta + b"]")]
        if not self._messages:
            return []
        frames = self._announce(token.message_id, attempt, token.node)
        text = self._texts.get(token.message_id)
        if text is None:
            text = self._texts[token.message_id] = MessageText()
        text.parts.append(token.text)
        return [*frames, ("messages/partial", Partial(token.message_id, text, len(text.parts)))]

    def _message(self, message: dict[str, Any], attempt: int) -> list[tuple[str, FrameData]]:
        if self._resending or message["role"] == "user":
            return []
        if self._tuples:
            if message["role"] == "assistant" and message_text(message["content"]):
                return []  # its text went out as chunks; a whole message would be appended
            return [("messages", _encode([to_langchain_dict(message), self._meta(attempt)]))]
        if not self._messages:
            return []
        frames = self._announce(message["id"], attempt, None)
        self._texts.pop(message["id"], None)
        return [*frames, ("messages/complete", Complete(message))]

    def _announce(
        self, message_id: str, attempt: int, node: str | None
    ) -> list[tuple[str, FrameData]]:
        """The `messages/metadata` frame for a message id this viewer has not seen yet."""
        if message_id in self._announced:
            return []
        self._announced.add(message_id)
        metadata = {message_id: {"metadata": self._meta(attempt, node)}}
        return [("messages/metadata", _encode(metadata))]

    def _meta(self, attempt: int, node: str | None = None, ns: str | None = None) -> dict[str, Any]:
        meta = {**self._metadata, "run_attempt": attempt}
        if node is not None:
            meta["langgraph_node"] = node
        if ns is not None:
            meta["checkpoint_ns"] = ns
        return meta

    def _end(self, engine_status: str) -> tuple[str, bytes]:
        """`end`, which stock servers never send but both SDKs take as "the run is over"
        (no status check on close); its data is what the Python SDK documents for it."""
        status = run_status(engine_status)
        self._ended = True
        return ("end", _encode({"run_id": self.run_id, "status": status}))

    def _error(self, error: _Error) -> bytes:
        kind, message = error.code, error.message
        if error.code == "graph_error" and (typed := _TYPED_ERROR.fullmatch(error.message)):
            kind, message = typed.group(1), typed.group(2)
        return _encode({"error": kind, "message": message})
