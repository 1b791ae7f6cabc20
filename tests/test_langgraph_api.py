"""The LangGraph API, driven by LangGraph's own Python SDK (`langgraph_sdk`), unmodified.

Each test is a promise runstream makes to a LangGraph client: what `get_client(url=...)`
gets from `runs.*` and `threads.*` against runstream's server and workers, including when a
stream is cut and rejoined, watched twice, served by another server process, or outlives a
killed worker. Wire details: docs/langgraph.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, StateGraph
from langgraph.types import Command, StateSnapshot
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import (
    BadRequestError,
    ConflictError,
    NotFoundError,
    UnprocessableEntityError,
)
from langgraph_sdk.schema import StreamPart

from project.graph_context import RunContext
from runner.graphs import approval, chat
from runner.models import EchoChatModel
from runner.run_scope import RunScope, running
from stream_store.settings import Settings
from stream_store.thread_records import ThreadRecords
from tests.conftest import ServerHandle, StartServer, StartWorker, schema_connection, stop_worker
from tests.processes import Cluster, TcpProxy
from tests.sse import read_events

QUESTION = "tell me about resumable streams"
API_KEYS = {"key-a": "alice", "key-b": "bob"}


def as_read(streamed: dict[str, Any]) -> dict[str, Any]:
    """An interrupt as LangGraph streams it (`{"value", "id", "response_schema"}`), as its
    thread's state shows it: `{"id", "value"}`, and the schema when the graph gave one (the
    built-in `approval`'s is `{}`: its answer is checked by a validator)."""
    shown = {"id": streamed["id"], "value": streamed["value"]}
    if streamed["response_schema"] is not None:
        shown["response_schema"] = streamed["response_schema"]
    return shown


def slow(delay_ms: int = 20) -> dict[str, Any]:
    """A run config whose fake model waits `delay_ms` between tokens."""
    return {"configurable": {"fake_token_delay_ms": delay_ms}}


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def client_for(url: str, api_key: str | None = None) -> LangGraphClient:
    # An explicit empty header set keeps `LANGGRAPH_API_KEY` & co. of the environment out.
    return get_client(url=url, api_key=api_key, headers={})


@pytest.fixture
async def sdk(server: ServerHandle, worker: Any) -> LangGraphClient:
    return client_for(server.url)


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"type": "human", "content": text}]}


def chunks_text(parts: list[StreamPart]) -> str:
    """The text of the AI message chunks of a `messages-tuple` stream, concatenated."""
    return "".join(
        p.data[0]["content"]
        for p in parts
        if p.event == "messages" and p.data[0]["type"] == "AIMessageChunk"
    )


def wire(parts: list[StreamPart]) -> list[tuple[str, Any, str | None]]:
    return [(p.event, p.data, p.id) for p in parts]


async def collect(stream: AsyncIterator[StreamPart], limit: int | None = None) -> list[StreamPart]:
    """The parts of a stream, all of them or the first `limit`; leaving early closes the
    connection (what a client does when it goes away)."""
    parts: list[StreamPart] = []
    async with contextlib.aclosing(stream) as opened:  # type: ignore[type-var]
        async for part in opened:
            parts.append(part)
            if limit is not None and len(parts) >= limit:
                break
    return parts


