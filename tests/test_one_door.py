"""One door per resource (issue 31): every rule holds on every route, whichever API it is in.

The app's own route table is walked; a route this module does not describe fails the test, so
a new route cannot skip the matrix. Each route is sent a request that alice, signed in with
every right, could make about her own thread, runs, assistant, cron and store item, as:

- nobody (no credentials): 401;
- bob, another owner: alice's objects are unknown ids (404);
- alice with a token the project's `@auth.on` handler refuses: 403;
- alice with a token whose handler returns a filter nothing matches: her objects are not
  found (404), listings show none of them, a store read finds nothing;
- alice with her budget for the route spent: 429.

After each condition nothing alice has changed: her rows in Postgres (runs, threads,
assistants, crons, evaluations, store items, checkpoints) and her keys in Redis. The project
is tests/projects/door; the rules are docs/security.md's table "One door per resource".
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import httpx
import pytest
from psycopg.rows import dict_row
from redis.asyncio import Redis

from stream_store.assistant_ids import assistant_id_for
from stream_store.settings import Settings
from stream_store.store import owner_label
from tests.conftest import StartServer, StartWorker, schema_connection
from tests.processes import ROOT
from tests.sse import iter_events
from tests.test_bad_input import send
from tests.test_owner_matrix import filled, route_table

PROJECT = ROOT / "tests" / "projects" / "door" / "langgraph.json"

Ids = dict[str, str]
Build = Callable[[Ids], tuple[str, dict[str, Any]]]


class Reach(Enum):
    """What a route reaches, which says what each condition must answer."""

    OBJECT = "names one of alice's objects: unknown to bob, hidden by a filter"
    LISTING = "lists or counts the caller's own: none of alice's for bob or through a filter"
    CREATE = "makes something new: a filter has nothing to hide (LangGraph ignores it)"
    STORE = "the caller's own store items: a filter hides alice's item"
    STORE_PUT = "writes a store item: a filter refuses a value, or a replaced item, it leaves out"
    PRUNE = "skips an id it does not find (200); a filter that leaves one out refuses all (404)"
    NAMESPACES = "the caller's store namespaces: they hold no values for a filter to match"
    NOT_SERVED = "not served: 404 `not_served` for any signed-in caller"
    RPC = (
        "A2A (JSON-RPC): alice's task or assistant is an unknown one to bob and through a"
        " filter, a JSON-RPC error (-32001, -32602; the card's a 400), as LangGraph answers"
    )
    PUBLIC = "no caller data: health, metrics, docs, the page"


class Budget(Enum):
    SUBMITS = "too_many_submits"
    WRITES = "too_many_writes"
    QUERIES = "too_many_queries"


@dataclass(frozen=True)
class Route:
    reach: Reach
    requests: tuple[Build, ...] = ()
    budget: Budget | None = None  # the per-minute budget the route counts against, if any


def at(template: str, body: Any = None, headers: dict[str, str] | None = None) -> Build:
    def build(ids: Ids) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {} if body is None else {"json": filled(body, ids)}
        return template.format(**ids), {**kwargs, **({"headers": headers} if headers else {})}

    return build


def _route(reach: Reach, *requests: Build, budget: Budget | None = None) -> Route:
    return Route(reach, requests, budget)


V1_RUN = {"input": {"messages": [{"role": "user", "content": "hi"}]}}
LG_RUN = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}}
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
A2A_ACCEPT = {"Accept": "application/json"}
CHAT_AGENT, APPROVAL_AGENT = assistant_id_for("chat"), assistant_id_for("approval")


def a2a(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


A2A_SEND = {"message": {"role": "user", "parts": [{"text": "hi"}], "messageId": "door"}}
CHECKPOINT_ID = "1f0a0b1c-2d3e-6f40-8000-000000000000"
OBJ, LIST, NEW, STORE = Reach.OBJECT, Reach.LISTING, Reach.CREATE, Reach.STORE
SUBMITS, WRITES, QUERIES = Budget.SUBMITS, Budget.WRITES, Budget.QUERIES

ROUTES: dict[tuple[str, str], Route] = {
    # -- /v1 ---------------------------------------------------------------------------------
    ("POST", "/v1/runs"): _route(
        OBJ, at("/v1/runs", {**V1_RUN, "thread_id": "{thread}"}), budget=SUBMITS
    ),
    ("GET", "/v1/runs/{run_id:str}"): _route(OBJ, at("/v1/runs/{run}")),
    ("POST", "/v1/runs/{run_id:str}/cancel"): _route(
        OBJ, at("/v1/runs/{pending}/cancel"), budget=WRITES
    ),
    ("GET", "/v1/runs/{run_id:str}/evaluations"): _route(OBJ, at("/v1/runs/{run}/evaluations")),
    ("GET", "/v1/runs/{run_id:str}/webhooks"): _route(OBJ, at("/v1/runs/{run}/webhooks")),
    ("GET", "/v1/runs/{run_id:str}/events"): _route(OBJ, at("/v1/runs/{run}/events")),
    ("POST", "/v1/runs/{run_id:str}/resume"): _route(
        OBJ, at("/v1/runs/{pending}/resume", {"resume": {"approve": True}}), budget=WRITES
    ),
    ("GET", "/v1/threads"): _route(LIST, at("/v1/threads")),
    ("POST", "/v1/threads"): _route(NEW, at("/v1/threads", {}), budget=SUBMITS),
    ("DELETE", "/v1/threads/{thread_id:str}"): _route(
        OBJ, at("/v1/threads/{thread}"), budget=WRITES
    ),
    ("GET", "/v1/threads/{thread_id:str}"): _route(OBJ, at("/v1/threads/{thread}")),
    ("GET", "/v1/threads/{thread_id:str}/evaluations"): _route(
        OBJ, at("/v1/threads/{thread}/evaluations")
    ),
    ("GET", "/v1/threads/{thread_id:str}/runs"): _route(OBJ, at("/v1/threads/{thread}/runs")),
    ("POST", "/v1/threads/{thread_id:str}/runs"): _route(
        OBJ, at("/v1/threads/{thread}/runs", V1_RUN), budget=SUBMITS
    ),
    # -- LangGraph API: threads ----------------------------------------------------------------
    ("POST", "/threads"): _route(NEW, at("/threads", {}), budget=SUBMITS),
    ("POST", "/threads/count"): _route(LIST, at("/threads/count", {}), budget=QUERIES),
    ("POST", "/threads/search"): _route(LIST, at("/threads/search", {}), budget=QUERIES),
    ("POST", "/threads/prune"): _route(
        Reach.PRUNE, at("/threads/prune", {"thread_ids": ["{thread}"]}), budget=WRITES
    ),
    ("DELETE", "/threads/{thread_id:str}"): _route(OBJ, at("/threads/{thread}"), budget=WRITES),
    ("GET", "/threads/{thread_id:str}"): _route(OBJ, at("/threads/{thread}")),
    ("PATCH", "/threads/{thread_id:str}"): _route(
        OBJ, at("/threads/{thread}", {"metadata": {"mine": "x"}}), budget=WRITES
    ),
    ("POST", "/threads/{thread_id:str}/commands"): _route(
        Reach.NOT_SERVED, at("/threads/{thread}/commands", {"command": {}})
    ),
    ("POST", "/threads/{thread_id:str}/copy"): _route(
        OBJ, at("/threads/{thread}/copy", {}), budget=WRITES
    ),
    ("GET", "/threads/{thread_id:str}/history"): _route(
        OBJ, at("/threads/{thread}/history"), budget=QUERIES
    ),
    ("POST", "/threads/{thread_id:str}/history"): _route(
        OBJ, at("/threads/{thread}/history", {"limit": 5}), budget=QUERIES
    ),
    ("GET", "/threads/{thread_id:str}/state"): _route(OBJ, at("/threads/{thread}/state")),
    ("POST", "/threads/{thread_id:str}/state"): _route(
        OBJ, at("/threads/{thread}/state", {"values": {"messages": []}}), budget=WRITES
    ),
    ("POST", "/threads/{thread_id:str}/state/bulk"): _route(
        Reach.NOT_SERVED, at("/threads/{thread}/state/bulk", {"supersteps": []})
    ),
    ("POST", "/threads/{thread_id:str}/state/checkpoint"): _route(
        OBJ,
        at("/threads/{thread}/state/checkpoint", {"checkpoint": {"checkpoint_id": CHECKPOINT_ID}}),
    ),
    ("GET", "/threads/{thread_id:str}/state/{checkpoint_id:str}"): _route(
        OBJ, at("/threads/{thread}/state/" + CHECKPOINT_ID)
    ),
    ("GET", "/threads/{thread_id:str}/stream"): _route(OBJ, at("/threads/{thread}/stream")),
    ("GET", "/threads/{thread_id:str}/stream/{rest:path}"): _route(
        Reach.NOT_SERVED, at("/threads/{thread}/stream/x")
    ),
    # -- LangGraph API: runs -------------------------------------------------------------------
    ("GET", "/threads/{thread_id:str}/runs"): _route(OBJ, at("/threads/{thread}/runs")),
    ("POST", "/threads/{thread_id:str}/runs"): _route(
        OBJ, at("/threads/{thread}/runs", LG_RUN), budget=SUBMITS
    ),
    ("POST", "/threads/{thread_id:str}/runs/stream"): _route(
        OBJ, at("/threads/{thread}/runs/stream", LG_RUN), budget=SUBMITS
    ),
    ("POST", "/threads/{thread_id:str}/runs/wait"): _route(
        OBJ, at("/threads/{thread}/runs/wait", LG_RUN), budget=SUBMITS
    ),
    ("POST", "/threads/{thread_id:str}/runs/crons"): _route(
        OBJ, at("/threads/{thread}/runs/crons", {"schedule": "0 0 1 1 *", **LG_RUN}), budget=SUBMITS
    ),
    ("GET", "/threads/{thread_id:str}/runs/{run_id:str}"): _route(
        OBJ, at("/threads/{thread}/runs/{run}")
    ),
    ("DELETE", "/threads/{thread_id:str}/runs/{run_id:str}"): _route(
        OBJ, at("/threads/{thread}/runs/{run}"), budget=WRITES
    ),
    ("POST", "/threads/{thread_id:str}/runs/{run_id:str}/cancel"): _route(
        OBJ, at("/threads/{thread}/runs/{pending}/cancel"), budget=WRITES
    ),
    ("GET", "/threads/{thread_id:str}/runs/{run_id:str}/join"): _route(
        OBJ, at("/threads/{thread}/runs/{run}/join")
    ),
    ("GET", "/threads/{thread_id:str}/runs/{run_id:str}/stream"): _route(
        OBJ, at("/threads/{thread}/runs/{run}/stream")
    ),
    ("POST", "/runs/cancel"): _route(
        OBJ, at("/runs/cancel", {"thread_id": "{thread}", "run_ids": ["{pending}"]}), budget=WRITES
    ),
    ("POST", "/runs"): _route(NEW, at("/runs", LG_RUN), budget=SUBMITS),
    ("POST", "/runs/stream"): _route(NEW, at("/runs/stream", LG_RUN), budget=SUBMITS),
    ("POST", "/runs/wait"): _route(NEW, at("/runs/wait", LG_RUN), budget=SUBMITS),
    ("POST", "/runs/batch"): _route(NEW, at("/runs/batch", [LG_RUN]), budget=SUBMITS),
    # -- LangGraph API: assistants ----------------------------------------------------------
    ("POST", "/assistants"): _route(NEW, at("/assistants", {"graph_id": "chat"}), budget=SUBMITS),
    ("POST", "/assistants/count"): _route(LIST, at("/assistants/count", {}), budget=QUERIES),
    ("POST", "/assistants/search"): _route(LIST, at("/assistants/search", {}), budget=QUERIES),
    ("GET", "/assistants/{assistant_id:str}"): _route(OBJ, at("/assistants/{assistant}")),
    ("PATCH", "/assistants/{assistant_id:str}"): _route(
        OBJ, at("/assistants/{assistant}", {"metadata": {"mine": "x"}}), budget=WRITES
    ),
    ("DELETE", "/assistants/{assistant_id:str}"): _route(
        OBJ, at("/assistants/{assistant}"), budget=WRITES
    ),
    ("GET", "/assistants/{assistant_id:str}/graph"): _route(
        OBJ, at("/assistants/{assistant}/graph")
    ),
    ("GET", "/assistants/{assistant_id:str}/schemas"): _route(
        OBJ, at("/assistants/{assistant}/schemas")
    ),
    ("POST", "/assistants/{assistant_id:str}/latest"): _route(
        OBJ, at("/assistants/{assistant}/latest", {"version": 1}), budget=WRITES
    ),
    ("POST", "/assistants/{assistant_id:str}/versions"): _route(
        OBJ, at("/assistants/{assistant}/versions", {}), budget=QUERIES
    ),
    ("GET", "/assistants/{assistant_id:str}/subgraphs"): _route(
        OBJ, at("/assistants/{assistant}/subgraphs")
    ),
    ("GET", "/assistants/{assistant_id:str}/subgraphs/{namespace:str}"): _route(
        OBJ, at("/assistants/{assistant}/subgraphs/x")
    ),
    # -- LangGraph API: crons, store, server -------------------------------------------------
    ("POST", "/runs/crons"): _route(
        NEW, at("/runs/crons", {"schedule": "0 0 1 1 *", **LG_RUN}), budget=SUBMITS
    ),
    ("POST", "/runs/crons/search"): _route(LIST, at("/runs/crons/search", {}), budget=QUERIES),
    ("POST", "/runs/crons/count"): _route(LIST, at("/runs/crons/count", {}), budget=QUERIES),
    ("PATCH", "/runs/crons/{cron_id:str}"): _route(
        OBJ, at("/runs/crons/{cron}", {"schedule": "0 0 2 1 *"}), budget=WRITES
    ),
    ("DELETE", "/runs/crons/{cron_id:str}"): _route(OBJ, at("/runs/crons/{cron}"), budget=WRITES),
    ("PUT", "/store/items"): _route(
        Reach.STORE_PUT,
        at("/store/items", {"namespace": ["notes"], "key": "todo", "value": {"x": 2}}),
        budget=WRITES,
    ),
    ("GET", "/store/items"): _route(
        STORE, at("/store/items?namespace=notes&key=todo"), budget=QUERIES
    ),
    ("DELETE", "/store/items"): _route(
        STORE, at("/store/items", {"namespace": ["notes"], "key": "todo"}), budget=WRITES
    ),
    ("POST", "/store/items/search"): _route(
        STORE, at("/store/items/search", {"namespace_prefix": ["notes"]}), budget=QUERIES
    ),
    ("POST", "/store/namespaces"): _route(
        Reach.NAMESPACES, at("/store/namespaces", {}), budget=QUERIES
    ),
    # `/mcp`: a tools/list lists alice's assistant, a tools/call of it would run it; both ask
    # `assistants.search` first. GET and DELETE hold nothing of anyone's (405, 404).
    ("POST", "/mcp"): _route(
        LIST,
        at("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, MCP_ACCEPT),
        at(
            "/mcp",
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "mine", "arguments": {"messages": "hi"}},
            },
            MCP_ACCEPT,
        ),
        budget=QUERIES,
    ),
    ("GET", "/mcp"): _route(Reach.PUBLIC),
    ("DELETE", "/mcp"): _route(Reach.PUBLIC),
    # `/a2a/{assistant_id}`: alice's finished task, her waiting one cancelled, a message to her
    # assistant; its cards name her assistant. DELETE holds nothing of anyone's (405).
    ("POST", "/a2a/{assistant_id:str}"): _route(
        Reach.RPC,
        at(f"/a2a/{CHAT_AGENT}", a2a("tasks/get", {"id": "{thread}:{run}"}), A2A_ACCEPT),
        at(
            f"/a2a/{APPROVAL_AGENT}",
            a2a("tasks/cancel", {"id": "{thread}:{pending}"}),
            A2A_ACCEPT,
        ),
        at("/a2a/{assistant}", a2a("message/send", A2A_SEND), A2A_ACCEPT),
        budget=QUERIES,
    ),
    ("GET", "/a2a/{assistant_id:str}"): _route(Reach.RPC, at("/a2a/{assistant}")),
    ("GET", "/a2a/{assistant_id:str}/.well-known/agent-card.json"): _route(
        Reach.RPC, at("/a2a/{assistant}/.well-known/agent-card.json")
    ),
    ("GET", "/a2a/{assistant_id:str}/.well-known/agent.json"): _route(
        Reach.RPC, at("/a2a/{assistant}/.well-known/agent.json")
    ),
    ("GET", "/.well-known/agent-card.json"): _route(
        Reach.RPC, at("/.well-known/agent-card.json?assistant_id={assistant}")
    ),
    ("DELETE", "/a2a/{assistant_id:str}"): _route(Reach.PUBLIC),
    ("GET", "/ok"): _route(Reach.PUBLIC),
    ("GET", "/info"): _route(Reach.PUBLIC),
    # -- runstream's own -----------------------------------------------------------------------
    ("GET", "/"): _route(Reach.PUBLIC),
    ("GET", "/healthz"): _route(Reach.PUBLIC),
    ("GET", "/readyz"): _route(Reach.PUBLIC),
    ("GET", "/metrics"): _route(Reach.PUBLIC),
    ("GET", "/ui/{file_path:path}"): _route(Reach.PUBLIC),
    ("GET", "/schema"): _route(Reach.PUBLIC),
    ("GET", "/docs"): _route(Reach.PUBLIC),
    ("GET", "/openapi.json"): _route(Reach.PUBLIC),
    ("GET", "/schema/openapi.json"): _route(Reach.PUBLIC),
    ("GET", "/schema/swagger"): _route(Reach.PUBLIC),
    ("GET", "/schema/{path:str}"): _route(Reach.PUBLIC),
}


def test_every_served_route_is_in_the_matrix(settings: Settings) -> None:
    served = route_table(replace_config(settings))
    missing = sorted(served - set(ROUTES))
    assert not missing, f"add these routes to tests/test_one_door.py's matrix: {missing}"
    gone = sorted(set(ROUTES) - served)
    assert not gone, f"these routes of the matrix are not served any more: {gone}"
    for (method, path), route in ROUTES.items():
        assert route.reach is Reach.PUBLIC or route.requests, (method, path)


def replace_config(settings: Settings) -> Settings:
    return replace(settings, config_path=str(PROJECT))


# -- alice's data, and what must not change -------------------------------------------------


@dataclass
class Door:
    url: str
    settings: Settings
    ids: Ids


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@pytest.fixture
async def door(settings: Settings, start_server: StartServer, start_worker: StartWorker) -> Door:
    settings = replace_config(settings)
    await start_worker(config_path=settings.config_path)
    server = await start_server(config_path=settings.config_path)
    async with httpx.AsyncClient(
        base_url=server.url, timeout=30, headers=bearer("token-alice")
    ) as alice:
        ids = await alices_objects(alice, settings)
    return Door(server.url, settings, ids)


async def alices_objects(alice: httpx.AsyncClient, settings: Settings) -> Ids:
    """Alice's thread with a finished run and a run waiting at its interrupt, her assistant,
    cron and store item."""
    thread = (await alice.post("/v1/threads", json={})).json()["thread_id"]
    finished = await alice.post(f"/threads/{thread}/runs/wait", json=LG_RUN)
    assert finished.status_code == 200, finished.text
    runs = (await alice.get(f"/v1/threads/{thread}/runs")).json()["runs"]
    run = runs[0]["run_id"]
    body = {"graph": "approval", "thread_id": thread, **V1_RUN}
    pending = (await alice.post("/v1/runs", json=body)).json()["run_id"]
    async with asyncio.timeout(30):
        async for event in iter_events(alice, f"/v1/runs/{pending}/events"):
            if event.event == "pending":
                break
    assistant = await alice.post("/assistants", json={"graph_id": "chat", "name": "mine"})
    assert assistant.status_code == 200, assistant.text
    cron = await alice.post("/runs/crons", json={"schedule": "0 0 1 1 *", **LG_RUN})
    assert cron.status_code == 200, cron.text
    put = await alice.put(
        "/store/items", json={"namespace": ["notes"], "key": "todo", "value": {"x": 1}}
    )
    assert put.status_code == 204, put.text
    await settled(settings, [run, pending])
    return {
        "thread": thread,
        "run": run,
        "pending": pending,
        "assistant": assistant.json()["assistant_id"],
        "cron": cron.json()["cron_id"],
    }


async def settled(settings: Settings, run_ids: list[str]) -> None:
    """Until the worker recorded each run's last event id (written just after its events)."""
    async with asyncio.timeout(10), await schema_connection(settings) as conn:
        while True:
            cur = await conn.execute(
                "SELECT count(*) FROM runstream_runs WHERE last_event_id IS NULL"
                " AND run_id = ANY(%s::uuid[])",
                (run_ids,),
            )
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                return
            await asyncio.sleep(0.01)


