"""The LangGraph dialect's pure parts: wire types and conversions (`server.langgraph.wire`) and
the translation of stored runstream events into LangGraph SSE frames
(`server.langgraph.stream`). Shapes follow docs/langgraph.md and the SDKs; frames are checked
with the Python SDK's own SSE parser.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph_sdk.schema import StreamPart
from langgraph_sdk.sse import BytesLineDecoder, SSEDecoder

from server.langgraph.conversions import (
    STREAM_MODES,
    assistant_id_for,
    engine_messages,
    stream_modes,
    to_langchain_dict,
)
from server.langgraph.statuses import run_status
from server.langgraph.stream import LangGraphStream, split_frame_id
from server.langgraph.wire import (
    AssistantSearch,
    Checkpoint,
    HistoryRequest,
    Run,
    RunCreate,
    Thread,
    ThreadCreate,
    ThreadSearch,
)
from stream_store.log import StoredEvent
from wire.events import encode_data

RUN = "0b8f8a4e-2c1d-4f5e-9a7b-3c6d2e1f0a9b"
THREAD = "5f0c2a7e-9d1b-4c3e-8a6f-2b7d9e1c4a50"
AGENT = "fe096781-5601-53d2-b2f6-0d3403f7e9ca"  # uuid5 of "agent", from LangGraph's server


class Log:
    """Stored events with increasing ids, as a run's Redis stream hands them out."""

    def __init__(self) -> None:
        self.seq = itertools.count()

    def __call__(self, event: str, data: Any, attempt: int = 1) -> StoredEvent:
        return StoredEvent(f"1700000000000-{next(self.seq)}", event, encode_data(data), attempt)


def viewer(*modes: str, metadata: dict[str, Any] | None = None) -> LangGraphStream:
    return LangGraphStream(
        run_id=RUN,
        thread_id=THREAD,
        graph="agent",
        modes=list(modes),
        metadata=metadata or {},
    )


def parse(raw: bytes, chunk_size: int = 7, last_event_id: str | None = None) -> list[StreamPart]:
    """Bytes through the Python SDK's parser, cut in small chunks, as `_async/http.py` reads."""
    lines = BytesLineDecoder()
    sse = SSEDecoder(last_event_id=last_event_id)
    parts: list[StreamPart] = []

    def take(line: bytes) -> None:
        part = sse.decode(line.rstrip(b"\n"))
        if part is not None and (part.event or sse.has_data):
            parts.append(part)

    for start in range(0, len(raw), chunk_size):
        for line in lines.decode(raw[start : start + chunk_size]):
            take(bytes(line))
    for line in lines.flush():
        take(bytes(line))
    take(b"")
    return parts


def frames(raw: bytes) -> list[tuple[str, Any, str | None]]:
    return [(part.event, part.data, part.id) for part in parse(raw)]


def token(
    log: Log, message_id: str, text: str, node: str | None = "chat", attempt: int = 1
) -> StoredEvent:
    data: dict[str, Any] = {"message_id": message_id, "text": text}
    if node is not None:
        data["node"] = node
    return log("token", data, attempt)


def message(log: Log, message_id: str, role: str, content: Any, **extra: Any) -> StoredEvent:
    return log(
        "message", {"message": {"id": message_id, "role": role, "content": content, **extra}}
    )


class TestIds:
    """Assistant ids and run statuses are LangGraph's, so SDK code written for a stock server
    finds the same values here."""

    def test_assistant_id_is_langgraph_uuid5(self) -> None:
        assert assistant_id_for("agent") == AGENT

    @pytest.mark.parametrize(
        ("engine", "langgraph"),
        [
            ("queued", "pending"),
            ("running", "running"),
            ("interrupted", "success"),  # LangGraph: the run ended, the thread is interrupted
            ("succeeded", "success"),
            ("failed", "error"),
            ("cancelled", "interrupted"),
        ],
    )
    def test_run_statuses_map_to_langgraph(self, engine: str, langgraph: str) -> None:
        assert run_status(engine) == langgraph

    def test_an_unknown_run_status_is_refused(self) -> None:
        with pytest.raises(ValueError, match="paused"):
            run_status("paused")


