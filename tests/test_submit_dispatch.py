"""A run that starts at once has its job queued before its submit commits (issue 36): the
worker's claim that comes first waits for the commit (`RUN_SUBMIT_LOCK`) and wins the run, or
finds nothing if the submit rolled back; through the server, such a run and one that waits
behind another both start, each once."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator

import httpx
import pytest

from stream_store.connections import PgPool, open_pg_pool
from stream_store.run_records import RunRecord, RunRecords
from stream_store.run_submit import Created, NewRun, RunSubmitter
from stream_store.settings import Settings
from tests.conftest import ServerHandle, StartWorker
from wire.events import RunStatus


@pytest.fixture
async def pool(settings: Settings) -> AsyncIterator[PgPool]:
    opened = await open_pg_pool(settings, max_size=4)
    yield opened
    await opened.close()


class SubmitAbandoned(Exception):
    """The submit's `before_commit` gave up: its transaction rolls back."""


async def _submit_with_claim_inside(
    pool: PgPool, *, commit: bool
) -> tuple[RunRecord | None, bool, RunRecord | None]:
    """Submit a run whose `before_commit` starts a worker's claim of it and holds the
    transaction open for 300 ms: (the run, whether the claim was still waiting when the
    transaction ended, what the claim got)."""
    records, submitter = RunRecords(pool), RunSubmitter(pool)
    claim: asyncio.Task[RunRecord | None] | None = None
    waiting = False

    async def before_commit(created: Created) -> None:
        nonlocal claim, waiting
        # as the worker's claim, a task of its own holding its own connection
        claim = asyncio.create_task(
            records.claim_runs([(created.run.run_id, None)]), context=contextvars.Context()
        )
        await asyncio.sleep(0.3)  # a claim that did not wait would be over by now
        waiting = not claim.done()
        if not commit:
            raise SubmitAbandoned

    run: RunRecord | None = None
    try:
        created = await submitter.create_run(
            NewRun(owner="o", graph="chat", input={"messages": []}), before_commit=before_commit
        )
        run = created.run
    except SubmitAbandoned:
        pass
    assert claim is not None
    [claimed] = await claim
    return run, waiting, claimed


async def test_a_claim_before_the_submits_commit_waits_for_it_and_wins_the_run(
    pool: PgPool,
) -> None:
    run, waited, claimed = await _submit_with_claim_inside(pool, commit=True)
    assert run is not None and waited
    assert claimed is not None and claimed.run_id == run.run_id
    assert claimed.status == RunStatus.RUNNING and claimed.attempt == 1
    assert claimed.thread_has_checkpoints is False


async def test_a_claim_before_a_submit_that_rolls_back_gets_nothing(pool: PgPool) -> None:
    run, waited, claimed = await _submit_with_claim_inside(pool, commit=False)
    assert run is None and waited
    assert claimed is None
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM runstream_runs")
        assert (await cur.fetchone()) == {"n": 0}


async def test_a_run_queued_at_its_submit_and_one_waiting_behind_it_each_run_once(
    server: ServerHandle, start_worker: StartWorker, client: httpx.AsyncClient
) -> None:
    await start_worker(fake_token_delay_ms=20)  # the first run's 50 words: a second at least
    long = " ".join(["one"] * 50)
    first = await client.post("/v1/runs", json={"input": {"messages": [user(long)]}})
    assert first.status_code == 202, first.text
    thread_id = first.json()["thread_id"]
    second = await client.post(
        "/v1/runs",
        json={"thread_id": thread_id, "multitask": "enqueue", "input": {"messages": [user("two")]}},
    )
    assert second.status_code == 202, second.text
    assert (await client.get(f"/v1/runs/{second.json()['run_id']}")).json()["status"] == "queued"
    for run in (first.json(), second.json()):
        async with client.stream("GET", run["stream_url"]) as events:
            body = "".join([chunk async for chunk in events.aiter_text()])
        assert body.count("event: done") == 1
        polled = (await client.get(f"/v1/runs/{run['run_id']}")).json()
        assert polled["status"] == "succeeded" and polled["attempt"] == 1
    thread = (await client.get(f"/v1/threads/{thread_id}")).json()
    assert [m["content"] for m in thread["messages"] if m["role"] == "user"] == [long, "two"]


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
