"""What a replay of a LangGraph stream costs, and what it leaves a client with (issue 20,
"replay cost"): in plain `messages` mode a replay sends each message as it stands instead of
every `messages/partial` on the way (their text is the whole message so far, so those cost
the square of the run); every replay writes at most `RUNSTREAM_MAX_REPLAY_BYTES`.

Driven over HTTP with LangGraph's own SSE parser and SDK; docs/langgraph.md, "Streams".
"""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import StreamPart

from tests.conftest import ServerHandle, StartServer, StartWorker
from tests.test_langgraph_api import (
    assert_resumable,
    client_for,
    client_view,
    collect,
    human,
    slow,
    wire,
    words,
)
from tests.test_langgraph_wire import parse


@pytest.fixture
async def sdk(server: ServerHandle, worker: Any) -> LangGraphClient:
    return client_for(server.url)


async def finished_run(
    sdk: LangGraphClient, text: str, modes: list[str], delay_ms: int = 0
) -> tuple[str, str]:
    """(thread id, run id) of a `chat` run that echoed `text`, once it is over."""
    thread = await sdk.threads.create()
    run = await sdk.runs.create(
        thread["thread_id"], "chat", input=human(text), stream_mode=modes, config=slow(delay_ms)
    )
    await sdk.runs.join(thread["thread_id"], run["run_id"])
    return thread["thread_id"], run["run_id"]


async def raw_stream(url: str, path: str, last_event_id: str | None = None) -> bytes:
    """The whole body of an event stream, as the server wrote it."""
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as client,
        client.stream("GET", path, headers=headers) as response,
    ):
        assert response.status_code == 200, await response.aread()
        return b"".join([chunk async for chunk in response.aiter_raw()])


def final_text(parts: list[StreamPart]) -> str:
    [complete] = [p for p in parts if p.event == "messages/complete"]
    return str(complete.data[0]["content"])


async def test_a_replay_in_messages_mode_is_linear_in_the_run(
    server: ServerHandle, worker: Any
) -> None:
    """The finding: a replay sent every `messages/partial` (n tokens, n partials of up to n
    tokens each). 3000 tokens replayed as some 30 MB; now the message once, and the frames
    around it."""
    sdk = client_for(server.url)
    text = words(3000)
    tid, rid = await finished_run(sdk, text, ["messages"])
    raw = await raw_stream(server.url, f"/threads/{tid}/runs/{rid}/stream")
    parts = parse(raw, chunk_size=65536)
    assert final_text(parts) == text
    assert len(raw) < 3 * len(text) + 10_000, len(raw)
    assert [p.event for p in parts] == [
        "metadata",
        "messages/metadata",
        "messages/complete",
        "end",
    ]


async def test_a_replay_leaves_the_client_with_what_a_live_watch_does(
    sdk: LangGraphClient,
) -> None:
    """A client that watched the run live and one that replays it after its end hold the same
    messages, announcements and other events; the replay is a fraction of the bytes."""
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    text = words(120)
    modes = ["messages", "values", "updates"]
    live = await collect(
        sdk.runs.stream(tid, "chat", input=human(text), stream_mode=modes, config=slow(5))
    )
    rid = live[0].data["run_id"]
    replayed = await collect(sdk.runs.join_stream(tid, rid, last_event_id="-1"))
    assert client_view(replayed) == client_view(live)
    assert final_text(replayed) == text
    assert [p.event for p in replayed].count("messages/partial") <= 1
    assert sum(p.event == "messages/partial" for p in live) > 100
    assert_resumable(replayed)
    assert wire([p for p in replayed if not p.event.startswith("messages")]) == wire(
        [p for p in live if not p.event.startswith("messages")]
    )