class TestStreamModes:
    """`stream_mode` is normalised as LangGraph does; modes runstream can't serve are named."""

    @pytest.mark.parametrize("value", [None, [], "", [""]])
    def test_no_mode_means_values(self, value: Any) -> None:
        assert stream_modes(value) == ["values"]

    def test_a_string_is_one_mode_and_a_list_keeps_its_order_without_repeats(self) -> None:
        assert stream_modes("updates") == ["updates"]
        assert stream_modes(["messages-tuple", "values", "messages-tuple", "custom"]) == [
            "messages-tuple",
            "values",
            "custom",
        ]

    def test_every_supported_mode_is_accepted(self) -> None:
        assert stream_modes(list(STREAM_MODES)) == list(STREAM_MODES)

    @pytest.mark.parametrize("mode", ["tools", "lifecycle", "x"])
    def test_unsupported_modes_are_refused_naming_the_mode_and_the_supported_ones(
        self, mode: str
    ) -> None:
        with pytest.raises(ValueError) as error:
            stream_modes(["values", mode])
        assert repr(mode) in str(error.value)
        assert all(supported in str(error.value) for supported in STREAM_MODES)


class TestRequestBodies:
    """Bodies decode what both SDKs send, unknown fields included."""

    def test_run_create_ignores_fields_it_does_not_name(self) -> None:
        body = msgspec.json.decode(
            b'{"assistant_id": "agent", "input": {"messages": []}, "strict_resume": true,'
            b' "checkpoint_during": false, "langsmith_tracer": {"project_name": "p"}}',
            type=RunCreate,
        )
        assert body.assistant_id == "agent"
        assert body.input == {"messages": []}

    def test_run_create_defaults_are_langgraphs(self) -> None:
        body = msgspec.json.decode(b'{"assistant_id": "agent"}', type=RunCreate)
        assert body.input is None
        assert body.stream_mode is None
        assert body.stream_subgraphs is False
        assert (body.multitask_strategy, body.if_not_exists, body.on_disconnect) == (
            "enqueue",
            "reject",
            "continue",
        )
        assert body.on_completion is None

    def test_run_create_takes_the_full_body_of_the_js_sdk(self) -> None:
        body = msgspec.json.decode(
            json.dumps(
                {
                    "assistant_id": AGENT,
                    "input": None,
                    "command": {"resume": {"ok": True}},
                    "stream_mode": ["values", "messages-tuple"],
                    "stream_subgraphs": True,
                    "stream_resumable": True,
                    "metadata": {"a": 1},
                    "config": {"configurable": {"x": 1}},
                    "context": {"y": 2},
                    "checkpoint": {"checkpoint_id": "c"},
                    "checkpoint_id": "c",
                    "interrupt_before": "*",
                    "interrupt_after": ["node"],
                    "multitask_strategy": "interrupt",
                    "if_not_exists": "create",
                    "on_disconnect": "cancel",
                    "on_completion": "keep",
                    "after_seconds": 2,
                    "webhook": "https://example.com/hook",
                    "feedback_keys": ["k"],
                    "durability": "sync",
                }
            ),
            type=RunCreate,
        )
        assert body.command == {"resume": {"ok": True}}
        assert body.after_seconds == 2.0
        assert body.interrupt_before == "*"

    def test_run_create_needs_an_assistant_and_known_strategies(self) -> None:
        with pytest.raises(msgspec.ValidationError, match="assistant_id"):
            msgspec.json.decode(b"{}", type=RunCreate)
        with pytest.raises(msgspec.ValidationError, match="multitask_strategy"):
            msgspec.json.decode(
                b'{"assistant_id": "a", "multitask_strategy": "queue"}', type=RunCreate
            )

    def test_thread_and_search_bodies_have_langgraphs_defaults(self) -> None:
        thread = msgspec.json.decode(b'{"metadata": {}, "ttl": {"ttl": 5}}', type=ThreadCreate)
        assert (thread.thread_id, thread.if_exists) == (None, "raise")
        search = msgspec.json.decode(b'{"select": ["thread_id"]}', type=ThreadSearch)
        assert (search.limit, search.offset, search.status) == (10, 0, None)
        assistants = msgspec.json.decode(b"{}", type=AssistantSearch)
        assert (assistants.limit, assistants.offset) == (10, 0)
        history = msgspec.json.decode(b'{"before": {"checkpoint_id": "c"}}', type=HistoryRequest)
        assert (history.limit, history.before) == (10, {"checkpoint_id": "c"})

    @pytest.mark.parametrize("body", [b'{"limit": 0}', b'{"limit": 1001}', b'{"offset": -1}'])
    def test_search_bounds_are_checked(self, body: bytes) -> None:
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(body, type=ThreadSearch)


