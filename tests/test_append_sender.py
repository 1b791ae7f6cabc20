"""Every attempt's events go through one sender task (`stream_store/append_sender.py`): in order
per run, paced for a fast model, refused batches raised once with nothing after them written,
and nothing waiting left hanging when the process closes its event log. Real Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest
from redis.asyncio import Redis

from stream_store.append_sender import BATCH_EVENTS, AttemptAppends
from stream_store.errors import Fenced, StoreUnavailable, StreamTooLarge
from stream_store.keys import KeySpace
from stream_store.log import EventLog
from stream_store.settings import Settings

RUNNING = b'{"status":"running","attempt":1}'


async def _running(events: EventLog) -> str:
    run_id = str(uuid.uuid4())
    data = b'{"status":"queued","attempt":1}'
    await events.open(run_id, owner="o", thread_id="t", attempt=1, event="run", data=data)
    await events.claim(run_id, 1, 30.0, RUNNING)
    return run_id


async def _appended(events: EventLog, run_id: str) -> list[tuple[str, bytes]]:
    """The run's stream after its `run` events (queued, running)."""
    return [(e.event, e.data) for e in (await events.read_range(run_id, "0-0", count=5000))[2:]]


def _tokens(n: int, tag: str = "") -> list[tuple[str, bytes]]:
    return [("token", b'{"t":"%s%d"}' % (tag.encode(), i)) for i in range(n)]


async def test_many_attempts_streaming_at_once_each_keep_their_order(events: EventLog) -> None:
    runs = [await _running(events) for _ in range(20)]
    sent = {run_id: _tokens(60, run_id[:4]) for run_id in runs}

    async def stream(run_id: str) -> None:
        queue = events.appends(run_id, 1)
        for i, (event, data) in enumerate(sent[run_id]):
            queue.put(event, data)
            if i % 7 == 0:
                await asyncio.sleep(0.001)  # a model's pace: batches of a few, one of one
        await queue.drain()

    await asyncio.gather(*(stream(run_id) for run_id in runs))
    for run_id in runs:
        assert await _appended(events, run_id) == sent[run_id]


async def test_a_fast_model_is_sent_in_paced_batches_and_a_full_batch_at_once(
    events: EventLog,
) -> None:
    run_id = await _running(events)
    batches: list[int] = []

    def written(batch: Sequence[tuple[str, bytes]], _: float, error: BaseException | None) -> None:
        assert error is None
        batches.append(len(batch))

    queue = events.appends(run_id, 1, on_written=written)
    sent = _tokens(BATCH_EVENTS * 2 + 30)
    for i, (event, data) in enumerate(sent):
        queue.put(event, data)
        if i % 100 == 0:
            await asyncio.sleep(0)  # the model yields: the sender's turn
    await queue.drain()
    assert await _appended(events, run_id) == sent
    assert batches[0] == 1  # the first token at once, not held for company
    assert max(batches) == BATCH_EVENTS and len(batches) < 10  # then batches, never more
    assert queue.last_id == (await events.read_range(run_id, "0-0", count=5000))[-1].id


async def test_a_refused_batch_is_raised_once_and_nothing_after_it_is_written(
    events: EventLog,
) -> None:
    run_id = await _running(events)
    queue = events.appends(run_id, 1)
    queue.put(*_tokens(1)[0])
    await queue.drain()
    await events.claim(run_id, 2, 30.0, b'{"status":"running","attempt":2}')  # taken over
    queue.put("token", b'{"t":"refused"}')
    with pytest.raises(Fenced):
        await queue.drain()
    queue.put("token", b'{"t":"after"}')  # the attempt's end: dropped, not raised again
    await queue.drain()
    stored = await events.read_range(run_id, "0-0")
    assert [(e.event, e.data) for e in stored if e.event == "token"] == _tokens(1)


async def test_a_stream_at_its_bound_keeps_what_fitted_and_refuses_the_rest(
    redis: Redis, settings: Settings
) -> None:
    events = EventLog(redis, KeySpace(settings.redis_prefix), stream_ttl_s=600, max_run_events=10)
    try:
        run_id = await _running(events)  # two events: queued, running
        queue = events.appends(run_id, 1)
        sent = _tokens(12)
        for event, data in sent:
            queue.put(event, data)
        with pytest.raises(StreamTooLarge):
            await queue.drain()
        assert await _appended(events, run_id) == sent[:8]
    finally:
        await events.aclose()


async def test_a_cancelled_drain_leaves_the_events_to_be_written(events: EventLog) -> None:
    run_id = await _running(events)
    queue = events.appends(run_id, 1)
    sent = _tokens(5)
    for event, data in sent:
        queue.put(event, data)
    waiting = asyncio.create_task(queue.drain())
    await asyncio.sleep(0)
    waiting.cancel()
    await queue.drain()
    assert await _appended(events, run_id) == sent


async def test_closing_the_log_fails_what_waits_instead_of_leaving_it_hanging(
    redis: Redis, settings: Settings
) -> None:
    events = EventLog(redis, KeySpace(settings.redis_prefix), stream_ttl_s=600)
    run_id = await _running(events)
    queue = events.appends(run_id, 1)
    queue.put(*_tokens(1)[0])
    await queue.drain()
    queue.put("token", b'{"t":"paced"}')  # waits its 10 ms turn
    await events.aclose()
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(queue.drain(), 5)
    late = events.appends(run_id, 1)
    late.put("token", b'{"t":"late"}')
    with pytest.raises(StoreUnavailable):
        await late.drain()


async def test_a_closed_attempt_drops_what_it_had_not_sent(events: EventLog) -> None:
    run_id = await _running(events)
    queue = events.appends(run_id, 1)
    queue.put(*_tokens(1)[0])
    await queue.drain()
    queue.put("token", b'{"t":"unsent"}')  # paced: still waiting
    queue.close()
    await queue.drain()  # returns at once
    await asyncio.sleep(0.05)  # past its turn
    assert await _appended(events, run_id) == _tokens(1)


async def test_a_defect_in_the_sender_fails_what_waits_and_the_next_event_starts_it_again(
    events: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await _running(events)
    take = AttemptAppends.take

    def broken(self: AttemptAppends, limit: int) -> list[tuple[str, bytes]]:
        raise RuntimeError("injected defect")

    monkeypatch.setattr(AttemptAppends, "take", broken)
    queue = events.appends(run_id, 1)
    queue.put(*_tokens(1)[0])
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(queue.drain(), 5)
    monkeypatch.setattr(AttemptAppends, "take", take)
    again = events.appends(run_id, 1)
    again.put(*_tokens(1)[0])
    await again.drain()
    assert await _appended(events, run_id) == _tokens(1)