async def test_a_rejoin_mid_message_catches_up_with_the_message_then_goes_on_live(
    sdk: LangGraphClient,
) -> None:
    """Cut mid-message while the run streams, then rejoined with the last id: the rejoin's
    replay gives the message as it stands, then live partials from there; the client holds
    exactly what one that never left holds."""
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    text = words(80)
    run = await sdk.runs.create(
        tid, "chat", input=human(text), stream_mode=["messages"], config=slow(25)
    )
    rid = run["run_id"]
    first = await collect(sdk.runs.join_stream(tid, rid), limit=8)
    assert first[-1].event == "messages/partial" and first[-1].id
    rest = await collect(sdk.runs.join_stream(tid, rid, last_event_id=first[-1].id))
    everything = await collect(sdk.runs.join_stream(tid, rid, last_event_id="-1"))
    assert client_view(first + rest) == client_view(everything)
    assert_resumable(first + rest)
    partials = [p.data[0]["content"] for p in rest if p.event == "messages/partial"]
    assert len(partials) > 1, "the run ended before the rejoin: nothing was live"
    assert all(b.startswith(a) and len(b) > len(a) for a, b in itertools.pairwise(partials))
    assert final_text(rest) == text


async def test_a_replay_past_its_bound_ends_with_an_error_and_resumes_from_its_last_id(
    start_server: StartServer, start_worker: StartWorker
) -> None:
    """`RUNSTREAM_MAX_REPLAY_BYTES`: a replay writes at most that many bytes, then an `error`
    (`ReplayTooLarge`, no id) ends the stream; rejoining with the last id goes on from there,
    and the pieces make up exactly the stream an unbounded replay gives."""
    bound = 8192
    server = await start_server(max_replay_bytes=bound)
    unbounded = await start_server()
    await start_worker()
    sdk = client_for(server.url)
    text = words(300)
    tid, rid = await finished_run(sdk, text, ["values", "messages-tuple"])
    path = f"/threads/{tid}/runs/{rid}/stream"
    whole = parse(await raw_stream(unbounded.url, path), chunk_size=65536)
    pieces: list[StreamPart] = []
    last_id: str | None = None
    for _ in range(200):
        raw = await raw_stream(server.url, path, last_id)
        parts = parse(raw, chunk_size=65536)
        if parts[-1].event == "end":
            pieces += parts
            break
        cut = parts[-1]
        # no id of its own: the client's Last-Event-ID stays its last frame's
        assert cut.event == "error" and b"id:" not in _closing(raw)[0], cut
        assert cut.data["error"] == "ReplayTooLarge", cut.data
        assert "RUNSTREAM_MAX_REPLAY_BYTES" in cut.data["message"]
        opening = raw[: raw.index(b"\r\n\r\n") + 4] if last_id is None else b""
        assert len(raw) - len(opening) - len(_closing(raw)[0]) <= bound
        pieces += parts[:-1]
        last_id = pieces[-1].id
    else:
        raise AssertionError("the replay never reached the run's end")
    assert last_id is not None, "one replay held the whole stream: the bound was not reached"
    assert wire(pieces) == wire(whole)


async def test_a_thread_stream_whose_replay_passes_the_bound_ends_there(
    start_server: StartServer, start_worker: StartWorker
) -> None:
    """In the thread stream the bound ends the whole stream, not only the run's part: the
    client rejoins after its last frame (`<run id>:<event id>`) and goes on from there."""
    bound = 8192
    server = await start_server(max_replay_bytes=bound)
    await start_worker()
    sdk = client_for(server.url)
    tid, rid = await finished_run(sdk, words(300), ["values", "messages-tuple"])
    await sdk.runs.join(tid, (await sdk.runs.create(tid, "chat", input=human("again")))["run_id"])
    raw = await raw_stream(server.url, f"/threads/{tid}/stream", "-")
    parts = parse(raw, chunk_size=65536)
    assert parts[-1].event == "error" and parts[-1].data["error"] == "ReplayTooLarge"
    opening = raw[: raw.index(b"\r\n\r\n") + 4]  # the run's `metadata`: no replayed frame
    assert len(raw) - len(opening) - len(_closing(raw)[0]) <= bound
    assert {p.id.partition(":")[0] for p in parts if p.id} == {rid}
    rest = parse(await raw_stream(server.url, f"/threads/{tid}/stream", parts[-2].id))
    assert rest[0].id and rest[0].id.startswith(f"{rid}:")


def _closing(raw: bytes) -> list[bytes]:
    """The closing `error` frame at the end of `raw`."""
    return [raw[raw.rindex(b"event: error") :]]