class TestResponses:
    """Response objects encode in the shape of notes section B."""

    def test_a_run_has_langgraphs_keys_and_offset_timestamps(self) -> None:
        at = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
        run = Run(
            run_id=RUN,
            thread_id=THREAD,
            assistant_id=AGENT,
            created_at=at,
            updated_at=at,
            status="pending",
        )
        encoded = json.loads(msgspec.json.encode(run))
        assert list(encoded) == [
            "run_id",
            "thread_id",
            "assistant_id",
            "created_at",
            "updated_at",
            "status",
            "multitask_strategy",
            "langsmith_session_name",
            "metadata",
            "kwargs",
        ]
        assert datetime.fromisoformat(encoded["created_at"]) == at

    def test_a_new_thread_is_idle_with_null_values_and_no_interrupts(self) -> None:
        at = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
        thread = Thread(thread_id=THREAD, created_at=at, updated_at=at, state_updated_at=at)
        encoded = json.loads(msgspec.json.encode(thread))
        assert encoded["status"] == "idle"
        assert encoded["values"] is None
        assert encoded["interrupts"] == {}
        assert encoded["error"] is None

    def test_a_checkpoint_leaves_out_an_unset_map_but_keeps_its_namespace(self) -> None:
        checkpoint = Checkpoint(checkpoint_id="c", thread_id=THREAD, checkpoint_ns="")
        assert json.loads(msgspec.json.encode(checkpoint)) == {
            "checkpoint_id": "c",
            "thread_id": THREAD,
            "checkpoint_ns": "",
        }


class TestInputMessages:
    """LangGraph input messages become runstream input messages; anything else is refused
    with a message that names the item at fault."""

    def test_langchain_types_and_roles_map_to_runstream_roles(self) -> None:
        assert engine_messages(
            [
                {"type": "human", "content": "a"},
                {"role": "human", "content": "b"},
                {"role": "user", "content": "c"},
                {"type": "ai", "content": "d"},
                {"role": "assistant", "content": "e"},
                {"type": "system", "content": "f"},
            ]
        ) == [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "user", "content": "c"},
            {"role": "assistant", "content": "d"},
            {"role": "assistant", "content": "e"},
            {"role": "system", "content": "f"},
        ]

    def test_role_wins_over_type_as_in_langchain(self) -> None:
        assert engine_messages([{"role": "system", "type": "human", "content": "x"}]) == [
            {"role": "system", "content": "x"}
        ]

    def test_a_bare_string_is_one_human_message(self) -> None:
        assert engine_messages("hi") == [{"role": "user", "content": "hi"}]
        assert engine_messages(["hi"]) == [{"role": "user", "content": "hi"}]

    def test_a_single_message_object_is_one_message(self) -> None:
        assert engine_messages({"type": "human", "content": "hi", "id": "h1"}) == [
            {"role": "user", "content": "hi", "id": "h1"}
        ]

    def test_ids_and_content_blocks_are_kept_and_extra_fields_dropped(self) -> None:
        blocks = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": "u"}]
        message = {"type": "human", "content": blocks, "id": "m1", "name": None, "example": False}
        assert engine_messages([message]) == [{"role": "user", "content": blocks, "id": "m1"}]

    def test_tool_messages_and_ai_tool_calls_are_taken_in_either_form(self) -> None:
        call = {"name": "f", "args": {"a": 1}, "id": "c1", "type": "tool_call"}
        openai = {
            "id": "c1",
            "type": "function",
            "function": {"name": "f", "arguments": '{"a": 1}'},
        }
        assert engine_messages(
            [
                {"type": "ai", "content": "", "tool_calls": [call]},
                {"role": "assistant", "content": "", "tool_calls": [openai]},
                {"type": "tool", "content": "ok", "tool_call_id": "c1", "name": "f"},
            ]
        ) == [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "f"},
        ]

    def test_no_messages_is_an_empty_list(self) -> None:
        assert engine_messages(None) == []
        assert engine_messages([]) == []

    @pytest.mark.parametrize(
        ("messages", "error"),
        [
            ([{"type": "tool", "content": "r"}], r"\[0\]: a tool message needs the tool_call_id"),
            ([{"role": "function", "content": "x"}], r"\[0\] needs a role .* 'function'"),
            ([{"content": "x"}], r"\[0\] needs a role .* None"),
            ([{"role": ["user"], "content": "x"}], r"\[0\] needs a role .* \['user'\]"),
            (["ok", {"type": "human"}], r"\[1\]\.content must be"),
            ([{"type": "human", "content": 3}], r"\[0\]\.content must be"),
            ([{"type": "human", "content": [1]}], r"\[0\]\.content must be"),
            ([42], r"\[0\] must be a message object or a string"),
            ([{"type": "human", "content": "x", "id": ""}], r"\[0\]\.id must be"),
            (
                [{"type": "ai", "content": "", "tool_calls": [{"name": "f", "args": {}}]}],
                r"\[0\]\.tool_calls must be a list of tool calls, each with an id",
            ),
        ],
    )
    def test_other_shapes_are_refused_naming_the_message(self, messages: Any, error: str) -> None:
        with pytest.raises(ValueError, match=r"input\.messages" + error):
            engine_messages(messages)


