"""A run's lease outlives its worker's event loop being blocked: it is renewed from a thread
(`stream_store/leases.py`), so an async node that blocks the loop past the lease delays the run
but does not lose it to a retry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis

from stream_store.keys import KeySpace
from stream_store.leases import LeaseKeeper
from stream_store.settings import Settings
from tests.conftest import StartServer, StartWorker
from tests.sse import read_events
from tests.test_input_bounds import run_body

BLOCKER = {"blocker": "tests.custom_graphs:blocks_the_loop"}
RUN_ID = "9a1c2a64-2f55-4f3e-9d55-1a2b3c4d5e6f"


async def test_a_node_blocking_the_event_loop_past_the_lease_keeps_its_attempt(
    start_server: StartServer, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNSTREAM_TEST_BLOCK_S", "2.5")  # five leases of 0.5 s
    server = await start_server(graphs=BLOCKER)
    await start_worker(graphs=BLOCKER, lease_s=0.5, reaper_interval_s=0.1)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        run = (await http.post("/v1/runs", json=run_body(graph="blocker"))).json()
        events = await asyncio.wait_for(read_events(http, run["stream_url"]), 30)
        polled = (await http.get(f"/v1/runs/{run['run_id']}")).json()

    assert [e.event for e in events if e.event == "retry"] == []
    assert {e.data.get("attempt") for e in events if e.event == "run"} == {1}
    assert events[-1].event == "done" and events[-1].data["status"] == "succeeded"
    assert polled["status"] == "succeeded" and polled["attempt"] == 1


@pytest.fixture
async def record(settings: Settings) -> AsyncIterator[tuple[Redis, str]]:
    """A run record holding attempt 1's lease, as `claim` leaves it (`docs/architecture.md`)."""
    redis = Redis.from_url(settings.redis_url)
    key = KeySpace(settings.redis_prefix).run_record(RUN_ID)
    now_s, now_us = await redis.time()
    lease_until = now_s * 1000 + now_us // 1000 + 300
    await redis.hset(key, mapping={"attempt": 1, "lease_until": lease_until})
    yield redis, key
    await redis.aclose()


async def lease_until(redis: Redis, key: str) -> int:
    return int(await redis.hget(key, "lease_until") or 0)


async def test_a_held_lease_is_renewed_while_the_loop_is_blocked(
    settings: Settings, record: tuple[Redis, str]
) -> None:
    redis, key = record
    keeper = LeaseKeeper(settings.redis_url, KeySpace(settings.redis_prefix), lease_s=0.3)
    lost: list[str] = []
    await keeper.start()
    try:
        keeper.hold(RUN_ID, 1, lambda: lost.append(RUN_ID))
        taken = await lease_until(redis, key)
        time.sleep(1.0)  # noqa: ASYNC251 (the point: the loop does not turn)
        renewed = await lease_until(redis, key)
        await asyncio.sleep(0.3)
    finally:
        await keeper.stop()
    assert renewed > taken + 500  # renewed during the second the loop stood still
    assert lost == []


async def test_a_lease_taken_over_calls_on_lost_and_is_no_longer_renewed(
    settings: Settings, record: tuple[Redis, str]
) -> None:
    redis, key = record
    keeper = LeaseKeeper(settings.redis_url, KeySpace(settings.redis_prefix), lease_s=0.3)
    lost = asyncio.Event()
    await keeper.start()
    try:
        keeper.hold(RUN_ID, 1, lost.set)
        await redis.hset(key, "attempt", 2)  # another attempt took the run over
        await asyncio.wait_for(lost.wait(), 2)
        before = await lease_until(redis, key)
        await asyncio.sleep(0.3)
        assert await lease_until(redis, key) == before
    finally:
        await keeper.stop()


async def test_a_loop_stalled_past_the_limit_lets_its_leases_lapse(
    settings: Settings, record: tuple[Redis, str]
) -> None:
    redis, key = record
    keeper = LeaseKeeper(
        settings.redis_url, KeySpace(settings.redis_prefix), lease_s=0.3, stalled_loop_s=0.5
    )
    lost = asyncio.Event()
    await keeper.start()
    try:
        keeper.hold(RUN_ID, 1, lost.set)
        time.sleep(1.5)  # noqa: ASYNC251 (a deadlock, as far as the keeper can tell)
        now_s, now_us = await redis.time()
        assert await lease_until(redis, key) < now_s * 1000 + now_us // 1000  # it lapsed
        await asyncio.wait_for(lost.wait(), 2)  # and the attempt hears of it once it turns
    finally:
        await keeper.stop()
