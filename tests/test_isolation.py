"""Guarantee 7 (isolation) and authentication: API keys, and the signed `stream_url` token.

Every thread and run belongs to the caller that created it; nobody else can read, attach,
cancel, resume or delete it, and not-found and not-yours look the same (docs/protocol.md
sections 2 Authentication, 3 Endpoints, 4 Events and 5 `stream_url` and its token).
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest

from server.callers.auth import StreamTokens
from stream_store.settings import Settings
from tests.conftest import StartServer, StartWorker, schema_connection
from tests.sse import iter_events, read_events
from tests.test_bad_input import assert_error, send, state_of

API_KEYS = {"key-a": "alice", "key-b": "bob"}


def run_body(text: str = "please remember this", **extra: Any) -> dict[str, Any]:
    return {"input": {"messages": [{"role": "user", "content": text}]}, **extra}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class Callers:
    url: str
    settings: Settings
    alice: httpx.AsyncClient
    bob: httpx.AsyncClient
    anonymous: httpx.AsyncClient


@pytest.fixture
async def callers(settings: Settings, start_server: StartServer) -> AsyncIterator[Callers]:
    server = await start_server(api_keys=API_KEYS)
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30, headers=bearer("key-a")) as alice,
        httpx.AsyncClient(base_url=server.url, timeout=30, headers=bearer("key-b")) as bob,
        httpx.AsyncClient(base_url=server.url, timeout=30) as anonymous,
    ):
        yield Callers(server.url, replace(settings, api_keys=API_KEYS), alice, bob, anonymous)


async def wait_for_status(client: httpx.AsyncClient, run_id: str, status: str) -> dict[str, Any]:
    run: dict[str, Any] = {}
    for _ in range(1000):
        response = await client.get(f"/v1/runs/{run_id}")
        assert response.status_code == 200, response.text
        run = response.json()
        if run["status"] == status:
            return run
        await asyncio.sleep(0.01)
    raise AssertionError(f"run {run_id} never reached {status}: {run}")


@dataclass
class AliceData:
    """Alice's thread with a finished chat run and, after it, an interrupted approval run."""

    thread_id: str
    finished: dict[str, Any]
    interrupted: dict[str, Any]


@pytest.fixture
async def alice_data(callers: Callers, start_worker: StartWorker) -> AliceData:
    await start_worker()
    alice = callers.alice
    thread = await alice.post("/v1/threads", json={})
    assert thread.status_code == 201, thread.text
    thread_id = thread.json()["thread_id"]

    response = await alice.post(f"/v1/threads/{thread_id}/runs", json=run_body("hello bob"))
    assert response.status_code == 202, response.text
    finished_id = response.json()["run_id"]
    events = await read_events(alice, f"/v1/runs/{finished_id}/events")
    assert events[-1].event == "done" and events[-1].data["status"] == "succeeded"
    finished = await wait_for_status(alice, finished_id, "succeeded")

    body = run_body("note: the safe code is 1234", graph="approval", thread_id=thread_id)
    response = await alice.post("/v1/runs", json=body)
    assert response.status_code == 202, response.text
    interrupted_id = response.json()["run_id"]
    async with asyncio.timeout(30):
        async for event in iter_events(alice, f"/v1/runs/{interrupted_id}/events"):
            if event.event == "pending":
                assert event.data["interrupt"]["action_requests"][0]["name"] == "save_note"
                break
            assert event.event not in ("done", "error"), event
        else:
            raise AssertionError("the approval run's stream ended without a pending event")
    interrupted = await wait_for_status(alice, interrupted_id, "interrupted")
    assert interrupted["interrupt"] is not None
    # The worker records each outcome's last event id in Postgres just after the events: wait
    # for it, so that the tests' before/after snapshots of the rows see only their own changes.
    async with asyncio.timeout(10), await schema_connection(callers.settings) as conn:
        while True:
            cur = await conn.execute(
                "SELECT count(*) FROM runstream_runs WHERE last_event_id IS NULL"
                " AND run_id = ANY(%s::uuid[])",
                ([finished_id, interrupted_id],),
            )
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                break
            await asyncio.sleep(0.01)
    return AliceData(thread_id, finished, interrupted)