class TestLangChainDicts:
    """runstream wire messages come out exactly as LangGraph serialises LangChain messages."""

    def test_human_system_ai_and_tool_messages_match_langchain(self) -> None:
        call = {"name": "search", "args": {"q": "x"}, "id": "call-1", "type": "tool_call"}
        pairs = [
            ({"id": "h", "role": "user", "content": "hi"}, HumanMessage("hi", id="h")),
            ({"id": "s", "role": "system", "content": "be"}, SystemMessage("be", id="s")),
            ({"id": "a", "role": "assistant", "content": "yo"}, AIMessage("yo", id="a")),
            (
                {"id": "a2", "role": "assistant", "content": "", "tool_calls": [call]},
                AIMessage("", id="a2", tool_calls=[call]),
            ),
            (
                {"id": "t", "role": "tool", "content": "found", "tool_call_id": "call-1"},
                ToolMessage("found", id="t", tool_call_id="call-1"),
            ),
        ]
        for wire, langchain in pairs:
            assert to_langchain_dict(wire) == langchain.model_dump(mode="json")
            assert list(to_langchain_dict(wire)) == list(langchain.model_dump(mode="json"))


class TestFraming:
    """Frames are LangGraph's: CRLF, one line of JSON, and ids that make a reconnect exact."""

    def test_a_frame_is_event_data_id_with_crlf(self) -> None:
        log = Log()
        event = log("custom", {"progress": 1})
        raw = viewer("custom").render(event)
        assert raw == (b'event: custom\r\ndata: {"progress":1}\r\nid: 1700000000000-0\r\n\r\n')

    def test_the_opening_metadata_names_the_run_and_has_the_id_before_its_events(self) -> None:
        raw = viewer("values").opening()
        assert frames(raw) == [("metadata", {"run_id": RUN, "attempt": 1}, "0-0")]

    def test_heartbeats_are_comments_the_sdk_skips(self) -> None:
        assert LangGraphStream.heartbeat == b": heartbeat\r\n\r\n"
        assert parse(LangGraphStream.heartbeat * 3) == []

    def test_the_last_frame_of_an_event_carries_its_id_and_those_before_their_place(
        self,
    ) -> None:
        log = Log()
        event = token(log, "m1", "Hel")
        raw = viewer("messages").render(event)
        assert raw.endswith(b"id: " + event.id.encode() + b"\r\n\r\n")
        metadata, partial = parse(raw)
        assert (metadata.event, metadata.id) == ("messages/metadata", f"{event.id}.0")
        assert (partial.event, partial.id) == ("messages/partial", event.id)
        assert split_frame_id(metadata.id) == (event.id, 1)
        assert split_frame_id(partial.id) == (event.id, None)

    def test_a_viewer_resumed_within_an_event_sends_only_the_frames_after(self) -> None:
        log = Log()
        events = [token(log, "m1", "Hel"), token(log, "m1", "lo")]
        resumed = viewer("messages")
        resumed.resume_within(events[0].id, 1)
        parts = parse(b"".join(resumed.render(e) for e in events))
        assert [(p.event, p.id) for p in parts] == [
            ("messages/partial", events[0].id),
            ("messages/partial", events[1].id),
        ]
        assert parts[-1].data[0]["content"] == "Hello"

    @pytest.mark.parametrize("value", ["1-0.x", "1-0.", "1-0.12345"])
    def test_malformed_frame_ids_are_refused(self, value: str) -> None:
        with pytest.raises(ValueError):
            split_frame_id(value)

    def test_events_a_viewer_did_not_ask_for_give_no_bytes(self) -> None:
        log = Log()
        view = viewer("values")
        for event in [
            token(log, "m1", "x"),
            message(log, "m1", "assistant", "x"),
            log("custom", 1),
            log("updates", {"updates": {"chat": {}}}),
            log("pending", {"interrupt": "?"}),
            log("run", {"status": "running", "attempt": 1}),
        ]:
            assert view.render(event) == b""

    def test_frames_parse_with_the_python_sdk_parser(self) -> None:
        """A whole run, cut into odd chunks, parses into the StreamParts a stock server gives."""
        log = Log()
        view = viewer("values", "updates", "messages-tuple", "custom")
        state = {"messages": [{"type": "human", "content": "hi\nthere", "id": "h1"}]}
        events = [
            log("run", {"status": "queued", "attempt": 1}),
            log("run", {"status": "running", "attempt": 1}),
            message(log, "h1", "user", "hi\nthere"),
            log("values", {"values": state}),
            token(log, "a1", "Hello"),
            token(log, "a1", " there\r\n"),
            log("custom", {"step": "half", "emoji": "\u2028\U0001f600"}),
            message(log, "a1", "assistant", "Hello there\r\n"),
            log("updates", {"updates": {"chat": {"messages": ["..."]}}}),
            log("run", {"status": "succeeded", "attempt": 1}),
            log("done", {"status": "succeeded", "output": None}),
        ]
        raw = view.opening() + b"".join(view.render(e) for e in events)
        for size in (1, 5, 64, len(raw)):
            parts = parse(raw, chunk_size=size)
            assert [(p.event, p.id) for p in parts] == [
                ("metadata", "0-0"),
                ("values", events[3].id),
                ("messages", events[4].id),
                ("messages", events[5].id),
                ("custom", events[6].id),
                ("updates", events[8].id),
                ("end", events[10].id),
            ]
            assert parts[1].data == state
            assert parts[3].data[0]["content"] == " there\r\n"
            assert parts[4].data == {"step": "half", "emoji": "\u2028\U0001f600"}
            assert parts[6].data == {"run_id": RUN, "status": "success"}


