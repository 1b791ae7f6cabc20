"""Fair scheduling between callers (issue 9): one caller's backlog never keeps another caller's
run waiting for a free slot longer than one run's worth of time.

A worker with two slots gets twenty slow runs of one caller, then one run of another: the
other caller's run takes the next slot that frees, not the slot after the backlog drains.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

import httpx

from runner.scheduling import WINDOW_MIN, ReadyJob, fair_order, window_size
from stream_store.settings import Settings
from tests.conftest import StartServer, StartWorker, schema_connection
from tests.test_caller_limits import ALICE, API_KEYS, BOB, NO_LIMITS

SLOTS = 2
BACKLOG = 20
TOKEN_DELAY_MS = 40
SLOW_TEXT = "one two three four five six seven eight"  # eight chunks: ~0.3 s per run


def job(name: str, owner: str, *, in_progress: bool = False) -> ReadyJob:
    return ReadyJob(job_id=name.encode(), owner=owner, in_progress=in_progress)


class TestFairOrder:
    """The order in which free slots take the ready jobs read (no service needed)."""

    def test_a_waiting_caller_goes_before_a_busy_callers_backlog(self) -> None:
        jobs = [job("a1", "a", in_progress=True), job("a2", "a", in_progress=True)]
        jobs += [job(f"a{i}", "a") for i in range(3, 7)] + [job("b1", "b")]
        assert fair_order(jobs) == [b"b1", b"a3", b"a4", b"a5", b"a6"]

    def test_callers_alternate_oldest_first_within_each(self) -> None:
        jobs = [job("a1", "a"), job("a2", "a"), job("a3", "a"), job("b1", "b"), job("b2", "b")]
        assert fair_order(jobs) == [b"a1", b"b1", b"a2", b"b2", b"a3"]

    def test_a_caller_alone_uses_every_slot_in_queue_order(self) -> None:
        jobs = [job("a1", "a", in_progress=True)] + [job(f"a{i}", "a") for i in range(2, 6)]
        assert fair_order(jobs) == [b"a2", b"a3", b"a4", b"a5"]

    def test_every_job_not_in_progress_is_offered_once(self) -> None:
        jobs = [job(f"{owner}{i}", owner) for i in range(30) for owner in "abc"]
        jobs += [job("x", ""), job("y", "", in_progress=True)]  # no record: one more owner
        ordered = fair_order(jobs)
        assert sorted(ordered) == sorted(j.job_id for j in jobs if not j.in_progress)

    def test_the_window_holds_a_full_backlog_ahead_of_a_newcomer(self) -> None:
        assert window_size(100, 50) == WINDOW_MIN
        assert window_size(2, 5000) > 5000


@dataclass(frozen=True)
class Timing:
    run_id: str
    owner: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


async def timings(settings: Settings) -> list[Timing]:
    async with await schema_connection(settings) as conn:
        rows = await (
            await conn.execute(
                "SELECT run_id::text, owner, created_at, started_at, finished_at"
                " FROM runstream_runs ORDER BY created_at"
            )
        ).fetchall()
    return [Timing(*row) for row in rows]


async def submit(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    body = {"input": {"messages": [{"role": "user", "content": SLOW_TEXT}]}}
    response = await client.post("/v1/runs", json=body, headers=headers)
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


async def test_another_callers_run_takes_the_next_free_slot_not_the_end_of_a_backlog(
    settings: Settings, start_server: StartServer, start_worker: StartWorker
) -> None:
    server = await start_server(api_keys=API_KEYS, **NO_LIMITS)
    await start_worker(worker_concurrency=SLOTS, fake_token_delay_ms=TOKEN_DELAY_MS)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        for _ in range(BACKLOG):
            await submit(client, ALICE)
        bob_run = await submit(client, BOB)
        async with asyncio.timeout(30):
            while True:
                runs = {t.run_id: t for t in await timings(settings)}
                if runs[bob_run].finished_at is not None:
                    break
                await asyncio.sleep(0.05)
    bob = runs[bob_run]
    assert bob.started_at is not None
    alice = [t for t in runs.values() if t.owner == "alice"]
    # Alice's runs that took a slot between Bob's submit and Bob's start.
    overtaking = [
        t
        for t in alice
        if t.started_at is not None and bob.created_at < t.started_at < bob.started_at
    ]
    durations = [
        (t.finished_at - t.started_at).total_seconds()
        for t in alice
        if t.started_at is not None and t.finished_at is not None
    ]
    wait = (bob.started_at - bob.created_at).total_seconds()
    print(
        f"bob waited {wait:.3f}s for a slot; {len(overtaking)} of alice's runs started meanwhile;"
        f" alice's runs took {min(durations):.3f}-{max(durations):.3f}s;"
        f" alice had {sum(t.started_at is None for t in alice)} not started when bob finished"
    )
    assert len(overtaking) <= SLOTS, overtaking
    assert wait <= 2 * max(durations) + 0.5, (wait, durations)
    assert any(t.started_at is None or t.started_at > bob.started_at for t in alice)
