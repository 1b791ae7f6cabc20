"""Error answers tell the caller what it needs and nothing internal; every answer carries a
request id to quote (issue 9; docs/protocol.md section 1, docs/security.md).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
import pytest
import structlog
from litestar import Request
from litestar.exceptions import HTTPException
from structlog.testing import capture_logs

from clients import AsyncClient, NotFound
from server.errors import EXCEPTION_HANDLERS, INTERNAL_MESSAGE, UNAVAILABLE_MESSAGE
from stream_store.errors import Fenced, StoreUnavailable
from stream_store.settings import Settings
from tests.conftest import ServerHandle, StartServer
from tests.processes import TcpProxy
from tests.test_bad_input import assert_error, run_body

GENERATED_ID = re.compile(r"[0-9a-f]{32}")


@contextmanager
def all_logs() -> Iterator[list[dict[str, Any]]]:
    """Every log entry, at any level, with the request's context variables merged in."""
    config = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            yield logs
    finally:
        structlog.configure(**config)


class TestRequestIds:
    """Every answer carries an `X-Request-ID`; a sane one sent by the client is kept."""

    async def test_every_answer_carries_its_own_request_id(self, client: httpx.AsyncClient) -> None:
        answers = [
            await client.get("/healthz"),
            await client.get("/"),
            await client.post("/v1/threads", json={}),
            await client.get("/no-such-route"),  # answered by the router, before any handler
            await client.delete("/healthz"),  # 405, likewise
            await client.get("/v1/runs/not-a-uuid"),
        ]
        assert [a.status_code for a in answers] == [200, 200, 201, 404, 405, 400]
        ids = [a.headers["x-request-id"] for a in answers]
        assert all(GENERATED_ID.fullmatch(rid) for rid in ids), ids
        assert len(set(ids)) == len(ids)
        for answer in answers[3:]:
            assert_error(answer, answer.status_code)  # the body's request_id is the header's

    async def test_event_streams_carry_a_request_id(self, client: httpx.AsyncClient) -> None:
        run = await client.post("/v1/runs", json=run_body())
        assert run.status_code == 202, run.text
        url = f"/v1/runs/{run.json()['run_id']}/events"
        async with client.stream("GET", url, headers={"X-Request-ID": "sse-1"}) as response:
            assert response.status_code == 200
            assert response.headers["x-request-id"] == "sse-1"

    @pytest.mark.parametrize("sent", ["edge-7f3a:42", "Root=1-5759e988+bd86/2e3f", "a" * 128])
    async def test_a_sane_client_request_id_is_kept(
        self, client: httpx.AsyncClient, sent: str
    ) -> None:
        response = await client.get("/v1/runs/not-a-uuid", headers={"X-Request-ID": sent})
        assert response.headers["x-request-id"] == sent
        assert assert_error(response, 400)["request_id"] == sent

    @pytest.mark.parametrize(
        "sent",
        ["a" * 129, "two words", "<script>alert(1)</script>", 'say "hi"', "a;b", ""],
        ids=["too-long", "space", "markup", "quotes", "semicolon", "empty"],
    )
    async def test_an_unsafe_client_request_id_is_replaced(
        self, client: httpx.AsyncClient, sent: str
    ) -> None:
        response = await client.get("/v1/runs/not-a-uuid", headers={"X-Request-ID": sent})
        rid = response.headers["x-request-id"]
        assert rid != sent and GENERATED_ID.fullmatch(rid), rid
        assert assert_error(response, 400)["request_id"] == rid

    async def test_the_client_exceptions_carry_the_request_id(self, server: ServerHandle) -> None:
        async with AsyncClient(server.url) as client:
            with pytest.raises(NotFound) as raised:
                await client.get("5f0c2a7e-9d1b-4c3e-8a6f-2b7d9e1c4a50")
        assert raised.value.request_id and GENERATED_ID.fullmatch(raised.value.request_id)

    async def test_the_request_id_is_in_the_log_context_of_the_request(
        self, client: httpx.AsyncClient
    ) -> None:
        with all_logs() as logs:
            created = await client.post("/v1/threads", json={}, headers={"X-Request-ID": "t-1"})
            refused = await client.get("/v1/runs/not-a-uuid", headers={"X-Request-ID": "t-2"})
        assert created.status_code == 201 and refused.status_code == 400
        created_logs = [e for e in logs if e["event"] == "thread created"]
        assert [e.get("request_id") for e in created_logs] == ["t-1"], logs
        refusals = [e for e in logs if e["event"] == "request refused"]
        assert [(e.get("request_id"), e.get("code")) for e in refusals] == [("t-2", "invalid_id")]


