"""CORS for browser UIs on other origins (RUNSTREAM_CORS_ORIGINS): off unless named."""

from __future__ import annotations

import httpx

from tests.conftest import StartServer

UI = "http://ui.example:3000"


async def test_a_named_origin_may_call_the_api_and_read_the_reconnect_headers(
    start_server: StartServer,
) -> None:
    server = await start_server(cors_origins=(UI,))
    async with httpx.AsyncClient(base_url=server.url) as http:
        preflight = await http.options(
            "/threads",
            headers={
                "Origin": UI,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-api-key,last-event-id",
            },
        )
        assert preflight.status_code in (200, 204), preflight.text
        assert preflight.headers["access-control-allow-origin"] == UI
        allowed = preflight.headers["access-control-allow-headers"].lower()
        assert {"x-api-key", "last-event-id", "content-type"} <= set(
            allowed.replace(" ", "").split(",")
        )
        created = await http.post("/threads", json={}, headers={"Origin": UI})
        assert created.status_code == 200, created.text
        assert created.headers["access-control-allow-origin"] == UI
        exposed = created.headers["access-control-expose-headers"].lower()
        assert "location" in exposed and "content-location" in exposed


async def test_other_origins_get_no_cors_and_cannot_write(start_server: StartServer) -> None:
    server = await start_server(cors_origins=(UI,))
    async with httpx.AsyncClient(base_url=server.url) as http:
        refused = await http.post("/threads", json={}, headers={"Origin": "http://evil.example"})
        assert refused.status_code == 403, refused.text
        assert "access-control-allow-origin" not in refused.headers


async def test_cors_is_off_by_default(start_server: StartServer) -> None:
    server = await start_server()
    async with httpx.AsyncClient(base_url=server.url) as http:
        answer = await http.get("/ok", headers={"Origin": UI})
        assert answer.status_code == 200
        assert "access-control-allow-origin" not in answer.headers
        refused = await http.post("/threads", json={}, headers={"Origin": UI})
        assert refused.status_code == 403
