"""LangGraph's crons, driven by LangGraph's own Python SDK (`langgraph_sdk`), unmodified.

The servers here fire no crons of their own (`cron_interval_s=0`) except where a test says
so: each test runs its own `CronScheduler`s with a clock it moves on, so a cron "every
minute" is due at once, and no test waits for a minute to pass. Wire details:
docs/langgraph.md, "Crons".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from server.callers.quotas import CallerQuotas, open_caller_quotas
from server.langgraph.cron_scheduler import CronScheduler, slot_key
from server.langgraph.schedules import next_run
from server.langgraph.submit import submit_scheduled
from server.langgraph.wire import RunCreate
from server.resources import Resources, open_resources
from stream_store.settings import Settings
from tests.conftest import StartServer, StartWorker, schema_connection
from tests.test_langgraph_api import API_KEYS, client_for, eventually, human

EVERY_MINUTE = "* * * * *"


def when(value: str) -> datetime:
    return datetime.fromisoformat(value)


@dataclass
class Clock:
    """The schedulers' "now", moved on by the test."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def sdk(start_server: StartServer, start_worker: StartWorker) -> LangGraphClient:
    server = await start_server(cron_interval_s=0)
    await start_worker()
    return client_for(server.url)


@pytest.fixture
async def deps(settings: Settings) -> AsyncIterator[tuple[Resources, CallerQuotas]]:
    """What a server process gives its scheduler, for the test's own schedulers."""
    async with (
        open_resources(settings) as resources,
        open_caller_quotas(resources.redis, settings) as quotas,
    ):
        yield resources, quotas


def scheduler(deps: tuple[Resources, CallerQuotas], clock: Clock, **kwargs: Any) -> CronScheduler:
    return CronScheduler(*deps, clock=clock, **kwargs)


async def cron_runs(sdk: LangGraphClient) -> list[tuple[str, dict[str, Any]]]:
    """(thread id, run) of every run of the caller's threads, oldest thread first."""
    found = []
    for thread in reversed(await sdk.threads.search(limit=100)):
        for run in await sdk.runs.list(thread["thread_id"]):
            found.append((thread["thread_id"], run))
    return found


# -- create, search, count, update, delete ------------------------------------------------------


