"""Isolation on every route (issue 9): the app's own route table, walked with another caller's key.

Each route of both APIs (`/v1` and the LangGraph API) is classified below; a route the table
has and the classification lacks fails the test, so a new route cannot be forgotten. Every
route that names a thread or a run is asked, with bob's key, about alice's thread and runs and
about ids nobody has: the two answers are the same 404 (or the same refusal, for routes that
are not served), and nothing of alice's changed afterwards.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from server.app import create_app
from stream_store.assistant_ids import assistant_id_for
from stream_store.settings import Settings
from tests.conftest import schema_connection
from tests.test_bad_input import send, state_of
from tests.test_isolation import (  # noqa: F401  (fixtures)
    AliceData,
    Callers,
    alice_data,
    alice_view,
    callers,
    run_body,
)

Ids = dict[str, str]  # "thread", "run"
Request = Callable[[Ids], tuple[str, dict[str, Any]]]  # ids -> (url, request kwargs)

LG_RUN = {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}}
CHECKPOINT_ID = "1f0a0b1c-2d3e-6f40-8000-000000000000"


def at(template: str, **body: Any) -> Request:
    """A request to `template` filled with the ids, with `body` (if any) as JSON."""

    def build(ids: Ids) -> tuple[str, dict[str, Any]]:
        kwargs = {"json": filled(body, ids)} if body else {}
        return template.format(**ids), kwargs

    return build


def filled(value: Any, ids: Ids) -> Any:
    """`value` with `{thread}`, `{run}` (and the like) in its strings filled from `ids`."""
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {k: filled(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [filled(v, ids) for v in value]
    return value


@dataclass(frozen=True)
class Owned:
    """Names a thread or run: not-yours answers `status` exactly as an unknown id does
    (`None`: a route not served, whose refusal is the same for any id; 200: a route that skips
    ids it does not find)."""

    requests: tuple[Request, ...]
    status: int | None = 404


@dataclass(frozen=True)
class Unscoped:
    """Names nobody's thread or run; `why` says what it serves instead."""

    why: str


PUBLIC = Unscoped("no caller data: health, metrics, docs, the web page")
SHARED = Unscoped("the graphs' own assistants (owned by nobody), and the caller's own")
ASSISTANT = Unscoped(
    "names an assistant, not a thread or run: another caller's created assistant is 404 as an"
    " unknown one (tests/test_langgraph_assistants.py); a graph's own is every caller's"
)
CREATE = Unscoped("creates the caller's own thread or run (a new id)")
LISTING = Unscoped("lists or counts only the caller's own (checked below)")
CLIENT_ID = Unscoped(
    "creates with a client-chosen id: a taken id is a 409 (checked below, and for assistants"
    " in tests/test_langgraph_assistants.py)"
)
CRON = Unscoped(
    "names a cron, not a thread or run: another caller's cron is 404 as an unknown one"
    " (tests/test_langgraph_crons.py)"
)
STORE = Unscoped(
    "the caller's own items in LangGraph's store, under its own namespaces: nothing names"
    " another caller's (tests/test_langgraph_store.py)"
)

RUN = "{run}"
THREAD = "{thread}"
CHAT_AGENT = assistant_id_for("chat")
A2A_CARD = Unscoped(
    "an assistant's A2A agent card: another caller's created assistant is a 400 'not found' as"
    " an unknown one (tests/test_langgraph_a2a.py); a graph's own is every caller's"
)


