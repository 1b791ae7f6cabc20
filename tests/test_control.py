"""Cancel, human-in-the-loop resume, and multitask on a busy thread (issue 2)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from runner.job_loop import JobLoop
from tests.sse import iter_events, read_events, reassemble
from tests.test_runs import run_body

LONG = " ".join(f"w{i}" for i in range(300))
SLOW = {"configurable": {"fake_token_delay_ms": 20}}


async def wait_status(client: httpx.AsyncClient, run_id: str, status: str) -> dict[str, Any]:
    for _ in range(500):
        run = (await client.get(f"/v1/runs/{run_id}")).json()
        if run["status"] == status:
            return run
        await asyncio.sleep(0.01)
    raise AssertionError(f"run {run_id} never reached {status}; last {run['status']}")


class TestCancel:
    """A cancelled run's stream ends with `done` cancelled, whatever state it was in."""

    async def test_cancel_while_running_ends_the_stream_within_a_second(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = (await client.post("/v1/runs", json=run_body(LONG, config=SLOW))).json()
        events = []
        cancelled_at = 0.0
        async for event in iter_events(client, f"/v1/runs/{run['run_id']}/events"):
            events.append(event)
            if event.event == "token" and not cancelled_at:
                cancelled_at = time.monotonic()
                response = await client.post(f"/v1/runs/{run['run_id']}/cancel")
                assert response.status_code == 202
        elapsed = time.monotonic() - cancelled_at
        assert events[-1].event == "done"
        assert events[-1].data == {"status": "cancelled", "output": None}
        assert elapsed < 1.0
        assert len(reassemble(events)[next(iter(reassemble(events)))]) < len(LONG)
        final = (await client.get(f"/v1/runs/{run['run_id']}")).json()
        assert final["status"] == "cancelled" and final["finished_at"]

    async def test_cancel_while_queued_never_runs(
        self, client: httpx.AsyncClient, start_worker: Any
    ) -> None:
        run = (await client.post("/v1/runs", json=run_body("never"))).json()
        response = await client.post(f"/v1/runs/{run['run_id']}/cancel")
        assert response.status_code == 202
        assert response.json()["status"] == "cancelled"
        await start_worker()
        await asyncio.sleep(0.3)
        events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
        assert [e.event for e in events] == ["run", "run", "done"]
        assert events[-1].data["status"] == "cancelled"
        assert (await client.get(f"/v1/runs/{run['run_id']}")).json()["status"] == "cancelled"

    async def test_cancel_a_finished_run_is_409(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = (await client.post("/v1/runs", json=run_body("quick"))).json()
        await read_events(client, f"/v1/runs/{run['run_id']}/events")
        response = await client.post(f"/v1/runs/{run['run_id']}/cancel")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "run_finished"


class TestApproval:
    """The approval graph pauses (`pending`, `interrupted`) and `/resume` continues the run."""

    async def start(self, client: httpx.AsyncClient) -> dict[str, Any]:
        body = run_body("remember the milk", graph="approval")
        run = (await client.post("/v1/runs", json=body)).json()
        await wait_status(client, run["run_id"], "interrupted")
        return run

    async def test_approve_runs_the_tool_once_and_finishes(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = await self.start(client)
        url = f"/v1/runs/{run['run_id']}/events"
        polled = (await client.get(f"/v1/runs/{run['run_id']}")).json()
        assert polled["interrupt"] == {
            "action_requests": [
                {
                    "name": "save_note",
                    "args": {"content": "remember the milk"},
                    "description": "Run save_note?",
                }
            ],
            "review_configs": [
                {"action_name": "save_note", "allowed_decisions": ["approve", "edit", "reject"]}
            ],
        }
        thread = (await client.get(f"/v1/threads/{run['thread_id']}")).json()
        assert thread["status"] == "interrupted"

        resumed = await client.post(
            f"/v1/runs/{run['run_id']}/resume",
            json={"resume": {"decisions": [{"type": "approve"}]}},
        )
        assert resumed.status_code == 202
        assert resumed.json()["run_id"] == run["run_id"]
        events = await read_events(client, url)
        names = [e.event for e in events]
        assert names.count("pending") == 1
        assert events[names.index("pending")].data["interrupt"] == polled["interrupt"]
        statuses = [e.data["status"] for e in events if e.event == "run"]
        assert statuses == ["queued", "running", "interrupted", "queued", "running", "succeeded"]
        executed = [e.data for e in events if e.event == "custom"]
        assert executed == [
            {
                "tool": "save_note",
                "tool_call_id": executed[0]["tool_call_id"],
                "executed": True,
                "replayed": False,
            }
        ]
        tool_messages = [
            e.data["message"]
            for e in events
            if e.event == "message" and e.data["message"]["role"] == "tool"
        ]
        assert tool_messages[0]["content"].startswith("saved note")
        assert events[-1].event == "done" and events[-1].data["status"] == "succeeded"
        assert events[-1].data["output"]["content"] == "remember the milk"

    async def resume_with(self, client: httpx.AsyncClient, resume: Any) -> list[Any]:
        """Resume a new approval run with `resume`; its events to the end."""
        run = await self.start(client)
        response = await client.post(f"/v1/runs/{run['run_id']}/resume", json={"resume": resume})
        assert response.status_code == 202
        return await read_events(client, f"/v1/runs/{run['run_id']}/events")

    @staticmethod
    def tool_messages(events: list[Any]) -> list[str]:
        return [
            e.data["message"]["content"]
            for e in events
            if e.event == "message" and e.data["message"]["role"] == "tool"
        ]

    async def test_edit_runs_the_edited_call(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        edited = {"name": "save_note", "args": {"content": "oat milk"}}
        events = await self.resume_with(
            client, {"decisions": [{"type": "edit", "edited_action": edited}]}
        )
        assert next(e.data for e in events if e.event == "custom")["executed"] is True
        assert self.tool_messages(events) == [
            'saved note (8 characters); a reviewer edited the call, it ran with {"content":'
            ' "oat milk"}'
        ]
        assert events[-1].data["status"] == "succeeded"

    async def test_reject_skips_the_tool_and_the_model_gets_the_reason(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        events = await self.resume_with(
            client, {"decisions": [{"type": "reject", "message": "I have milk"}]}
        )
        assert next(e.data for e in events if e.event == "custom")["executed"] is False
        assert self.tool_messages(events) == [
            "User rejected the tool call for `save_note` with reason: I have milk"
        ]
        assert events[-1].data["status"] == "succeeded"

    @pytest.mark.parametrize(("approve", "executed"), [(True, True), (False, False)])
    async def test_the_older_answer_is_still_taken(
        self, client: httpx.AsyncClient, worker: JobLoop, approve: bool, executed: bool
    ) -> None:
        events = await self.resume_with(client, {"approve": approve})
        assert next(e.data for e in events if e.event == "custom")["executed"] is executed
        assert events[-1].data["status"] == "succeeded"

    async def test_an_answer_it_cannot_read_fails_the_run_with_the_reason(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        events = await self.resume_with(client, {"decisions": []})
        assert not [e for e in events if e.event == "custom"]
        assert events[-1].event == "error" and events[-1].data["code"] == "graph_error"
        assert "0 decisions for 1 proposed calls" in events[-1].data["message"]

    async def test_resume_on_a_run_that_is_not_interrupted_is_409(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = (await client.post("/v1/runs", json=run_body("plain chat"))).json()
        await read_events(client, f"/v1/runs/{run['run_id']}/events")
        response = await client.post(
            f"/v1/runs/{run['run_id']}/resume", json={"resume": {"approve": True}}
        )
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "run_not_interrupted"

    async def test_cancel_while_interrupted_ends_the_stream(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = await self.start(client)
        assert (await client.post(f"/v1/runs/{run['run_id']}/cancel")).status_code == 202
        events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
        assert events[-1].data == {"status": "cancelled", "output": None}


class TestMultitask:
    """A thread runs one run at a time: `reject` answers 409, `enqueue` waits its turn."""

    async def test_reject_answers_409_while_the_thread_is_busy(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        first = (await client.post("/v1/runs", json=run_body(LONG, config=SLOW))).json()
        path = f"/v1/threads/{first['thread_id']}/runs"
        response = await client.post(path, json=run_body("me too"))
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "thread_busy"
        await client.post(f"/v1/runs/{first['run_id']}/cancel")

    async def test_enqueue_runs_after_the_active_run(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        slow = {"configurable": {"fake_token_delay_ms": 5}}
        first = (await client.post("/v1/runs", json=run_body("one two three", config=slow))).json()
        path = f"/v1/threads/{first['thread_id']}/runs"
        second = await client.post(path, json=run_body("four five", multitask="enqueue"))
        assert second.status_code == 202
        second_id = second.json()["run_id"]
        events = await read_events(client, f"/v1/runs/{second_id}/events")
        assert events[-1].data["status"] == "succeeded"
        a = (await client.get(f"/v1/runs/{first['run_id']}")).json()
        b = (await client.get(f"/v1/runs/{second_id}")).json()
        assert a["finished_at"] <= b["started_at"]
        thread = (await client.get(f"/v1/threads/{first['thread_id']}")).json()
        assert [m["content"] for m in thread["messages"]] == [
            "one two three",
            "one two three",
            "four five",
            "four five",
        ]