_TABLES = (
    "runstream_runs",
    "runstream_threads",
    "runstream_assistants",
    "runstream_assistant_versions",
    "runstream_crons",
    "runstream_evaluations",
    "runstream_webhooks",
    "store",
    "checkpoints",
    "checkpoint_writes",
)
# Keys that move by themselves or count requests: the workers' beats, the callers' windows.
_MOVING = (b":worker:", b":workers", b":health-check", b":caller:", b":queue", b":reaper:")


async def alices_state(settings: Settings) -> dict[str, Any]:
    """Every row of the tables a request could change, and every key under the test's prefix
    that holds data (not the windows that count requests, nor the workers' beats)."""
    state: dict[str, Any] = {}
    async with await schema_connection(settings, row_factory=dict_row) as conn:
        for table in _TABLES:
            rows = await (await conn.execute(f"SELECT * FROM {table}")).fetchall()
            state[table] = sorted(json.dumps(row, default=str, sort_keys=True) for row in rows)
    redis = Redis.from_url(settings.redis_url or "")
    try:
        keys = [
            key
            async for key in redis.scan_iter(match=f"{settings.redis_prefix}:*")
            if not any(part in key for part in _MOVING)
        ]
        state["redis"] = {key: await redis.dump(key) for key in sorted(keys)}
    finally:
        await redis.aclose()
    return state


