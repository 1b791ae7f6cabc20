"""Only local clients reach a server without API keys, and no page from another site can make a
browser change anything (issue 9; server/browser_guard.py; docs/security.md).

Every refusal here is checked with `Api.refused` from test_bad_input: the status and the error
shape, and the test's whole state (Postgres rows, Redis keys) identical before and after.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from stream_store.settings import Settings
from tests.conftest import ServerHandle, StartServer
from tests.test_bad_input import Api, assert_error, run_body, send, state_of

FOREIGN = "rebound.attacker.example"
KEY = "test-key"


async def api_on(server: ServerHandle, settings: Settings, **client: Any) -> AsyncIterator[Api]:
    """An `Api` on `server`: one thread and one queued run recorded (no worker runs them)."""
    async with httpx.AsyncClient(base_url=server.url, timeout=30, **client) as http:
        thread = await http.post("/v1/threads", json={})
        assert thread.status_code == 201, thread.text
        thread_id = thread.json()["thread_id"]
        run = await http.post("/v1/runs", json=run_body(thread_id=thread_id))
        assert run.status_code == 202, run.text
        yield Api(http, settings, thread_id, run.json()["run_id"])


@pytest.fixture
async def api(settings: Settings, start_server: StartServer) -> AsyncIterator[Api]:
    """No API keys: the loopback-only mode."""
    async for value in api_on(await start_server(), settings):
        yield value


@pytest.fixture
async def keyed_api(settings: Settings, start_server: StartServer) -> AsyncIterator[Api]:
    """API keys configured; the client presents one."""
    server = await start_server(api_keys={KEY: "alice"})
    async for value in api_on(server, settings, headers={"Authorization": f"Bearer {KEY}"}):
        yield value


def writes(api: Api) -> list[tuple[str, str, dict[str, Any]]]:
    """Every state-changing route, each with a request that would otherwise succeed."""
    return [
        ("POST", "/v1/runs", {"json": run_body()}),
        ("POST", f"/v1/threads/{api.thread_id}/runs", {"json": run_body()}),
        ("POST", "/v1/threads", {"json": {}}),
        ("POST", f"/v1/runs/{api.run_id}/cancel", {}),
        ("POST", f"/v1/runs/{api.run_id}/resume", {"json": {"resume": True}}),
        ("DELETE", f"/v1/threads/{api.thread_id}", {}),
    ]


def text_plain(body: dict[str, Any]) -> dict[str, Any]:
    """What an HTML form or a no-preflight `fetch` from another site sends: JSON as text."""
    return {"content": json.dumps(body).encode(), "headers": {"content-type": "text/plain"}}


class TestForeignHostIsRefused:
    """Without API keys, a Host that is not loopback or allowed is a 400 (DNS rebinding)."""

    async def test_foreign_host_reads_no_thread(self, api: Api) -> None:
        for path in ("/v1/threads", f"/v1/threads/{api.thread_id}", f"/v1/runs/{api.run_id}"):
            response = await send(api.client, "GET", path, headers={"Host": FOREIGN})
            assert assert_error(response, 400)["code"] == "host_not_allowed"
            assert api.thread_id not in response.text and api.run_id not in response.text

    async def test_foreign_host_cannot_follow_a_run(self, api: Api) -> None:
        path = f"/v1/runs/{api.run_id}/events"
        response = await send(api.client, "GET", path, headers={"Host": FOREIGN})
        assert assert_error(response, 400)["code"] == "host_not_allowed"

    async def test_foreign_host_post_is_refused_and_records_nothing(self, api: Api) -> None:
        for method, path, kwargs in writes(api):
            headers = {"Host": f"{FOREIGN}:8000", "Origin": f"http://{FOREIGN}:8000"}
            error = await api.refused(400, method, path, headers=headers, **kwargs)
            assert error["code"] == "host_not_allowed", (method, path)

    @pytest.mark.parametrize("host", ["", "127.0.0.1:notaport", "user@127.0.0.1", "127.0.0.1/x"])
    async def test_malformed_host_is_refused(self, api: Api, host: str) -> None:
        """In every mode: a malformed Host is a 400 (the router itself refuses some)."""
        response = await send(api.client, "GET", "/v1/threads", headers={"Host": host})
        assert assert_error(response, 400)["code"] in ("host_not_allowed", "invalid_request")

    @pytest.mark.parametrize(
        "host", ["localhost", "LocalHost:1234", "127.0.0.1", "127.0.0.2:80", "[::1]:8000", "[::1]"]
    )
    async def test_loopback_names_and_addresses_on_any_port_are_allowed(
        self, api: Api, host: str
    ) -> None:
        response = await api.client.get("/v1/threads", headers={"Host": host})
        assert response.status_code == 200, response.text
        assert response.json()["threads"][0]["thread_id"] == api.thread_id

    async def test_allowed_hosts_setting_adds_names(
        self, settings: Settings, start_server: StartServer
    ) -> None:
        server = await start_server(allowed_hosts=("runstream.internal", "10.0.0.7"))
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            for host in ("runstream.internal:8000", "RUNSTREAM.internal", "10.0.0.7:9"):
                response = await http.get("/v1/threads", headers={"Host": host})
                assert response.status_code == 200, (host, response.text)
            response = await http.get("/v1/threads", headers={"Host": FOREIGN})
            assert assert_error(response, 400)["code"] == "host_not_allowed"

    async def test_with_api_keys_any_host_is_served(self, keyed_api: Api) -> None:
        """The key is the credential; a rebinding page has none (and gets 401 without it)."""
        response = await keyed_api.client.get("/v1/threads", headers={"Host": FOREIGN})
        assert response.status_code == 200, response.text
        async with httpx.AsyncClient(base_url=str(keyed_api.client.base_url)) as anonymous:
            response = await anonymous.get("/v1/threads", headers={"Host": FOREIGN})
            assert assert_error(response, 401)["code"] == "unauthorized"

    async def test_with_api_keys_a_malformed_host_is_still_refused(self, keyed_api: Api) -> None:
        headers = {"Host": "127.0.0.1:notaport"}
        response = await send(keyed_api.client, "GET", "/v1/threads", headers=headers)
        assert assert_error(response, 400)["code"] == "host_not_allowed"


class TestCrossOriginWritesAreRefused:
    """A browser write whose Origin is not this server or an allowed host is a 403 (CSRF)."""

    async def test_cross_origin_text_plain_post_is_refused_and_records_nothing(
        self, api: Api
    ) -> None:
        headers = {"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site"}
        request = text_plain(run_body("pwned"))
        request["headers"].update(headers)
        error = await api.refused(403, "POST", "/v1/runs", **request)
        assert error["code"] == "origin_not_allowed"

    @pytest.mark.parametrize(
        "origin",
        [
            "https://attacker.example",
            "http://127.0.0.1.attacker.example",
            "null",
            "file://",
            "not an origin",
        ],
    )
    async def test_every_write_from_another_origin_is_refused_and_records_nothing(
        self, api: Api, origin: str
    ) -> None:
        for method, path, kwargs in writes(api):
            error = await api.refused(403, method, path, headers={"Origin": origin}, **kwargs)
            assert error["code"] == "origin_not_allowed", (method, path)

    @pytest.mark.parametrize("site", ["cross-site", "same-site"])
    async def test_write_without_origin_from_another_site_is_refused(
        self, api: Api, site: str
    ) -> None:
        headers = {"Sec-Fetch-Site": site}
        error = await api.refused(403, "POST", "/v1/runs", json=run_body(), headers=headers)
        assert error["code"] == "origin_not_allowed"

    async def test_same_origin_write_is_accepted(self, api: Api) -> None:
        """What the page at `/` sends: its own origin, `same-origin`, JSON."""
        headers = {"Origin": str(api.client.base_url).rstrip("/"), "Sec-Fetch-Site": "same-origin"}
        response = await api.client.post("/v1/threads", json={}, headers=headers)
        assert response.status_code == 201, response.text

    async def test_origin_of_an_allowed_host_on_any_port_is_accepted(self, api: Api) -> None:
        for origin in ("http://localhost:3000", "http://[::1]:1", "https://127.0.0.1"):
            response = await api.client.post("/v1/threads", headers={"Origin": origin})
            assert response.status_code == 201, (origin, response.text)

    async def test_reads_from_another_origin_are_not_refused(self, api: Api) -> None:
        """Reads change nothing, and without CORS headers the other site cannot see them."""
        response = await api.client.get("/v1/threads", headers={"Origin": "https://other.example"})
        assert response.status_code == 200, response.text
        assert "access-control-allow-origin" not in response.headers

    async def test_with_api_keys_cross_origin_writes_are_still_refused(
        self, keyed_api: Api
    ) -> None:
        headers = {"Origin": "https://attacker.example"}
        error = await keyed_api.refused(403, "POST", "/v1/runs", json=run_body(), headers=headers)
        assert error["code"] == "origin_not_allowed"

    async def test_with_api_keys_the_servers_own_public_origin_is_accepted(
        self, keyed_api: Api
    ) -> None:
        """Behind a proxy that keeps the Host, the page's origin is the server's own."""
        headers = {"Host": "chat.example.com", "Origin": "https://chat.example.com"}
        response = await keyed_api.client.post("/v1/threads", json={}, headers=headers)
        assert response.status_code == 201, response.text


class TestBodiesMustBeJson:
    """A body not sent as `application/json` is a 415 that records nothing."""

    @pytest.mark.parametrize(
        "content_type",
        [
            "text/plain",
            "text/plain; charset=utf-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            None,
        ],
    )
    async def test_non_json_body_is_refused_and_records_nothing(
        self, api: Api, content_type: str | None
    ) -> None:
        headers = {"content-type": content_type} if content_type else {}
        for method, path, kwargs in writes(api):
            body = json.dumps(kwargs.get("json", {})).encode()
            error = await api.refused(415, method, path, content=body, headers=headers)
            assert error["code"] == "unsupported_media_type", (method, path)

    async def test_chunked_non_json_body_is_refused(self, api: Api) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            yield json.dumps(run_body()).encode()

        headers = {"content-type": "text/plain"}
        await api.refused(415, "POST", "/v1/runs", content=chunks(), headers=headers)

    @pytest.mark.parametrize(
        "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"]
    )
    async def test_json_body_is_accepted(self, api: Api, content_type: str) -> None:
        before = await state_of(api.settings)
        body = json.dumps({"metadata": {"via": content_type}}).encode()
        response = await api.client.post(
            "/v1/threads", content=body, headers={"content-type": content_type}
        )
        assert response.status_code == 201, response.text
        assert len((await state_of(api.settings)).threads) == len(before.threads) + 1

    async def test_write_without_a_body_needs_no_content_type(self, api: Api) -> None:
        response = await api.client.post("/v1/threads")
        assert response.status_code == 201, response.text
        response = await api.client.post(f"/v1/runs/{api.run_id}/cancel")
        assert response.status_code == 202, response.text
