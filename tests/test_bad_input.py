"""Bad input never changes state and gets a clear JSON error (docs/protocol.md sections
1 Conventions and 3 Endpoints).

Every request here is refused. Each test records the test's whole state (the rows of
`runstream_runs` and `runstream_threads` in its schema, every Redis key under its prefix)
before the request and checks it is identical afterwards. No worker runs, so nothing else
can change that state while a test looks. The module's tests share one server and schema: each
has a thread and a queued run of its own, and compares the state before and after its request.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import pytest_asyncio
from psycopg.rows import dict_row
from redis.asyncio import Redis

from server.app import create_app, serving
from stream_store.limits import JSON_MAX_DEPTH
from stream_store.settings import Settings
from tests.conftest import ServerHandle, schema_connection, serve_in_loop

pytestmark = pytest.mark.asyncio(loop_scope="module")

MAX_BODY = 2048
RANDOM_ID = "5f0c2a7e-9d1b-4c3e-8a6f-2b7d9e1c4a50"


def run_body(text: str = "hello there", **extra: Any) -> dict[str, Any]:
    return {"input": {"messages": [{"role": "user", "content": text}]}, **extra}


# -- state ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    """Everything a request could change: table rows and Redis keys with their contents."""

    runs: list[dict[str, Any]]
    threads: list[dict[str, Any]]
    redis: dict[bytes, bytes | None]

    @property
    def counts(self) -> tuple[int, int, int]:
        return len(self.runs), len(self.threads), len(self.redis)


async def state_of(settings: Settings) -> State:
    """The rows of the test's tables and the dump of every key under its Redis prefix."""
    assert settings.redis_url
    async with await schema_connection(settings, row_factory=dict_row) as conn:
        runs = await (await conn.execute("SELECT * FROM runstream_runs ORDER BY run_id")).fetchall()
        threads = await (
            await conn.execute("SELECT * FROM runstream_threads ORDER BY thread_id")
        ).fetchall()
    redis = Redis.from_url(settings.redis_url)
    try:
        # The submit-rate window counts attempts, refused ones included (docs/protocol.md 3.6):
        # it is the one key a refused submit may change. A worker's reaper takes its turns
        # (`:reaper:`) on its own.
        keys = sorted(
            [
                k
                async for k in redis.scan_iter(match=f"{settings.redis_prefix}:*")
                if not k.endswith(b":submits") and b":reaper:" not in k
            ]
        )
        dumps = {key: await redis.dump(key) for key in keys}
    finally:
        await redis.aclose()
    return State(runs=runs, threads=threads, redis=dumps)