def without_token(run: dict[str, Any]) -> dict[str, Any]:
    """A run object minus `stream_url`, whose token is re-issued (with a new expiry) per read."""
    return {k: v for k, v in run.items() if k != "stream_url"}


async def alice_view(alice: httpx.AsyncClient, data: AliceData) -> dict[str, Any]:
    """Everything alice can read about her data, to compare before and after bob's attempts."""
    view: dict[str, Any] = {}
    for run in (data.finished, data.interrupted):
        response = await alice.get(f"/v1/runs/{run['run_id']}")
        assert response.status_code == 200, response.text
        view[run["run_id"]] = without_token(response.json())
    thread = await alice.get(f"/v1/threads/{data.thread_id}")
    assert thread.status_code == 200, thread.text
    view["thread"] = thread.json()
    runs = await alice.get(f"/v1/threads/{data.thread_id}/runs")
    assert runs.status_code == 200, runs.text
    view["runs"] = [without_token(r) for r in runs.json()["runs"]]
    listing = await alice.get("/v1/threads")
    assert listing.status_code == 200, listing.text
    view["threads"] = listing.json()
    return view


def routes(run_id: str, thread_id: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """Every run and thread route, as (name, method, url, request kwargs)."""
    resume = {"json": {"resume": {"approve": True}}}
    return [
        ("get run", "GET", f"/v1/runs/{run_id}", {}),
        ("run events", "GET", f"/v1/runs/{run_id}/events", {}),
        ("cancel run", "POST", f"/v1/runs/{run_id}/cancel", {}),
        ("resume run", "POST", f"/v1/runs/{run_id}/resume", resume),
        ("get thread", "GET", f"/v1/threads/{thread_id}", {}),
        ("thread runs", "GET", f"/v1/threads/{thread_id}/runs", {}),
        ("run on thread", "POST", f"/v1/threads/{thread_id}/runs", {"json": run_body()}),
        (
            "enqueue on thread",
            "POST",
            f"/v1/threads/{thread_id}/runs",
            {"json": run_body(multitask="enqueue")},
        ),
        ("delete thread", "DELETE", f"/v1/threads/{thread_id}", {}),
        ("run with thread_id", "POST", "/v1/runs", {"json": run_body(thread_id=thread_id)}),
        (
            "enqueue with thread_id",
            "POST",
            "/v1/runs",
            {"json": run_body(thread_id=thread_id, multitask="enqueue")},
        ),
    ]


class TestOwnerIsolation:
    """Another caller's threads and runs answer exactly like ones that do not exist."""

    async def test_other_callers_get_the_unknown_id_answer_on_every_route(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        before_view = await alice_view(callers.alice, alice_data)
        before_state = await state_of(callers.settings)
        unknown_run, unknown_thread = str(uuid.uuid4()), str(uuid.uuid4())

        for run in (alice_data.finished, alice_data.interrupted):
            theirs = routes(run["run_id"], alice_data.thread_id)
            unknown = routes(unknown_run, unknown_thread)
            for (name, method, url, kwargs), (_, _, unknown_url, unknown_kwargs) in zip(
                theirs, unknown, strict=True
            ):
                not_yours = await send(callers.bob, method, url, **kwargs)
                not_found = await send(callers.bob, method, unknown_url, **unknown_kwargs)
                mine = assert_error(not_yours, 404)
                nobodys = assert_error(not_found, 404)
                assert mine["code"] == nobodys["code"], name
                masked = (
                    mine["message"]
                    .replace(run["run_id"], "<id>")
                    .replace(alice_data.thread_id, "<id>")
                )
                masked_unknown = (
                    nobodys["message"].replace(unknown_run, "<id>").replace(unknown_thread, "<id>")
                )
                assert masked == masked_unknown, name
                assert set(not_yours.headers) - {"date"} == set(not_found.headers) - {"date"}

        await asyncio.sleep(0.3)  # a wrongly accepted resume or run would have started by now
        after_state = await state_of(callers.settings)
        assert after_state.runs == before_state.runs
        assert after_state.threads == before_state.threads
        assert await alice_view(callers.alice, alice_data) == before_view

    async def test_owner_can_still_resume_after_others_tried(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        run_id = alice_data.interrupted["run_id"]
        resume = {"json": {"resume": {"approve": True}}}
        for method, url, kwargs in [
            ("POST", f"/v1/runs/{run_id}/resume", resume),
            ("POST", f"/v1/runs/{run_id}/cancel", {}),
            ("DELETE", f"/v1/threads/{alice_data.thread_id}", {}),
        ]:
            assert_error(await send(callers.bob, method, url, **kwargs), 404)
        assert (await wait_for_status(callers.alice, run_id, "interrupted"))["interrupt"]

        response = await callers.alice.post(f"/v1/runs/{run_id}/resume", **resume)
        assert response.status_code == 202, response.text
        events = await read_events(callers.alice, f"/v1/runs/{run_id}/events")
        assert events[-1].event == "done" and events[-1].data["status"] == "succeeded"
        executed = [e.data for e in events if e.event == "custom"]
        assert [c["executed"] for c in executed] == [True]
        thread = (await callers.alice.get(f"/v1/threads/{alice_data.thread_id}")).json()
        assert thread["status"] == "idle"

    async def test_thread_listing_shows_only_the_callers_threads(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        empty = await callers.bob.get("/v1/threads")
        assert empty.status_code == 200, empty.text
        assert empty.json() == {"threads": [], "next_cursor": None}

        own = await callers.bob.post("/v1/threads", json={})
        assert own.status_code == 201, own.text
        listed = (await callers.bob.get("/v1/threads")).json()
        assert [t["thread_id"] for t in listed["threads"]] == [own.json()["thread_id"]]

        alices = (await callers.alice.get("/v1/threads")).json()
        assert [t["thread_id"] for t in alices["threads"]] == [alice_data.thread_id]

    async def test_other_callers_cannot_page_into_anothers_threads(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        """A cursor names a position, not an owner: bob paging with it still sees only his."""
        for _ in range(3):
            assert (await callers.alice.post("/v1/threads", json={})).status_code == 201
        page = (await callers.alice.get("/v1/threads", params={"limit": 1})).json()
        assert page["next_cursor"]
        bobs = await callers.bob.get("/v1/threads", params={"cursor": page["next_cursor"]})
        assert bobs.status_code == 200, bobs.text
        assert bobs.json()["threads"] == []


CREDENTIALS = {
    "no header": {},
    "unknown key": bearer("key-c"),
    "bare bearer": {"Authorization": "Bearer"},
    "empty authorization": {"Authorization": ""},
    "wrong case": bearer("KEY-A"),
    "key prefix": bearer("key-"),
    "key with suffix": bearer("key-a2"),
    "basic scheme": {"Authorization": "Basic " + base64.b64encode(b"key-a:").decode()},
    "unknown x-api-key": {"X-API-Key": "key-c"},
}


class TestAuthentication:
    """With API keys configured, a request without a known key is a 401 and changes nothing."""

    @pytest.mark.parametrize("credentials", list(CREDENTIALS), ids=list(CREDENTIALS))
    async def test_missing_or_unknown_key_is_unauthorized_everywhere(
        self, callers: Callers, alice_data: AliceData, credentials: str
    ) -> None:
        headers = CREDENTIALS[credentials]
        before_view = await alice_view(callers.alice, alice_data)
        before_state = await state_of(callers.settings)
        requests = [
            ("GET", "/v1/threads", {}),
            ("POST", "/v1/threads", {"json": {}}),
            ("POST", "/v1/runs", {"json": run_body()}),
        ] + [
            (method, url, kwargs)
            for _, method, url, kwargs in routes(
                alice_data.interrupted["run_id"], alice_data.thread_id
            )
        ]
        for method, url, kwargs in requests:
            response = await send(callers.anonymous, method, url, headers=headers, **kwargs)
            assert_error(response, 401)

        after_state = await state_of(callers.settings)
        assert after_state.runs == before_state.runs
        assert after_state.threads == before_state.threads
        assert await alice_view(callers.alice, alice_data) == before_view

    async def test_health_needs_no_key(self, callers: Callers) -> None:
        assert (await callers.anonymous.get("/healthz")).status_code == 200


class TestStreamTokens:
    """`stream_url` lets a client with no headers attach to that one run, and nothing else."""

    async def test_stream_url_attaches_without_an_auth_header(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        run = alice_data.finished
        assert run["stream_url"].startswith(f"/v1/runs/{run['run_id']}/events?token=")
        with_key = await read_events(callers.alice, f"/v1/runs/{run['run_id']}/events")
        with_token = await read_events(callers.anonymous, run["stream_url"])
        assert with_token == with_key
        assert with_token[0].event == "run" and with_token[-1].event == "done"

    async def test_stream_url_resumes_after_last_event_id(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        """A reconnecting EventSource sends Last-Event-ID; the token is checked again."""
        run = alice_data.finished
        everything = await read_events(callers.anonymous, run["stream_url"])
        middle = everything[len(everything) // 2]
        rest = await read_events(
            callers.anonymous, run["stream_url"], headers={"Last-Event-ID": middle.id}
        )
        assert rest == everything[len(everything) // 2 + 1 :]

    async def test_stream_url_of_an_interrupted_run_attaches(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        run = alice_data.interrupted
        async with asyncio.timeout(30):
            async for event in iter_events(callers.anonymous, run["stream_url"]):
                if event.event == "pending":
                    assert event.data["interrupt"] == run["interrupt"]
                    break
            else:
                raise AssertionError("the stream ended without its pending event")

    async def test_token_does_not_work_for_another_run(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        token = alice_data.finished["stream_url"].split("?token=", 1)[1]
        for run_id in (alice_data.interrupted["run_id"], str(uuid.uuid4())):
            url = f"/v1/runs/{run_id}/events"
            assert_error(await send(callers.anonymous, "GET", url, params={"token": token}), 401)

    async def test_token_does_not_authorize_other_routes(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        run_id = alice_data.interrupted["run_id"]
        token = alice_data.interrupted["stream_url"].split("?token=", 1)[1]
        before = await alice_view(callers.alice, alice_data)
        for _, method, url, kwargs in routes(run_id, alice_data.thread_id):
            if url.endswith("/events"):
                continue
            response = await send(callers.anonymous, method, url, params={"token": token}, **kwargs)
            assert_error(response, 401)
        assert await alice_view(callers.alice, alice_data) == before

    async def test_tampered_token_is_unauthorized(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        run_id = alice_data.finished["run_id"]
        other_id = alice_data.interrupted["run_id"]
        token = alice_data.finished["stream_url"].split("?token=", 1)[1]
        kid, payload, signature = token.split(".")
        decoded = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        swapped = base64.urlsafe_b64encode(decoded.replace(run_id.encode(), other_id.encode()))
        as_bob = base64.urlsafe_b64encode(decoded.replace(b"\nalice\n", b"\nbob\n"))
        flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
        cases = {
            "flipped signature": (run_id, f"{kid}.{payload}.{flipped}"),
            "no signature": (run_id, f"{kid}.{payload}"),
            "empty signature": (run_id, f"{kid}.{payload}."),
            "signature only": (run_id, f"..{signature}"),
            "no key id": (run_id, f"{payload}.{signature}"),
            "unknown key id": (run_id, f"other.{payload}.{signature}"),
            "other run, old signature": (
                other_id,
                f"{kid}.{swapped.decode().rstrip('=')}.{signature}",
            ),
            "other owner, old signature": (
                run_id,
                f"{kid}.{as_bob.decode().rstrip('=')}.{signature}",
            ),
            "garbage": (run_id, "not-a-token"),
            "truncated": (run_id, token[: len(token) // 2]),
        }
        for name, (target, bad) in cases.items():
            url = f"/v1/runs/{target}/events"
            response = await send(callers.anonymous, "GET", url, params={"token": bad})
            assert response.status_code == 401, (name, response.status_code)
            assert_error(response, 401)

    async def test_expired_token_is_unauthorized(
        self, callers: Callers, alice_data: AliceData
    ) -> None:
        run_id = alice_data.finished["run_id"]
        tokens = StreamTokens(callers.settings)
        stale = tokens.issue(run_id, "alice", now=time.time() - tokens.ttl_s - 60)
        fresh = tokens.issue(run_id, "alice")
        url = f"/v1/runs/{run_id}/events"
        assert_error(await send(callers.anonymous, "GET", url, params={"token": stale}), 401)
        events = await read_events(callers.anonymous, url, params={"token": fresh})
        assert events[-1].event == "done"


class TestIdempotencyPerCaller:
    """An Idempotency-Key is scoped to its caller: the same key never crosses owners."""

    async def test_same_key_from_two_callers_makes_two_runs(self, callers: Callers) -> None:
        key = {"Idempotency-Key": "order-42"}
        first_a = await callers.alice.post("/v1/runs", json=run_body("alice"), headers=key)
        first_b = await callers.bob.post("/v1/runs", json=run_body("bob"), headers=key)
        assert first_a.status_code == 202, first_a.text
        assert first_b.status_code == 202, first_b.text
        run_a, run_b = first_a.json(), first_b.json()
        assert run_a["run_id"] != run_b["run_id"]
        assert run_a["thread_id"] != run_b["thread_id"]

        again_a = await callers.alice.post("/v1/runs", json=run_body("alice"), headers=key)
        again_b = await callers.bob.post("/v1/runs", json=run_body("bob"), headers=key)
        assert again_a.status_code == 200, again_a.text
        assert again_b.status_code == 200, again_b.text
        assert again_a.json()["run_id"] == run_a["run_id"]
        assert again_b.json()["run_id"] == run_b["run_id"]

        assert_error(await callers.bob.get(f"/v1/runs/{run_a['run_id']}"), 404)
        assert_error(await callers.alice.get(f"/v1/runs/{run_b['run_id']}"), 404)
        mismatch = await callers.bob.post("/v1/runs", json=run_body("alice"), headers=key)
        assert_error(mismatch, 422)

    async def test_same_key_and_body_from_two_callers_makes_two_runs(
        self, callers: Callers
    ) -> None:
        key = {"Idempotency-Key": "same-everything"}
        first_a = await callers.alice.post("/v1/runs", json=run_body(), headers=key)
        first_b = await callers.bob.post("/v1/runs", json=run_body(), headers=key)
        assert (first_a.status_code, first_b.status_code) == (202, 202), (first_a, first_b)
        assert first_a.json()["run_id"] != first_b.json()["run_id"]

    async def test_racing_callers_with_one_key_each_get_their_own_run(
        self, callers: Callers
    ) -> None:
        key = {"Idempotency-Key": "race"}
        responses = await asyncio.gather(
            *[
                client.post("/v1/runs", json=run_body(), headers=key)
                for client in [callers.alice, callers.bob] * 5
            ]
        )
        by_owner: dict[str, set[str]] = {"alice": set(), "bob": set()}
        for index, response in enumerate(responses):
            assert response.status_code in (200, 202), response.text
            by_owner["alice" if index % 2 == 0 else "bob"].add(response.json()["run_id"])
        assert len(by_owner["alice"]) == 1 and len(by_owner["bob"]) == 1
        assert by_owner["alice"] != by_owner["bob"]
        created = [r.status_code for r in responses].count(202)
        assert created == 2
