"""An attempt starts in one script call (`EventLog.claim`: lease, cancel check and `running`),
and a worker's batches reach Redis in one round trip: each keeps the guarantee the separate
calls had (issue 12). A repair waits for the attempt that holds the lease."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from psycopg import AsyncCursor
from psycopg.rows import DictRow
from redis.asyncio import Redis

from runner.graphs import chat
from stream_store import log
from stream_store.checkpoints import FencedPostgresSaver, FreshThread, attempt_fence, fresh_thread
from stream_store.errors import Fenced
from stream_store.keys import KeySpace
from stream_store.lifecycle import RetryPlan
from stream_store.live_record import Claimed, TakeOver
from stream_store.log import EventLog
from stream_store.run_records import RunRecord
from stream_store.run_submit import NewRun
from stream_store.services import Services, open_services
from stream_store.settings import Settings
from wire.events import RunStatus

RUNNING = b'{"status":"running","attempt":1}'


async def _queued(events: EventLog, attempt: int = 1) -> str:
    run_id = str(uuid.uuid4())
    data = b'{"status":"queued","attempt":%d}' % attempt
    await events.open(run_id, owner="o", thread_id="t", attempt=attempt, event="run", data=data)
    return run_id


async def test_claim_takes_the_lease_and_says_running(events: EventLog) -> None:
    run_id = await _queued(events)
    assert await events.claim(run_id, 1, 5.0, RUNNING, "worker-1") is Claimed.RUNNING
    record = await events.live_record(run_id)
    assert record is not None
    assert record.status is RunStatus.RUNNING and record.lease_until is not None
    stored = await events.read_range(run_id, "0-0")
    assert [(e.event, e.data) for e in stored][-1] == ("run", RUNNING)
    assert record.last_event_id == stored[-1].id


async def test_claim_after_a_cancel_request_writes_nothing(events: EventLog) -> None:
    run_id = await _queued(events)
    await events.request_cancel(run_id)
    assert await events.claim(run_id, 1, 5.0, RUNNING, "worker-1") is Claimed.CANCELLED
    assert [e.event for e in await events.read_range(run_id, "0-0")] == ["run"]  # queued only
    record = await events.live_record(run_id)
    assert record is not None and record.lease_until is not None  # the cancel is ours to write


async def test_claim_of_a_retry_leaves_running_to_its_announcement(events: EventLog) -> None:
    run_id = await _queued(events, attempt=2)  # re-queued, its `retry` not written
    assert await events.claim(run_id, 2, 5.0, RUNNING) is Claimed.RETRY
    assert len(await events.read_range(run_id, "0-0")) == 1


async def test_claim_by_an_older_attempt_is_fenced(events: EventLog) -> None:
    run_id = await _queued(events, attempt=2)
    with pytest.raises(Fenced):
        await events.claim(run_id, 1, 5.0, RUNNING)
    assert len(await events.read_range(run_id, "0-0")) == 1


async def test_batches_load_the_script_redis_lacks_and_append_once(
    redis: Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis that lost the scripts (restart, SCRIPT FLUSH) answers NOSCRIPT, which ran nothing:
    the batch is sent again after loading, and each event is in the stream once."""
    unloaded = f"{log._APPEND_BATCH}\n-- {uuid.uuid4()}"  # a script Redis has never seen
    monkeypatch.setattr(log, "_APPEND_BATCH", unloaded)
    events = EventLog(redis, KeySpace(settings.redis_prefix), stream_ttl_s=600)
    try:
        run_id = await _queued(events)
        await events.claim(run_id, 1, 5.0, RUNNING)
        batch = [("token", b'{"i":%d}' % i) for i in range(3)]
        queue = events.appends(run_id, 1)
        for event, data in batch:
            queue.put(event, data)
        await queue.drain()
        stored = await events.read_range(run_id, "0-0")
        assert [(e.event, e.data) for e in stored[2:]] == batch
        assert stored[-1].id == queue.last_id
    finally:
        await events.aclose()


async def test_repair_leaves_the_outcome_to_the_attempt_holding_the_lease(
    settings: Settings,
) -> None:
    """A reaper that read a run before it was handed to a new attempt must not write the
    outcome that attempt is writing (found by the chaos test once starts got faster); once
    the lease is gone, the repair does write it."""

    async def no_retry(run: RunRecord) -> RetryPlan:
        raise AssertionError("a first attempt has no retry")

    async with open_services(settings) as services:
        lifecycle, events = services.lifecycle, services.events
        new = NewRun(owner="o", graph="chat", input={"messages": []})
        run_id = (await lifecycle.submit(new)).run.run_id
        run = await lifecycle.claim(run_id)
        assert run is not None
        assert await lifecycle.start(run, no_retry, lease_s=5.0)
        # the attempt recorded its outcome in Postgres and is about to tell the stream
        assert await services.run_records.finish_run(run_id, 1, RunStatus.SUCCEEDED) is not None
        await lifecycle.repair(run_id)
        last = await events.last_event(run_id)
        assert last is not None and last.event == "run"  # left to the attempt
        assert await events.take_over(run_id, 1, force=True) is TakeOver.TAKEN  # it died
        await lifecycle.repair(run_id)
        last = await events.last_event(run_id)
        assert last is not None and last.event == "done"