async def send(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> httpx.Response:
    """One request, its body read unless it is an event stream.

    An error must never be answered with an open SSE stream. If the server answers one anyway,
    this returns at once (and the status fails the caller's check) instead of waiting for a
    stream that, on a run no worker executes, never ends.
    """
    response = await client.send(client.build_request(method, url, **kwargs), stream=True)
    try:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            await response.aread()
    finally:
        await response.aclose()
    return response


def _text(response: httpx.Response) -> str:
    try:
        return response.text
    except httpx.ResponseNotRead:
        return "<an event stream>"


def assert_error(response: httpx.Response, status: int) -> dict[str, str]:
    """The response is `status` with exactly `{"error": {"code", "message", "request_id"}}` as
    JSON, the `request_id` being the answer's `X-Request-ID`."""
    assert response.status_code == status, (response.status_code, _text(response))
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message", "request_id"}, body
    assert isinstance(error["code"], str) and error["code"].strip(), body
    assert isinstance(error["message"], str) and error["message"].strip(), body
    assert error["request_id"] and error["request_id"] == response.headers["x-request-id"], body
    return error


@dataclass
class Api:
    """A server (no worker) with one thread and one queued run on it already recorded."""

    client: httpx.AsyncClient
    settings: Settings
    thread_id: str
    run_id: str

    async def refused(self, status: int, method: str, url: str, **kwargs: Any) -> dict[str, str]:
        """Send one request; it must answer `status` with the error shape and change nothing."""
        before = await state_of(self.settings)
        assert before.counts[0] >= 1 and before.counts[1] >= 1 and before.counts[2] >= 1
        error = assert_error(await send(self.client, method, url, **kwargs), status)
        after = await state_of(self.settings)
        assert after.counts == before.counts
        assert after.runs == before.runs
        assert after.threads == before.threads
        assert after.redis == before.redis
        return error


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def module_server(module_settings: Settings) -> AsyncIterator[ServerHandle]:
    """One server for the module's tests: each leaves the state as it found it (or adds to it,
    for the few accepted requests), and every check compares the state before and after."""
    handle = await serve_in_loop(serving(create_app(limited(module_settings))))
    yield handle
    await handle.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def api(module_settings: Settings, module_server: ServerHandle) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(base_url=module_server.url, timeout=30) as client:
        thread = await client.post("/v1/threads", json={})
        assert thread.status_code == 201, thread.text
        thread_id = thread.json()["thread_id"]
        run = await client.post("/v1/runs", json=run_body(thread_id=thread_id))
        assert run.status_code == 202, run.text
        yield Api(client, limited(module_settings), thread_id, run.json()["run_id"])


def limited(settings: Settings) -> Settings:
    """A small body limit; room for each test's thread and queued run (the per-caller rates
    and counts are off, as for a single developer without API keys)."""
    return replace(
        settings,
        max_body_bytes=MAX_BODY,
        max_active_runs=0,
        max_submits_per_minute=0,
        max_writes_per_minute=0,
        max_queries_per_minute=0,
    )


def run_routes(run_id: str, thread_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every route that names a run or a thread in its path, with an otherwise valid request."""
    return [
        ("GET", f"/v1/runs/{run_id}", {}),
        ("GET", f"/v1/runs/{run_id}/events", {}),
        ("POST", f"/v1/runs/{run_id}/cancel", {}),
        ("POST", f"/v1/runs/{run_id}/resume", {"json": {"resume": {"approve": True}}}),
        ("GET", f"/v1/threads/{thread_id}", {}),
        ("GET", f"/v1/threads/{thread_id}/runs", {}),
        ("POST", f"/v1/threads/{thread_id}/runs", {"json": run_body()}),
        ("DELETE", f"/v1/threads/{thread_id}", {}),
    ]


ROUTE_NAMES = [
    "get-run",
    "run-events",
    "cancel-run",
    "resume-run",
    "get-thread",
    "thread-runs",
    "thread-create-run",
    "delete-thread",
]

# -- bodies ---------------------------------------------------------------------------------


class TestMalformedBodies:
    """A body that is not JSON, or not the documented shape, is a 400 that records nothing."""

    @pytest.mark.parametrize(
        "raw",
        [
            b'{"input": ',
            b"not json",
            b'{"input": {"messages": [{"role": "user", "content": "hi"}]},}',
            b"{'input': {}}",
            b'{"input": {"messages": [{"role": "user", "content": "\xff"}]}}',
        ],
        ids=["truncated", "bare-words", "trailing-comma", "single-quotes", "invalid-utf8"],
    )
    @pytest.mark.parametrize("target", ["runs", "thread-runs"])
    async def test_malformed_json_is_rejected_without_side_effects(
        self, api: Api, raw: bytes, target: str
    ) -> None:
        url = "/v1/runs" if target == "runs" else f"/v1/threads/{api.thread_id}/runs"
        headers = {"content-type": "application/json"}
        await api.refused(400, "POST", url, content=raw, headers=headers)

    @pytest.mark.parametrize(
        "body",
        [{}, {"graph": "chat"}, {"thread_id": RANDOM_ID, "multitask": "enqueue"}, {"input": None}],
        ids=["empty-object", "graph-only", "thread-only", "input-null"],
    )
    async def test_missing_input_is_rejected_without_side_effects(
        self, api: Api, body: dict[str, Any]
    ) -> None:
        await api.refused(400, "POST", "/v1/runs", json=body)

    @pytest.mark.parametrize(
        "body",
        [
            [run_body()],
            "hello",
            None,
            {"input": "hello"},
            {"input": {"messages": "hello"}},
            {"input": {"messages": {"role": "user", "content": "hi"}}},
            {"input": {"messages": ["hello"]}},
            {"input": {"messages": [{"role": "user", "content": 5}]}},
            {"input": {"messages": [{"role": "user", "content": ["a", "b"]}]}},
            {"input": {"messages": [{"role": 1, "content": "hi"}]}},
            {"input": {"messages": [{"content": "hi"}]}},
            {"input": {"messages": [{"role": "user"}]}},
            run_body(multitask="sometimes"),
            run_body(multitask=True),
            run_body(graph=5),
            run_body(graph=""),
            run_body(graph=None),
            run_body(metadata="tag"),
            run_body(metadata=[1, 2]),
            run_body(config="fast"),
            run_body(config={"configurable": "fast"}),
            run_body(thread_id=123),
        ],
        ids=[
            "body-array",
            "body-string",
            "body-null",
            "input-string",
            "messages-string",
            "messages-object",
            "message-string",
            "content-number",
            "content-list",
            "role-number",
            "role-missing",
            "content-missing",
            "multitask-sometimes",
            "multitask-bool",
            "graph-int",
            "graph-empty",
            "graph-null",
            "metadata-string",
            "metadata-list",
            "config-string",
            "configurable-string",
            "thread-id-int",
        ],
    )
    async def test_wrong_types_are_rejected_without_side_effects(self, api: Api, body: Any) -> None:
        await api.refused(400, "POST", "/v1/runs", json=body)

    @pytest.mark.parametrize("target", ["runs", "thread-runs"])
    async def test_empty_messages_list_is_rejected_without_side_effects(
        self, api: Api, target: str
    ) -> None:
        url = "/v1/runs" if target == "runs" else f"/v1/threads/{api.thread_id}/runs"
        await api.refused(400, "POST", url, json={"input": {"messages": []}})

    async def test_empty_message_content_is_rejected_without_side_effects(self, api: Api) -> None:
        await api.refused(400, "POST", "/v1/runs", json=run_body(""))

    @pytest.mark.parametrize("role", ["robot", "USER", "", "tool"])
    async def test_unknown_role_is_rejected_without_side_effects(self, api: Api, role: str) -> None:
        body = {"input": {"messages": [{"role": role, "content": "hi"}]}}
        await api.refused(400, "POST", "/v1/runs", json=body)

    @pytest.mark.parametrize(
        "body",
        [
            run_body(stream=True),
            {"input": {"messages": [{"role": "user", "content": "hi"}], "files": []}},
            {"input": {"messages": [{"role": "user", "content": "hi", "name": "al"}]}},
            run_body(config={"configurable": {}, "recursion_limit": 3}),
        ],
        ids=["top-level", "in-input", "in-message", "in-config"],
    )
    async def test_unknown_field_is_rejected_without_side_effects(
        self, api: Api, body: dict[str, Any]
    ) -> None:
        await api.refused(400, "POST", "/v1/runs", json=body)

    @pytest.mark.parametrize("graph", ["no-such-graph", "CHAT", "runner.graphs:chat"])
    @pytest.mark.parametrize("target", ["runs", "thread-runs"])
    async def test_unknown_graph_is_rejected_without_side_effects(
        self, api: Api, graph: str, target: str
    ) -> None:
        url = "/v1/runs" if target == "runs" else f"/v1/threads/{api.thread_id}/runs"
        error = await api.refused(400, "POST", url, json=run_body(graph=graph))
        assert graph in error["message"]

    @pytest.mark.parametrize("thread_id", ["not-a-uuid", "12345", "", "x" * 300])
    async def test_non_uuid_thread_id_in_body_is_rejected_without_side_effects(
        self, api: Api, thread_id: str
    ) -> None:
        await api.refused(400, "POST", "/v1/runs", json=run_body(thread_id=thread_id))

    async def test_body_thread_id_differing_from_path_is_rejected_without_side_effects(
        self, api: Api
    ) -> None:
        url = f"/v1/threads/{api.thread_id}/runs"
        await api.refused(400, "POST", url, json=run_body(thread_id=RANDOM_ID))

    @pytest.mark.parametrize(
        "body",
        [{}, {"value": {"approve": True}}, {"resume": True, "extra": 1}, [True], None],
        ids=["empty", "wrong-key", "extra-key", "array", "null"],
    )
    async def test_resume_without_resume_key_is_rejected_without_side_effects(
        self, api: Api, body: Any
    ) -> None:
        await api.refused(400, "POST", f"/v1/runs/{api.run_id}/resume", json=body)

    async def test_resume_with_no_body_is_rejected_without_side_effects(self, api: Api) -> None:
        error = await api.refused(400, "POST", f"/v1/runs/{api.run_id}/resume")
        assert "needs a body" in error["message"], error

    async def test_a_run_with_no_body_is_refused_saying_a_body_is_needed(self, api: Api) -> None:
        error = await api.refused(400, "POST", "/v1/runs")
        assert error["message"].startswith("the request needs a body: a JSON object"), error

    @pytest.mark.parametrize(
        "raw",
        [b'{"metadata": "x"}', b'{"meta": {}}', b'{"metadata": '],
        ids=["metadata-string", "unknown-field", "malformed"],
    )
    async def test_bad_thread_body_is_rejected_without_side_effects(
        self, api: Api, raw: bytes
    ) -> None:
        headers = {"content-type": "application/json"}
        await api.refused(400, "POST", "/v1/threads", content=raw, headers=headers)


class TestOversizeBodies:
    """A body bigger than `max_body_bytes` is a 413 that records nothing."""

    @pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
    @pytest.mark.parametrize("target", ["runs", "thread-runs", "resume", "threads"])
    async def test_oversize_body_is_rejected_without_side_effects(
        self, api: Api, target: str, chunked: bool
    ) -> None:
        filler = "word " * MAX_BODY
        url, body = {
            "runs": ("/v1/runs", run_body(filler)),
            "thread-runs": (f"/v1/threads/{api.thread_id}/runs", run_body(filler)),
            "resume": (f"/v1/runs/{api.run_id}/resume", {"resume": filler}),
            "threads": ("/v1/threads", {"metadata": {"note": filler}}),
        }[target]
        raw = json.dumps(body).encode()
        assert len(raw) > MAX_BODY

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(raw), 512):
                yield raw[start : start + 512]

        content: Any = chunks() if chunked else raw
        headers = {"content-type": "application/json"}
        await api.refused(413, "POST", url, content=content, headers=headers)

    async def test_body_just_under_the_limit_is_accepted(self, api: Api) -> None:
        """The 413 above is about size alone: the same request made to fit is a run."""
        base = len(json.dumps(run_body("")).encode())
        text = "a" * (MAX_BODY - base - 16)
        response = await api.client.post("/v1/runs", json=run_body(text))
        assert response.status_code == 202, response.text


JSON_HEADERS = {"content-type": "application/json"}


def nested_body(field: str, depth: int) -> bytes:
    """`{field: [[...]]}`: a JSON body `depth` arrays and objects deep, the body counted."""
    inner = depth - 1
    return f'{{"{field}":{"[" * inner}{"]" * inner}}}'.encode()


def body_routes(api: Api) -> dict[str, tuple[str, str]]:
    """Every route that takes a JSON body: (url, a top-level field of its body)."""
    return {
        "runs": ("/v1/runs", "input"),
        "thread-runs": (f"/v1/threads/{api.thread_id}/runs", "input"),
        "resume": (f"/v1/runs/{api.run_id}/resume", "resume"),
        "threads": ("/v1/threads", "metadata"),
    }


class TestDeepJson:
    """JSON nested more than `JSON_MAX_DEPTH` deep is a 400 that records nothing, never a 500
    (issue 9: past about 960 levels the decoder raised `RecursionError`)."""

    @pytest.mark.parametrize(
        "depth", [JSON_MAX_DEPTH + 1, 1000], ids=["just-over-the-limit", "past-recursion-limit"]
    )
    @pytest.mark.parametrize("target", ["runs", "thread-runs", "resume", "threads"])
    async def test_deeply_nested_json_is_rejected_without_side_effects(
        self, api: Api, target: str, depth: int
    ) -> None:
        url, field = body_routes(api)[target]
        raw = nested_body(field, depth)
        assert len(raw) <= MAX_BODY  # a 400 for depth, not a 413 for size
        error = await api.refused(400, "POST", url, content=raw, headers=JSON_HEADERS)
        assert error["code"] == "invalid_request"
        assert f"more than {JSON_MAX_DEPTH}" in error["message"], error

    async def test_json_as_deep_as_the_limit_is_accepted(self, api: Api) -> None:
        """The 400 above is about depth alone: the same body one level shallower is recorded."""
        inner = JSON_MAX_DEPTH - 2  # the body and `metadata` are the first two levels
        metadata = {"a": json.loads("[" * inner + "]" * inner)}
        response = await api.client.post("/v1/threads", json={"metadata": metadata})
        assert response.status_code == 201, response.text
        assert response.json()["metadata"] == metadata

    async def test_brackets_inside_strings_do_not_count(self, api: Api) -> None:
        text = '"\\' + "[{" * 200  # an escaped quote and backslash, then brackets
        response = await api.client.post("/v1/threads", json={"metadata": {"note": text}})
        assert response.status_code == 201, response.text
        assert response.json()["metadata"] == {"note": text}


NUL = "\u0000"


class TestNulCharacters:
    """NUL (U+0000), which Postgres cannot store, is a 400 `invalid_request` naming where it is
    and recording nothing, on every route, never a 500 (issue 9)."""

    @pytest.mark.parametrize(
        ("body", "where"),
        [
            (run_body(f"a{NUL}b"), "input.messages[0].content"),
            (
                {"input": {"messages": [{"role": "user", "content": "hi", "id": f"m{NUL}"}]}},
                "input.messages[0].id",
            ),
            (run_body(metadata={"tag": f"x{NUL}"}), "metadata.tag"),
            (run_body(metadata={f"k{NUL}": 1}), "metadata["),
            (run_body(metadata={"deep": {"list": ["ok", NUL]}}), "metadata.deep.list[1]"),
            (run_body(graph=f"chat{NUL}"), "graph"),
            (run_body(config={"configurable": {f"x{NUL}": 1}}), "config.configurable["),
        ],
        ids=[
            "content",
            "message-id",
            "metadata-value",
            "metadata-key",
            "metadata-nested",
            "graph",
            "configurable-key",
        ],
    )
    @pytest.mark.parametrize("target", ["runs", "thread-runs"])
    async def test_nul_in_a_run_body_is_rejected_naming_the_field(
        self, api: Api, target: str, body: dict[str, Any], where: str
    ) -> None:
        url = body_routes(api)[target][0]
        error = await api.refused(400, "POST", url, json=body)
        assert error["code"] == "invalid_request"
        assert error["message"].startswith(where) and "NUL" in error["message"], error

    @pytest.mark.parametrize(
        ("body", "where"),
        [
            ({"metadata": {"tag": f"x{NUL}"}}, "metadata.tag"),
            ({"metadata": {f"k{NUL}": "v"}}, "metadata["),
        ],
        ids=["value", "key"],
    )
    async def test_nul_in_thread_metadata_is_rejected_naming_the_field(
        self, api: Api, body: dict[str, Any], where: str
    ) -> None:
        error = await api.refused(400, "POST", "/v1/threads", json=body)
        assert error["message"].startswith(where) and "NUL" in error["message"], error

    @pytest.mark.parametrize(
        ("value", "where"),
        [(f"a{NUL}", "resume"), ({"note": [f"x{NUL}"]}, "resume.note[0]")],
        ids=["string", "nested"],
    )
    async def test_nul_in_a_resume_value_is_rejected_naming_the_field(
        self, api: Api, value: Any, where: str
    ) -> None:
        """Even for a run that is not interrupted: the body is refused before the run is read."""
        url = f"/v1/runs/{api.run_id}/resume"
        error = await api.refused(400, "POST", url, json={"resume": value})
        assert error["message"].startswith(where) and "NUL" in error["message"], error

    async def test_an_escaped_backslash_before_u0000_is_not_nul(self, api: Api) -> None:
        """The six characters `\\u0000` are text, not NUL: only the character is refused."""
        text = "\\u0000"
        response = await api.client.post("/v1/threads", json={"metadata": {"note": text}})
        assert response.status_code == 201, response.text
        assert response.json()["metadata"] == {"note": text}

    @pytest.mark.parametrize(
        "path", ["/ui/%00", "/ui/app.js%00", "/v1/runs/{run}%00", "/v1/threads/{thread}%00/runs"]
    )
    async def test_nul_in_the_path_is_rejected_without_side_effects(
        self, api: Api, path: str
    ) -> None:
        url = path.format(run=api.run_id, thread=api.thread_id)
        await api.refused(400, "GET", url)

    @pytest.mark.parametrize(
        ("route", "params", "status"),
        [
            ("threads", {"cursor": f"a{NUL}"}, 400),
            ("threads", {"limit": f"1{NUL}"}, 400),
            ("events", {"last_event_id": f"1-0{NUL}"}, 400),
            ("events", {"token": f"a.b{NUL}.c"}, 400),
            ("threads", {"unknown": NUL}, 400),
            ("health", {"x": NUL}, 400),
        ],
        ids=["cursor", "limit", "last-event-id", "token", "unknown-parameter", "health"],
    )
    async def test_nul_in_a_query_parameter_is_refused_without_side_effects(
        self, api: Api, route: str, params: dict[str, str], status: int
    ) -> None:
        """Refused before any route reads the query string, whichever parameter it is in."""
        url = {
            "threads": "/v1/threads",
            "events": f"/v1/runs/{api.run_id}/events",
            "health": "/healthz",
        }[route]
        error = await api.refused(status, "GET", url, params=params)
        assert error["message"] == "the query string must not contain NUL (%00)", error


# -- ids in paths ---------------------------------------------------------------------------

BAD_IDS = [
    "not-a-uuid",
    "12345",
    "5f0c2a7e-9d1b-4c3e-8a6f-2b7d9e1c4a5",
    "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz",
    "5f0c2a7e-9d1b-4c3e-8a6f-2b7d9e1c4a50-00",
    "x" * 300,
]


class TestIdsInPaths:
    """Ids in paths must be UUIDs (400); a well-formed id nobody has is 404; neither writes."""

    @pytest.mark.parametrize("bad_id", BAD_IDS, ids=lambda v: v[:40])
    @pytest.mark.parametrize("route", range(len(ROUTE_NAMES)), ids=ROUTE_NAMES)
    async def test_non_uuid_path_id_is_rejected_without_side_effects(
        self, api: Api, route: int, bad_id: str
    ) -> None:
        method, url, kwargs = run_routes(bad_id, bad_id)[route]
        await api.refused(400, method, url, **kwargs)

    @pytest.mark.parametrize("route", range(len(ROUTE_NAMES)), ids=ROUTE_NAMES)
    async def test_unknown_uuid_path_id_is_not_found_without_side_effects(
        self, api: Api, route: int
    ) -> None:
        method, url, kwargs = run_routes(RANDOM_ID, RANDOM_ID)[route]
        await api.refused(404, method, url, **kwargs)

    async def test_unknown_thread_id_in_body_is_not_found_without_side_effects(
        self, api: Api
    ) -> None:
        await api.refused(404, "POST", "/v1/runs", json=run_body(thread_id=RANDOM_ID))

    async def test_unknown_ids_answer_the_same_code_on_every_route(self, api: Api) -> None:
        codes = set()
        for method, url, kwargs in run_routes(str(uuid.uuid4()), str(uuid.uuid4())):
            codes.add(assert_error(await send(api.client, method, url, **kwargs), 404)["code"])
        body = run_body(thread_id=str(uuid.uuid4()))
        codes.add(assert_error(await api.client.post("/v1/runs", json=body), 404)["code"])
        assert len(codes) == 1, codes


# -- event ids ------------------------------------------------------------------------------

BAD_EVENT_IDS = [
    "abc",
    "1700000000000",
    "1700000000000-",
    "-0",
    "1-2-3",
    "1700000000000-0x",
    "$",
    "+",
    "1.5-0",
    "99999999999999999999-0",
    "1700000000000-99999999999999999999",
]


class TestEventIds:
    """A malformed `Last-Event-ID` header or `last_event_id` query is a 400 (docs/protocol.md
    4.1 Event ids)."""

    @pytest.mark.parametrize("value", BAD_EVENT_IDS)
    async def test_bad_last_event_id_header_is_rejected_without_side_effects(
        self, api: Api, value: str
    ) -> None:
        url = f"/v1/runs/{api.run_id}/events"
        await api.refused(400, "GET", url, headers={"Last-Event-ID": value})

    @pytest.mark.parametrize("value", BAD_EVENT_IDS)
    async def test_bad_last_event_id_query_is_rejected_without_side_effects(
        self, api: Api, value: str
    ) -> None:
        url = f"/v1/runs/{api.run_id}/events"
        await api.refused(400, "GET", url, params={"last_event_id": value})

    @pytest.mark.parametrize(
        "value",
        ["18446744073709551615-18446744073709551615", "18446744073709551615-0", "99999999999999-0"],
        ids=["redis-max", "max-ms", "year-5138"],
    )
    @pytest.mark.parametrize("where", ["header", "query"])
    async def test_event_id_after_the_newest_event_is_rejected_without_side_effects(
        self, api: Api, value: str, where: str
    ) -> None:
        """An id the run never issued is bad input, not an empty stream that never ends."""
        url = f"/v1/runs/{api.run_id}/events"
        kwargs: dict[str, Any] = (
            {"headers": {"Last-Event-ID": value}}
            if where == "header"
            else {"params": {"last_event_id": value}}
        )
        await api.refused(400, "GET", url, **kwargs)

    async def test_bad_header_wins_over_good_query(self, api: Api) -> None:
        url = f"/v1/runs/{api.run_id}/events"
        headers = {"Last-Event-ID": "garbage"}
        await api.refused(400, "GET", url, headers=headers, params={"last_event_id": "0-0"})


# -- headers and query parameters -----------------------------------------------------------


class TestIdempotencyKey:
    """An `Idempotency-Key` outside 1-255 printable characters is a 400 that records nothing."""

    @pytest.mark.parametrize(
        "key", ["k" * 300, "k" * 256, "", "a\tb"], ids=["300", "256", "empty", "tab"]
    )
    @pytest.mark.parametrize("target", ["runs", "thread-runs"])
    async def test_malformed_idempotency_key_is_rejected_without_side_effects(
        self, api: Api, key: str, target: str
    ) -> None:
        url = "/v1/runs" if target == "runs" else f"/v1/threads/{api.thread_id}/runs"
        body = run_body(multitask="enqueue")
        await api.refused(400, "POST", url, json=body, headers={"Idempotency-Key": key})

    async def test_longest_idempotency_key_is_accepted(self, api: Api) -> None:
        """255 characters is within the limit: the 400s above are about the key alone."""
        headers = {"Idempotency-Key": "k" * 255}
        response = await api.client.post("/v1/runs", json=run_body(), headers=headers)
        assert response.status_code == 202, response.text


class TestStreamTokenInput:
    """A `token` this server did not issue is a 401 that records nothing, whatever its
    characters: a non-ASCII signature used to raise `TypeError` (a 500; issue 9)."""

    @pytest.mark.parametrize("part", [0, -1], ids=["first-part", "signature"])
    async def test_non_ascii_token_is_unauthorized_without_side_effects(
        self, api: Api, part: int
    ) -> None:
        run = (await api.client.get(f"/v1/runs/{api.run_id}")).json()
        parts = parse_qs(urlsplit(run["stream_url"]).query)["token"][0].split(".")
        parts[part] = parts[part][:-1] + "\u00e9"
        url = f"/v1/runs/{api.run_id}/events"
        error = await api.refused(401, "GET", url, params={"token": ".".join(parts)})
        assert error["code"] == "unauthorized"

    @pytest.mark.parametrize(
        "token", ["\u00e9", "\u00e9.\u00e9.\u00e9", "a.b.c", "..", "x" * 2000, "\U0001f600.a"]
    )
    async def test_garbage_token_is_unauthorized_without_side_effects(
        self, api: Api, token: str
    ) -> None:
        url = f"/v1/runs/{api.run_id}/events"
        await api.refused(401, "GET", url, params={"token": token})


def _cursor(text: bytes) -> str:
    return base64.urlsafe_b64encode(text).decode()


class TestThreadListing:
    """A bad `limit` or `cursor` on GET /v1/threads is a 400, never a 500 or a silent default."""

    @pytest.mark.parametrize("limit", ["0", "-1", "101", "abc", "1.5", "1e3"])
    async def test_bad_limit_is_rejected_without_side_effects(self, api: Api, limit: str) -> None:
        await api.refused(400, "GET", "/v1/threads", params={"limit": limit})

    @pytest.mark.parametrize(
        "cursor",
        [
            "garbage!",
            "abc",
            _cursor(b"no separator"),
            _cursor(b"yesterday|" + RANDOM_ID.encode()),
            _cursor(b"2024-01-01T00:00:00+00:00|not-a-uuid"),
            _cursor(b"2024-01-01T00:00:00+00:00|" + RANDOM_ID.encode() + b"|x"),
            _cursor(b"\xff\xfe\xfd"),
        ],
        ids=["not-base64", "bad-padding", "no-pipe", "bad-date", "bad-uuid", "extra", "not-utf8"],
    )
    async def test_bad_cursor_is_rejected_without_side_effects(self, api: Api, cursor: str) -> None:
        await api.refused(400, "GET", "/v1/threads", params={"cursor": cursor})

    async def test_valid_listing_still_works(self, api: Api) -> None:
        response = await api.client.get("/v1/threads", params={"limit": "1"})
        assert response.status_code == 200, response.text
        assert [t["thread_id"] for t in response.json()["threads"]] == [api.thread_id]


class TestConflicts:
    """Valid requests the state forbids are refused with a JSON error and change nothing."""

    async def test_resume_of_a_run_that_is_not_interrupted_is_refused(self, api: Api) -> None:
        url = f"/v1/runs/{api.run_id}/resume"
        await api.refused(409, "POST", url, json={"resume": {"approve": True}})

    async def test_run_on_a_busy_thread_with_reject_is_refused(self, api: Api) -> None:
        body = run_body(thread_id=api.thread_id, multitask="reject")
        await api.refused(409, "POST", "/v1/runs", json=body)

    async def test_delete_of_a_thread_with_an_active_run_is_refused(self, api: Api) -> None:
        await api.refused(409, "DELETE", f"/v1/threads/{api.thread_id}")