@pytest.fixture
async def clients(door: Door) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    tokens = {
        "nobody": None,
        "bob": "token-bob",
        "refused": "token-alice-refused",
        "filtered": "token-alice-filtered",
        "alice": "token-alice",
    }
    opened = {
        name: httpx.AsyncClient(base_url=door.url, timeout=30, headers=bearer(token))
        for name, token in tokens.items()
    }
    try:
        yield opened
    finally:
        for client in opened.values():
            await client.aclose()


def expected(condition: str, route: Route) -> int | None:
    """The status `condition` gets on `route`; None: the condition is not tried there."""
    if route.reach is Reach.PUBLIC:
        return None
    if condition == "nobody":
        return 401
    if route.reach is Reach.NOT_SERVED:
        return 404
    if condition == "refused":
        return 403
    if route.reach is Reach.OBJECT:
        return 404
    if route.reach is Reach.PRUNE:
        return 200 if condition == "bob" else 404
    if route.reach is Reach.NAMESPACES:
        return 200
    if route.reach is Reach.STORE_PUT:
        return 403
    return None if route.reach is Reach.CREATE else 0  # 0: a listing's, store's or A2A's answer


def unknown_to_a2a(response: httpx.Response) -> bool:
    """A2A's answer for a task or assistant the caller may not reach: the one for an unknown."""
    if response.status_code not in (200, 400):
        return False
    error = response.json().get("error")
    return isinstance(error, dict) and error.get("code") in (-32001, -32602)