async def test_a_gone_workers_pass_leaves_an_attempt_whose_lease_is_not_taken_yet(
    events: EventLog,
) -> None:
    """Between a claim in Postgres and its lease in Redis, an attempt has no holder: a reaper
    that found a dead worker must not take it for that worker's (found by the chaos test)."""
    run_id = await _queued(events)
    assert await events.claim(run_id, 1, 5.0, RUNNING, "dead") is Claimed.RUNNING
    assert await events.take_over(run_id, 1, gone_workers=["dead"]) is TakeOver.TAKEN
    # attempt 2 is claimed in Postgres by a live worker; its lease is not yet in Redis
    assert await events.take_over(run_id, 2, gone_workers=["dead"]) is TakeOver.ALIVE
    assert await events.claim(run_id, 2, 5.0, RUNNING, "alive") is Claimed.RETRY
    assert await events.take_over(run_id, 2, gone_workers=["dead"]) is TakeOver.ALIVE
    # the lease pass still takes an attempt whose lease was never taken, once it is due
    other = await _queued(events)
    assert await events.take_over(other, 1) is TakeOver.TAKEN


class CountedSaver(FencedPostgresSaver):
    """The worker's saver, counting the checkpoint reads that reach Postgres."""

    reads = 0

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        if not pipeline:
            self.reads += 1
        async with super()._cursor(pipeline=pipeline) as cur:
            yield cur


async def _claimed_chat_run(services: Services) -> RunRecord:
    """A new `chat` run on a new thread, submitted and claimed: attempt 1 owns it."""
    new = NewRun(owner="o", graph="chat", input={"messages": []})
    run = await services.lifecycle.claim((await services.lifecycle.submit(new)).run.run_id)
    assert run is not None
    return run


async def test_a_first_message_starts_its_graph_without_reading_the_thread_again(
    settings: Settings,
) -> None:
    """The claim says whether the thread has a checkpoint; a thread without one is not read
    again when the graph starts, and a thread with one is (issue 12, first token)."""
    async with open_services(settings) as services:
        lifecycle = services.lifecycle
        saver = CountedSaver(services.pool)  # type: ignore[arg-type]
        graph = chat.compile(checkpointer=saver)
        run = await _claimed_chat_run(services)
        assert run.thread_has_checkpoints is False
        config: RunnableConfig = {"configurable": {"thread_id": run.thread_id}}
        token = fresh_thread.set(FreshThread(run.thread_id))
        try:
            assert await saver.aget_tuple(config) is None
            assert saver.reads == 0  # answered by the claim
            await graph.aupdate_state(config, {"messages": [HumanMessage("hi", id="h")]})
            assert (await saver.aget_tuple(config)) is not None  # later reads go to Postgres
            assert saver.reads >= 1
        finally:
            fresh_thread.reset(token)
        again = NewRun(owner="o", graph="chat", input={"messages": []}, thread_id=run.thread_id)
        await services.run_records.finish_run(run.run_id, 1, RunStatus.SUCCEEDED)
        second = await lifecycle.claim((await lifecycle.submit(again)).run.run_id)
        assert second is not None and second.thread_has_checkpoints is True


def test_a_fresh_threads_first_read_is_the_only_one_answered_whatever_it_asks() -> None:
    """A run started from a checkpoint reads that checkpoint first; the thread's latest, read
    later, is the run's own and must come from Postgres."""
    latest: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    forked: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_id": "c"}}
    other: RunnableConfig = {"configurable": {"thread_id": "u"}}
    fresh = FreshThread("t")
    assert not fresh.skips(other)  # another thread's read leaves it armed
    assert not fresh.skips(forked)  # the first read of the thread, by id: read from Postgres
    assert not fresh.skips(latest)  # and so is every read after it
    first = FreshThread("t")
    assert first.skips(latest) and not first.skips(latest)


async def test_nothing_is_read_after_the_last_position(events: EventLog) -> None:
    """Redis refuses `XRANGE (<last possible id>`; nothing can follow that id anyway."""
    run_id = await _queued(events)
    last = f"{2**64 - 1}-{2**64 - 1}"
    assert await events.read_range(run_id, last) == []
    assert len(await events.read_range(run_id, "0-0")) == 1


@contextmanager
def acting_as(run: RunRecord, attempt: int) -> Iterator[None]:
    """Checkpoint writes in this block are fenced as `attempt` of `run`, as a worker's are."""
    token = attempt_fence.set((run.run_id, attempt))
    try:
        yield
    finally:
        attempt_fence.reset(token)


async def test_a_checkpoint_write_of_an_attempt_that_lost_its_run_is_refused_in_one_trip(
    settings: Settings,
) -> None:
    """The fence and the writes go to Postgres in one pipeline (`runstream_fence`): the owner's
    write lands; a stale attempt's raises `Fenced` and leaves nothing, and the pool's one
    connection is clean for the write after it."""
    async with open_services(settings, pool_size=1) as services:
        graph = chat.compile(checkpointer=FencedPostgresSaver(services.pool))  # type: ignore[arg-type]
        run = await _claimed_chat_run(services)
        assert run.attempt == 1
        config: RunnableConfig = {"configurable": {"thread_id": run.thread_id}}

        async def history() -> int:
            return len([state async for state in graph.aget_state_history(config)])

        with acting_as(run, 2), pytest.raises(Fenced, match="no longer owns"):
            await graph.aupdate_state(config, {"messages": [HumanMessage("x", id="x")]})
        assert await history() == 0
        with acting_as(run, 1):
            await graph.aupdate_state(config, {"messages": [HumanMessage("hi", id="h")]})
        assert await history() == 1
        await services.run_records.finish_run(run.run_id, 1, RunStatus.SUCCEEDED)
        with acting_as(run, 1), pytest.raises(Fenced):  # the run is over: no attempt owns it
            await graph.aupdate_state(config, {"messages": [HumanMessage("y", id="y")]})
        assert await history() == 1