class TestMessages:
    """Message events become LangGraph's `messages` (tuple) or `messages/*` (plain) events."""

    def test_messages_tuple_chunks_carry_the_message_id_and_node(self) -> None:
        log = Log()
        view = viewer("messages-tuple", metadata={"graph_id": "agent", "mine": "x"})
        [(event, (chunk, metadata), _)] = frames(view.render(token(log, "a1", "Hi")))
        assert event == "messages"
        assert chunk == {
            "content": "Hi",
            "additional_kwargs": {},
            "response_metadata": {},
            "type": "AIMessageChunk",
            "name": None,
            "id": "a1",
            "tool_calls": [],
            "invalid_tool_calls": [],
            "usage_metadata": None,
            "tool_call_chunks": [],
        }
        assert metadata == {
            "graph_id": "agent",
            "mine": "x",
            "run_id": RUN,
            "thread_id": THREAD,
            "assistant_id": AGENT,
            "run_attempt": 1,
            "langgraph_node": "chat",
        }

    def test_a_token_without_a_node_has_no_langgraph_node(self) -> None:
        log = Log()
        [(_, (_, metadata), _)] = frames(
            viewer("messages-tuple").render(token(log, "a", "x", None))
        )
        assert "langgraph_node" not in metadata

    def test_streamed_assistant_messages_are_not_repeated_whole(self) -> None:
        """JS concatenates a whole `ai` message onto the chunks it holds for that id."""
        log = Log()
        view = viewer("messages-tuple")
        view.render(token(log, "a1", "Hello"))
        assert view.render(message(log, "a1", "assistant", "Hello")) == b""
        # Also for a viewer that resumed after the last token: the text went out before.
        assert viewer("messages-tuple").render(message(log, "a1", "assistant", "Hello")) == b""

    def test_tool_messages_and_tool_call_only_messages_are_sent_whole_once(self) -> None:
        log = Log()
        view = viewer("messages-tuple")
        call = {"name": "search", "args": {}, "id": "c1", "type": "tool_call"}
        calls = frames(view.render(message(log, "a1", "assistant", "", tool_calls=[call])))
        result = frames(view.render(message(log, "t1", "tool", "found", tool_call_id="c1")))
        [(_, (ai, _), _)] = calls
        [(_, (tool, metadata), _)] = result
        assert (ai["type"], ai["tool_calls"]) == ("ai", [call])
        assert (tool["type"], tool["tool_call_id"], tool["status"]) == ("tool", "c1", "success")
        assert metadata["run_id"] == RUN

    def test_the_users_input_messages_are_never_streamed(self) -> None:
        log = Log()
        for mode in ("messages-tuple", "messages"):
            assert viewer(mode).render(message(log, "h1", "user", "hi")) == b""

    def test_plain_messages_send_metadata_once_then_accumulated_partials_then_complete(
        self,
    ) -> None:
        log = Log()
        view = viewer("messages", metadata={"graph_id": "agent"})
        first = frames(view.render(token(log, "a1", "Hel")))
        second = frames(view.render(token(log, "a1", "lo")))
        complete = frames(view.render(message(log, "a1", "assistant", "Hello")))
        assert [event for event, _, _ in first] == ["messages/metadata", "messages/partial"]
        assert first[0][1]["a1"]["metadata"]["langgraph_node"] == "chat"
        assert first[1][1][0]["content"] == "Hel"
        assert [event for event, _, _ in second] == ["messages/partial"]
        [partial] = second[0][1]
        assert partial == to_langchain_dict({"id": "a1", "role": "assistant", "content": "Hello"})
        assert [(event, data[0]["content"]) for event, data, _ in complete] == [
            ("messages/complete", "Hello")
        ]

    def test_a_plain_viewer_resuming_mid_message_accumulates_from_where_it_resumed(self) -> None:
        log = Log()
        log("token", {"message_id": "a1", "text": "Hel"})  # before the resume point
        [_, (_, [partial], _)] = frames(viewer("messages").render(token(log, "a1", "lo")))
        assert partial["content"] == "lo"

    def test_messages_tuple_wins_over_plain_messages_as_in_langgraph(self) -> None:
        log = Log()
        events = frames(viewer("messages", "messages-tuple").render(token(log, "a1", "x")))
        assert [event for event, _, _ in events] == ["messages"]