def a2a(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


ROUTES: dict[tuple[str, str], Owned | Unscoped] = {
    # -- /v1 ---------------------------------------------------------------------------------
    ("POST", "/v1/runs"): Owned(
        (
            at("/v1/runs", **run_body(thread_id=THREAD)),
            at("/v1/runs", **run_body(thread_id=THREAD, multitask="enqueue")),
        )
    ),
    ("GET", "/v1/runs/{run_id:str}"): Owned((at("/v1/runs/{run}"),)),
    ("POST", "/v1/runs/{run_id:str}/cancel"): Owned((at("/v1/runs/{run}/cancel"),)),
    ("GET", "/v1/runs/{run_id:str}/evaluations"): Owned((at("/v1/runs/{run}/evaluations"),)),
    ("GET", "/v1/runs/{run_id:str}/webhooks"): Owned((at("/v1/runs/{run}/webhooks"),)),
    ("GET", "/v1/runs/{run_id:str}/events"): Owned((at("/v1/runs/{run}/events"),)),
    ("POST", "/v1/runs/{run_id:str}/resume"): Owned(
        (at("/v1/runs/{run}/resume", resume={"approve": True}),)
    ),
    ("GET", "/v1/threads"): LISTING,
    ("POST", "/v1/threads"): CREATE,
    ("DELETE", "/v1/threads/{thread_id:str}"): Owned((at("/v1/threads/{thread}"),)),
    ("GET", "/v1/threads/{thread_id:str}"): Owned((at("/v1/threads/{thread}"),)),
    ("GET", "/v1/threads/{thread_id:str}/evaluations"): Owned(
        (at("/v1/threads/{thread}/evaluations"),)
    ),
    ("GET", "/v1/threads/{thread_id:str}/runs"): Owned((at("/v1/threads/{thread}/runs"),)),
    ("POST", "/v1/threads/{thread_id:str}/runs"): Owned(
        (
            at("/v1/threads/{thread}/runs", **run_body()),
            at("/v1/threads/{thread}/runs", **run_body(multitask="enqueue")),
        )
    ),
    # -- LangGraph API: threads ----------------------------------------------------------------
    ("POST", "/threads"): CLIENT_ID,
    ("POST", "/threads/count"): LISTING,
    ("POST", "/threads/search"): LISTING,
    ("POST", "/threads/prune"): Owned(
        (
            at("/threads/prune", thread_ids=[THREAD]),
            at("/threads/prune", thread_ids=[THREAD], strategy="keep_latest"),
        ),
        status=200,  # {"pruned_count": 0}: an unknown id is skipped, not an error
    ),
    ("DELETE", "/threads/{thread_id:str}"): Owned((at("/threads/{thread}"),)),
    ("GET", "/threads/{thread_id:str}"): Owned((at("/threads/{thread}"),)),
    ("PATCH", "/threads/{thread_id:str}"): Owned(
        (at("/threads/{thread}", metadata={"mine": "bob"}),)
    ),
    ("POST", "/threads/{thread_id:str}/commands"): Owned(
        (at("/threads/{thread}/commands", command={}),), status=None
    ),
    ("POST", "/threads/{thread_id:str}/copy"): Owned((at("/threads/{thread}/copy", x=1),)),
    ("GET", "/threads/{thread_id:str}/history"): Owned((at("/threads/{thread}/history"),)),
    ("POST", "/threads/{thread_id:str}/history"): Owned(
        (at("/threads/{thread}/history", limit=5),)
    ),
    ("GET", "/threads/{thread_id:str}/state"): Owned((at("/threads/{thread}/state"),)),
    ("POST", "/threads/{thread_id:str}/state"): Owned(
        (at("/threads/{thread}/state", values={"messages": []}),)
    ),
    ("POST", "/threads/{thread_id:str}/state/bulk"): Owned(
        (at("/threads/{thread}/state/bulk", supersteps=[]),), status=None
    ),
    ("POST", "/threads/{thread_id:str}/state/checkpoint"): Owned(
        (at("/threads/{thread}/state/checkpoint", checkpoint={"checkpoint_id": CHECKPOINT_ID}),)
    ),
    ("GET", "/threads/{thread_id:str}/state/{checkpoint_id:str}"): Owned(
        (at("/threads/{thread}/state/" + CHECKPOINT_ID),)
    ),
    ("GET", "/threads/{thread_id:str}/stream"): Owned((at("/threads/{thread}/stream"),)),
    ("GET", "/threads/{thread_id:str}/stream/{rest:path}"): Owned(
        (at("/threads/{thread}/stream/x"),), status=None
    ),
    # -- LangGraph API: runs -------------------------------------------------------------------
    ("GET", "/threads/{thread_id:str}/runs"): Owned((at("/threads/{thread}/runs"),)),
    ("POST", "/threads/{thread_id:str}/runs"): Owned((at("/threads/{thread}/runs", **LG_RUN),)),
    ("POST", "/threads/{thread_id:str}/runs/stream"): Owned(
        (at("/threads/{thread}/runs/stream", **LG_RUN),)
    ),
    ("POST", "/threads/{thread_id:str}/runs/wait"): Owned(
        (at("/threads/{thread}/runs/wait", **LG_RUN),)
    ),
    ("POST", "/threads/{thread_id:str}/runs/crons"): Owned(
        (at("/threads/{thread}/runs/crons", schedule="* * * * *", **LG_RUN),)
    ),
    ("GET", "/threads/{thread_id:str}/runs/{run_id:str}"): Owned(
        (at("/threads/{thread}/runs/{run}"),)
    ),
    ("DELETE", "/threads/{thread_id:str}/runs/{run_id:str}"): Owned(
        (at("/threads/{thread}/runs/{run}"),)
    ),
    ("POST", "/threads/{thread_id:str}/runs/{run_id:str}/cancel"): Owned(
        (
            at("/threads/{thread}/runs/{run}/cancel"),
            at("/threads/{thread}/runs/{run}/cancel?action=rollback"),
        )
    ),
    ("GET", "/threads/{thread_id:str}/runs/{run_id:str}/join"): Owned(
        (at("/threads/{thread}/runs/{run}/join"),)
    ),
    ("GET", "/threads/{thread_id:str}/runs/{run_id:str}/stream"): Owned(
        (at("/threads/{thread}/runs/{run}/stream"),)
    ),
    ("POST", "/runs/cancel"): Owned(
        (
            at("/runs/cancel", run_ids=[RUN]),
            at("/runs/cancel", thread_id=THREAD, run_ids=[RUN]),
        )
    ),
    ("POST", "/runs"): CREATE,
    ("POST", "/runs/stream"): CREATE,
    ("POST", "/runs/wait"): CREATE,
    ("POST", "/runs/batch"): CREATE,
    # -- LangGraph API: assistants, crons, store, server -------------------------------------
    ("POST", "/assistants"): CLIENT_ID,
    ("POST", "/assistants/count"): SHARED,
    ("POST", "/assistants/search"): SHARED,
    ("GET", "/assistants/{assistant_id:str}"): ASSISTANT,
    ("PATCH", "/assistants/{assistant_id:str}"): ASSISTANT,
    ("DELETE", "/assistants/{assistant_id:str}"): ASSISTANT,
    ("GET", "/assistants/{assistant_id:str}/graph"): ASSISTANT,
    ("GET", "/assistants/{assistant_id:str}/schemas"): ASSISTANT,
    ("POST", "/assistants/{assistant_id:str}/latest"): ASSISTANT,
    ("POST", "/assistants/{assistant_id:str}/versions"): ASSISTANT,
    ("GET", "/assistants/{assistant_id:str}/subgraphs"): ASSISTANT,
    ("GET", "/assistants/{assistant_id:str}/subgraphs/{namespace:str}"): ASSISTANT,
    ("POST", "/runs/crons"): CREATE,
    ("POST", "/runs/crons/search"): LISTING,
    ("POST", "/runs/crons/count"): LISTING,
    ("PATCH", "/runs/crons/{cron_id:str}"): CRON,
    ("DELETE", "/runs/crons/{cron_id:str}"): CRON,
    ("PUT", "/store/items"): STORE,
    ("GET", "/store/items"): STORE,
    ("DELETE", "/store/items"): STORE,
    ("POST", "/store/items/search"): STORE,
    ("POST", "/store/namespaces"): STORE,
    ("POST", "/mcp"): Unscoped(
        "the graphs' assistants and the caller's as tools; a call runs one on a new thread of"
        " the caller's (tests/test_langgraph_mcp.py)"
    ),
    ("GET", "/mcp"): PUBLIC,
    ("DELETE", "/mcp"): PUBLIC,
    # A2A: a task id is `{thread}:{run}`; bob's answer about alice's is the JSON-RPC error (in a
    # 200) an unknown task gets. A message into her context: tests/test_langgraph_a2a.py.
    ("POST", "/a2a/{assistant_id:str}"): Owned(
        (
            at(f"/a2a/{CHAT_AGENT}", **a2a("tasks/get", {"id": "{thread}:{run}"})),
            at(f"/a2a/{CHAT_AGENT}", **a2a("tasks/get", {"id": RUN, "contextId": THREAD})),
            at(f"/a2a/{CHAT_AGENT}", **a2a("tasks/cancel", {"id": "{thread}:{run}"})),
        ),
        status=200,
    ),
    ("GET", "/a2a/{assistant_id:str}"): A2A_CARD,
    ("GET", "/a2a/{assistant_id:str}/.well-known/agent-card.json"): A2A_CARD,
    ("GET", "/a2a/{assistant_id:str}/.well-known/agent.json"): A2A_CARD,
    ("GET", "/.well-known/agent-card.json"): A2A_CARD,
    ("DELETE", "/a2a/{assistant_id:str}"): PUBLIC,
    ("GET", "/ok"): PUBLIC,
    ("GET", "/info"): PUBLIC,
    # -- runstream's own -----------------------------------------------------------------------
    ("GET", "/"): PUBLIC,
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    ("GET", "/ui/{file_path:path}"): PUBLIC,
    ("GET", "/schema"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/schema/openapi.json"): PUBLIC,
    ("GET", "/schema/swagger"): PUBLIC,
    ("GET", "/schema/{path:str}"): PUBLIC,
}


def route_table(settings: Settings) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves (HEAD and OPTIONS are Litestar's own)."""
    app = create_app(settings)
    return {
        (method, route.path)
        for route in app.routes
        for method in getattr(route, "methods", ())
        if method not in ("HEAD", "OPTIONS")
    }


def test_every_route_is_classified(settings: Settings) -> None:
    served = route_table(settings)
    unclassified = sorted(served - set(ROUTES))
    assert not unclassified, f"classify these routes in tests/test_owner_matrix.py: {unclassified}"
    gone = sorted(set(ROUTES) - served)
    assert not gone, f"these classified routes are not served any more: {gone}"


async def checkpoint_rows(settings: Settings) -> tuple[int, int]:
    async with await schema_connection(settings) as conn:
        saved = await (await conn.execute("SELECT count(*) FROM checkpoints")).fetchone()
        writes = await (await conn.execute("SELECT count(*) FROM checkpoint_writes")).fetchone()
    assert saved is not None and writes is not None
    return saved[0], writes[0]


def answer(response: httpx.Response, ids: Ids) -> tuple[int, str, Any]:
    """Status, content type and JSON body, with the ids asked about and the request id masked:
    what must not tell another caller's id from an unknown one."""
    text = response.text.replace(response.headers.get("x-request-id", "-"), "<request>")
    for value in ids.values():
        text = text.replace(value, "<id>")
    return response.status_code, response.headers.get("content-type", ""), json.loads(text)


@pytest.mark.usefixtures("alice_data")
async def test_another_callers_ids_answer_like_unknown_ids_on_every_route(
    callers: Callers,  # noqa: F811
    alice_data: AliceData,  # noqa: F811
) -> None:
    """Bob, on every route that names a thread or run, asked about alice's finished run, her
    interrupted run and her thread, gets what he gets for ids nobody has; nothing changes."""
    settings = callers.settings
    before = (
        await alice_view(callers.alice, alice_data),
        await state_of(settings),
        await checkpoint_rows(settings),
    )
    unknown: Ids = {"thread": str(uuid.uuid4()), "run": str(uuid.uuid4())}
    tried = 0
    for (method, path), kind in ROUTES.items():
        if not isinstance(kind, Owned):
            continue
        for run in (alice_data.finished, alice_data.interrupted):
            alices: Ids = {"thread": alice_data.thread_id, "run": run["run_id"]}
            for build in kind.requests:
                url, kwargs = build(alices)
                unknown_url, unknown_kwargs = build(unknown)
                not_yours = await send(callers.bob, method, url, **kwargs)
                not_found = await send(callers.bob, method, unknown_url, **unknown_kwargs)
                where = f"{method} {path} ({url})"
                expected = kind.status or not_found.status_code
                assert not_yours.status_code == expected, (where, not_yours.text)
                # a refusal, unless the route is declared to skip an unknown id (prune)
                assert expected >= 400 or kind.status == expected, where
                assert answer(not_yours, alices) == answer(not_found, unknown), where
                assert set(not_yours.headers) - {"date"} == set(not_found.headers) - {"date"}, where
                tried += 1
    assert tried >= 2 * sum(isinstance(kind, Owned) for kind in ROUTES.values())

    # Listings show bob none of alice's; a client-chosen id that is hers is refused.
    listed = [
        await send(callers.bob, "GET", "/v1/threads"),
        await send(callers.bob, "POST", "/threads/search", json={}),
        await send(callers.bob, "POST", "/threads/count", json={}),
        await send(callers.bob, "POST", "/runs/cancel", json={"status": "all"}),
    ]
    assert [r.status_code for r in listed] == [200, 200, 200, 204], [r.text for r in listed]
    for response in listed:
        assert alice_data.thread_id not in response.text
    assert listed[2].json() == 0
    for if_exists in ("raise", "do_nothing"):
        body = {"thread_id": alice_data.thread_id, "if_exists": if_exists}
        taken = await send(callers.bob, "POST", "/threads", json=body)
        assert taken.status_code == 409 and taken.json()["code"] == "thread_exists", taken.text

    await asyncio.sleep(0.3)  # a wrongly accepted run or resume would have started by now
    after = (
        await alice_view(callers.alice, alice_data),
        await state_of(settings),
        await checkpoint_rows(settings),
    )
    assert after[0] == before[0]
    assert (after[1].runs, after[1].threads) == (before[1].runs, before[1].threads)
    assert after[2] == before[2]
