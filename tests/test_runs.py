"""Runs from submit to terminal: the event protocol of docs/protocol.md section 4, Events
(SSE) (issue 2)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from runner.job_loop import JobLoop
from tests.sse import read_events, reassemble

TEXT = ("the quick brown fox jumps over the lazy dog " * 3).strip()


def run_body(text: str = TEXT, **extra: Any) -> dict[str, Any]:
    return {"input": {"messages": [{"role": "user", "content": text}]}, **extra}


async def submit(client: httpx.AsyncClient, **extra: Any) -> dict[str, Any]:
    response = await client.post("/v1/runs", json=run_body(**extra))
    assert response.status_code == 202, response.text
    return response.json()


class TestRunStream:
    """A run's events, reassembled, are exactly the final message of its thread."""

    async def test_events_reassemble_to_final_thread_message(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = await submit(client)
        events = await read_events(client, f"/v1/runs/{run['run_id']}/events")

        assert events[0].event == "run" and events[0].data == {"status": "queued", "attempt": 1}
        assert events[-1].event == "done" and events[-1].data["status"] == "succeeded"
        assert [e.event for e in events].count("done") == 1
        ids = [e.id for e in events]
        assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
        assert len(set(ids)) == len(ids)

        thread = (await client.get(f"/v1/threads/{run['thread_id']}")).json()
        final = thread["messages"][-1]
        assert final["role"] == "assistant"
        assert final["content"] == TEXT
        assert reassemble(events) == {final["id"]: final["content"]}
        assert events[-1].data["output"]["id"] == final["id"]
        message_events = [e.data["message"] for e in events if e.event == "message"]
        assert [m["content"] for m in message_events] == [TEXT, TEXT]
        assert [m["role"] for m in message_events] == ["user", "assistant"]

    async def test_a_run_with_only_a_system_message_succeeds_with_an_empty_reply(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        body = {"input": {"messages": [{"role": "system", "content": "be brief"}]}}
        run = (await client.post("/v1/runs", json=body)).json()
        events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
        assert events[-1].event == "done", events[-1]
        assert events[-1].data["status"] == "succeeded"
        assert events[-1].data["output"]["content"] == ""
        assert not [e for e in events if e.event == "token"]

    async def test_tokens_of_one_message_share_its_id(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = await submit(client)
        events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
        tokens = [e for e in events if e.event == "token"]
        assert len(tokens) == len(TEXT.split())
        assert len({t.data["message_id"] for t in tokens}) == 1

    async def test_poll_sees_queued_running_succeeded(
        self, client: httpx.AsyncClient, start_worker: Any
    ) -> None:
        run = await submit(client, config={"configurable": {"fake_token_delay_ms": 40}})
        url = f"/v1/runs/{run['run_id']}"
        seen = [(await client.get(url)).json()["status"]]
        await start_worker()
        for _ in range(400):
            status = (await client.get(url)).json()["status"]
            if status != seen[-1]:
                seen.append(status)
            if status == "succeeded":
                break
            await asyncio.sleep(0.01)
        assert seen == ["queued", "running", "succeeded"]
        final = (await client.get(url)).json()
        assert final["started_at"] and final["finished_at"] and final["last_event_id"]