class TestOtherModes:
    """`values`, `updates` and `custom` pass through as stored, when asked for."""

    def test_values_updates_and_custom_pass_through(self) -> None:
        log = Log()
        view = viewer("values", "updates", "custom")
        state = {"messages": [], "__interrupt__": [{"value": "ok?", "id": "i1"}]}
        assert frames(view.render(log("values", {"values": state})))[0][:2] == ("values", state)
        updates = {"chat": {"messages": [{"type": "ai", "content": "x"}]}}
        assert frames(view.render(log("updates", {"updates": updates})))[0][:2] == (
            "updates",
            updates,
        )
        assert frames(view.render(log("custom", [1, "two"])))[0][:2] == ("custom", [1, "two"])

    def test_pending_becomes_an_interrupt_update(self) -> None:
        log = Log()
        event = log("pending", {"interrupt": {"question": "ok?"}, "interrupt_id": "i1"})
        [(name, data, _)] = frames(viewer("updates").render(event))
        assert (name, data) == (
            "updates",
            {
                "__interrupt__": [
                    {"value": {"question": "ok?"}, "id": "i1", "response_schema": None}
                ]
            },
        )

    def test_pending_is_not_repeated_when_the_runs_updates_carried_the_interrupt(self) -> None:
        log = Log()
        view = viewer("updates")
        interrupt = {"value": "ok?", "id": "i1"}
        assert view.render(log("updates", {"updates": {"__interrupt__": [interrupt]}}))
        assert view.render(log("pending", {"interrupt": "ok?", "interrupt_id": "i1"})) == b""
        view.render(log("run", {"status": "queued", "attempt": 1}))  # resumed: a new interrupt
        assert view.render(log("pending", {"interrupt": "again?", "interrupt_id": "i2"}))


