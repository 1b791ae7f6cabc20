"""The Python client (issue 3): typed calls, and a stream that reconnects by itself."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from clients import AsyncClient, Conflict, NotFound, TooManyRequests
from runner.job_loop import JobLoop
from tests.conftest import ServerHandle, StartServer
from tests.processes import TcpProxy
from tests.sse import read_events
from tests.test_langgraph_api import eventually
from wire.events import Event, TokenData

TEXT = " ".join(f"word{i}" for i in range(120))
SLOW = {"configurable": {"fake_token_delay_ms": 5}}


def text_of(events: list[Event]) -> str:
    """The reply's text from typed events, applying retry discards."""
    texts: dict[str, str] = {}
    for event in events:
        if isinstance(event.data, TokenData):
            texts[event.data.message_id] = texts.get(event.data.message_id, "") + event.data.text
        elif event.event == "retry":
            for message_id in event.data.discard:
                texts.pop(message_id, None)
    assert len(texts) == 1, texts
    return next(iter(texts.values()))


class TestClientCalls:
    """The client's calls map the API one to one, with typed results and errors."""

    async def test_submit_stream_wait_and_threads(
        self, server: ServerHandle, worker: JobLoop
    ) -> None:
        async with AsyncClient(server.url) as client:
            run = await client.submit("hello typed world")
            events = [event async for event in client.stream(run.run_id)]
            assert events[0].event == "run" and events[-1].event == "done"
            assert text_of(events) == "hello typed world"
            finished = await client.wait(run.run_id)
            assert finished.status == "succeeded"
            thread = await client.get_thread(run.thread_id)
            assert [m.role for m in thread.messages] == ["user", "assistant"]
            listed = await client.list_threads()
            assert [t.thread_id for t in listed.threads] == [run.thread_id]
            await client.delete_thread(run.thread_id)
            with pytest.raises(NotFound):
                await client.get(run.run_id)

    async def test_resume_and_conflicts(self, server: ServerHandle, worker: JobLoop) -> None:
        async with AsyncClient(server.url) as client:
            run = await client.submit("note it", graph="approval")
            paused = await client.wait(run.run_id)
            assert paused.status == "interrupted"
            await client.resume(run.run_id, {"approve": True})
            assert (await client.wait(run.run_id)).status == "succeeded"
            with pytest.raises(Conflict):
                await client.cancel(run.run_id)


class TestClientReconnects:
    """`stream()` survives cut connections and server restarts: nothing lost, nothing twice."""

    async def test_proxy_cutting_every_few_kilobytes(
        self, server: ServerHandle, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        port = int(server.url.rsplit(":", 1)[1])
        # each connection must carry the answer's headers (security headers, X-Request-ID,
        # X-Trace-ID) and at least one event, or the stream never moves on
        proxy = TcpProxy("127.0.0.1", port, cut_every_bytes=2000)
        await proxy.start()
        try:
            async with AsyncClient(f"http://127.0.0.1:{proxy.port}", max_backoff_s=0.2) as cut:
                run = await client.post(
                    "/v1/runs",
                    json={
                        "input": {"messages": [{"role": "user", "content": TEXT}]},
                        "config": SLOW,
                    },
                )
                run_id = run.json()["run_id"]
                events = [event async for event in cut.stream(run_id)]
                assert cut.reconnects >= 3 and proxy.cuts >= 3
        finally:
            await proxy.stop()
        direct = await read_events(client, f"/v1/runs/{run_id}/events")
        assert [(e.id, e.event) for e in events] == [(e.id, e.event) for e in direct]
        assert text_of(events) == TEXT

    async def test_server_stopped_and_started_again_mid_stream(
        self, start_server: StartServer, worker: JobLoop
    ) -> None:
        first = await start_server()
        proxy = TcpProxy("127.0.0.1", int(first.url.rsplit(":", 1)[1]))
        await proxy.start()
        try:
            async with AsyncClient(f"http://127.0.0.1:{proxy.port}", max_backoff_s=0.2) as client:
                run = await client.submit(
                    TEXT, config={"configurable": {"fake_token_delay_ms": 10}}
                )
                events: list[Event] = []
                async for event in client.stream(run.run_id):
                    events.append(event)
                    if len(events) == 20:
                        proxy.cut()
                        await first.stop()
                        second = await start_server()
                        proxy.target = ("127.0.0.1", int(second.url.rsplit(":", 1)[1]))
                        await asyncio.sleep(0.3)
                        proxy.restore()
                assert client.reconnects >= 1
                again = [event async for event in client.stream(run.run_id)]
        finally:
            await proxy.stop()
        assert events == again
        assert text_of(events) == TEXT


class TestClientRateLimits:
    """A 429 is waited out (its Retry-After) when that is short enough, else raised."""

    async def test_a_long_retry_after_is_raised_with_its_wait(
        self, start_server: StartServer
    ) -> None:
        server = await start_server(max_active_runs=1)  # no worker: the first run stays queued
        async with AsyncClient(server.url, max_retry_after_s=1) as client:
            await client.submit("first")
            with pytest.raises(TooManyRequests) as refused:
                await client.submit("second")
            assert refused.value.code == "too_many_active_runs"
            assert refused.value.retry_after_s == 5

    async def test_stream_waits_for_a_free_connection_slot(
        self, start_server: StartServer, worker: JobLoop
    ) -> None:
        server = await start_server(max_sse_connections=1)
        async with AsyncClient(server.url) as first, AsyncClient(server.url) as second:
            run = await first.submit(TEXT, config={"configurable": {"fake_token_delay_ms": 10}})
            holding = first.stream(run.run_id)
            await anext(holding)  # the caller's one slot is taken while this stays open
            waiting = asyncio.create_task(anext(second.stream(run.run_id)))

            async def refused() -> bool:
                return second.reconnects >= 1

            await eventually(refused, "the second stream's 429 while the slot is held", 15)
            assert not waiting.done()  # still waiting out Retry-After
            await holding.aclose()
            event = await asyncio.wait_for(waiting, 15)
            assert event.event == "run"