def hides_alice(response: httpx.Response, route: Route, ids: Ids) -> bool:
    """A listing or store read that shows nothing of alice's."""
    if response.status_code not in (200, 204):
        return False
    text = response.text
    if any(value in text for value in ids.values()):
        return False
    if route.reach is Reach.STORE:
        body = response.json() if text else None
        return body in (None, {"items": []}, {"namespaces": []})
    return True


@pytest.mark.parametrize("condition", ["nobody", "bob", "refused", "filtered"])
async def test_every_route_applies_every_rule_and_changes_nothing_it_refuses(
    door: Door, clients: dict[str, httpx.AsyncClient], condition: str
) -> None:
    before = await alices_state(door.settings)
    client = clients[condition]
    wrong: list[str] = []
    for (method, _path), route in ROUTES.items():
        status = expected(condition, route)
        if status is None:
            continue
        if condition == "bob" and route.reach not in (Reach.OBJECT, Reach.RPC):
            continue  # bob's own listings and store are his: nothing of alice's to reach
        for build in route.requests:
            url, kwargs = build(door.ids)
            response = await send(client, method, url, **kwargs)
            if route.reach is Reach.RPC and status == 0:
                ok = unknown_to_a2a(response)
            elif status == 0:
                ok = hides_alice(response, route, door.ids)
            else:
                ok = response.status_code == status
            if not ok:
                wrong.append(f"{method} {url}: {response.status_code} {_text(response)[:160]}")
    await asyncio.sleep(0.3)  # a wrongly accepted run or resume would have started by now
    after = await alices_state(door.settings)
    changed = [name for name in before if before[name] != after[name]]
    assert not wrong, "\n".join(wrong)
    assert not changed, changed