class TestRetries:
    """A new attempt is announced as LangGraph announces one, and the whole messages re-sent
    after a `retry` never reach a client as chunks it would append to what it holds."""

    def retried_run(self, log: Log) -> list[StoredEvent]:
        return [
            token(log, "a1", "Hel"),
            log("retry", {"attempt": 2, "discard": ["a1"]}, attempt=2),
            token(log, "a1", "Hello"),  # re-sent whole
            message(log, "a1", "assistant", "Hello"),
            message(log, "t1", "tool", "found", tool_call_id="c1"),
            log("values", {"values": {"messages": ["fresh"]}}, attempt=2),
            log("run", {"status": "queued", "attempt": 2}, attempt=2),
            log("run", {"status": "running", "attempt": 2}, attempt=2),
            token(log, "a2", "Next", attempt=2),
        ]

    def test_retry_is_announced_as_metadata_and_resent_messages_are_not_repeated_as_chunks(
        self,
    ) -> None:
        log = Log()
        events = self.retried_run(log)
        view = viewer("messages-tuple", "values")
        parts = frames(b"".join(view.render(event) for event in events))
        assert [
            (event, data if event != "messages" else data[0]["id"]) for event, data, _ in parts
        ] == [
            ("messages", "a1"),
            ("metadata", {"run_id": RUN, "attempt": 2}),
            ("values", {"messages": ["fresh"]}),
            ("messages", "a2"),
        ]
        assert parts[3][1][1]["run_attempt"] == 2

    def test_frames_inside_a_retry_window_carry_no_id(self) -> None:
        """A client cut inside the window resumes before the `retry`, and is served again by
        a viewer that knows the window."""
        log = Log()
        events = self.retried_run(log)
        view = viewer("messages-tuple", "values")
        raw = [view.render(event) for event in events]
        assert b"id: " not in raw[1] and b"id: " not in raw[5]
        resumed = viewer("messages-tuple", "values")
        again = frames(b"".join(resumed.render(event) for event in events[1:]))
        assert [event for event, _, _ in again] == ["metadata", "values", "messages"]
        assert again[-1][2] == events[-1].id

    def test_plain_mode_starts_a_discarded_message_over(self) -> None:
        log = Log()
        view = viewer("messages")
        view.render(token(log, "a1", "Hel"))
        view.render(log("retry", {"attempt": 2, "discard": ["a1"]}))
        view.render(log("run", {"status": "queued", "attempt": 2}))
        [(_, [partial], _)] = frames(view.render(token(log, "a1", "Hi")))
        assert partial["content"] == "Hi"


class TestEndings:
    """The LangGraph stream ends with `end` or `error`; a run ends at an interrupt."""

    def test_interrupted_run_ends_the_stream(self) -> None:
        log = Log()
        view = viewer("values")
        interrupted = log("run", {"status": "interrupted", "attempt": 1})
        assert view.ends_after(interrupted)
        assert frames(view.render(interrupted)) == [
            ("end", {"run_id": RUN, "status": "success"}, interrupted.id)
        ]

    @pytest.mark.parametrize("status", ["queued", "running", "succeeded", "failed", "cancelled"])
    def test_other_run_events_neither_end_nor_show(self, status: str) -> None:
        event = Log()("run", {"status": status, "attempt": 1})
        assert not viewer("values").ends_after(event)
        assert viewer("values").render(event) == b""

    @pytest.mark.parametrize(
        ("status", "langgraph"), [("succeeded", "success"), ("cancelled", "interrupted")]
    )
    def test_done_becomes_end_with_the_langgraph_run_status(
        self, status: str, langgraph: str
    ) -> None:
        event = Log()("done", {"status": status, "output": None})
        view = viewer()
        assert view.ends_after(event)
        assert frames(view.render(event)) == [
            ("end", {"run_id": RUN, "status": langgraph}, event.id)
        ]

    def test_graph_errors_are_split_into_type_and_message(self) -> None:
        event = Log()("error", {"code": "graph_error", "message": "ValueError: bad: input\nline 2"})
        view = viewer()
        assert view.ends_after(event)
        assert frames(view.render(event)) == [
            ("error", {"error": "ValueError", "message": "bad: input\nline 2"}, event.id)
        ]

    @pytest.mark.parametrize(
        ("code", "text", "error"),
        [
            ("attempts_exhausted", "3 attempts ended", "attempts_exhausted"),
            ("graph_error", "no type here", "graph_error"),
        ],
    )
    def test_other_errors_are_named_by_their_code(self, code: str, text: str, error: str) -> None:
        event = Log()("error", {"code": code, "message": text})
        assert frames(viewer().render(event))[0][1] == {"error": error, "message": text}