async def test_crons_are_created_searched_counted_updated_and_deleted(
    sdk: LangGraphClient,
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    before = datetime.now(UTC)
    stateless = await sdk.crons.create(
        "chat",
        schedule=EVERY_MINUTE,
        input=human("daily news"),
        metadata={"team": "a"},
        on_run_completed="keep",
    )
    on_thread = await sdk.crons.create_for_thread(
        tid, "chat", schedule="30 9 * * 1-5", input=human("standup"), metadata={"team": "b"}
    )
    assert stateless["thread_id"] is None and on_thread["thread_id"] == tid
    assistant_id = (await sdk.assistants.get("chat"))["assistant_id"]
    assert stateless["assistant_id"] == on_thread["assistant_id"] == assistant_id
    assert stateless["schedule"] == EVERY_MINUTE and stateless["enabled"] is True
    assert stateless["on_run_completed"] == "keep" and stateless["metadata"] == {"team": "a"}
    assert stateless["payload"]["input"] == human("daily news")
    first = when(stateless["next_run_date"])
    # the next whole minute after it was made
    assert first.second == 0 and before < first <= before + timedelta(minutes=1, seconds=1)
    weekday_slot = when(on_thread["next_run_date"]).astimezone(UTC)
    assert (weekday_slot.hour, weekday_slot.minute, weekday_slot.weekday() < 5) == (9, 30, True)

    ids = {c["cron_id"] for c in await sdk.crons.search()}
    assert ids == {stateless["cron_id"], on_thread["cron_id"]}
    assert [c["cron_id"] for c in await sdk.crons.search(thread_id=tid)] == [on_thread["cron_id"]]
    assert [c["cron_id"] for c in await sdk.crons.search(metadata={"team": "a"})] == [
        stateless["cron_id"]
    ]
    assert len(await sdk.crons.search(assistant_id="chat")) == 2
    assert len(await sdk.crons.search(assistant_id=assistant_id, limit=1, offset=1)) == 1
    assert await sdk.crons.search(assistant_id="no-such-graph") == []
    by_next = await sdk.crons.search(sort_by="next_run_date", sort_order="asc")
    assert [c["cron_id"] for c in by_next] == [stateless["cron_id"], on_thread["cron_id"]]
    assert await sdk.crons.search(select=["cron_id", "schedule"], thread_id=tid) == [
        {"cron_id": on_thread["cron_id"], "schedule": "30 9 * * 1-5"}
    ]
    assert await sdk.crons.count() == 2
    assert await sdk.crons.count(thread_id=tid) == 1
    assert await sdk.crons.count(metadata={"team": "b"}) == 1

    end = datetime.now(UTC) + timedelta(days=3)
    updated = await sdk.crons.update(
        stateless["cron_id"],
        schedule="0 12 * * *",
        enabled=False,
        end_time=end,
        input=human("weekly news"),
    )
    assert updated["schedule"] == "0 12 * * *" and updated["enabled"] is False
    assert when(updated["end_time"]) == end
    assert when(updated["next_run_date"]).astimezone(UTC).hour == 12
    assert updated["payload"]["input"] == human("weekly news")
    assert updated["payload"]["metadata"] == {"team": "a"}  # what the update left out stays
    assert await sdk.crons.search(enabled=False) == [updated]
    unchanged = await sdk.crons.update(on_thread["cron_id"])  # nothing to change
    assert {**unchanged, "updated_at": None} == {**on_thread, "updated_at": None}
    cleared = await sdk.crons.update(stateless["cron_id"], end_time=None)
    assert cleared["end_time"] is None and cleared["schedule"] == "0 12 * * *"

    await sdk.crons.delete(stateless["cron_id"])
    assert [c["cron_id"] for c in await sdk.crons.search()] == [on_thread["cron_id"]]
    with pytest.raises(httpx.HTTPStatusError) as gone:
        await sdk.crons.delete(stateless["cron_id"])
    assert gone.value.response.status_code == 404
    await sdk.threads.delete(tid)  # a thread's crons go with it
    assert await sdk.crons.count() == 0


async def test_a_cron_in_a_timezone_is_scheduled_in_its_local_time(sdk: LangGraphClient) -> None:
    cron = await sdk.crons.create(
        "chat", schedule="0 9 * * *", timezone="Asia/Tokyo", input=human("ohayo")
    )
    assert cron["timezone"] == "Asia/Tokyo"
    assert when(cron["next_run_date"]).astimezone(UTC).hour == 0  # 09:00 in Tokyo (UTC+9)


async def test_a_created_assistants_cron_can_change_its_run_request(sdk: LangGraphClient) -> None:
    # the assistant is read before the cron's row is locked (one connection per request)
    assistant = await sdk.assistants.create(graph_id="chat", name="news desk")
    made = assistant["assistant_id"]
    cron = await sdk.crons.create(made, schedule=EVERY_MINUTE, input=human("a"))
    changed = await sdk.crons.update(cron["cron_id"], input=human("b"), metadata={"v": 2})
    assert changed["payload"]["input"] == human("b") and changed["metadata"] == {"v": 2}
    assert changed["assistant_id"] == assistant["assistant_id"]


def test_a_slot_in_the_hour_clocks_go_back_is_never_one_already_past() -> None:
    """cronsim gives a repeated local hour's first reading; the scheduler must not get a slot
    at or before now (it would fire it over and over)."""
    cases = [
        ("45 1 * * *", "America/New_York", "2026-11-01T06:10:00+00:00"),  # 01:10, second time
        ("30 2 * * *", "Europe/Berlin", "2025-10-26T01:05:00+00:00"),  # 02:05, second time
        ("* * * * *", "America/New_York", "2026-11-01T06:10:00+00:00"),
        ("*/15 1 * * *", "Europe/Berlin", "2026-10-25T00:50:00+00:00"),
    ]
    for schedule, timezone, after in cases:
        slot = next_run(schedule, timezone, when(after), None)
        assert slot is not None and slot > when(after), (schedule, timezone, slot)
        assert slot - when(after) <= timedelta(hours=25)  # a daily slot, a day with 25 hours


# -- bad input ------------------------------------------------------------------------------------


async def test_bad_crons_are_refused_saying_why_and_nothing_is_created(
    sdk: LangGraphClient,
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    attempts: dict[str, tuple[Callable[[], Awaitable[Any]], int, str]] = {
        "four fields": (
            lambda: sdk.crons.create("chat", schedule="* * * *", input=human("x")),
            422,
            "5 fields",
        ),
        "six fields": (
            lambda: sdk.crons.create("chat", schedule="0 * * * * *", input=human("x")),
            422,
            "5 fields",
        ),
        "bad minute": (
            lambda: sdk.crons.create("chat", schedule="61 * * * *", input=human("x")),
            422,
            "Bad minute",
        ),
        "30 February": (
            lambda: sdk.crons.create("chat", schedule="0 0 30 2 *", input=human("x")),
            422,
            "schedule",
        ),
        "unknown timezone": (
            lambda: sdk.crons.create(
                "chat", schedule=EVERY_MINUTE, timezone="Mars/Olympus", input=human("x")
            ),
            422,
            "timezone",
        ),
        "unknown assistant": (
            lambda: sdk.crons.create("no-such-graph", schedule=EVERY_MINUTE, input=human("x")),
            404,
            "assistant",
        ),
        "unknown thread": (
            lambda: sdk.crons.create_for_thread(
                "6f1c1a52-4d2b-4c55-9d1e-0b8b1d1f0a00",
                "chat",
                schedule=EVERY_MINUTE,
                input=human("x"),
            ),
            404,
            "not found",
        ),
        "no input": (
            lambda: sdk.crons.create("chat", schedule=EVERY_MINUTE),
            422,
            "input needs a message or a value of the graph's input keys",
        ),
        "unknown configurable key": (
            lambda: sdk.crons.create(
                "chat", schedule=EVERY_MINUTE, input=human("x"), config={"configurable": {"z": 1}}
            ),
            422,
            "z",
        ),
        "webhook": (
            lambda: sdk.crons.create(
                "chat", schedule=EVERY_MINUTE, input=human("x"), webhook="ftp://example.com"
            ),
            422,
            "scheme 'ftp' not allowed",  # LangGraph's URL policy (tests/test_webhooks.py)
        ),
    }
    for name, (attempt, status, says) in attempts.items():
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await attempt()
        assert refused.value.response.status_code == status, name
        assert says in refused.value.response.json()["detail"], name
    assert await sdk.crons.count() == 0

    cron = await sdk.crons.create_for_thread(tid, "chat", schedule=EVERY_MINUTE, input=human("x"))
    for change in (
        {"schedule": "every minute"},
        {"timezone": "Nowhere/Else"},
        {"input": {"messages": []}},
        {"webhook": "http://169.254.169.254/"},
    ):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await sdk.crons.update(cron["cron_id"], **change)  # type: ignore[arg-type]
        assert refused.value.response.status_code == 422, change
    assert await sdk.crons.search() == [cron]
    with pytest.raises(httpx.HTTPStatusError) as unknown:
        await sdk.crons.update("6f1c1a52-4d2b-4c55-9d1e-0b8b1d1f0a00", enabled=False)
    assert unknown.value.response.status_code == 404


# -- isolation ------------------------------------------------------------------------------------


async def test_another_key_gets_404_for_a_cron_and_sees_none_and_no_key_gets_401(
    start_server: StartServer,
) -> None:
    server = await start_server(api_keys=API_KEYS, cron_interval_s=0)
    alice, bob, nobody = (
        client_for(server.url, "key-a"),
        client_for(server.url, "key-b"),
        client_for(server.url),
    )
    tid = (await alice.threads.create())["thread_id"]
    cron = await alice.crons.create_for_thread(
        tid, "chat", schedule=EVERY_MINUTE, input=human("secret"), metadata={"who": "alice"}
    )
    cid = cron["cron_id"]
    attempts: dict[str, Callable[[LangGraphClient], Awaitable[Any]]] = {
        "crons.update": lambda c: c.crons.update(cid, enabled=False),
        "crons.update(schedule)": lambda c: c.crons.update(cid, schedule="0 0 * * *"),
        "crons.delete": lambda c: c.crons.delete(cid),
        "crons.create_for_thread": lambda c: c.crons.create_for_thread(
            tid, "chat", schedule=EVERY_MINUTE, input=human("x")
        ),
    }
    for name, attempt in attempts.items():
        for caller, status in ((bob, 404), (nobody, 401)):
            with pytest.raises(httpx.HTTPStatusError) as refused:
                await attempt(caller)
            assert refused.value.response.status_code == status, name
    assert await bob.crons.search() == []
    assert await bob.crons.search(thread_id=tid) == []
    assert await bob.crons.count(metadata={"who": "alice"}) == 0
    for listing in (nobody.crons.search(), nobody.crons.count()):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await listing
        assert refused.value.response.status_code == 401
    assert await alice.crons.search() == [cron]  # untouched


# -- firing ---------------------------------------------------------------------------------------


async def test_a_due_cron_fires_once_on_a_new_thread_whose_run_and_output_are_visible(
    sdk: LangGraphClient, deps: tuple[Resources, CallerQuotas]
) -> None:
    cron = await sdk.crons.create("chat", schedule=EVERY_MINUTE, input=human("what's new?"))
    slot = when(cron["next_run_date"])
    clock = Clock(slot - timedelta(seconds=1))
    fires = scheduler(deps, clock)
    assert await fires.tick() == 0  # not due yet
    clock.now = slot + timedelta(seconds=1)
    assert await fires.tick() == 1
    assert await fires.tick() == 0  # the slot is over: it moved on

    [(tid, run)] = await cron_runs(sdk)
    assert run["assistant_id"] == cron["assistant_id"]
    final = await sdk.runs.join(tid, run["run_id"])
    assert [m["type"] for m in final["messages"]] == ["human", "ai"]
    assert final["messages"][0]["content"] == "what's new?"
    assert (await sdk.runs.get(tid, run["run_id"]))["status"] == "success"
    [moved] = await sdk.crons.search()
    assert when(moved["next_run_date"]) == slot + timedelta(minutes=1)

    clock.now = slot + timedelta(minutes=1, seconds=1)
    assert await fires.tick() == 1  # the next slot: another run, on another new thread
    assert len({t for t, _ in await cron_runs(sdk)}) == 2


async def test_a_thread_cron_runs_on_its_thread(
    sdk: LangGraphClient, deps: tuple[Resources, CallerQuotas]
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    cron = await sdk.crons.create_for_thread(
        tid, "chat", schedule=EVERY_MINUTE, input=human("tick"), metadata={"from": "cron"}
    )
    slot = when(cron["next_run_date"])
    fires = scheduler(deps, Clock(slot + timedelta(seconds=1)))
    assert await fires.tick() == 1
    [run] = await sdk.runs.list(tid)
    assert run["metadata"] == {"from": "cron"}
    await sdk.runs.join(tid, run["run_id"])
    values = (await sdk.threads.get_state(tid))["values"]
    assert [m["type"] for m in values["messages"]] == ["human", "ai"]
    assert len(await sdk.threads.search()) == 1  # no other thread was made


async def test_slots_missed_while_no_scheduler_ran_fire_once(
    sdk: LangGraphClient, deps: tuple[Resources, CallerQuotas]
) -> None:
    cron = await sdk.crons.create("chat", schedule=EVERY_MINUTE, input=human("catch up"))
    slot = when(cron["next_run_date"])
    clock = Clock(slot + timedelta(minutes=10, seconds=30))  # ten slots missed
    fires = scheduler(deps, clock)
    assert await fires.tick() == 1
    assert await fires.tick() == 0
    assert len(await cron_runs(sdk)) == 1
    [moved] = await sdk.crons.search()
    assert when(moved["next_run_date"]) == slot + timedelta(minutes=11)  # the first after now


async def test_a_cron_fires_no_more_after_its_end_time_nor_while_disabled(
    sdk: LangGraphClient, deps: tuple[Resources, CallerQuotas]
) -> None:
    ending = await sdk.crons.create("chat", schedule=EVERY_MINUTE, input=human("last"))
    slot = when(ending["next_run_date"])
    await sdk.crons.update(ending["cron_id"], end_time=slot + timedelta(seconds=30))
    disabled = await sdk.crons.create(
        "chat", schedule=EVERY_MINUTE, input=human("off"), enabled=False
    )
    clock = Clock(slot + timedelta(seconds=1))
    fires = scheduler(deps, clock)
    assert await fires.tick() == 1  # the ending one's last slot; not the disabled one
    [ended] = await sdk.crons.search(enabled=True)
    assert ended["next_run_date"] is None
    clock.now = slot + timedelta(hours=1)
    assert await fires.tick() == 0
    assert len(await cron_runs(sdk)) == 1
    # enabled again, it fires from its next slot after now
    enabled = await sdk.crons.update(disabled["cron_id"], enabled=True)
    assert when(enabled["next_run_date"]) > datetime.now(UTC)


async def test_two_schedulers_racing_fire_each_slot_once(
    sdk: LangGraphClient, deps: tuple[Resources, CallerQuotas], settings: Settings
) -> None:
    crons = [
        await sdk.crons.create("chat", schedule=EVERY_MINUTE, input=human(f"race {i}"))
        for i in range(6)
    ]
    slot = max(when(c["next_run_date"]) for c in crons)
    async with (
        open_resources(settings) as other,  # a second server process's
        open_caller_quotas(other.redis, settings) as other_quotas,
    ):
        for minute in range(3):
            clock = Clock(slot + timedelta(minutes=minute, seconds=1))
            a, b = scheduler(deps, clock), scheduler((other, other_quotas), clock)
            claimed = await asyncio.gather(a.tick(), b.tick(), a.tick(), b.tick())
            assert sum(claimed) == len(crons), minute
    runs = await cron_runs(sdk)
    assert len(runs) == 3 * len(crons)
    assert len({run["run_id"] for _, run in runs}) == len(runs)


async def test_one_owners_many_due_crons_do_not_go_before_another_owners_one(
    start_server: StartServer, deps: tuple[Resources, CallerQuotas], settings: Settings
) -> None:
    """A pass takes one due cron per owner in turn: bob's one cron fires second, not after
    all of alice's, although hers were due earlier."""
    server = await start_server(api_keys=API_KEYS, cron_interval_s=0)
    alice, bob = client_for(server.url, "key-a"), client_for(server.url, "key-b")
    many = [
        await alice.crons.create("chat", schedule=EVERY_MINUTE, input=human(f"alice {i}"))
        for i in range(12)
    ]
    one = await bob.crons.create("chat", schedule=EVERY_MINUTE, input=human("bob"))
    slot = max(when(c["next_run_date"]) for c in [*many, one])
    async with await schema_connection(settings) as conn:
        # alice's all due a second before bob's, in the order she made them
        for i, cron in enumerate(many):
            await conn.execute(
                "UPDATE runstream_crons SET next_run_date = %s WHERE cron_id = %s",
                (slot - timedelta(seconds=1) + timedelta(milliseconds=i), cron["cron_id"]),
            )
        await conn.execute(
            "UPDATE runstream_crons SET next_run_date = %s WHERE cron_id = %s",
            (slot, one["cron_id"]),
        )
    fires = scheduler(deps, Clock(slot + timedelta(seconds=1)))
    assert await fires.tick() == len(many) + 1
    async with await schema_connection(settings) as conn:
        cur = await conn.execute(
            "SELECT r.owner = c.owner AS bobs FROM runstream_runs r,"
            " (SELECT owner FROM runstream_crons WHERE cron_id = %s) c ORDER BY r.created_at",
            (one["cron_id"],),
        )
        order = [row[0] for row in await cur.fetchall()]
    assert order == [False, True] + [False] * (len(many) - 1)


async def test_a_scheduler_dying_between_submit_and_moving_on_does_not_fire_the_slot_twice(
    sdk: LangGraphClient, deps: tuple[Resources, CallerQuotas]
) -> None:
    cron = await sdk.crons.create("chat", schedule=EVERY_MINUTE, input=human("once"))
    slot = when(cron["next_run_date"])
    clock = Clock(slot + timedelta(seconds=1))
    resources, quotas = deps
    # The dead scheduler: it claimed the slot and submitted its run, then never moved on.
    claimed = await resources.cron_records.claim_due(clock(), lease_s=0.2)
    assert claimed is not None and claimed.cron_id == cron["cron_id"]
    body = RunCreate(assistant_id="chat", input=human("once"))
    first = await submit_scheduled(
        resources, quotas, claimed.owner, body, None, slot_key(claimed.cron_id, slot)
    )
    assert first.created
    fires = scheduler(deps, clock)
    assert await fires.tick() == 0  # its claim holds until it lapses
    await asyncio.sleep(0.3)
    assert await fires.tick() == 1  # the slot, claimed again: its submit finds the run
    [(_, run)] = await cron_runs(sdk)
    assert run["run_id"] == first.run.run_id
    [moved] = await sdk.crons.search()
    assert when(moved["next_run_date"]) == slot + timedelta(minutes=1)


async def test_the_servers_own_scheduler_fires_a_due_cron(
    start_server: StartServer, start_worker: StartWorker, settings: Settings
) -> None:
    server = await start_server(cron_interval_s=0.05)
    await start_worker()
    sdk = client_for(server.url)
    cron = await sdk.crons.create("chat", schedule=EVERY_MINUTE, input=human("by itself"))
    async with await schema_connection(settings) as conn:  # due a second ago
        await conn.execute(
            "UPDATE runstream_crons SET next_run_date = now() - interval '1 second'"
            " WHERE cron_id = %s",
            (cron["cron_id"],),
        )
    before_firing = datetime.now(UTC)

    async def fired() -> bool:
        return len(await cron_runs(sdk)) == 1

    await eventually(fired, "the server's scheduler to fire the cron")
    after_firing = datetime.now(UTC)
    [(tid, run)] = await cron_runs(sdk)
    assert (await sdk.runs.join(tid, run["run_id"]))["messages"][0]["content"] == "by itself"
    [moved] = await sdk.crons.search()
    # the next whole minute after it fired (not after now: it may have fired at 59.9 s)
    assert before_firing < when(moved["next_run_date"]) <= after_firing + timedelta(minutes=1)
    assert len(await cron_runs(sdk)) == 1


async def test_retention_keeps_a_thread_with_a_cron_still_to_fire(
    sdk: LangGraphClient, start_worker: StartWorker
) -> None:
    kept = (await sdk.threads.create())["thread_id"]
    await sdk.crons.create_for_thread(kept, "chat", schedule=EVERY_MINUTE, input=human("x"))
    idle = (await sdk.threads.create())["thread_id"]
    await start_worker(thread_retention_s=1, reaper_interval_s=0.1)

    async def expired() -> bool:
        return [t["thread_id"] for t in await sdk.threads.search()] == [kept]

    await eventually(expired, "the idle thread to expire")
    await asyncio.sleep(0.3)  # a few more reaper passes
    assert await sdk.threads.get(kept) and await sdk.crons.count(thread_id=kept) == 1
    assert idle not in [t["thread_id"] for t in await sdk.threads.search()]


def test_settings_read_the_cron_interval() -> None:
    assert Settings.from_env({}, env_file="").cron_interval_s == 1.0
    assert Settings.from_env({"RUNSTREAM_CRON_INTERVAL_MS": "0"}, env_file="").cron_interval_s == 0
    assert (
        Settings.from_env({"RUNSTREAM_CRON_INTERVAL_MS": "250"}, env_file="").cron_interval_s
        == 0.25
    )