async def eventually(
    check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 20
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def status_is(sdk: LangGraphClient, thread_id: str, run_id: str, status: str) -> None:
    async def check() -> bool:
        return (await sdk.runs.get(thread_id, run_id))["status"] == status

    await eventually(check, f"run {run_id} to be {status}")


def messages_of(values: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(m["type"], m["content"]) for m in values["messages"]]


ClientView = tuple[dict[str, Any], list[str], list[tuple[str, Any, str | None]]]


def client_view(parts: list[StreamPart]) -> ClientView:
    """What a LangGraph client holds after plain `messages` mode's `parts`: each message as the
    last `messages/partial` or `messages/complete` of its id left it (the SDKs and `useStream`
    replace a message by id), the message ids announced by `messages/metadata` in order, and
    every other part as it came."""
    messages: dict[str, Any] = {}
    announced: list[str] = []
    others: list[tuple[str, Any, str | None]] = []
    for part in parts:
        if part.event in ("messages/partial", "messages/complete"):
            messages.update((message["id"], message) for message in part.data)
        elif part.event == "messages/metadata":
            announced.extend(part.data)
        else:
            others.append((part.event, part.data, part.id))
    return messages, announced, others


def position(event_id: str) -> tuple[int, ...]:
    """A LangGraph event id (`<ms>-<seq>` or `<ms>-<seq>.<place>`) as a sortable position."""
    stored, _, place = event_id.partition(".")
    ms, seq = stored.split("-")
    return int(ms), int(seq), int(place) if place else 1_000


def assert_resumable(parts: list[StreamPart]) -> None:
    """Every part, the opening `metadata` too (but a closing `error`), carries an id, in
    increasing order: each is a resume point, none sent twice."""
    ids = [p.id for p in parts if not (p.event == "error" and p is parts[-1])]
    assert all(ids), ids
    places = [position(i) for i in ids if i]
    assert places == sorted(places) and len(set(places)) == len(places), ids


# -- runs.stream -------------------------------------------------------------------------------


async def test_stream_gives_metadata_first_then_chunks_values_and_end(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    parts = await collect(
        sdk.runs.stream(
            thread["thread_id"],
            "chat",
            input=human(QUESTION),
            stream_mode=["values", "messages-tuple"],
        )
    )
    assert parts[0].event == "metadata"
    run_id = parts[0].data["run_id"]
    assert parts[0].data["attempt"] == 1
    assert parts[-1].event == "end"
    values = [p.data for p in parts if p.event == "values"]
    answer = values[-1]["messages"][-1]
    assert answer["type"] == "ai"
    assert chunks_text(parts) == answer["content"]
    assert answer["content"] == QUESTION  # the fake model echoes
    run = await sdk.runs.get(thread["thread_id"], run_id)
    assert run["status"] == "success"
    state = await sdk.threads.get_state(thread["thread_id"])
    assert [m["type"] for m in state["values"]["messages"]] == ["human", "ai"]


async def test_stream_with_every_mode_gives_each_and_only_the_modes_asked(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create()
    parts = await collect(
        sdk.runs.stream(
            thread["thread_id"],
            "chat",
            input=human(QUESTION),
            stream_mode=["values", "updates", "messages-tuple"],
        )
    )
    events = [p.event for p in parts]
    assert events[0] == "metadata" and events[-1] == "end"
    assert set(events) == {"metadata", "values", "updates", "messages", "end"}
    assert events.count("metadata") == 1 and events.count("end") == 1
    values = [p.data for p in parts if p.event == "values"]
    assert messages_of(values[0]) == [("human", QUESTION)]  # the input state comes first
    assert messages_of(values[-1]) == [("human", QUESTION), ("ai", QUESTION)]
    updates = [p.data for p in parts if p.event == "updates"]
    assert [list(u) for u in updates] == [["respond"]]
    assert updates[0]["respond"]["messages"][0]["content"] == QUESTION
    assert updates[0]["respond"]["messages"][0]["id"] == values[-1]["messages"][-1]["id"]
    chunks = [p.data for p in parts if p.event == "messages"]
    assert len(chunks) == len(QUESTION.split())  # one chunk a word
    assert {c[0]["id"] for c in chunks} == {values[-1]["messages"][-1]["id"]}
    assert {c[1]["langgraph_node"] for c in chunks} == {"respond"}
    assert {c[1]["thread_id"] for c in chunks} == {thread["thread_id"]}
    assert chunks_text(parts) == QUESTION
    assert parts[-1].data == {"run_id": parts[0].data["run_id"], "status": "success"}
    # only `values`: no chunks, no updates
    only_values = await collect(
        sdk.runs.stream(thread["thread_id"], "chat", input=human("again"), stream_mode="values")
    )
    assert {p.event for p in only_values} == {"metadata", "values", "end"}
    assert messages_of(only_values[-2].data)[-2:] == [("human", "again"), ("ai", "again")]


async def test_stream_answer_names_the_run_in_location_and_content_location(
    server: ServerHandle, worker: Any, sdk: LangGraphClient
) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    created: list[Any] = []
    parts = await collect(
        sdk.runs.stream(tid, "chat", input=human(QUESTION), on_run_created=created.append)
    )
    run_id = parts[0].data["run_id"]
    assert [(c["thread_id"], c["run_id"]) for c in created] == [(tid, run_id)]
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30) as http,
        http.stream(
            "POST",
            f"/threads/{tid}/runs/stream",
            json={"assistant_id": "chat", "input": human("hello")},
        ) as response,
    ):
        body = (await response.aread()).decode()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    second = response.headers["content-location"].rsplit("/", 1)[-1]
    assert response.headers["content-location"] == f"/threads/{tid}/runs/{second}"
    assert response.headers["location"] == f"/threads/{tid}/runs/{second}/stream"
    assert f'"run_id":"{second}"' in body and second != run_id


async def test_stream_answers_name_their_charset_once(
    server: ServerHandle, sdk: LangGraphClient
) -> None:
    """`text/event-stream; charset=utf-8`, as LangGraph's server sends it: a run's stream, a
    rejoin, and a thread's stream."""
    tid = (await sdk.threads.create())["thread_id"]
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        async with http.stream(
            "POST",
            f"/threads/{tid}/runs/stream",
            json={"assistant_id": "chat", "input": human("hello")},
        ) as response:
            await response.aread()
            run_path = response.headers["content-location"]
        types = [response.headers.get_list("content-type")]
        for path in (f"{run_path}/stream", f"/threads/{tid}/stream"):
            async with http.stream("GET", path, headers={"Last-Event-ID": "-1"}) as response:
                assert response.status_code == 200, path
                types.append(response.headers.get_list("content-type"))
    assert types == [["text/event-stream; charset=utf-8"]] * 3


# -- background runs, join_stream ----------------------------------------------------------------


async def test_join_stream_cut_and_rejoined_by_last_id_equals_a_replay_from_the_start(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    text = words(40)
    run = await sdk.runs.create(
        tid,
        "chat",
        input=human(text),
        stream_mode=["values", "updates", "messages-tuple"],
        config=slow(),
    )
    rid = run["run_id"]
    first = await collect(sdk.runs.join_stream(tid, rid), limit=8)  # then the client goes away
    assert first[-1].id is not None
    rest = await collect(sdk.runs.join_stream(tid, rid, last_event_id=first[-1].id))
    everything = await collect(sdk.runs.join_stream(tid, rid, last_event_id="-1"))
    assert any(p.event == "messages" for p in first), "cut before the answer streamed"
    assert any(p.event == "messages" for p in rest), "cut after the answer streamed"
    assert wire(first + rest) == wire(everything)
    assert everything[0].event == "metadata" and everything[-1].event == "end"
    ids = [p.id for p in everything]
    assert None not in ids and len(set(ids)) == len(ids)
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
    final = [p.data for p in everything if p.event == "values"][-1]
    assert chunks_text(everything) == text == final["messages"][-1]["content"]


@pytest.mark.parametrize(
    "modes",
    [["values", "updates", "messages-tuple"], ["messages", "updates"]],
    ids=["messages-tuple", "messages"],
)
async def test_rejoining_after_any_part_gives_exactly_the_parts_after_it(
    sdk: LangGraphClient, modes: list[str]
) -> None:
    """Cut after every part in turn: what the rejoin gives completes the stream exactly,
    including the accumulated text of plain `messages/partial` and the one `messages/metadata`
    per message, also when the cut falls between that announcement and the first partial
    (one stored event, two frames: the announcement's id names its place in the event).

    In plain `messages` mode a rejoin is a replay, which leaves out the partials a later
    frame replaces: there it completes what the client holds exactly (`client_view`)."""
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    text = words(6)
    run = await sdk.runs.create(tid, "chat", input=human(text), stream_mode=modes, config=slow())
    everything = await collect(sdk.runs.join_stream(tid, run["run_id"], last_event_id="-1"))
    assert everything[-1].event == "end"
    # every part has an id, the opening `metadata` `0-0`: a rejoin after it has no second one
    assert everything[0].event == "metadata" and everything[0].id == "0-0"
    assert all(p.id is not None for p in everything)
    for cut in range(1, len(everything)):
        rest = await collect(
            sdk.runs.join_stream(tid, run["run_id"], last_event_id=everything[cut - 1].id)
        )
        if "messages" in modes:
            joined = everything[:cut] + rest
            assert client_view(joined) == client_view(everything), f"cut after part {cut}"
            assert_resumable(joined)
        else:
            assert wire(everything[:cut] + rest) == wire(everything), f"cut after part {cut}"
    if "messages" in modes:
        partials = [p.data[0]["content"] for p in everything if p.event == "messages/partial"]
        assert all(text.startswith(partial) for partial in partials)
        assert client_view(everything)[0] == {
            p.data[0]["id"]: p.data[0] for p in everything if p.event == "messages/complete"
        }
        assert [p.data[0]["content"] for p in everything if p.event == "messages/complete"] == [
            text
        ]
        assert [p.event for p in everything].count("messages/metadata") == 1


async def test_the_sdk_reconnects_a_cut_stream_by_itself_without_gap_or_duplicate(
    server: ServerHandle, worker: Any, sdk: LangGraphClient
) -> None:
    """A proxy drops every connection after 3000 bytes: `runs.stream` follows the answer's
    `Location` with its last id, by itself, until the run's `end`."""
    port = int(server.url.rsplit(":", 1)[1])
    proxy = TcpProxy("127.0.0.1", port, cut_every_bytes=3000)
    await proxy.start()
    try:
        through_proxy = client_for(f"http://127.0.0.1:{proxy.port}")
        thread = await sdk.threads.create()
        tid = thread["thread_id"]
        text = words(12)
        parts = await collect(
            through_proxy.runs.stream(
                tid,
                "chat",
                input=human(text),
                stream_mode=["values", "messages-tuple"],
                config=slow(10),
            )
        )
    finally:
        await proxy.stop()
    assert proxy.cuts >= 2
    everything = await collect(
        sdk.runs.join_stream(tid, parts[0].data["run_id"], last_event_id="-1")
    )
    assert wire(parts) == wire(everything)
    assert parts[-1].event == "end" and chunks_text(parts) == text


async def test_two_viewers_of_one_run_get_identical_parts(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    text = words(25)
    run = await sdk.runs.create(
        tid, "chat", input=human(text), stream_mode=["values", "messages-tuple"], config=slow()
    )
    one, two = await asyncio.gather(
        collect(sdk.runs.join_stream(tid, run["run_id"])),
        collect(sdk.runs.join_stream(tid, run["run_id"])),
    )
    assert wire(one) == wire(two)
    assert one[0].event == "metadata" and one[-1].event == "end"
    assert chunks_text(one) == text


async def test_join_stream_gives_the_modes_asked_of_those_the_run_streams(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    run = await sdk.runs.create(
        tid, "chat", input=human(QUESTION), stream_mode=["values", "messages-tuple"]
    )
    rid = run["run_id"]
    everything = await collect(sdk.runs.join_stream(tid, rid, last_event_id="-1"))

    async def join(mode: str) -> list[StreamPart]:
        return await collect(sdk.runs.join_stream(tid, rid, stream_mode=mode, last_event_id="-1"))

    ends = {"metadata", "end"}
    assert wire(await join("values")) == wire([p for p in everything if p.event != "messages"])
    assert wire(await join("messages-tuple")) == wire(
        [p for p in everything if p.event != "values"]
    )
    assert wire(await join("messages")) == wire(await join("messages-tuple"))
    assert [p.event for p in await join("updates")] == ["metadata", "end"]
    assert {p.event for p in everything} == {"values", "messages"} | ends


async def test_deleted_runs_are_gone(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    done = await sdk.runs.wait(tid, "chat", input=human("hi"))
    assert messages_of(done)[-1] == ("ai", "hi")
    [finished] = await sdk.runs.list(tid)
    await sdk.runs.delete(tid, finished["run_id"])
    with pytest.raises(NotFoundError):
        await sdk.runs.get(tid, finished["run_id"])
    asked = await collect(sdk.runs.stream(tid, "approval", input=human("note this")))
    paused = asked[0].data["run_id"]
    assert (await sdk.runs.get(tid, paused))["status"] == "success"  # ended at its interrupt
    await sdk.runs.delete(tid, paused)
    with pytest.raises(NotFoundError):
        await sdk.runs.get(tid, paused)
    assert await sdk.runs.list(tid) == []


async def test_join_stream_on_a_second_server_process_equals_the_first(
    start_server: StartServer, start_worker: StartWorker
) -> None:
    first_server, second_server = await start_server(), await start_server()
    await start_worker()
    on_first, on_second = client_for(first_server.url), client_for(second_server.url)
    thread = await on_first.threads.create()
    tid = thread["thread_id"]
    text = words(25)
    run = await on_first.runs.create(
        tid, "chat", input=human(text), stream_mode=["values", "messages-tuple"], config=slow()
    )
    one, two = await asyncio.gather(
        collect(on_first.runs.join_stream(tid, run["run_id"])),
        collect(on_second.runs.join_stream(tid, run["run_id"])),
    )
    assert wire(one) == wire(two)
    assert one[-1].event == "end" and chunks_text(two) == text
    assert await on_second.runs.get(tid, run["run_id"]) == await on_first.runs.get(
        tid, run["run_id"]
    )


async def test_join_and_wait_return_the_final_values(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    run = await sdk.runs.create(tid, "chat", input=human("first question"), config=slow(5))
    assert run["status"] in ("pending", "running")
    joined = await sdk.runs.join(tid, run["run_id"])
    assert messages_of(joined) == [("human", "first question"), ("ai", "first question")]
    waited = await sdk.runs.wait(tid, "chat", input=human("second question"))
    assert isinstance(waited, dict)
    assert messages_of(waited) == [
        ("human", "first question"),
        ("ai", "first question"),
        ("human", "second question"),
        ("ai", "second question"),
    ]
    assert waited == (await sdk.threads.get_state(tid))["values"]


async def test_runs_list_newest_first_and_get(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    made = []
    for text in ("one", "two", "three"):
        made.append(await sdk.runs.create(tid, "chat", input=human(text), metadata={"n": text}))
        await sdk.runs.join(tid, made[-1]["run_id"])
    listed = await sdk.runs.list(tid)
    assert [r["run_id"] for r in listed] == [r["run_id"] for r in reversed(made)]
    assert [r["status"] for r in listed] == ["success"] * 3
    assert [r["run_id"] for r in await sdk.runs.list(tid, limit=1, offset=1)] == [made[1]["run_id"]]
    got = await sdk.runs.get(tid, made[0]["run_id"])
    assert got["run_id"] == made[0]["run_id"] and got["thread_id"] == tid
    assert got["status"] == "success" and got["metadata"]["n"] == "one"
    assert got["assistant_id"] == (await sdk.assistants.get("chat"))["assistant_id"]
    with pytest.raises(NotFoundError):
        await sdk.runs.get(tid, str(uuid.uuid4()))


async def test_history_lists_checkpoints_newest_first(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("one"))
    await sdk.runs.wait(tid, "chat", input=human("two"))
    history = await sdk.threads.get_history(tid, limit=100)
    steps = [h["metadata"]["step"] for h in history]
    assert steps == sorted(steps, reverse=True) and len(steps) >= 4
    assert history[0]["checkpoint"] == (await sdk.threads.get_state(tid))["checkpoint"]
    assert [len(h["values"].get("messages", [])) for h in history] == sorted(
        (len(h["values"].get("messages", [])) for h in history), reverse=True
    )
    assert messages_of(history[0]["values"])[-1] == ("ai", "two")
    for newer, older in itertools.pairwise(history):
        assert newer["parent_checkpoint"] == older["checkpoint"]
    assert len(await sdk.threads.get_history(tid, limit=2)) == 2
    older = history[2]
    assert await sdk.threads.get_state(tid, checkpoint_id=older["checkpoint"]["checkpoint_id"]) == (
        older
    )
    assert await sdk.threads.get_state(tid, checkpoint=older["checkpoint"]) == older
    with pytest.raises(NotFoundError):
        await sdk.threads.get_state(tid, checkpoint_id=str(uuid.uuid4()))
    before = await sdk.threads.get_history(tid, limit=100, before=history[1]["checkpoint"])
    assert [h["checkpoint"] for h in before] == [h["checkpoint"] for h in history[2:]]


async def test_threads_create_search_and_delete(sdk: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    chosen = str(uuid.uuid4())
    made = await sdk.threads.create(thread_id=chosen, metadata={"tag": tag, "n": 1})
    assert made["thread_id"] == chosen and made["status"] == "idle"
    again = await sdk.threads.create(
        thread_id=chosen, metadata={"other": 2}, if_exists="do_nothing"
    )
    assert again["thread_id"] == chosen and again["metadata"] == made["metadata"]
    with pytest.raises(ConflictError):
        await sdk.threads.create(thread_id=chosen)
    other = await sdk.threads.create(metadata={"tag": tag, "n": 2})
    await sdk.threads.create(metadata={"tag": "unrelated"})
    found = await sdk.threads.search(metadata={"tag": tag})
    assert {t["thread_id"] for t in found} == {chosen, other["thread_id"]}
    assert [t["thread_id"] for t in await sdk.threads.search(metadata={"tag": tag, "n": 2})] == [
        other["thread_id"]
    ]
    await sdk.runs.wait(chosen, "chat", input=human("hi"))
    assert (await sdk.threads.get(chosen))["values"]["messages"][-1]["content"] == "hi"
    await sdk.threads.delete(chosen)
    with pytest.raises(NotFoundError):
        await sdk.threads.get(chosen)
    with pytest.raises(NotFoundError):
        await sdk.threads.get_state(chosen)
    assert [t["thread_id"] for t in await sdk.threads.search(metadata={"tag": tag})] == [
        other["thread_id"]
    ]


async def test_a_run_records_its_graph_and_assistant_in_the_threads_metadata(
    sdk: LangGraphClient,
) -> None:
    # agent-chat-ui lists its threads with threads.search(metadata={"graph_id": ...}).
    tag = uuid.uuid4().hex
    kept = await sdk.threads.create(metadata={"tag": tag})
    await sdk.runs.wait(kept["thread_id"], "chat", input=human("hi"))
    stateless = await sdk.runs.wait(None, "chat", input=human("hello"), metadata={"tag": tag})
    assistant_id = (await sdk.assistants.search(graph_id="chat"))[0]["assistant_id"]
    metadata = (await sdk.threads.get(kept["thread_id"]))["metadata"]
    assert metadata == {"tag": tag, "graph_id": "chat", "assistant_id": assistant_id}
    listed = await sdk.threads.search(metadata={"graph_id": "chat", "tag": tag})
    assert [t["thread_id"] for t in listed] == [kept["thread_id"]]
    by_assistant = await sdk.threads.search(metadata={"assistant_id": assistant_id}, limit=1000)
    assert kept["thread_id"] in {t["thread_id"] for t in by_assistant}
    assert stateless["messages"][-1]["content"] == "hello"


async def test_threads_count_and_search_by_ids(sdk: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    first = await sdk.threads.create(metadata={"tag": tag})
    second = await sdk.threads.create(metadata={"tag": tag})
    assert await sdk.threads.count(metadata={"tag": tag}) == 2
    assert await sdk.threads.count(metadata={"tag": tag}, status="idle") == 2
    assert await sdk.threads.count(metadata={"tag": tag}, status="busy") == 0
    found = await sdk.threads.search(ids=[first["thread_id"]])
    assert [t["thread_id"] for t in found] == [first["thread_id"]]
    assert second["thread_id"] not in {t["thread_id"] for t in found}


async def test_thread_search_sorts_selects_and_filters_by_values_as_langgraph(
    sdk: LangGraphClient,
) -> None:
    """As observed on `langgraph dev` (langgraph-api 0.16.7): `select` returns only the named
    fields; without `sort_by` the most recently updated thread comes first (`sort_order`
    alone changes nothing); `sort_by` alone sorts descending; an unknown sort or select field
    is 422; `values` keeps the threads whose current values contain it (Postgres's `@>`,
    which LangGraph's Postgres runtime uses), a thread without values never matches."""
    tag = uuid.uuid4().hex
    alpha, beta, empty = [await sdk.threads.create(metadata={"tag": tag}) for _ in range(3)]
    await sdk.runs.wait(alpha["thread_id"], "chat", input=human("alpha"))
    await sdk.runs.wait(beta["thread_id"], "chat", input=human("beta"))
    ids = [t["thread_id"] for t in (alpha, beta, empty)]

    await sdk.threads.update(alpha["thread_id"], metadata={"touched": True})
    newest_first = await sdk.threads.search(metadata={"tag": tag}, sort_order="asc")
    assert [t["thread_id"] for t in newest_first] == [ids[0], ids[1], ids[2]]  # a run updates
    for order, reverse in (("asc", False), ("desc", True), (None, True)):
        found = await sdk.threads.search(
            metadata={"tag": tag}, sort_by="thread_id", sort_order=order
        )
        assert [t["thread_id"] for t in found] == sorted(ids, reverse=reverse)
    by_creation = await sdk.threads.search(
        metadata={"tag": tag}, sort_by="created_at", sort_order="asc"
    )
    assert [t["thread_id"] for t in by_creation] == ids

    selected = await sdk.threads.search(
        metadata={"tag": tag}, select=["thread_id", "values"], sort_by="created_at"
    )
    assert [set(t) for t in selected] == [{"thread_id", "values"}] * 3
    assert selected[0]["values"] is None and selected[2]["values"]["messages"]

    def contains(text: str) -> dict[str, Any]:
        return {"messages": [{"type": "human", "content": text}]}

    matched = await sdk.threads.search(metadata={"tag": tag}, values=contains("alpha"))
    assert [t["thread_id"] for t in matched] == [ids[0]]
    both = await sdk.threads.search(
        metadata={"tag": tag}, values={"messages": [{"type": "human"}]}, limit=1, offset=1
    )
    assert [t["thread_id"] for t in both] == [ids[1]]
    assert await sdk.threads.search(metadata={"tag": tag}, values=contains("gamma")) == []

    for bad in ({"sort_by": "name"}, {"select": ["thread_id", "owner"]}, {"sort_order": "up"}):
        with pytest.raises(UnprocessableEntityError):
            await sdk.http.post("/threads/search", json={"metadata": {"tag": tag}, **bad})


async def test_assistants_are_the_graphs_with_counts_and_their_drawn_graph(
    sdk: LangGraphClient,
) -> None:
    assistants = await sdk.assistants.search()
    assert {a["graph_id"] for a in assistants} == {"chat", "approval"}
    assert await sdk.assistants.count() == 2
    assert await sdk.assistants.count(graph_id="chat") == 1
    assert await sdk.assistants.count(metadata={"created_by": "someone"}) == 0
    chat = next(a for a in assistants if a["graph_id"] == "chat")
    assert (await sdk.assistants.get(chat["assistant_id"]))["graph_id"] == "chat"
    drawn = await sdk.assistants.get_graph(chat["assistant_id"])
    names = {node["id"] for node in drawn["nodes"]}
    assert {"__start__", "__end__"} <= names and len(names) > 2
    assert drawn["edges"]


# -- human in the loop -----------------------------------------------------------------------


async def test_interrupt_ends_the_run_and_a_new_run_resumes_it(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    modes = ["values", "updates", "messages-tuple", "custom"]
    asked = await collect(
        sdk.runs.stream(tid, "approval", input=human("buy milk"), stream_mode=modes)
    )
    first_run = asked[0].data["run_id"]
    assert asked[-1].event == "end"
    assert asked[-1].data == {"run_id": first_run, "status": "success"}
    # as LangGraph streams an interrupt(): in `updates`, then in the `values` that follow
    assert [p.event for p in asked[-3:]] == ["updates", "values", "end"]
    [interrupt] = asked[-3].data["__interrupt__"]
    assert asked[-2].data["__interrupt__"] == [interrupt]
    assert [p.data for p in asked if p.event == "updates" and "__interrupt__" in p.data] == [
        asked[-3].data
    ]
    assert {} not in [p.data for p in asked if p.event == "updates"]
    # LangChain's HITLRequest, which agent-chat-ui draws Approve / Edit / Reject for
    proposed = asked[-2].data["messages"][-1]["tool_calls"]
    assert [c["name"] for c in proposed] == ["save_note"]
    assert interrupt["value"] == {
        "action_requests": [
            {"name": "save_note", "args": {"content": "buy milk"}, "description": "Run save_note?"}
        ],
        "review_configs": [
            {"action_name": "save_note", "allowed_decisions": ["approve", "edit", "reject"]}
        ],
    }
    assert [m["type"] for m in asked[-2].data["messages"]] == ["human", "ai"]
    assert (await sdk.runs.get(tid, first_run))["status"] == "success"
    assert (await sdk.threads.get(tid))["status"] == "interrupted"
    state = await sdk.threads.get_state(tid)
    assert state["next"] == ["confirm_and_run"]
    [task] = state["tasks"]
    assert task["name"] == "confirm_and_run"
    assert task["interrupts"] == [as_read(interrupt)]
    assert state["interrupts"] == task["interrupts"]
    assert (await sdk.threads.get(tid))["interrupts"] == {task["id"]: task["interrupts"]}
    with pytest.raises(NotFoundError):  # to LangGraph the run is over
        await sdk.runs.cancel(tid, first_run)
    assert (await sdk.runs.get(tid, first_run))["status"] == "success"

    approve = {"decisions": [{"type": "approve"}]}
    resumed = await collect(
        sdk.runs.stream(tid, "approval", command={"resume": approve}, stream_mode=modes)
    )
    second_run = resumed[0].data["run_id"]
    assert second_run != first_run
    assert resumed[-1].data == {"run_id": second_run, "status": "success"}
    customs = [p.data for p in resumed if p.event == "custom"]
    assert customs == [
        {
            "tool": "save_note",
            "tool_call_id": proposed[0]["id"],
            "executed": True,
            "replayed": False,
        }
    ]
    final = [p.data for p in resumed if p.event == "values"][-1]
    assert [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "ai"]
    assert final["messages"][-1]["content"] == "buy milk"
    assert chunks_text(resumed) == "buy milk"
    assert (await sdk.runs.get(tid, first_run))["status"] == "success"
    assert (await sdk.runs.get(tid, second_run))["status"] == "success"
    assert (await sdk.threads.get(tid))["status"] == "idle"
    after = await sdk.threads.get_state(tid)
    assert after["next"] == [] and after["tasks"] == [] and after["interrupts"] == []
    assert all(r["status"] not in ("pending", "running") for r in await sdk.runs.list(tid))
    # the first run's stream still ends at its interrupt, and nothing comes after its `end`
    assert wire(await collect(sdk.runs.join_stream(tid, first_run, last_event_id="-1"))) == wire(
        asked
    )
    assert await collect(sdk.runs.join_stream(tid, first_run, last_event_id=asked[-1].id)) == []


async def notes_of(settings: Settings, thread_id: str) -> list[str]:
    """The contents of the notes `save_note` wrote on the thread, oldest first."""
    async with await schema_connection(settings) as conn:
        cur = await conn.execute(
            "SELECT content FROM runstream_notes WHERE thread_id = %s ORDER BY created_at",
            (thread_id,),
        )
        return [row[0] for row in await cur.fetchall()]


EDIT_TO_EGGS = {"type": "edit", "edited_action": {"name": "save_note", "args": {"content": "eggs"}}}


@pytest.mark.parametrize(
    ("decision", "notes", "tool_message"),
    [
        ({"type": "approve"}, ["buy milk"], "saved note (8 characters)"),
        (
            EDIT_TO_EGGS,
            ["eggs"],
            "saved note (4 characters); a reviewer edited the call,"
            ' it ran with {"content": "eggs"}',
        ),
        (
            {"type": "reject", "message": "not now"},
            [],
            "User rejected the tool call for `save_note` with reason: not now",
        ),
    ],
    ids=["approve", "edit", "reject"],
)
async def test_each_decision_does_what_it_says(
    sdk: LangGraphClient,
    settings: Settings,
    decision: dict[str, Any],
    notes: list[str],
    tool_message: str,
) -> None:
    """agent-chat-ui's buttons: what it sends for each (`{"decisions": [...]}`) and what runs."""
    asked = await interrupted_thread(sdk)
    tid = asked["checkpoint"]["thread_id"]
    call = asked["values"]["messages"][-1]["tool_calls"][0]
    parts = await collect(
        sdk.runs.stream(
            tid,
            "approval",
            command={"resume": {"decisions": [decision]}},
            stream_mode=["values", "custom"],
        )
    )
    assert parts[-1].data["status"] == "success"
    executed = decision["type"] != "reject"
    custom = {"tool": "save_note", "tool_call_id": call["id"], "executed": executed}
    assert [p.data for p in parts if p.event == "custom"] == [
        {**custom, "replayed": False} if executed else custom
    ]
    final = [p.data for p in parts if p.event == "values"][-1]
    # the tool message is what the model was given next: the conversation it answered
    assert messages_of(final) == [
        ("human", "buy milk"),
        ("ai", ""),
        ("tool", tool_message),
        ("ai", "buy milk"),
    ]
    assert final["messages"][1]["tool_calls"] == [call]  # the model's call, as it proposed it
    assert final["messages"][2]["status"] == ("success" if executed else "error")
    assert await notes_of(settings, tid) == notes
    assert (await sdk.threads.get(tid))["status"] == "idle"


async def test_a_reject_without_a_message_tells_the_model_not_to_retry(
    sdk: LangGraphClient, settings: Settings
) -> None:
    asked = await interrupted_thread(sdk)
    tid = asked["checkpoint"]["thread_id"]
    call_id = asked["values"]["messages"][-1]["tool_calls"][0]["id"]
    out = await sdk.runs.wait(
        tid, "approval", command={"resume": {"decisions": [{"type": "reject"}]}}
    )
    assert out["messages"][2]["content"] == (
        f"User rejected the tool call for `save_note` with id {call_id}. The tool was not"
        " executed. Do not retry this tool call unless the user explicitly requests it."
    )
    assert await notes_of(settings, tid) == []


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"decisions": []}, "0 decisions for 1 proposed calls"),
        ({"decisions": [{"type": "respond", "message": "x"}]}, "the resume value must be"),
        ({"decisions": [{**EDIT_TO_EGGS, "edited_action": {"name": "rm", "args": {}}}]}, "rm"),
        ({"approve": "yes"}, "the resume value must be"),
    ],
    ids=["count", "respond", "other-tool", "not-a-bool"],
)
async def test_an_answer_the_graph_cannot_read_fails_the_run_and_runs_nothing(
    sdk: LangGraphClient, settings: Settings, answer: Any, why: str
) -> None:
    """As LangChain's middleware does: the run fails with the reason; the question still waits,
    and a good answer then goes on."""
    asked = await interrupted_thread(sdk)
    tid = asked["checkpoint"]["thread_id"]
    parts = await collect(sdk.runs.stream(tid, "approval", command={"resume": answer}))
    [error] = [p.data for p in parts if p.event == "error"]
    assert error["error"] == "ValidationError" and why in error["message"]
    assert await notes_of(settings, tid) == []
    state = await sdk.threads.get_state(tid)
    assert state["interrupts"] == asked["interrupts"]
    out = await sdk.runs.wait(
        tid, "approval", command={"resume": {"decisions": [{"type": "approve"}]}}
    )
    assert messages_of(out)[2] == ("tool", "saved note (8 characters)")
    assert await notes_of(settings, tid) == ["buy milk"]


async def test_the_older_answer_approve_true_or_false_is_still_taken(
    sdk: LangGraphClient, settings: Settings
) -> None:
    for approve, notes in ((False, []), (True, ["buy milk"])):
        asked = await interrupted_thread(sdk)
        tid = asked["checkpoint"]["thread_id"]
        out = await sdk.runs.wait(tid, "approval", command={"resume": {"approve": approve}})
        assert [m["type"] for m in out["messages"]] == ["human", "ai", "tool", "ai"]
        assert await notes_of(settings, tid) == notes


async def test_command_update_and_goto_steer_the_graph_as_in_langgraph(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("first"))
    command = {"update": {"messages": [{"type": "human", "content": "second"}]}, "goto": "respond"}
    parts = await collect(sdk.runs.stream(tid, "chat", command=command, stream_mode="values"))
    assert parts[-1].event == "end" and parts[-1].data["status"] == "success"
    final = parts[-2].data
    assert messages_of(final) == [
        ("human", "first"),
        ("ai", "first"),
        ("human", "second"),
        ("ai", "second"),
    ]
    run = await sdk.runs.get(tid, parts[0].data["run_id"])
    assert run["kwargs"]["command"]["goto"] == ["respond"]
    # `update` as [key, value] pairs, and `goto` as a Send, on a new thread
    fresh = await sdk.threads.create()
    send = {"node": "respond", "input": {"messages": [{"type": "human", "content": "sent"}]}}
    out = await sdk.runs.wait(
        fresh["thread_id"],
        "chat",
        command={"update": [["messages", [{"type": "human", "content": "paired"}]]], "goto": send},
    )
    assert ("human", "paired") in messages_of(out)
    assert messages_of(out)[-1][0] == "ai"


async def test_command_resume_with_update_edits_the_proposed_call_before_it_runs(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    await sdk.runs.wait(tid, "approval", input=human("buy milk"))
    assert (await sdk.threads.get(tid))["status"] == "interrupted"
    proposal = (await sdk.threads.get_state(tid))["values"]["messages"][-1]
    edited = {
        **proposal,
        "tool_calls": [{**proposal["tool_calls"][0], "args": {"content": "eggs"}}],
    }
    out = await sdk.runs.wait(
        tid,
        "approval",
        command={"resume": {"approve": True}, "update": {"messages": [edited]}},
    )
    assert [m["type"] for m in out["messages"]] == ["human", "ai", "tool", "ai"]
    assert out["messages"][1]["tool_calls"][0]["args"] == {"content": "eggs"}
    assert out["messages"][2]["content"] == "saved note (4 characters)"
    assert "__interrupt__" not in out
    assert (await sdk.threads.get(tid))["status"] == "idle"


async def test_bad_commands_get_a_422_naming_the_field_and_create_no_run(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    bad: dict[str, dict[str, Any]] = {
        "unknown command key": {"command": {"jump": "respond"}},
        "unknown state key": {"command": {"update": {"todos": []}}},
        "unknown node": {"command": {"goto": "nowhere"}},
        "bad goto": {"command": {"goto": [{"input": {}}]}},
        "bad update": {"command": {"update": "messages"}},
        "bad message": {"command": {"update": {"messages": [{"type": "robot", "content": "x"}]}}},
        "input and update": {"command": {"goto": "respond"}, "input": human("x")},
        "empty": {"command": {"update": None}},
    }
    for name, body in bad.items():
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await sdk.runs.create(tid, "chat", **body)
        assert refused.value.response.status_code == 422, name
        assert refused.value.response.json()["detail"], name
    assert await sdk.runs.list(tid) == []


# -- a run from a checkpoint (agent-chat-ui's edit and regenerate), goto END -------------------


class InProcess:
    """The same graph run by LangGraph itself, in this process, on its own `InMemorySaver`:
    the reference runstream's threads are compared with."""

    def __init__(self, builder: StateGraph) -> None:
        self.graph = builder.compile(checkpointer=InMemorySaver())
        self.configurable = {"thread_id": "reference"}

    async def run(self, input: Any, checkpoint_id: str | None = None) -> None:
        at = {"checkpoint_id": checkpoint_id, "checkpoint_ns": ""} if checkpoint_id else {}
        context = RunContext(run_id=str(uuid.uuid4()), thread_id="reference", attempt=1)
        config: Any = {"configurable": {**self.configurable, **at}}
        with running(in_process_scope(context)):
            await self.graph.ainvoke(input, config, context=context)

    async def history(self) -> list[StateSnapshot]:
        config: Any = {"configurable": self.configurable}
        return [s async for s in self.graph.aget_state_history(config)]

    async def parent_of(self, place: int) -> str:
        """The id of the parent of the checkpoint at `place` in the history (newest first)."""
        parent = (await self.history())[place].parent_config
        assert parent is not None
        return str(parent["configurable"]["checkpoint_id"])


def in_process_scope(context: RunContext, token_delay_s: float = 0) -> RunScope:
    """The run scope of a built-in graph run by LangGraph in this process: the fake model, and
    neither a ledger nor evaluations (no write tool runs, nothing is graded)."""
    return RunScope(
        run_id=context.run_id,
        thread_id=context.thread_id,
        owner="reference",
        graph="reference",
        attempt=context.attempt,
        trace_id=None,
        x_trace_id=None,
        max_facts=0,
        ledger=None,  # type: ignore[arg-type]
        evaluations=None,  # type: ignore[arg-type]
        chat_models=lambda _: EchoChatModel(token_delay_s=token_delay_s),
    )


def history_shape(history: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A LangGraph API history as a tree: each checkpoint's source, step, next, messages and
    its parent's place in the list (None: the root)."""
    place = {h["checkpoint"]["checkpoint_id"]: i for i, h in enumerate(history)}
    return [
        (
            h["metadata"]["source"],
            h["metadata"]["step"],
            list(h["next"]),
            messages_of(h["values"]) if h["values"] else [],
            place.get((h["parent_checkpoint"] or {}).get("checkpoint_id")),
            [len(t["interrupts"]) for t in h["tasks"]],
        )
        for h in history
    ]


def reference_shape(history: list[StateSnapshot]) -> list[tuple[Any, ...]]:
    """`history_shape` of LangGraph's own history."""
    place = {h.config["configurable"]["checkpoint_id"]: i for i, h in enumerate(history)}
    return [
        (
            h.metadata["source"] if h.metadata else None,
            h.metadata["step"] if h.metadata else None,
            list(h.next),
            [(m.type, m.content) for m in h.values.get("messages", [])],
            place.get((h.parent_config or {}).get("configurable", {}).get("checkpoint_id")),
            [len(t.interrupts) for t in h.tasks],
        )
        for h in history
    ]


def first_seen(history: list[dict[str, Any]], match: Callable[[dict[str, Any]], bool]) -> int:
    """The place in `history` (newest first) of the oldest state holding a message that
    `match`es: agent-chat-ui's `firstSeenState` of a message, whose parent it forks from."""
    return max(
        i for i, h in enumerate(history) if any(match(m) for m in h["values"].get("messages", []))
    )


async def test_a_run_from_an_earlier_checkpoint_forks_the_thread_as_langgraph_does(
    sdk: LangGraphClient,
) -> None:
    """agent-chat-ui's edit (new input from the checkpoint before a message), regenerate (no
    input, from the checkpoint before an answer) and a normal turn (which sends the latest
    checkpoint), each compared with LangGraph run in-process."""
    tid = (await sdk.threads.create())["thread_id"]
    reference = InProcess(chat)
    for text in ("one", "two"):
        await sdk.runs.wait(tid, "chat", input=human(text))
        await reference.run(human(text))
    history = await sdk.threads.get_history(tid, limit=100)
    assert history_shape(history) == reference_shape(await reference.history())
    old_head = history[0]["checkpoint"]

    # edit "two": the run starts at the parent of the first state that holds it
    edited = first_seen(history, lambda m: m["content"] == "two")
    fork = history[edited]["parent_checkpoint"]
    out = await sdk.runs.wait(tid, "chat", input=human("TWO"), checkpoint=fork)
    await reference.run(human("TWO"), await reference.parent_of(edited))
    assert messages_of(out) == [("human", "one"), ("ai", "one"), ("human", "TWO"), ("ai", "TWO")]
    assert messages_of((await sdk.threads.get_state(tid))["values"]) == messages_of(out)
    history = await sdk.threads.get_history(tid, limit=100)
    assert history_shape(history) == reference_shape(await reference.history())
    branch = [h for h in history if h["parent_checkpoint"] == fork]
    assert len(branch) == 2  # the old branch's and the new one's first checkpoint
    assert old_head in [h["checkpoint"] for h in history]  # the old branch stays in history

    # regenerate the last answer: no input, from the parent of the first state that holds it
    answer = out["messages"][-1]
    answered = first_seen(history, lambda m: m["id"] == answer["id"])
    given = history[answered]["parent_checkpoint"]["checkpoint_id"]
    parts = await collect(sdk.runs.stream(tid, "chat", checkpoint_id=given, stream_mode="values"))
    await reference.run(None, await reference.parent_of(answered))
    assert parts[-1].data["status"] == "success"
    regenerated = parts[-2].data["messages"]
    assert messages_of(parts[-2].data) == messages_of(out)
    assert regenerated[-1]["id"] != answer["id"]  # a new answer
    assert regenerated[:-1] == out["messages"][:-1]
    history = await sdk.threads.get_history(tid, limit=100)
    assert history_shape(history) == reference_shape(await reference.history())
    assert history[1]["metadata"]["source"] == "fork"
    assert history[1]["parent_checkpoint"]["checkpoint_id"] == given

    # a normal turn sends the latest checkpoint: as without it
    head = (await sdk.threads.get_state(tid))["checkpoint"]
    out = await sdk.runs.wait(tid, "chat", input=human("three"), checkpoint=head)
    await reference.run(human("three"))
    assert messages_of(out)[-2:] == [("human", "three"), ("ai", "three")]
    assert len(out["messages"]) == 6
    assert history_shape(await sdk.threads.get_history(tid, limit=100)) == reference_shape(
        await reference.history()
    )

    # a command (update, goto) from the checkpoint after the first answer
    update = {"messages": [{"type": "human", "content": "alt"}]}
    place = [h["metadata"]["step"] for h in history].index(1)
    out = await sdk.runs.wait(
        tid,
        "chat",
        command={"update": update, "goto": "respond"},
        checkpoint=history[place]["checkpoint"],
    )
    await reference.run(
        Command(update=update, goto="respond"),
        (await reference.history())[place + 3].config["configurable"]["checkpoint_id"],
    )
    assert messages_of(out) == [("human", "one"), ("ai", "one"), ("human", "alt"), ("ai", "alt")]
    assert history_shape(await sdk.threads.get_history(tid, limit=100)) == reference_shape(
        await reference.history()
    )


async def test_regenerate_as_agent_chat_ui_sends_it_has_no_input_key(
    server: ServerHandle, sdk: LangGraphClient
) -> None:
    """`stream.submit(undefined, {checkpoint})`: no `input`, the checkpoint object as the
    state gave it (with `thread_id` and `checkpoint_map`)."""
    tid = (await sdk.threads.create())["thread_id"]
    first = await sdk.runs.wait(tid, "chat", input=human("again"))
    history = await sdk.threads.get_history(tid, limit=100)
    checkpoint = history[first_seen(history, lambda m: m["type"] == "ai")]["parent_checkpoint"]
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        response = await http.post(
            f"/threads/{tid}/runs/wait", json={"assistant_id": "chat", "checkpoint": checkpoint}
        )
    assert response.status_code == 200, response.text
    out = response.json()
    assert messages_of(out) == [("human", "again"), ("ai", "again")]
    assert out["messages"][-1]["id"] != first["messages"][-1]["id"]
    assert len(await sdk.runs.list(tid)) == 2


async def test_a_checkpoint_the_thread_does_not_have_is_refused_and_records_nothing(
    sdk: LangGraphClient,
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("one"))
    other = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(other, "chat", input=human("other"))
    others = (await sdk.threads.get_state(other))["checkpoint"]
    refused: dict[str, tuple[int, dict[str, Any]]] = {
        "unknown checkpoint": (404, {"checkpoint_id": str(uuid.uuid4())}),
        "another thread's checkpoint": (404, {"checkpoint_id": others["checkpoint_id"]}),
        "not a uuid": (422, {"checkpoint_id": "latest"}),
        "a subgraph's namespace": (
            422,
            {"checkpoint": {"checkpoint_id": others["checkpoint_id"], "checkpoint_ns": "x"}},
        ),
        "another thread named": (422, {"checkpoint": others}),
    }
    for name, (status, body) in refused.items():
        for given in (body, {**body, "input": human("x")}):
            with pytest.raises(httpx.HTTPStatusError) as caught:
                await sdk.runs.create(tid, "chat", **given)
            assert caught.value.response.status_code == status, name
            assert caught.value.response.json()["detail"], name
    with pytest.raises(httpx.HTTPStatusError) as caught:  # a stateless run has no thread
        await sdk.runs.wait(None, "chat", input=human("x"), checkpoint_id=others["checkpoint_id"])
    assert caught.value.response.status_code == 422
    assert "stateless" in caught.value.response.json()["detail"]
    assert len(await sdk.runs.list(tid)) == 1
    assert len(await sdk.runs.list(other)) == 1


async def test_a_resume_takes_the_latest_checkpoint_and_refuses_an_earlier_one(
    sdk: LangGraphClient,
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "approval", input=human("buy milk"))
    state = await sdk.threads.get_state(tid)
    resume = {"resume": {"approve": True}}
    with pytest.raises(httpx.HTTPStatusError) as caught:
        await sdk.runs.create(
            tid, "approval", command=resume, checkpoint=state["parent_checkpoint"]
        )
    assert caught.value.response.status_code == 422
    assert "latest checkpoint" in caught.value.response.json()["detail"]
    assert (await sdk.threads.get(tid))["status"] == "interrupted"
    # useStream sends the thread's latest checkpoint with a resume
    out = await sdk.runs.wait(tid, "approval", command=resume, checkpoint=state["checkpoint"])
    assert [m["type"] for m in out["messages"]] == ["human", "ai", "tool", "ai"]
    assert (await sdk.threads.get(tid))["status"] == "idle"


async def test_command_goto_end_is_taken_and_leaves_the_thread_as_langgraph_does(
    sdk: LangGraphClient,
) -> None:
    """agent-chat-ui's "Mark as Resolved": `input: {}`, `command: {goto: END}`. To LangGraph
    the command schedules nothing, so the graph goes on from the thread's checkpoint: the
    interrupted node asks again, and nothing else changes."""
    tid = (await sdk.threads.create())["thread_id"]
    reference = InProcess(approval)
    await sdk.runs.wait(tid, "approval", input=human("buy milk"))
    await reference.run(human("buy milk"))
    before = await sdk.threads.get_state(tid)
    out = await sdk.runs.wait(tid, "approval", input={}, command={"goto": END})
    await reference.run(Command(goto=END))
    # `wait` shows each `Interrupt` as LangGraph streams it, the thread's state as it reads it
    assert [as_read(i) for i in out["__interrupt__"]] == before["interrupts"]
    after = await sdk.threads.get_state(tid)
    assert (await sdk.threads.get(tid))["status"] == "interrupted"
    assert after["interrupts"] == before["interrupts"]
    assert after["values"] == before["values"] and after["next"] == ["confirm_and_run"]
    assert history_shape(await sdk.threads.get_history(tid, limit=100)) == reference_shape(
        await reference.history()
    )
    run = (await sdk.runs.list(tid))[0]
    assert run["status"] == "success" and run["kwargs"]["command"] == {"goto": [END]}
    # the interrupt still takes its answer
    out = await sdk.runs.wait(tid, "approval", command={"resume": {"approve": False}})
    assert [m["type"] for m in out["messages"]] == ["human", "ai", "tool", "ai"]
    # on a finished thread, nothing runs and nothing changes
    chat_tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(chat_tid, "chat", input=human("one"))
    history = await sdk.threads.get_history(chat_tid, limit=100)
    await sdk.runs.wait(chat_tid, "chat", command={"goto": END})
    assert await sdk.threads.get_history(chat_tid, limit=100) == history
    with pytest.raises(httpx.HTTPStatusError) as caught:  # a Send to END is not a node
        await sdk.runs.create(chat_tid, "chat", command={"goto": {"node": END, "input": {}}})
    assert caught.value.response.status_code == 422


# -- cancel and multitask ------------------------------------------------------------------------


async def started_answering(sdk: LangGraphClient, tid: str, rid: str) -> None:
    """Returns once the run streamed its first chunk."""
    async with contextlib.aclosing(
        sdk.runs.join_stream(tid, rid, stream_mode="messages-tuple")  # type: ignore[type-var]
    ) as parts:
        async for part in parts:
            if part.event == "messages":
                return
    raise AssertionError("the run ended before it streamed")


TUPLES: dict[str, Any] = {"stream_mode": "messages-tuple"}  # `started_answering` reads it


async def state_at_work(sdk: LangGraphClient, tid: str) -> Any:
    """The thread's state once its running run's checkpoint names the node at work: with
    async durability that checkpoint is written while the node runs, so the first token can
    come before it."""
    deadline = time.monotonic() + 10
    while not (state := await sdk.threads.get_state(tid))["next"]:
        assert time.monotonic() < deadline, state
        await asyncio.sleep(0.05)
    return state


async def test_a_busy_thread_shows_the_values_its_last_run_left_and_its_state_the_running_one(
    sdk: LangGraphClient,
) -> None:
    """As on LangGraph's server: while a run goes on, `threads.get` (and `threads.search`)
    hold the values as the thread's last run left them (none on a first run), where its state
    and history show the running run's checkpoints (agent-chat-ui reads those)."""
    tid = (await sdk.threads.create())["thread_id"]
    first = await sdk.runs.create(tid, "chat", input=human(words(30)), config=slow(), **TUPLES)
    await started_answering(sdk, tid, first["run_id"])
    busy = await sdk.threads.get(tid)
    assert busy["status"] == "busy" and busy["values"] is None, busy
    state = await state_at_work(sdk, tid)
    assert [m["type"] for m in state["values"]["messages"]] == ["human"]
    assert state["next"] and not state["interrupts"]
    await sdk.runs.join(tid, first["run_id"])
    done = (await sdk.threads.get(tid))["values"]
    assert [m["type"] for m in done["messages"]] == ["human", "ai"]

    second = await sdk.runs.create(
        tid, "chat", input=human(words(30, "x")), config=slow(), **TUPLES
    )
    await started_answering(sdk, tid, second["run_id"])
    busy = await sdk.threads.get(tid)
    assert busy["status"] == "busy" and busy["values"] == done, busy
    [found] = await sdk.threads.search(ids=[tid])
    assert found["values"] == done
    await state_at_work(sdk, tid)
    history = await sdk.threads.get_history(tid, limit=1)
    assert [m["type"] for m in history[0]["values"]["messages"]] == ["human", "ai", "human"]
    assert history[0]["next"]
    await sdk.runs.join(tid, second["run_id"])
    after = (await sdk.threads.get(tid))["values"]
    assert [m["type"] for m in after["messages"]] == ["human", "ai", "human", "ai"]


async def test_cancel_with_wait_leaves_the_run_interrupted(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    run = await sdk.runs.create(
        tid, "chat", input=human(words(200)), stream_mode="messages-tuple", config=slow()
    )
    await started_answering(sdk, tid, run["run_id"])
    # LangGraph's answer: what the run streamed after the cancel, nothing (`{}`), once it ended
    assert await sdk.runs.cancel(tid, run["run_id"], wait=True) == {}
    assert (await sdk.runs.get(tid, run["run_id"]))["status"] == "interrupted"
    with pytest.raises(NotFoundError):  # it is over: nothing left to cancel
        await sdk.runs.cancel(tid, run["run_id"])
    parts = await collect(sdk.runs.join_stream(tid, run["run_id"], last_event_id="-1"))
    assert parts[-1].data == {"run_id": run["run_id"], "status": "interrupted"}


async def test_cancel_many_cancels_a_threads_runs_by_id_and_the_callers_by_status(
    sdk: LangGraphClient,
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    running = await sdk.runs.create(tid, "chat", input=human(words(200)), config=slow())
    queued = await sdk.runs.create(tid, "chat", input=human("later"))
    await status_is(sdk, tid, running["run_id"], "running")
    with pytest.raises(NotFoundError):  # no id the caller's: nothing is cancelled
        await sdk.runs.cancel_many(thread_id=tid, run_ids=[str(uuid.uuid4())])
    assert (await sdk.runs.get(tid, queued["run_id"]))["status"] == "pending"
    # an unknown id among known ones is skipped, as LangGraph skips it
    ids = [running["run_id"], queued["run_id"], str(uuid.uuid4())]
    await sdk.runs.cancel_many(thread_id=tid, run_ids=ids)
    await status_is(sdk, tid, running["run_id"], "interrupted")
    await status_is(sdk, tid, queued["run_id"], "interrupted")
    # by status: the pending ones only
    other = (await sdk.threads.create())["thread_id"]
    first = await sdk.runs.create(other, "chat", input=human(words(200)), config=slow())
    second = await sdk.runs.create(other, "chat", input=human("later"))
    await status_is(sdk, other, first["run_id"], "running")
    await sdk.runs.cancel_many(status="pending")
    await status_is(sdk, other, second["run_id"], "interrupted")
    assert (await sdk.runs.get(other, first["run_id"]))["status"] == "running"
    await sdk.runs.cancel_many(status="running", action="rollback")
    await eventually(
        lambda: _gone(sdk, other, first["run_id"]), "the rolled-back run to be deleted"
    )
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await sdk.runs.cancel_many()
    assert refused.value.response.status_code == 422


async def test_deleting_a_thread_cancels_its_queued_and_running_runs_and_fences_the_worker(
    sdk: LangGraphClient, settings: Settings
) -> None:
    """As observed on `langgraph dev` (langgraph-api 0.16.7): the delete of a thread with a
    running and a queued run is 204; the running run's viewer gets the end of its stream (an
    `error` "404: Run not found" there, the cancellation here); `runs.get` of either is 404.
    The worker still running it writes nothing after the delete: no checkpoint of the thread
    reappears."""
    tid = (await sdk.threads.create())["thread_id"]
    running = await sdk.runs.create(tid, "chat", input=human(words(200)), config=slow(50))
    queued = await sdk.runs.create(tid, "chat", input=human("later"))
    await status_is(sdk, tid, running["run_id"], "running")
    seen: dict[str, list[StreamPart]] = {running["run_id"]: [], queued["run_id"]: []}
    attached = asyncio.Event()

    async def watch(run_id: str) -> None:
        async for part in sdk.runs.join_stream(tid, run_id):
            seen[run_id].append(part)
            if run_id == running["run_id"]:
                attached.set()

    watchers = [asyncio.create_task(watch(run_id)) for run_id in seen]
    await asyncio.wait_for(attached.wait(), 10)

    await sdk.threads.delete(tid)  # 204, where it was 409

    await asyncio.wait_for(asyncio.gather(*watchers), 10)  # both viewers got the end
    for run_id, parts in seen.items():  # cancelled: LangGraph's `interrupted`
        assert (parts[-1].event, parts[-1].data) == (
            "end",
            {"run_id": run_id, "status": "interrupted"},
        )
    for run_id in seen:
        with pytest.raises(NotFoundError):
            await sdk.runs.get(tid, run_id)
    with pytest.raises(NotFoundError):
        await sdk.threads.get(tid)
    await asyncio.sleep(1.5)  # the worker had time to write (it would, at 50 ms a token)

    async with await schema_connection(settings) as conn:
        for table in ("checkpoints", "checkpoint_writes", "runstream_runs"):
            cur = await conn.execute(f"SELECT count(*) FROM {table} WHERE thread_id = %s", (tid,))
            row = await cur.fetchone()
            assert row is not None and row[0] == 0, table
    # the worker is free for the next run
    other = (await sdk.threads.create())["thread_id"]
    assert (await sdk.runs.wait(other, "chat", input=human("next")))["messages"]


async def _gone(sdk: LangGraphClient, tid: str, rid: str) -> bool:
    try:
        await sdk.runs.get(tid, rid)
    except NotFoundError:
        return True
    return False


async def test_a_stream_closed_by_its_client_cancels_the_run_with_on_disconnect_cancel(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    parts = []
    async with contextlib.aclosing(
        sdk.runs.stream(  # type: ignore[type-var]
            tid,
            "chat",
            input=human(words(200)),
            stream_mode="messages-tuple",
            config=slow(),
            on_disconnect="cancel",
        )
    ) as stream:
        async for part in stream:
            parts.append(part)
            if part.event == "messages":
                break
    await status_is(sdk, tid, parts[0].data["run_id"], "interrupted")
    kept = await sdk.threads.create()  # the default, `continue`, lets the run go on
    await collect(
        sdk.runs.stream(
            kept["thread_id"], "chat", input=human(words(20)), config=slow(5), stream_mode="values"
        ),
        limit=2,
    )
    [run] = await sdk.runs.list(kept["thread_id"])
    assert (await sdk.runs.join(kept["thread_id"], run["run_id"]))["messages"][-1]["content"] == (
        words(20)
    )
    assert (await sdk.runs.get(kept["thread_id"], run["run_id"]))["status"] == "success"


async def test_a_stream_the_server_cuts_at_shutdown_leaves_an_on_disconnect_cancel_run_going(
    start_server: StartServer, start_worker: StartWorker
) -> None:
    """Only a client that goes away cancels its run: a server that stops cuts the stream so
    that the client reconnects (to another server), and the run goes on."""
    staying, stopping = await start_server(), await start_server()
    await start_worker()
    sdk = client_for(staying.url)
    tid = (await sdk.threads.create())["thread_id"]
    body = {
        "assistant_id": "chat",
        "input": human(words(60)),
        "stream_mode": ["messages-tuple"],
        "config": slow(),
        "on_disconnect": "cancel",
    }
    async with (
        httpx.AsyncClient(base_url=stopping.url, timeout=30) as http,
        http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as answer,
    ):
        assert answer.status_code == 200
        lines = answer.aiter_lines()
        while "messages" not in await anext(lines):
            pass
        # as `runstream serve` does on SIGTERM (server/processes/commands.py), then stops
        stopping.app.state.resources.follower.close_all()
        with contextlib.suppress(httpx.HTTPError, StopAsyncIteration):
            async for _ in lines:
                pass
    await stopping.stop()
    [run] = await sdk.runs.list(tid)
    await status_is(sdk, tid, run["run_id"], "success")
    assert (await sdk.runs.join(tid, run["run_id"]))["messages"][-1]["content"] == words(60)


async def test_multitask_reject_enqueue_and_interrupt(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    busy = await sdk.runs.create(
        tid, "chat", input=human(words(60)), stream_mode="messages-tuple", config=slow()
    )
    await started_answering(sdk, tid, busy["run_id"])
    with pytest.raises(ConflictError):
        await sdk.runs.create(tid, "chat", input=human("no"), multitask_strategy="reject")
    queued = await sdk.runs.create(tid, "chat", input=human("queued"), multitask_strategy="enqueue")
    assert (await sdk.runs.get(tid, queued["run_id"]))["status"] == "pending"
    assert (await sdk.runs.get(tid, busy["run_id"]))["status"] == "running"
    await sdk.runs.join(tid, queued["run_id"])
    assert (await sdk.runs.get(tid, busy["run_id"]))["status"] == "success"
    assert (await sdk.runs.get(tid, queued["run_id"]))["status"] == "success"
    # the queued run started after the busy one ended: its answer comes after the other's
    values = (await sdk.threads.get_state(tid))["values"]
    assert messages_of(values)[-2:] == [("human", "queued"), ("ai", "queued")]
    assert messages_of(values)[1] == ("ai", words(60))

    long = await sdk.runs.create(
        tid, "chat", input=human(words(200)), stream_mode="messages-tuple", config=slow()
    )
    await started_answering(sdk, tid, long["run_id"])
    taking_over = await sdk.runs.create(
        tid, "chat", input=human("interrupting"), multitask_strategy="interrupt"
    )
    joined = await sdk.runs.join(tid, taking_over["run_id"])
    assert (await sdk.runs.get(tid, long["run_id"]))["status"] == "interrupted"
    assert (await sdk.runs.get(tid, taking_over["run_id"]))["status"] == "success"
    assert messages_of(joined)[-1] == ("ai", "interrupting")


async def test_multitask_rollback_removes_the_running_run_and_what_it_wrote(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("first"))
    long = await sdk.runs.create(
        tid, "chat", input=human(words(200)), stream_mode="messages-tuple", config=slow()
    )
    await started_answering(sdk, tid, long["run_id"])
    after = await sdk.runs.create(tid, "chat", input=human("after"), multitask_strategy="rollback")
    joined = await sdk.runs.join(tid, after["run_id"])
    with pytest.raises(NotFoundError):  # LangGraph deletes a rolled-back run
        await sdk.runs.get(tid, long["run_id"])
    expected = [("human", "first"), ("ai", "first"), ("human", "after"), ("ai", "after")]
    assert messages_of(joined) == expected
    assert messages_of((await sdk.threads.get_state(tid))["values"]) == expected
    listed = [r["run_id"] for r in await sdk.runs.list(tid)]
    assert after["run_id"] in listed and long["run_id"] not in listed


async def test_cancel_with_rollback_puts_the_thread_back_as_it_was(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("kept"))
    before = await sdk.threads.get_state(tid)
    run = await sdk.runs.create(
        tid, "chat", input=human(words(200)), stream_mode="messages-tuple", config=slow()
    )
    await started_answering(sdk, tid, run["run_id"])
    await sdk.runs.cancel(tid, run["run_id"], wait=True, action="rollback")
    with pytest.raises(NotFoundError):
        await sdk.runs.get(tid, run["run_id"])
    after = await sdk.threads.get_state(tid)
    assert after["checkpoint"] == before["checkpoint"]
    assert messages_of(after["values"]) == [("human", "kept"), ("ai", "kept")]
    assert (await sdk.threads.get(tid))["status"] == "idle"


async def test_thread_status_is_langgraphs_after_a_cancel_mid_step_and_an_error(
    sdk: LangGraphClient,
) -> None:
    suite = {"suite": str(uuid.uuid4())}
    cancelled = (await sdk.threads.create(metadata=suite))["thread_id"]
    failed = (await sdk.threads.create(metadata=suite))["thread_id"]
    run = await sdk.runs.create(
        cancelled, "chat", input=human(words(200)), stream_mode="messages-tuple", config=slow()
    )
    await started_answering(sdk, cancelled, run["run_id"])
    assert (await sdk.threads.get(cancelled))["status"] == "busy"
    await sdk.runs.cancel(cancelled, run["run_id"], wait=True)
    # LangGraph: a cancelled run leaves its step to do, so the thread is `interrupted`
    thread = await sdk.threads.get(cancelled)
    assert thread["status"] == "interrupted" and thread["interrupts"] == {}
    assert (await sdk.threads.get_state(cancelled))["next"] == ["respond"]
    # the approval graph's confirm step fails without a proposed call: the thread is `error`
    out = await sdk.runs.wait(
        failed,
        "approval",
        command={"update": {"messages": ["hi"]}, "goto": "confirm_and_run"},
        raise_error=False,
    )
    assert out["__error__"]["error"] == "AssertionError"
    assert (await sdk.threads.get(failed))["status"] == "error"
    # search and count filter on the same statuses
    found = await sdk.threads.search(metadata=suite, status="interrupted")
    assert [t["thread_id"] for t in found] == [cancelled]
    assert [t["thread_id"] for t in await sdk.threads.search(metadata=suite, status="error")] == [
        failed
    ]
    assert await sdk.threads.count(metadata=suite, status="idle") == 0
    # a run that finishes puts each back to `idle`
    await sdk.runs.wait(cancelled, "chat", input=human("again"))
    await sdk.runs.wait(failed, "chat", input=human("again"))
    assert await sdk.threads.count(metadata=suite, status="idle") == 2
    assert (await sdk.threads.get(cancelled))["status"] == "idle"


async def test_update_state_writes_a_checkpoint_the_next_run_starts_from(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("first"))
    before = await sdk.threads.get_state(tid)
    written = await sdk.threads.update_state(
        tid, {"messages": [{"role": "user", "content": "added"}]}, as_node="respond"
    )
    assert written["checkpoint"]["thread_id"] == tid
    state = await sdk.threads.get_state(tid)
    assert state["checkpoint"]["checkpoint_id"] == written["checkpoint"]["checkpoint_id"]
    assert state["parent_checkpoint"]["checkpoint_id"] == before["checkpoint"]["checkpoint_id"]
    assert messages_of(state["values"])[-1] == ("human", "added")
    assert state["next"] == []  # as if `respond` had just run: the graph is at its end
    out = await sdk.runs.wait(tid, "chat", input=human("next"))
    assert [c for _, c in messages_of(out)] == ["first", "first", "added", "next", "next"]
    # from an earlier checkpoint: a fork, the latest state is the fork's
    forked = await sdk.threads.update_state(
        tid, {"messages": ["forked"]}, as_node="respond", checkpoint=before["checkpoint"]
    )
    fork = await sdk.threads.get_state(tid)
    assert fork["checkpoint"]["checkpoint_id"] == forked["checkpoint"]["checkpoint_id"]
    assert [c for _, c in messages_of(fork["values"])] == ["first", "first", "forked"]


@contextlib.asynccontextmanager
async def paused_state_writes(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[asyncio.Event]:
    """State writes wait, holding the thread's locks, until the yielded event is set; the
    event's `entered` attribute is set once one holds them."""
    original = ThreadRecords.hold_for_state_write
    release = asyncio.Event()
    entered = asyncio.Event()

    @contextlib.asynccontextmanager
    async def paused(
        self: ThreadRecords, thread_id: str, owner: str, quota: Any = None
    ) -> AsyncIterator[Any]:
        async with original(self, thread_id, owner, quota) as held:
            entered.set()
            await release.wait()
            yield held

    monkeypatch.setattr(ThreadRecords, "hold_for_state_write", paused)
    release.entered = entered  # type: ignore[attr-defined]
    try:
        yield release
    finally:
        release.set()


async def test_a_run_submitted_during_update_state_starts_from_the_updated_state(
    sdk: LangGraphClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("first"))
    async with paused_state_writes(monkeypatch) as release:
        update = asyncio.create_task(
            sdk.threads.update_state(tid, {"messages": ["added"]}, as_node="respond")
        )
        await release.entered.wait()  # type: ignore[attr-defined]
        run = asyncio.create_task(sdk.runs.wait(tid, "chat", input=human("next")))
        await asyncio.sleep(0.5)
        assert not run.done()  # its submit waits for the update to commit
        release.set()
        await update
        out = await run
    # the run read the thread after the update: nothing of either is lost
    assert [c for _, c in messages_of(out)] == ["first", "first", "added", "next", "next"]


async def test_update_state_refuses_bad_values_a_busy_thread_and_a_thread_without_graph(
    sdk: LangGraphClient,
) -> None:
    empty = (await sdk.threads.create())["thread_id"]
    with pytest.raises(BadRequestError):  # 400, as LangGraph's server answers
        await sdk.threads.update_state(empty, {"messages": ["x"]})
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("first"))
    before = await sdk.threads.get_state(tid)
    bad: dict[str, dict[str, Any]] = {
        "unknown key": {"values": {"todos": []}},
        "unknown node": {"values": {"messages": ["x"]}, "as_node": "nowhere"},
        "bad message": {"values": {"messages": [{"type": "robot", "content": "x"}]}},
        "bad checkpoint": {"values": {"messages": ["x"]}, "checkpoint_id": "not-a-uuid"},
    }
    for name, body in bad.items():
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await sdk.threads.update_state(tid, **body)
        assert refused.value.response.status_code == 422, name
    with pytest.raises(NotFoundError):
        await sdk.threads.update_state(
            tid, {"messages": ["x"]}, as_node="respond", checkpoint_id=str(uuid.uuid4())
        )
    run = await sdk.runs.create(tid, "chat", input=human(words(100)), config=slow())
    with pytest.raises(ConflictError):
        await sdk.threads.update_state(tid, {"messages": ["x"]}, as_node="respond")
    await sdk.runs.cancel(tid, run["run_id"], wait=True, action="rollback")

    async def rolled_back() -> bool:
        return (await sdk.threads.get_state(tid))["checkpoint"] == before["checkpoint"]

    await eventually(rolled_back, "the refused updates and the rolled-back run to leave no trace")


# -- update_state on an interrupted thread, then a resume ----------------------------------------


async def interrupted_thread(sdk: LangGraphClient, text: str = "buy milk") -> dict[str, Any]:
    """The state of a new `approval` thread that waits at its interrupt about `text`."""
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "approval", input=human(text))
    return await sdk.threads.get_state(tid)


def edited_proposal(state: dict[str, Any], content: str) -> dict[str, Any]:
    """The proposed `save_note` call with other arguments, under the same message id (so the
    `messages` reducer replaces the proposal rather than adding one)."""
    proposal = state["values"]["messages"][-1]
    call = {**proposal["tool_calls"][0], "args": {"content": content}}
    return {**proposal, "tool_calls": [call]}


def history_steps(history: list[dict[str, Any]]) -> list[tuple[str, int, list[str]]]:
    return [(h["metadata"]["source"], h["metadata"]["step"], h["next"]) for h in history]


@pytest.mark.parametrize("as_node", ["propose", None])
async def test_resume_after_update_state_sees_the_edited_state(
    sdk: LangGraphClient, as_node: str | None
) -> None:
    asked = await interrupted_thread(sdk)
    tid = asked["checkpoint"]["thread_id"]
    call_id = asked["values"]["messages"][-1]["tool_calls"][0]["id"]
    # without as_node LangGraph takes the node that wrote last: `propose`, as named
    written = await sdk.threads.update_state(
        tid, {"messages": [edited_proposal(asked, "eggs")]}, as_node=as_node
    )
    state = await sdk.threads.get_state(tid)
    # as LangGraph gives it: a checkpoint after the interrupted one, with `confirm_and_run` to
    # run again and its question not asked yet (the interrupt belonged to the checkpoint before)
    assert state["checkpoint"]["checkpoint_id"] == written["checkpoint"]["checkpoint_id"]
    assert state["parent_checkpoint"] == asked["checkpoint"]
    assert state["metadata"]["source"] == "update"
    assert state["next"] == ["confirm_and_run"]
    assert [(t["name"], t["interrupts"]) for t in state["tasks"]] == [("confirm_and_run", [])]
    assert state["interrupts"] == []
    assert [m["id"] for m in state["values"]["messages"]] == [
        m["id"] for m in asked["values"]["messages"]
    ]
    assert state["values"]["messages"][-1]["tool_calls"][0]["args"] == {"content": "eggs"}
    thread = await sdk.threads.get(tid)
    assert (thread["status"], thread["interrupts"]) == ("interrupted", {})

    parts = await collect(
        sdk.runs.stream(
            tid, "approval", command={"resume": {"approve": True}}, stream_mode=["values", "custom"]
        )
    )
    assert parts[-1].data["status"] == "success"
    assert [p.data for p in parts if p.event == "custom"] == [
        {"tool": "save_note", "tool_call_id": call_id, "executed": True, "replayed": False}
    ]
    final = [p.data for p in parts if p.event == "values"][-1]
    assert messages_of(final) == [
        ("human", "buy milk"),
        ("ai", ""),
        ("tool", "saved note (4 characters)"),  # "eggs", the edited call
        ("ai", "buy milk"),
    ]
    assert (await sdk.threads.get(tid))["status"] == "idle"
    # the history LangGraph keeps for it: the update is a step of its own, between the
    # interrupt's checkpoint and the resumed run's
    assert history_steps(await sdk.threads.get_history(tid)) == [
        ("loop", 4, []),
        ("loop", 3, ["propose"]),
        ("update", 2, ["confirm_and_run"]),
        ("loop", 1, ["confirm_and_run"]),
        ("loop", 0, ["propose"]),
        ("input", -1, ["__start__"]),
    ]


async def test_update_state_as_the_interrupted_node_answers_it_and_a_resume_goes_on_from_there(
    sdk: LangGraphClient,
) -> None:
    asked = await interrupted_thread(sdk)
    tid = asked["checkpoint"]["thread_id"]
    call_id = asked["values"]["messages"][-1]["tool_calls"][0]["id"]
    answer = {"type": "tool", "content": "done by hand", "tool_call_id": call_id}
    await sdk.threads.update_state(tid, {"messages": [answer]}, as_node="confirm_and_run")
    state = await sdk.threads.get_state(tid)
    # the interrupted node counts as run: nothing waits for an answer, `propose` is next
    assert state["next"] == ["propose"] and state["interrupts"] == []
    thread = await sdk.threads.get(tid)
    assert (thread["status"], thread["interrupts"]) == ("interrupted", {})  # LangGraph: a next step
    # A resume then answers nothing: LangGraph takes a single resume value with no interrupt
    # waiting (it may be a breakpoint's) and goes on from the thread's state; the tool never runs.
    parts = await collect(
        sdk.runs.stream(
            tid, "approval", command={"resume": {"approve": True}}, stream_mode=["values", "custom"]
        )
    )
    assert parts[-1].data["status"] == "success"
    assert [p for p in parts if p.event == "custom"] == []
    final = [p.data for p in parts if p.event == "values"][-1]
    assert messages_of(final) == [
        ("human", "buy milk"),
        ("ai", ""),
        ("tool", "done by hand"),
        ("ai", "buy milk"),
    ]
    assert (await sdk.threads.get(tid))["status"] == "idle"
    # the run went on from the update (`propose`, step 3), not from the start again
    assert history_steps(await sdk.threads.get_history(tid))[:2] == [
        ("loop", 3, []),
        ("update", 2, ["propose"]),
    ]
    # ... and the answer is not kept for a question asked later in the run
    asked = await interrupted_thread(sdk)
    tid = asked["checkpoint"]["thread_id"]
    call_id = asked["values"]["messages"][-1]["tool_calls"][0]["id"]
    skipped = {"type": "tool", "content": "skipped", "tool_call_id": call_id}
    await sdk.threads.update_state(
        tid,
        {"messages": [skipped, {"type": "human", "content": "bread"}]},
        as_node="confirm_and_run",
    )
    out = await sdk.runs.wait(tid, "approval", command={"resume": {"approve": True}})
    [interrupt] = out["__interrupt__"]
    assert interrupt["value"]["action_requests"][0]["args"] == {"content": "bread"}
    after = await sdk.threads.get_state(tid)
    assert after["next"] == ["confirm_and_run"]
    assert after["interrupts"] == [as_read(interrupt)]
    assert [m["type"] for m in after["values"]["messages"]] == [
        "human",
        "ai",
        "tool",
        "human",
        "ai",
    ]


async def test_resume_naming_an_interrupt_that_update_state_replaced_asks_again(
    sdk: LangGraphClient,
) -> None:
    asked = await interrupted_thread(sdk)
    tid = asked["checkpoint"]["thread_id"]
    [old] = asked["interrupts"]
    await sdk.threads.update_state(tid, {"messages": [edited_proposal(asked, "eggs")]})
    # LangGraph ignores an answer to an interrupt that no longer waits (unless `strict_resume`):
    # `confirm_and_run` asks about the edited call under a new id, and nothing runs
    parts = await collect(
        sdk.runs.stream(
            tid,
            "approval",
            command={"resume": {old["id"]: {"approve": True}}},
            stream_mode=["updates", "custom"],
        )
    )
    assert parts[-1].data["status"] == "success"
    assert [p for p in parts if p.event == "custom"] == []
    [interrupt] = parts[-2].data["__interrupt__"]
    assert interrupt["id"] != old["id"]
    assert interrupt["value"]["action_requests"][0]["args"] == {"content": "eggs"}
    thread = await sdk.threads.get(tid)
    assert thread["status"] == "interrupted"
    assert list(thread["interrupts"].values()) == [[as_read(interrupt)]]
    out = await sdk.runs.wait(
        tid, "approval", command={"resume": {interrupt["id"]: {"approve": True}}}
    )
    assert messages_of(out)[2] == ("tool", "saved note (4 characters)")


async def test_update_state_that_ends_the_graph_leaves_the_thread_idle_and_nothing_to_resume(
    sdk: LangGraphClient,
) -> None:
    asked = await interrupted_thread(sdk)
    tid = asked["checkpoint"]["thread_id"]
    proposal = asked["values"]["messages"][-1]
    instead = {"type": "ai", "content": "never mind", "id": proposal["id"]}
    await sdk.threads.update_state(tid, {"messages": [instead]}, as_node="propose")
    state = await sdk.threads.get_state(tid)
    assert state["next"] == [] and state["interrupts"] == []
    # LangGraph sets a thread's status from its checkpoint on update_state: nothing next, idle
    assert (await sdk.threads.get(tid))["status"] == "idle"
    out = await sdk.runs.wait(tid, "approval", command={"resume": {"approve": True}})
    assert messages_of(out) == [("human", "buy milk"), ("ai", "never mind")]
    assert (await sdk.threads.get_state(tid))["checkpoint"] == state["checkpoint"]  # nothing ran
    assert (await sdk.threads.get(tid))["status"] == "idle"


async def v1_interrupted_run(client: httpx.AsyncClient, text: str = "buy milk") -> dict[str, Any]:
    """A `/v1` run of the approval graph, waiting at its interrupt."""
    body = {"graph": "approval", "input": {"messages": [{"role": "user", "content": text}]}}
    run = (await client.post("/v1/runs", json=body)).json()

    async def interrupted() -> bool:
        return (await client.get(f"/v1/runs/{run['run_id']}")).json()["status"] == "interrupted"

    await eventually(interrupted, "the /v1 run to wait at its interrupt")
    return run


async def v1_events(client: httpx.AsyncClient, run_id: str) -> list[Any]:
    """The run's `/v1` events to its end (which must come within 20 s)."""
    return await asyncio.wait_for(read_events(client, f"/v1/runs/{run_id}/events"), timeout=20)


async def test_v1_resume_after_a_langgraph_update_state_continues_the_run_with_the_edited_state(
    sdk: LangGraphClient, client: httpx.AsyncClient
) -> None:
    run = await v1_interrupted_run(client)
    url = f"/v1/runs/{run['run_id']}"
    asked = await sdk.threads.get_state(run["thread_id"])
    call_id = asked["values"]["messages"][-1]["tool_calls"][0]["id"]
    await sdk.threads.update_state(
        run["thread_id"], {"messages": [edited_proposal(asked, "eggs")]}, as_node="propose"
    )
    assert (await client.get(url)).json()["status"] == "interrupted"  # still waits for its answer
    resumed = await client.post(f"{url}/resume", json={"resume": {"approve": True}})
    assert resumed.status_code == 202 and resumed.json()["run_id"] == run["run_id"]
    events = await v1_events(client, run["run_id"])
    statuses = [e.data["status"] for e in events if e.event == "run"]
    assert statuses == ["queued", "running", "interrupted", "queued", "running", "succeeded"]
    assert [e.data for e in events if e.event == "custom"] == [
        {"tool": "save_note", "tool_call_id": call_id, "executed": True, "replayed": False}
    ]
    tool = [e.data["message"] for e in events if e.event == "message"][-2]
    assert (tool["role"], tool["content"]) == ("tool", "saved note (4 characters)")
    assert events[-1].data["status"] == "succeeded"
    assert events[-1].data["output"]["content"] == "buy milk"
    final = await sdk.threads.get_state(run["thread_id"])
    assert final["next"] == [] and final["values"]["messages"][1]["tool_calls"][0]["args"] == {
        "content": "eggs"
    }


async def test_a_v1_resume_sent_during_update_state_goes_on_from_the_updated_state(
    sdk: LangGraphClient, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await v1_interrupted_run(client)
    url = f"/v1/runs/{run['run_id']}"
    asked = await sdk.threads.get_state(run["thread_id"])
    async with paused_state_writes(monkeypatch) as release:
        update = asyncio.create_task(
            sdk.threads.update_state(
                run["thread_id"], {"messages": [edited_proposal(asked, "eggs")]}, as_node="propose"
            )
        )
        await release.entered.wait()  # type: ignore[attr-defined]
        resume = asyncio.create_task(
            client.post(f"{url}/resume", json={"resume": {"approve": True}})
        )
        await asyncio.sleep(0.5)
        assert not resume.done()  # it waits for the update to commit
        release.set()
        await update
        assert (await resume).status_code == 202
    events = await v1_events(client, run["run_id"])
    tool = [e.data["message"] for e in events if e.event == "message"][-2]
    assert (tool["role"], tool["content"]) == ("tool", "saved note (4 characters)")  # "eggs"
    assert events[-1].data["status"] == "succeeded"


async def test_a_resume_records_the_id_of_the_question_it_answers(
    sdk: LangGraphClient, client: httpx.AsyncClient, settings: Settings, worker: Any
) -> None:
    """What runner/graph_input.py needs to tell, on a retry, whether the graph took the answer
    (tests/test_retry_input.py): the question's id, on both APIs. The resumes are read while
    they wait in the queue (the worker stopped first): a finished run no longer keeps its
    `resume`, and the approval graph's answer takes the worker a few milliseconds."""

    async def recorded(run_id: str) -> tuple[Any, Any]:
        async with await schema_connection(settings) as conn:
            cur = await conn.execute(
                "SELECT interrupt_id, resume FROM runstream_runs WHERE run_id = %s", (run_id,)
            )
            row = await cur.fetchone()
        assert row is not None
        return row[0], row[1]

    run = await v1_interrupted_run(client)
    question = (await sdk.threads.get_state(run["thread_id"]))["interrupts"][0]["id"]
    assert await recorded(run["run_id"]) == (question, None)
    asked = await interrupted_thread(sdk)
    tid = asked["checkpoint"]["thread_id"]
    await stop_worker(worker)

    await client.post(f"/v1/runs/{run['run_id']}/resume", json={"resume": {"approve": True}})
    interrupt_id, resume = await recorded(run["run_id"])
    assert interrupt_id is None and resume["interrupt_id"] == question
    assert resume["value"] == {"approve": True}
    # a LangGraph resume is a new run: it takes the question of the run it supersedes
    resumed = await sdk.runs.create(tid, "approval", command={"resume": {"approve": False}})
    _, resume = await recorded(resumed["run_id"])
    assert resume == {"value": {"approve": False}, "interrupt_id": asked["interrupts"][0]["id"]}


async def test_v1_run_after_update_state_as_the_interrupted_node_or_to_the_end(
    sdk: LangGraphClient, client: httpx.AsyncClient
) -> None:
    # as the interrupted node: the run still waits (the graph has a next step), and its resume
    # goes on from the update, as LangGraph's would: the answer finds no question
    run = await v1_interrupted_run(client)
    url = f"/v1/runs/{run['run_id']}"
    asked = await sdk.threads.get_state(run["thread_id"])
    call_id = asked["values"]["messages"][-1]["tool_calls"][0]["id"]
    answer = {"type": "tool", "content": "done by hand", "tool_call_id": call_id}
    await sdk.threads.update_state(
        run["thread_id"], {"messages": [answer]}, as_node="confirm_and_run"
    )
    assert (await client.get(url)).json()["status"] == "interrupted"
    await client.post(f"{url}/resume", json={"resume": {"approve": True}})
    events = await v1_events(client, run["run_id"])
    assert [e for e in events if e.event == "custom"] == []
    assert events[-1].data["status"] == "succeeded"
    assert events[-1].data["output"]["content"] == "buy milk"
    # to the graph's end: nothing is left to resume, so the waiting run ends (`succeeded`, no
    # output) and a resume is refused
    run = await v1_interrupted_run(client)
    url = f"/v1/runs/{run['run_id']}"
    asked = await sdk.threads.get_state(run["thread_id"])
    instead = {"type": "ai", "content": "never mind", "id": asked["values"]["messages"][-1]["id"]}
    await sdk.threads.update_state(run["thread_id"], {"messages": [instead]}, as_node="propose")
    events = await v1_events(client, run["run_id"])
    assert [(e.event, e.data) for e in events[-2:]] == [
        ("run", {"status": "succeeded", "attempt": 1}),
        ("done", {"status": "succeeded", "output": None}),
    ]
    assert (await client.get(url)).json()["status"] == "succeeded"
    refused = await client.post(f"{url}/resume", json={"resume": {"approve": True}})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "run_not_interrupted"
    assert (await client.get(f"/v1/threads/{run['thread_id']}")).json()["status"] == "idle"


ITEMS_GRAPHS = """
import operator
from typing import Annotated

from langgraph.graph import StateGraph

# a state that is one value (the root channel), as a graph over a list is
graph = StateGraph(Annotated[list, operator.add]).add_node("n", lambda items: ["n"])
graph = graph.add_edge("__start__", "n").compile()
"""


async def test_update_state_hands_a_list_to_the_graph_as_one_update(
    cluster: Cluster, tmp_path: Path
) -> None:
    """As LangGraph's server (observed on `langgraph dev`, langgraph-api 0.16.7): a list of
    `values` is passed whole to the graph's `update_state`, as one update in one checkpoint,
    not one update per item. A graph of state keys refuses it with nothing written (LangGraph:
    400 "Expected dict, got [...]"); a graph whose state is a list takes it."""
    (tmp_path / "items.py").write_text(ITEMS_GRAPHS)
    (tmp_path / "langgraph.json").write_text('{"graphs": {"items": "./items.py:graph"}}')
    env = {"RUNSTREAM_CONFIG": str(tmp_path / "langgraph.json")}
    (_, url), _ = await asyncio.gather(cluster.server(**env), cluster.ready_worker(**env))
    sdk = client_for(url)

    keyed = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(keyed, "chat", input=human("first"))
    before = await sdk.threads.get_history(keyed, limit=50)
    with pytest.raises(UnprocessableEntityError) as refused:
        await sdk.threads.update_state(keyed, [{"messages": ["a"]}, {"messages": ["b"]}])
    assert "Expected dict" in refused.value.response.text
    assert await sdk.threads.get_history(keyed, limit=50) == before

    items = (await sdk.threads.create(metadata={"graph_id": "items"}))["thread_id"]
    await sdk.threads.update_state(items, ["a", "b"])
    await sdk.threads.update_state(items, ["c"], as_node="n")
    assert (await sdk.threads.get_state(items))["values"] == ["a", "b", "c"]
    history = await sdk.threads.get_history(items, limit=50)
    assert [h["values"] for h in history] == [["a", "b", "c"], ["a", "b"]]


async def test_copy_is_a_new_thread_with_the_same_state_and_history(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create(metadata={"topic": "copying"})
    tid = thread["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("first"))
    copied = await sdk.threads.copy(tid)
    assert copied is not None
    cid = copied["thread_id"]
    assert cid != tid
    assert copied["metadata"] == (await sdk.threads.get(tid))["metadata"]  # the run's graph too
    assert copied["metadata"]["topic"] == "copying" and copied["metadata"]["graph_id"] == "chat"
    assert copied["status"] == "idle"
    assert copied["values"] == (await sdk.threads.get(tid))["values"]
    original = await sdk.threads.get_history(tid)
    history = await sdk.threads.get_history(cid)
    assert [h["checkpoint"]["checkpoint_id"] for h in history] == [
        h["checkpoint"]["checkpoint_id"] for h in original
    ]
    assert {h["checkpoint"]["thread_id"] for h in history} == {cid}
    assert await sdk.runs.list(cid) == []
    # the copy goes on apart from the original
    out = await sdk.runs.wait(cid, "chat", input=human("second"))
    assert [c for _, c in messages_of(out)] == ["first", "first", "second", "second"]
    assert len(messages_of((await sdk.threads.get_state(tid))["values"])) == 2


async def test_langgraph_routes_not_served_answer_404_saying_so(sdk: LangGraphClient) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "thread commands": lambda: sdk.http.post(f"/threads/{tid}/commands", json={}),
        "bulk state": lambda: sdk.http.post(f"/threads/{tid}/state/bulk", json=[]),
    }
    for name, call in calls.items():
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await call()
        assert refused.value.response.status_code == 404, name
        assert refused.value.response.json()["code"] == "not_served", name
        assert "not served" in refused.value.response.json()["detail"], name
    async with httpx.AsyncClient(base_url=str(sdk.http.client.base_url)) as raw:
        unknown = await raw.get("/threads/search/nothing/here")
    assert unknown.status_code == 404
    assert unknown.json()


# -- isolation ---------------------------------------------------------------------------------


async def _joined_thread_stream(client: LangGraphClient, tid: str) -> list[StreamPart]:
    return await collect(await client.threads.join_stream(tid, last_event_id="-"))


async def test_another_key_gets_404_on_every_route_and_no_key_gets_401(
    start_server: StartServer, start_worker: StartWorker
) -> None:
    server = await start_server(api_keys=API_KEYS)
    await start_worker()
    alice, bob, nobody = (
        client_for(server.url, "key-a"),
        client_for(server.url, "key-b"),
        client_for(server.url),
    )
    thread = await alice.threads.create(metadata={"owner": "alice"})
    tid = thread["thread_id"]
    run = await alice.runs.create(tid, "chat", input=human("secret"))
    rid = run["run_id"]
    await alice.runs.join(tid, rid)
    checkpoint_id = (await alice.threads.get_history(tid))[-1]["checkpoint"]["checkpoint_id"]
    attempts: dict[str, Callable[[LangGraphClient], Awaitable[Any]]] = {
        "threads.get": lambda c: c.threads.get(tid),
        "threads.update": lambda c: c.threads.update(tid, metadata={"x": 1}),
        "threads.get_state": lambda c: c.threads.get_state(tid),
        "threads.get_history": lambda c: c.threads.get_history(tid),
        "threads.get_state(checkpoint_id)": lambda c: c.threads.get_state(
            tid, checkpoint_id=checkpoint_id
        ),
        "threads.update_state": lambda c: c.threads.update_state(tid, {"messages": ["x"]}),
        "threads.copy": lambda c: c.threads.copy(tid),
        "threads.delete": lambda c: c.threads.delete(tid),
        "runs.list": lambda c: c.runs.list(tid),
        "runs.get": lambda c: c.runs.get(tid, rid),
        "runs.join": lambda c: c.runs.join(tid, rid),
        "runs.join_stream": lambda c: collect(c.runs.join_stream(tid, rid, last_event_id="-1")),
        "threads.join_stream": lambda c: _joined_thread_stream(c, tid),
        "runs.cancel": lambda c: c.runs.cancel(tid, rid),
        "runs.cancel_many": lambda c: c.runs.cancel_many(thread_id=tid, run_ids=[rid]),
        "runs.delete": lambda c: c.runs.delete(tid, rid),
        "runs.create": lambda c: c.runs.create(tid, "chat", input=human("x")),
        "runs.wait": lambda c: c.runs.wait(tid, "chat", input=human("x")),
        "runs.stream": lambda c: collect(c.runs.stream(tid, "chat", input=human("x"))),
    }
    # (`runs.join` raises httpx's own error where the others raise the SDK's typed ones,
    # which derive from it: the status code is what both carry.)
    for name, attempt in attempts.items():
        for caller, status in ((bob, 404), (nobody, 401)):
            with pytest.raises(httpx.HTTPStatusError) as refused:
                await attempt(caller)
            assert refused.value.response.status_code == status, name
    assert await bob.threads.search(metadata={"owner": "alice"}) == []
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await nobody.threads.search()
    assert refused.value.response.status_code == 401
    message = refused.value.response.json()["detail"]
    assert "x-api-key" in message and "Authorization: Bearer" in message
    # alice's thread and run are untouched
    assert (await alice.runs.get(tid, rid))["status"] == "success"
    assert [r["run_id"] for r in await alice.runs.list(tid)] == [rid]
    assert (await alice.threads.get(tid))["metadata"]["owner"] == "alice"


# -- faults -------------------------------------------------------------------------------------


@pytest.fixture
def cluster_settings(settings: Settings) -> Settings:
    """Short leases and a fast reaper, so a killed worker's run moves on within seconds."""
    return replace(settings, lease_s=1.0, reaper_interval_s=0.2, shutdown_grace_s=2.0)


@pytest.mark.fault
async def test_worker_killed_mid_run_the_sdk_stream_ends_with_the_whole_answer_once(
    cluster: Cluster,
) -> None:
    _, url = await cluster.server()
    first = await cluster.ready_worker()
    second = await cluster.standby_worker()
    sdk = client_for(url)
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    text = words(250)
    run = await sdk.runs.create(
        tid, "chat", input=human(text), stream_mode=["values", "messages-tuple"], config=slow()
    )
    parts: list[StreamPart] = []

    async def watch() -> None:
        async for part in sdk.runs.join_stream(tid, run["run_id"]):
            parts.append(part)

    async def chunks_at_least(n: int) -> bool:
        return sum(p.event == "messages" for p in parts) >= n

    viewer = asyncio.create_task(watch())
    await eventually(lambda: chunks_at_least(10), "chunks", 30)
    second.resume()
    await eventually(lambda: chunks_at_least(15), "chunks", 30)
    first.kill()
    await asyncio.wait_for(viewer, 60)
    assert parts[-1].event == "end"
    assert parts[-1].data == {"run_id": run["run_id"], "status": "success"}
    metadata = [p.data for p in parts if p.event == "metadata"]
    assert metadata == [
        {"run_id": run["run_id"], "attempt": 1},
        {"run_id": run["run_id"], "attempt": 2},
    ]
    final = [p.data for p in parts if p.event == "values"][-1]
    assert messages_of(final) == [("human", text), ("ai", text)]
    # attempt 2 opens with a snapshot that drops attempt 1's half answer, then streams it all
    retried = [p.event for p in parts].index("metadata", 1)
    assert parts[retried + 1].event == "values"
    assert messages_of(parts[retried + 1].data) == [("human", text)]
    assert chunks_text(parts[retried:]) == text
    assert (await sdk.runs.get(tid, run["run_id"]))["status"] == "success"
    assert (await sdk.threads.get_state(tid))["values"] == final
    assert second.alive()


@pytest.mark.fault
async def test_a_forked_run_retried_after_its_worker_died_goes_on_on_its_branch_forking_once(
    cluster: Cluster,
) -> None:
    _, url = await cluster.server()
    first = await cluster.ready_worker()
    sdk = client_for(url)
    tid = (await sdk.threads.create())["thread_id"]
    for text in ("one", "two"):
        await sdk.runs.wait(tid, "chat", input=human(text))
    history = await sdk.threads.get_history(tid, limit=100)
    fork = history[first_seen(history, lambda m: m["content"] == "two")]["parent_checkpoint"]
    second = await cluster.standby_worker()  # after the two runs above, which it must not take
    text = words(250)
    run = await sdk.runs.create(
        tid,
        "chat",
        input=human(text),
        checkpoint=fork,
        stream_mode=["values", "messages-tuple"],
        config=slow(),
    )
    parts: list[StreamPart] = []

    async def watch() -> None:
        async for part in sdk.runs.join_stream(tid, run["run_id"]):
            parts.append(part)

    async def chunks_at_least(n: int) -> bool:
        return sum(p.event == "messages" for p in parts) >= n

    viewer = asyncio.create_task(watch())
    await eventually(lambda: chunks_at_least(10), "chunks", 30)
    second.resume()
    await eventually(lambda: chunks_at_least(15), "chunks", 30)
    first.kill()
    await asyncio.wait_for(viewer, 90)
    assert parts[-1].data == {"run_id": run["run_id"], "status": "success"}
    assert [p.data["attempt"] for p in parts if p.event == "metadata"] == [1, 2]
    final = [p.data for p in parts if p.event == "values"][-1]
    assert messages_of(final) == [("human", "one"), ("ai", "one"), ("human", text), ("ai", text)]
    # attempt 2 opens with the branch attempt 1 saved, not with the thread's old head
    retried = [p.event for p in parts].index("metadata", 1)
    assert messages_of(parts[retried + 1].data) == messages_of(final)[:3]
    assert (await sdk.threads.get_state(tid))["values"] == final
    history = await sdk.threads.get_history(tid, limit=100)
    children = [h for h in history if h["parent_checkpoint"] == fork]
    assert len(children) == 2  # the old branch's first checkpoint and this run's, once
    assert history_shape(history)[0][:4] == ("loop", 5, [], messages_of(final))
