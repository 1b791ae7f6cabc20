"""LangGraph's assistants, driven by LangGraph's own Python SDK (`langgraph_sdk`), unmodified.

A caller's assistants: created, read, searched, counted, updated (each update a version),
switched between versions and deleted; runs and crons made with one take its graph and its
configurable, under their own. The graphs' own assistants are every caller's and read-only.
Wire details: docs/langgraph.md, "Assistants".
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from psycopg import AsyncConnection

from server.callers.quotas import CallerQuotas, open_caller_quotas
from server.langgraph.conversions import assistant_id_for
from server.resources import Resources, open_resources
from stream_store.settings import Settings
from tests.conftest import StartServer, StartWorker, schema_connection
from tests.test_langgraph_api import API_KEYS, client_for, eventually, human, messages_of
from tests.test_langgraph_crons import EVERY_MINUTE, Clock, scheduler, when

GRAPHS = {"persona": "tests.custom_graphs:persona"}


@pytest.fixture
async def sdk(start_server: StartServer, start_worker: StartWorker) -> LangGraphClient:
    server = await start_server(graphs=GRAPHS, cron_interval_s=0)
    await start_worker(graphs=GRAPHS)
    return client_for(server.url)


@pytest.fixture
async def two(
    start_server: StartServer, start_worker: StartWorker
) -> tuple[LangGraphClient, LangGraphClient]:
    """Alice and bob, on one server with keys."""
    server = await start_server(graphs=GRAPHS, api_keys=API_KEYS, cron_interval_s=0)
    await start_worker(graphs=GRAPHS, api_keys=API_KEYS)
    return client_for(server.url, "key-a"), client_for(server.url, "key-b")


@pytest.fixture
async def deps(settings: Settings) -> AsyncIterator[tuple[Resources, CallerQuotas]]:
    """A server process's resources, for a test's own cron scheduler."""
    with_graphs = replace(settings, graphs=GRAPHS)
    async with (
        open_resources(with_graphs) as resources,
        open_caller_quotas(resources.redis, with_graphs) as quotas,
    ):
        yield resources, quotas


async def refused(call: Awaitable[Any], status: int) -> dict[str, Any]:
    """The error body of a call that must fail with `status`."""
    with pytest.raises(httpx.HTTPStatusError) as caught:
        await call
    assert caught.value.response.status_code == status, caught.value.response.text
    body: dict[str, Any] = caught.value.response.json()
    return body


async def answer(sdk: LangGraphClient, assistant_id: str, **kwargs: Any) -> str:
    """The last message of a stateless run of `assistant_id`, waited for."""
    out = await sdk.runs.wait(None, assistant_id, input=human("hello"), **kwargs)
    assert isinstance(out, dict), out
    return str(messages_of(out)[-1][1])


def pirate(**extra: Any) -> dict[str, Any]:
    return {"graph_id": "persona", "context": {"persona": "pirate"}, **extra}


# -- create, read, search, count ------------------------------------------------------------


async def test_created_assistants_are_read_searched_and_counted_beside_the_graphs(
    sdk: LangGraphClient,
) -> None:
    graphs = await sdk.assistants.count()
    made = await sdk.assistants.create(
        **pirate(),
        metadata={"team": "a"},
        name="Pirate Bot",
        description="talks like a pirate",
    )
    assert uuid.UUID(made["assistant_id"])
    assert made["graph_id"] == "persona" and made["version"] == 1
    assert made["context"] == {"persona": "pirate"}
    assert made["config"] == {"configurable": {"persona": "pirate"}}  # kept in step
    assert made["metadata"] == {"team": "a"} and made["name"] == "Pirate Bot"
    assert made["description"] == "talks like a pirate"
    plain = await sdk.assistants.create("chat", config={"configurable": {"fake_token_delay_ms": 0}})
    assert plain["name"] == "Untitled" and plain["context"] == {"fake_token_delay_ms": 0}
    assert await sdk.assistants.get(made["assistant_id"]) == made

    assert await sdk.assistants.count() == graphs + 2
    assert [a["assistant_id"] for a in await sdk.assistants.search(metadata={"team": "a"})] == [
        made["assistant_id"]
    ]
    by_graph = await sdk.assistants.search(graph_id="persona")
    assert {a["assistant_id"] for a in by_graph} == {
        made["assistant_id"],
        assistant_id_for("persona"),
    }
    assert await sdk.assistants.count(graph_id="persona") == 2
    # name: a part of it, in any case, as LangGraph matches it
    assert [a["assistant_id"] for a in await sdk.assistants.search(name="pirate")] == [
        made["assistant_id"]
    ]
    assert await sdk.assistants.count(name="PIRATE b") == 1
    newest = await sdk.assistants.search(limit=2)
    assert [a["assistant_id"] for a in newest] == [plain["assistant_id"], made["assistant_id"]]
    by_name = await sdk.assistants.search(sort_by="name", sort_order="asc", limit=100)
    names = [a["name"].lower() for a in by_name]
    assert names == sorted(names) and len(names) == graphs + 2
    assert await sdk.assistants.search(select=["assistant_id", "version"], name="pirate") == [
        {"assistant_id": made["assistant_id"], "version": 1}
    ]
    page = await sdk.assistants.search(limit=1, offset=1, response_format="object")
    assert page["next"] == "2" and len(page["assistants"]) == 1
    last = await sdk.assistants.search(limit=5, offset=graphs, response_format="object")
    assert last["next"] is None and len(last["assistants"]) == 2

    schemas = await sdk.assistants.get_schemas(made["assistant_id"])
    assert schemas["graph_id"] == "persona"
    drawn = await sdk.assistants.get_graph(made["assistant_id"])
    assert {n["id"] for n in drawn["nodes"]} >= {"greet"}


async def test_a_taken_id_is_409_unless_if_exists_is_do_nothing(sdk: LangGraphClient) -> None:
    chosen = str(uuid.uuid4())
    first = await sdk.assistants.create(**pirate(), assistant_id=chosen, name="first")
    assert first["assistant_id"] == chosen
    error = await refused(sdk.assistants.create(**pirate(), assistant_id=chosen), 409)
    assert error["code"] == "assistant_exists" and chosen in error["detail"]
    again = await sdk.assistants.create(
        "chat", assistant_id=chosen, if_exists="do_nothing", name="second"
    )
    assert again == first  # the existing one, unchanged
    system = assistant_id_for("chat")
    await refused(sdk.assistants.create("chat", assistant_id=system), 409)
    kept = await sdk.assistants.create("chat", assistant_id=system, if_exists="do_nothing")
    assert kept == await sdk.assistants.get("chat")


# -- versions ---------------------------------------------------------------------------------


async def test_updates_are_versions_listed_newest_first_and_set_latest_switches_back(
    sdk: LangGraphClient,
) -> None:
    made = await sdk.assistants.create(**pirate(), metadata={"a": 1}, name="v1")
    aid = made["assistant_id"]
    second = await sdk.assistants.update(aid, context={"persona": "ninja"}, metadata={"b": 2})
    assert second["version"] == 2 and second["name"] == "v1"  # what is left out stays
    assert second["context"] == {"persona": "ninja"}
    assert second["config"]["configurable"] == {"persona": "ninja"}
    assert second["metadata"] == {"a": 1, "b": 2}  # merged
    third = await sdk.assistants.update(aid, name="v3", graph_id="chat", context={})
    assert (third["version"], third["graph_id"], third["context"]) == (3, "chat", {})
    assert await sdk.assistants.get(aid) == third

    versions = await sdk.assistants.get_versions(aid)
    assert [v["version"] for v in versions] == [3, 2, 1]
    assert [v["name"] for v in versions] == ["v3", "v1", "v1"]
    assert versions[2]["context"] == {"persona": "pirate"}
    assert set(versions[0]) == {
        "assistant_id",
        "graph_id",
        "name",
        "description",
        "config",
        "context",
        "metadata",
        "version",
        "created_at",
    }
    assert [v["version"] for v in await sdk.assistants.get_versions(aid, limit=1, offset=1)] == [2]
    filtered = await sdk.assistants.get_versions(aid, metadata={"b": 2})
    assert [v["version"] for v in filtered] == [3, 2]

    back = await sdk.assistants.set_latest(aid, 1)
    assert (back["version"], back["graph_id"], back["name"]) == (1, "persona", "v1")
    assert back["context"] == {"persona": "pirate"} and back["metadata"] == {"a": 1}
    assert await answer(sdk, aid) == "as pirate"  # runs take the active version
    assert [v["version"] for v in await sdk.assistants.get_versions(aid)] == [3, 2, 1]
    fourth = await sdk.assistants.update(aid, metadata={"c": 3})
    assert fourth["version"] == 4 and fourth["context"] == {"persona": "pirate"}
    assert fourth["metadata"] == {"a": 1, "c": 3}
    error = await refused(sdk.assistants.set_latest(aid, 9), 404)
    assert "Version 9" in error["detail"]
    assert (await sdk.assistants.get(aid))["version"] == 4


async def test_the_graphs_own_assistants_are_read_only(sdk: LangGraphClient) -> None:
    chat = await sdk.assistants.get("chat")
    for call in (
        sdk.assistants.update("chat", metadata={"x": 1}),
        sdk.assistants.update(chat["assistant_id"], name="mine"),
        sdk.assistants.delete(chat["assistant_id"]),
        sdk.assistants.set_latest("chat", 1),
    ):
        error = await refused(call, 409)
        assert error["code"] == "assistant_read_only"
        assert "POST /assistants" in error["detail"]
    assert await sdk.assistants.get("chat") == chat
    [only] = await sdk.assistants.get_versions("chat")
    assert (only["version"], only["graph_id"], only["assistant_id"]) == (
        1,
        "chat",
        chat["assistant_id"],
    )


# -- runs and crons ---------------------------------------------------------------------------


async def test_runs_of_a_created_assistant_take_its_graph_and_configurable_under_their_own(
    sdk: LangGraphClient,
) -> None:
    made = await sdk.assistants.create(**pirate())
    aid = made["assistant_id"]
    assert await answer(sdk, "persona") == "as nobody"  # the graph's own: no configurable
    assert await answer(sdk, aid) == "as pirate"
    assert await answer(sdk, aid, context={"persona": "ninja"}) == "as ninja"  # the run's wins
    assert await answer(sdk, aid, config={"configurable": {"persona": "monk"}}) == "as monk"

    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    run = await sdk.runs.create(tid, aid, input=human("hi"))
    assert run["assistant_id"] == aid
    assert "assistant_id" not in run["kwargs"]
    await sdk.runs.join(tid, run["run_id"])
    assert (await sdk.runs.get(tid, run["run_id"]))["assistant_id"] == aid
    assert (await sdk.runs.list(tid))[0]["assistant_id"] == aid
    streamed = [
        p async for p in sdk.runs.stream(tid, aid, input=human("again"), stream_mode="custom")
    ]
    assert streamed[0].data["run_id"]
    assert [p.data["persona"] for p in streamed if p.event == "custom"] == ["pirate"]

    await sdk.assistants.update(aid, context={"persona": "bard"})
    assert await answer(sdk, aid) == "as bard"  # each run reads the active version
    # the graph's rule for configurable still holds: an undeclared key is refused
    error = await refused(sdk.runs.wait(None, aid, input=human("x"), context={"evil": 1}), 422)
    assert "evil" in error["detail"]


async def test_a_cron_of_a_created_assistant_fires_with_its_configurable(
    sdk: LangGraphClient, deps: tuple[Resources, CallerQuotas]
) -> None:
    made = await sdk.assistants.create(**pirate())
    aid = made["assistant_id"]
    cron = await sdk.crons.create(aid, schedule=EVERY_MINUTE, input=human("ahoy"))
    assert cron["assistant_id"] == aid
    other = await sdk.crons.create("persona", schedule=EVERY_MINUTE, input=human("plain"))
    assert [c["cron_id"] for c in await sdk.crons.search(assistant_id=aid)] == [cron["cron_id"]]
    assert [c["cron_id"] for c in await sdk.crons.search(assistant_id="persona")] == [
        other["cron_id"]
    ]
    assert await sdk.crons.count(assistant_id=aid) == 1
    await sdk.crons.delete(other["cron_id"])

    fires = scheduler(deps, Clock(when(cron["next_run_date"]) + timedelta(seconds=1)))
    assert await fires.tick() == 1
    [thread] = await sdk.threads.search()
    [run] = await sdk.runs.list(thread["thread_id"])
    assert run["assistant_id"] == aid
    final = await sdk.runs.join(thread["thread_id"], run["run_id"])
    assert messages_of(final)[-1] == ("ai", "as pirate")

    await sdk.assistants.delete(aid)  # its crons go with it, as in LangGraph
    assert await sdk.crons.count() == 0


# -- deleting ---------------------------------------------------------------------------------


async def test_deleting_an_assistant_cancels_its_runs_keeps_them_and_its_threads(
    sdk: LangGraphClient,
) -> None:
    made = await sdk.assistants.create(**pirate())
    aid = made["assistant_id"]
    tid = (await sdk.threads.create())["thread_id"]
    done = await sdk.runs.create(tid, aid, input=human("one"))
    await sdk.runs.join(tid, done["run_id"])
    slow = await sdk.assistants.create(
        "chat", config={"configurable": {"fake_token_delay_ms": 200}}
    )
    busy_tid = (await sdk.threads.create())["thread_id"]
    busy = await sdk.runs.create(busy_tid, slow["assistant_id"], input=human("long " * 50))

    async def running() -> bool:
        return (await sdk.runs.get(busy_tid, busy["run_id"]))["status"] == "running"

    await eventually(running, "the slow run to start")
    await sdk.assistants.delete(slow["assistant_id"])

    async def cancelled() -> bool:
        return (await sdk.runs.get(busy_tid, busy["run_id"]))["status"] == "interrupted"

    await eventually(cancelled, "the deleted assistant's run to be cancelled")

    await sdk.assistants.delete(aid)
    await refused(sdk.assistants.get(aid), 404)
    await refused(sdk.assistants.get_versions(aid), 404)
    await refused(sdk.assistants.delete(aid), 404)
    await refused(sdk.runs.create(tid, aid, input=human("two")), 404)
    kept = await sdk.runs.get(tid, done["run_id"])  # its runs and threads stay
    assert kept["assistant_id"] == aid and kept["status"] == "success"
    assert (await sdk.threads.get(tid))["thread_id"] == tid


async def test_delete_threads_deletes_the_threads_the_assistant_ran_on(
    sdk: LangGraphClient, settings: Settings
) -> None:
    made = await sdk.assistants.create(**pirate())
    aid = made["assistant_id"]
    ran_on = (await sdk.threads.create())["thread_id"]
    run = await sdk.runs.create(ran_on, aid, input=human("one"))
    await sdk.runs.join(ran_on, run["run_id"])
    named = (await sdk.threads.create(metadata={"assistant_id": aid}))["thread_id"]
    other = (await sdk.threads.create())["thread_id"]
    await sdk.runs.join(
        other, (await sdk.runs.create(other, "persona", input=human("x")))["run_id"]
    )

    await sdk.assistants.delete(aid, delete_threads=True)
    assert [t["thread_id"] for t in await sdk.threads.search()] == [other]
    for gone in (ran_on, named):
        await refused(sdk.threads.get(gone), 404)
    async with await schema_connection(settings) as conn:
        cur = await conn.execute("SELECT count(*) FROM runstream_assistant_versions")
        assert await cur.fetchone() == (0,)


async def blocked_on(holder: AsyncConnection[Any], call: asyncio.Task[Any]) -> None:
    """Wait until `call` is done or waits on a lock `holder` holds (its transaction still
    open), so a test can let the two meet in one order, without sleeping."""

    async def waiting_or_done() -> bool:
        cur = await holder.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity"
            " WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid)))"
        )
        row = await cur.fetchone()
        return call.done() or bool(row and row[0])

    await eventually(waiting_or_done, "the call to wait on the held lock")


async def test_delete_threads_is_all_or_nothing_when_a_run_comes_in_meanwhile(
    sdk: LangGraphClient, settings: Settings
) -> None:
    """The busy check and the deletes are one transaction under the threads' locks: a run
    submitted on one of them while the delete goes on makes it 409 with every thread kept."""
    aid = (await sdk.assistants.create(**pirate()))["assistant_id"]
    first = (await sdk.threads.create(metadata={"assistant_id": aid}))["thread_id"]
    second = (await sdk.threads.create(metadata={"assistant_id": aid}))["thread_id"]
    async with await schema_connection(settings) as holder:
        async with holder.transaction():  # a submit on `first`: its row locked, a run queued
            await holder.execute(
                "SELECT 1 FROM runstream_threads WHERE thread_id = %s FOR UPDATE", (first,)
            )
            await holder.execute(
                "INSERT INTO runstream_runs (run_id, thread_id, owner, graph, status, input)"
                " SELECT %s, thread_id, owner, 'persona', 'queued', '{}'"
                " FROM runstream_threads WHERE thread_id = %s",
                (str(uuid.uuid4()), first),
            )
            delete = asyncio.create_task(sdk.assistants.delete(aid, delete_threads=True))
            await blocked_on(holder, delete)
        busy = await refused(delete, 409)
        assert busy["code"] == "thread_busy" and first in busy["detail"], busy
        for kept in (first, second):
            assert (await sdk.threads.get(kept))["thread_id"] == kept
        assert len(await sdk.assistants.get_versions(aid)) == 1
        await holder.execute(  # that run ends: the delete goes through, all of it
            "UPDATE runstream_runs SET status = 'cancelled' WHERE thread_id = %s", (first,)
        )
        await holder.execute(  # a run waiting at an interrupt is over, to LangGraph
            "INSERT INTO runstream_runs (run_id, thread_id, owner, graph, status, input)"
            " SELECT %s, thread_id, owner, 'persona', 'interrupted', '{}'"
            " FROM runstream_threads WHERE thread_id = %s",
            (str(uuid.uuid4()), second),
        )
    await sdk.assistants.delete(aid, delete_threads=True)
    for gone in (first, second):
        await refused(sdk.threads.get(gone), 404)
    await refused(sdk.assistants.get(aid), 404)


async def test_a_cron_made_while_its_assistant_is_deleted_is_404_and_not_left_behind(
    sdk: LangGraphClient, settings: Settings
) -> None:
    """A cron's insert holds its assistant's row: a delete under way makes the create 404, as
    after the delete, instead of leaving a cron that names no assistant."""
    aid = (await sdk.assistants.create(**pirate()))["assistant_id"]
    async with await schema_connection(settings) as holder:
        async with holder.transaction():  # the delete's transaction, not yet committed
            await holder.execute("DELETE FROM runstream_assistants WHERE assistant_id = %s", (aid,))
            await holder.execute("DELETE FROM runstream_crons WHERE assistant_id = %s", (aid,))
            create = asyncio.create_task(
                sdk.crons.create(aid, schedule=EVERY_MINUTE, input=human("x"))
            )
            await blocked_on(holder, create)
        error = await refused(create, 404)
        assert error["detail"] == f"assistant {aid} not found", error
        cur = await holder.execute("SELECT count(*) FROM runstream_crons")
        assert await cur.fetchone() == (0,)
    assert await sdk.crons.search() == []


async def test_a_caller_keeps_at_most_its_limit_of_assistants_and_crons_even_when_racing(
    start_server: StartServer, start_worker: StartWorker
) -> None:
    server = await start_server(
        graphs=GRAPHS, api_keys=API_KEYS, cron_interval_s=0, max_assistants=2, max_crons=2
    )
    await start_worker(graphs=GRAPHS, api_keys=API_KEYS)
    alice, bob = client_for(server.url, "key-a"), client_for(server.url, "key-b")
    # five at once, two places: the count is taken under the caller's lock
    tried = await asyncio.gather(
        *(alice.assistants.create(**pirate()) for _ in range(5)), return_exceptions=True
    )
    made = [a["assistant_id"] for a in tried if isinstance(a, dict)]
    assert len(made) == 2, tried
    over = await refused(alice.assistants.create(**pirate()), 409)
    assert over["code"] == "too_many_assistants" and "RUNSTREAM_MAX_ASSISTANTS" in over["detail"]
    assert await alice.assistants.count(graph_id="persona") == 2 + 1  # and the graph's own
    await bob.assistants.create(**pirate())  # another caller's places are its own
    crons = await asyncio.gather(
        *(
            alice.crons.create(made[0], schedule=EVERY_MINUTE, input=human(str(i)))
            for i in range(5)
        ),
        return_exceptions=True,
    )
    assert len([c for c in crons if isinstance(c, dict)]) == 2, crons
    over = await refused(
        alice.crons.create("persona", schedule=EVERY_MINUTE, input=human("x")), 409
    )
    assert over["code"] == "too_many_crons"
    assert len(await alice.crons.search()) == 2
    # deleting one makes room again
    await alice.assistants.delete(made[1])
    await alice.assistants.create(**pirate())
    await alice.crons.delete((await alice.crons.search())[0]["cron_id"])
    await alice.crons.create("persona", schedule=EVERY_MINUTE, input=human("y"))


# -- bad input and isolation ------------------------------------------------------------------


async def test_bad_assistants_are_refused_saying_why_and_nothing_changes(
    sdk: LangGraphClient,
) -> None:
    before = await sdk.assistants.count()
    big = {f"k{i}": "x" * 400 for i in range(60)}  # over RUNSTREAM_MAX_METADATA_BYTES
    attempts: dict[str, tuple[Callable[[], Awaitable[Any]], int, str]] = {
        "unknown graph": (lambda: sdk.assistants.create("nope"), 404, "registered graphs"),
        "undeclared key": (
            lambda: sdk.assistants.create("persona", context={"mood": "grim"}),
            422,
            "mood",
        ),
        "reserved key": (
            lambda: sdk.assistants.create("persona", config={"configurable": {"thread_id": "x"}}),
            422,
            "reserved",
        ),
        "configurable not an object": (
            lambda: sdk.assistants.create("persona", config={"configurable": [1]}),
            422,
            "configurable",
        ),
        "both": (
            lambda: sdk.assistants.create(
                "persona",
                config={"configurable": {"persona": "a"}},
                context={"persona": "b"},
            ),
            422,
            "not both",
        ),
        "config not an object": (
            lambda: sdk.assistants.create("persona", config=[1]),  # type: ignore[arg-type]
            422,
            "config",
        ),
        "metadata too big": (
            lambda: sdk.assistants.create("persona", metadata=big),
            413,
            "RUNSTREAM_MAX_METADATA_BYTES",
        ),
        "name too long": (
            lambda: sdk.assistants.create("persona", name="n" * 256),
            413,
            "name",
        ),
        "id not a UUID": (
            lambda: sdk.assistants.create("persona", assistant_id="not-a-uuid"),
            422,  # as LangGraph's "Invalid assistant ID: must be a UUID"
            "UUID",
        ),
    }
    for what, (call, status, says) in attempts.items():
        error = await refused(call(), status)
        assert says in error["detail"], (what, error)
    assert await sdk.assistants.count() == before

    made = await sdk.assistants.create(**pirate())
    aid = made["assistant_id"]
    for call, status in (
        (sdk.assistants.update(aid, graph_id="nope"), 404),
        (sdk.assistants.update(aid, context={"mood": "x"}), 422),
        (sdk.assistants.update(aid, graph_id="chat"), 422),  # chat takes no `persona`
        (sdk.assistants.update(aid, metadata=big), 413),
    ):
        await refused(call, status)
    assert await sdk.assistants.get(aid) == made
    assert len(await sdk.assistants.get_versions(aid)) == 1
    await refused(sdk.assistants.get(str(uuid.uuid4())), 404)
    await refused(sdk.assistants.get("not-a-graph"), 404)


async def test_another_key_gets_404_on_every_created_assistant_route_and_never_sees_one(
    two: tuple[LangGraphClient, LangGraphClient],
) -> None:
    alice, bob = two
    made = await alice.assistants.create(**pirate(), metadata={"who": "alice"})
    aid = made["assistant_id"]
    unknown = str(uuid.uuid4())

    def attempts(target: str) -> dict[str, Awaitable[Any]]:
        return {
            "get": bob.assistants.get(target),
            "update": bob.assistants.update(target, metadata={"x": 1}),
            "delete": bob.assistants.delete(target),
            "get_versions": bob.assistants.get_versions(target),
            "set_latest": bob.assistants.set_latest(target, 1),
            "get_graph": bob.assistants.get_graph(target),
            "get_schemas": bob.assistants.get_schemas(target),
            "runs.wait": bob.runs.wait(None, target, input=human("x")),
            "crons.create": bob.crons.create(target, schedule=EVERY_MINUTE, input=human("x")),
        }

    for (what, not_yours), not_found in zip(
        attempts(aid).items(), attempts(unknown).values(), strict=True
    ):
        mine = await refused(not_yours, 404)
        nobodys = await refused(not_found, 404)
        assert mine["detail"].replace(aid, "<id>") == nobodys["detail"].replace(unknown, "<id>"), (
            what
        )
    assert aid not in str(await bob.assistants.search(limit=100))
    assert await bob.assistants.count(metadata={"who": "alice"}) == 0
    assert await bob.assistants.search(graph_id="persona") == [await bob.assistants.get("persona")]
    assert await bob.crons.search(assistant_id=aid) == []
    for if_exists in ("raise", "do_nothing"):
        taken = await refused(
            bob.assistants.create("chat", assistant_id=aid, if_exists=if_exists),  # type: ignore[arg-type]
            409,
        )
        assert taken["code"] == "assistant_exists"
    assert await alice.assistants.get(aid) == made
    assert len(await alice.assistants.get_versions(aid)) == 1