def _request(rid: str) -> Request[Any, Any, Any]:
    return Request(
        {  # type: ignore[arg-type]
            "type": "http",
            "method": "GET",
            "scheme": "http",
            "server": ("127.0.0.1", 8000),
            "path": "/v1/runs/5f0c2a7e-9d1b-4c3e-8a6f-2b7d9e1c4a50",
            "raw_path": b"/v1/runs/5f0c2a7e-9d1b-4c3e-8a6f-2b7d9e1c4a50",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"x-request-id", rid.encode())],
            "state": {},
        }
    )


def _handle(exc: Exception, rid: str) -> tuple[int, Any]:
    """What the app answers for `exc`: the handler Litestar picks (nearest class in the MRO)."""
    handler = next(EXCEPTION_HANDLERS[k] for k in type(exc).__mro__ if k in EXCEPTION_HANDLERS)
    response = handler(_request(rid), exc)
    return response.status_code, msgspec.json.decode(msgspec.json.encode(response.content))


class TestServerErrorBodies:
    """A 5xx body is one fixed sentence and the request id; what went wrong is only logged."""

    @pytest.mark.parametrize(
        ("exc", "status", "code", "message"),
        [
            (
                StoreUnavailable("postgres: couldn't get a connection after 10.00 sec"),
                503,
                "unavailable",
                UNAVAILABLE_MESSAGE,
            ),
            (Fenced("run r: FENCED attempt 3"), 500, "internal", INTERNAL_MESSAGE),
            (
                HTTPException(status_code=503, detail="db.internal:5432 refused"),
                503,
                "unavailable",
                UNAVAILABLE_MESSAGE,
            ),
            (HTTPException(status_code=500, detail="db.internal:5432"), 500, "internal", None),
            (RuntimeError("password=hunter2 at db.internal"), 500, "internal", INTERNAL_MESSAGE),
        ],
        ids=["store-unavailable", "store-error", "http-503", "http-500", "unexpected"],
    )
    def test_server_errors_answer_a_fixed_sentence_and_log_the_detail(
        self, exc: Exception, status: int, code: str, message: str | None
    ) -> None:
        detail = str(getattr(exc, "detail", None) or exc)
        with all_logs() as logs:
            answered, body = _handle(exc, "unit-1")
        assert answered == status
        expected = message or INTERNAL_MESSAGE
        assert body == {"error": {"code": code, "message": expected, "request_id": "unit-1"}}
        logged = [e for e in logs if e.get("request_id") == "unit-1"]
        assert logged and logged[0]["log_level"] in ("warning", "error"), logs
        assert detail in str(logged[0]) or logged[0].get("exc_info") is exc, logged

    async def test_storage_outage_answers_503_without_driver_text(
        self, settings: Settings, start_server: StartServer
    ) -> None:
        """Redis refusing connections: the driver's message (host, port) stays in the log."""
        real = urlsplit(str(settings.redis_url))
        proxy = TcpProxy(real.hostname or "127.0.0.1", real.port or 6379)
        await proxy.start()
        try:
            netloc = real.netloc.replace(f"{real.hostname}:{real.port}", f"127.0.0.1:{proxy.port}")
            server = await start_server(redis_url=real._replace(netloc=netloc).geturl())
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
                run = await http.post("/v1/runs", json=run_body())
                assert run.status_code == 202, run.text
                await proxy.stop()  # new connections are refused
                with all_logs() as logs:
                    url = f"/v1/runs/{run.json()['run_id']}"
                    response = await http.get(url, headers={"X-Request-ID": "outage-1"})
        finally:
            await proxy.stop()
        error = assert_error(response, 503)
        assert error == {
            "code": "unavailable",
            "message": UNAVAILABLE_MESSAGE,
            "request_id": "outage-1",
        }
        for secret in (str(proxy.port), "127.0.0.1", "redis", "Error"):
            assert secret not in response.text, response.text
        logged = [
            e for e in logs if e.get("request_id") == "outage-1" and e["event"] != "request refused"
        ]
        assert logged and logged[0]["log_level"] == "warning", logs
        assert str(proxy.port) in logged[0]["error"], logged
