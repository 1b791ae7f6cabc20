"""CORS for browser UIs on other origins (RUNSTREAM_CORS_ORIGINS): off unless named."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from server.app import create_app
from stream_store.settings import Settings, SettingsError
from tests.conftest import StartServer
from tests.test_project import write_project

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


def _open_cors_project(folder: Path, cors: dict[str, Any]) -> str:
    """A project whose `http.cors` lets in origins it does not name."""
    graph = "from tests.custom_graphs import builder\n"
    return str(
        write_project(
            folder, {"graphs": {"g": "./g.py:builder"}, "http": {"cors": cors}}, **{"g.py": graph}
        )
    )


class TestCorsOpenToAnyOrigin:
    """Issue 32: `http.cors.allow_origins: ["*"]` with no sign-in let any web page read
    `GET /v1/threads`. The read rule of docs/security.md ("Browsers") holds unless the operator
    opts out by name."""

    @pytest.mark.parametrize(
        "cors",
        [{"allow_origins": ["*"]}, {"allow_origin_regex": "https://.*"}],
        ids=["star", "regex"],
    )
    async def test_without_a_sign_in_pages_of_other_origins_cannot_read(
        self, start_server: StartServer, tmp_path: Path, cors: dict[str, Any]
    ) -> None:
        server = await start_server(config_path=_open_cors_project(tmp_path, cors))
        async with httpx.AsyncClient(base_url=server.url) as http:
            await http.post("/v1/threads", json={})
            read = await http.get("/v1/threads", headers={"Origin": "https://evil.example"})
            assert read.status_code == 403, read.text
            assert read.json()["error"]["code"] == "origin_not_allowed"
            assert "RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN" in read.json()["error"]["message"]
            langgraph = await http.post(
                "/threads/search", json={}, headers={"Origin": "https://evil.example"}
            )
            assert langgraph.status_code == 403
            assert (await http.get("/v1/threads")).status_code == 200  # no Origin: not a page
            own = await http.get("/v1/threads", headers={"Origin": server.url})
            assert own.status_code == 200

    async def test_the_operator_may_opt_out_by_name(
        self, start_server: StartServer, tmp_path: Path
    ) -> None:
        server = await start_server(
            config_path=_open_cors_project(tmp_path, {"allow_origins": ["*"]}),
            cors_any_origin_without_sign_in=True,
        )
        async with httpx.AsyncClient(base_url=server.url) as http:
            read = await http.get("/v1/threads", headers={"Origin": "https://ui.example"})
            assert read.status_code == 200
            assert read.headers["access-control-allow-origin"] == "*"

    async def test_with_a_sign_in_the_credential_guards_reads(
        self, start_server: StartServer, tmp_path: Path
    ) -> None:
        server = await start_server(
            config_path=_open_cors_project(tmp_path, {"allow_origins": ["*"]}),
            api_keys={"k": "alice"},
            signing_key="s" * 32,
        )
        async with httpx.AsyncClient(base_url=server.url) as http:
            page = {"Origin": "https://ui.example", "x-api-key": "k"}
            assert (await http.get("/v1/threads", headers=page)).status_code == 200

    def test_the_start_warns(self, settings: Settings, tmp_path: Path) -> None:
        project = _open_cors_project(tmp_path, {"allow_origins": ["*"]})
        with capture_logs() as logs:
            create_app(replace(settings, config_path=project))
        warned = [log["event"] for log in logs if log["log_level"] == "warning"]
        assert any("RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN" in event for event in warned)
        with capture_logs() as logs:
            create_app(replace(settings, config_path=project, cors_any_origin_without_sign_in=True))
        assert any("any web page" in log["event"] for log in logs if log["log_level"] == "warning")

    def test_the_setting(self) -> None:
        name = "RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN"
        assert not Settings.from_env({}, env_file="").cors_any_origin_without_sign_in
        assert Settings.from_env({name: "true"}, env_file="").cors_any_origin_without_sign_in
        with pytest.raises(SettingsError, match=name):
            Settings.from_env({name: "maybe"}, env_file="")