def error_code(response: httpx.Response) -> str | None:
    """The code of an error in either dialect: `/v1`'s `{"error": {...}}`, LangGraph's flat."""
    body = response.json()
    return (body.get("error") or body).get("code")


def _text(response: httpx.Response) -> str:
    try:
        return response.text
    except httpx.ResponseNotRead:
        return "<an event stream>"


# What spends each budget without changing anything: a count, a delete of nothing.
_SPEND: dict[Budget, tuple[str, str, dict[str, Any]]] = {
    Budget.SUBMITS: ("POST", "/threads", {"json": {}}),
    Budget.WRITES: ("DELETE", "/store/items", {"json": {"namespace": ["x"], "key": "none"}}),
    Budget.QUERIES: ("POST", "/threads/count", {"json": {}}),
}


async def test_every_counted_route_refuses_once_its_budget_is_spent(
    door: Door, start_server: StartServer
) -> None:
    """With each of alice's per-minute budgets spent, every route that counts against one
    answers 429 with that budget's code, and nothing of hers changes."""
    limited = await start_server(
        config_path=door.settings.config_path,
        max_submits_per_minute=3,
        max_writes_per_minute=3,
        max_queries_per_minute=3,
    )
    async with httpx.AsyncClient(
        base_url=limited.url, timeout=30, headers=bearer("token-alice")
    ) as alice:
        for budget, (method, url, kwargs) in _SPEND.items():
            for _ in range(10):
                if (await send(alice, method, url, **kwargs)).status_code == 429:
                    break
            else:
                raise AssertionError(f"{budget.name} was never spent")
        before = await alices_state(door.settings)
        wrong: list[str] = []
        tried = 0
        for (method, _path), route in ROUTES.items():
            if route.budget is None:
                continue
            for build in route.requests:
                url, kwargs = build(door.ids)
                response = await send(alice, method, url, **kwargs)
                code = error_code(response) if response.status_code == 429 else None
                if code != route.budget.value:
                    wrong.append(f"{method} {url}: {response.status_code} {_text(response)[:160]}")
                tried += 1
    await asyncio.sleep(0.3)
    after = await alices_state(door.settings)
    assert not wrong, "\n".join(wrong)
    assert tried >= 40
    assert [name for name in before if before[name] != after[name]] == []


