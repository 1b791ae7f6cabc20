"""A retried attempt first sends what its checkpoint holds and its stream never got.

Events are appended while the graph runs on and checkpoints are written while the next step
runs, so an attempt that dies can leave the checkpoint ahead of the stream. Here the first
attempt's event batches are lost (as if its worker died with them in flight) while its graph
runs to the end and its checkpoint is saved, and Postgres then refuses its outcome; the second
attempt finds a finished checkpoint and must still stream the graph's output.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
import pytest

from stream_store.append_sender import AttemptAppends
from stream_store.run_records import RunRecords
from tests.conftest import StartServer, StartWorker
from tests.sse import read_events, reassemble
from tests.test_runs import run_body

TEXT = "the answer every attempt must stream in full"


async def test_retry_sends_messages_the_checkpoint_has_and_the_stream_lacks(
    start_server: StartServer, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    put, finish_run = AttemptAppends.put, RunRecords.finish_run
    dropped: list[str] = []

    def first_attempt_loses_its_events(self: AttemptAppends, event: str, data: bytes) -> None:
        if self.attempt == 1:
            dropped.append(event)
        else:
            put(self, event, data)

    async def first_attempt_cannot_finish(
        self: RunRecords, run_id: str, attempt: int, *args: Any, **kwargs: Any
    ) -> Any:
        if attempt == 1:
            raise psycopg.OperationalError("injected: postgres went away")
        return await finish_run(self, run_id, attempt, *args, **kwargs)

    monkeypatch.setattr(AttemptAppends, "put", first_attempt_loses_its_events)
    monkeypatch.setattr(RunRecords, "finish_run", first_attempt_cannot_finish)
    server = await start_server()
    await start_worker(lease_s=0.5, reaper_interval_s=0.1)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        run = (await http.post("/v1/runs", json=run_body(TEXT))).json()
        events = await asyncio.wait_for(read_events(http, run["stream_url"]), 30)
        thread = (await http.get(f"/v1/threads/{run['thread_id']}")).json()
        polled = (await http.get(f"/v1/runs/{run['run_id']}")).json()

    assert "token" in dropped  # the first attempt's output really was lost
    assert polled["status"] == "succeeded" and polled["attempt"] == 2
    user, answer = thread["messages"]
    assert answer["role"] == "assistant" and answer["content"] == TEXT
    names = [e.event for e in events]
    assert names.count("retry") == 1 and names[-1] == "done"
    assert reassemble(events) == {answer["id"]: TEXT}
    sent = [e.data["message"]["id"] for e in events if e.event == "message"]
    assert sent == [user["id"], answer["id"]]  # each message once, in thread order
    assert events[-1].data["output"]["id"] == answer["id"]