class TestSharedFrames:
    """Viewers of one live event share its `messages-tuple` frame, except where they differ."""

    def test_viewers_share_a_token_frame_and_get_what_each_would_render(self) -> None:
        log = Log()
        token = log("token", {"message_id": "m1", "text": "hi", "node": "chat"})
        alone = viewer("messages-tuple").render(token)
        shared: dict[str, bytes] = {}
        first = viewer("messages-tuple", "values").render(token, shared=shared)
        second = viewer("messages-tuple").render(token, shared=shared)
        assert first == second == alone
        assert shared  # the second viewer took the first one's bytes

    def test_a_viewer_in_a_retry_resend_does_not_use_the_shared_frame(self) -> None:
        log = Log()
        resending = viewer("messages-tuple")
        resending.render(log("retry", {"attempt": 2, "discard": ["m1"]}))
        token = log("token", {"message_id": "m1", "text": "again"})
        shared = {"langgraph:messages-tuple": b"poison"}
        assert resending.render(token, shared=shared) == b""


class TestResumingFromRecentEvents:
    """A resumed viewer rebuilt from the events just before its resume point sends what one
    that skipped every event before it sends, or says it cannot tell."""

    @staticmethod
    def interrupted_then_continued(log: Log) -> list[StoredEvent]:
        """A run that streams, is retried, stops at an interrupt (the LangGraph stream's end),
        then is resumed by a `/v1` client and finishes."""
        return [
            log("run", {"status": "queued", "attempt": 1}),
            log("run", {"status": "running", "attempt": 1}),
            message(log, "h1", "user", "hi"),
            token(log, "a1", "Hel"),
            log("retry", {"attempt": 2, "discard": ["a1"]}, 2),
            log("values", {"values": {"messages": ["fresh"]}}, 2),
            log("run", {"status": "running", "attempt": 2}, 2),
            token(log, "a2", "Hel", attempt=2),
            token(log, "a2", "lo", attempt=2),
            log("custom", {"step": 1}, 2),
            message(log, "a2", "assistant", "Hello", tool_calls=[]),
            log("updates", {"updates": {"__interrupt__": [{"value": "?", "id": "i1"}]}}, 2),
            log("values", {"values": {"messages": ["asked"]}}, 2),
            log("pending", {"interrupt": "?", "interrupt_id": "i1"}, 2),
            log("run", {"status": "interrupted", "attempt": 2}, 2),
            log("run", {"status": "queued", "attempt": 2}, 2),
            log("run", {"status": "running", "attempt": 2}, 2),
            token(log, "a3", "done", attempt=2),
            log("done", {"status": "succeeded", "output": None}, 2),
        ]

    @pytest.mark.parametrize(
        "modes",
        [
            ("values", "updates", "messages-tuple", "custom"),
            ("values", "messages-tuple"),
            ("updates",),
        ],
    )
    @pytest.mark.parametrize("window", [1, 3, 64])
    def test_every_resume_point_renders_what_a_full_skip_renders(
        self, modes: tuple[str, ...], window: int
    ) -> None:
        events = self.interrupted_then_continued(Log())
        sent = viewer(*modes)
        held = [i for e in events for _, _, i in frames(sent.render(e)) if i is not None]
        assert held
        for at in held:
            cut = next(i for i, event in enumerate(events) if event.id == at) + 1
            skipped = viewer(*modes)
            for event in events[:cut]:
                skipped.skip(event)
            recent = list(reversed(events[:cut]))[:window]
            rebuilt = viewer(*modes)
            assert rebuilt.resumes_from_recent
            if not rebuilt.take_recent(recent, whole_stream=len(recent) == cut):
                continue  # too few events to tell: the server then skips them all
            rest = events[cut:]
            assert [rebuilt.render(e) for e in rest] == [skipped.render(e) for e in rest], at

    def test_the_recent_events_tell_when_they_reach_a_status_change(self) -> None:
        events = self.interrupted_then_continued(Log())
        tail = list(reversed(events[:11]))  # up to the whole assistant message
        with_updates = viewer("updates", "messages-tuple")
        assert not with_updates.take_recent(tail[:3], whole_stream=False)
        assert viewer("updates").take_recent(tail[:5], whole_stream=False)  # reaches a `run`
        assert viewer("values", "messages-tuple").take_recent(tail[:1], whole_stream=False)

    def test_plain_messages_mode_needs_every_event(self) -> None:
        assert not viewer("messages").resumes_from_recent
        assert not viewer("messages", "values").resumes_from_recent