def test_only_the_access_layer_asks_the_projects_auth_or_counts_a_submit() -> None:
    """A handler of either API (or anything else in the server) that asked the project's
    `@auth.on` itself, or counted a submit itself, would be a second door: every ask and every
    submit count is in `server/access/`."""
    server = ROOT / "server"
    for call, owner in ((".authorize(", server / "callers" / "auth.py"), (".take_submit(", None)):
        found = sorted(
            str(path.relative_to(ROOT))
            for path in server.rglob("*.py")
            if call in path.read_text() and path.parent != server / "access" and path != owner
        )
        assert found == [], call


# -- graph code in the worker -----------------------------------------------------------------

KEYS = {"key-a": "alice", "key-b": "bob"}


async def test_graph_code_reaches_only_its_runs_owners_store(
    settings: Settings, start_server: StartServer, start_worker: StartWorker
) -> None:
    """A graph run by bob that names alice's namespace, label and all, in every store call
    (search, get, list, delete, put) reaches only bob's own store: it sees nothing of alice's,
    deletes nothing of hers and plants nothing in her namespaces. (The caps graph code meets
    are tests/test_store_bounds.py's `TestGraphWrites`; `once` and `record_evaluation` outside
    a run raise `NotInARun`: tests/test_effects.py, tests/test_evaluations.py.)"""
    graphs = {"probes_store": "tests.custom_graphs:probes_store"}
    await start_worker(api_keys=KEYS, graphs=graphs)
    server = await start_server(api_keys=KEYS, graphs=graphs)
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30, headers=bearer("key-a")) as alice,
        httpx.AsyncClient(base_url=server.url, timeout=30, headers=bearer("key-b")) as bob,
    ):
        body = {"namespace": ["notes"], "key": "todo", "value": {"x": 1}}
        assert (await alice.put("/store/items", json=body)).status_code == 204
        before = await alices_items(alice)
        for named in (f"{owner_label('alice')}.notes", "notes"):
            said = {"messages": [{"role": "user", "content": named}]}
            answer = await bob.post(
                "/runs/wait", json={"assistant_id": "probes_store", "input": said}
            )
            assert answer.status_code == 200, answer.text
            seen = json.loads(answer.json()["messages"][-1]["content"])
            assert seen == {"search": [], "get": None, "namespaces": []}, named
        assert await alices_items(alice) == before
        planted = await bob.post("/store/items/search", json={"namespace_prefix": []})
        assert {i["key"] for i in planted.json()["items"]} == {"planted"}


async def alices_items(alice: httpx.AsyncClient) -> list[Any]:
    found = await alice.post("/store/items/search", json={"namespace_prefix": []})
    namespaces = await alice.post("/store/namespaces", json={})
    return [found.json()["items"], namespaces.json()["namespaces"]]
