"""A project's own routes (`http.app`) and CORS (`http.cors`), served beside runstream's as
LangGraph's server serves them (tests/projects/http, a Starlette app)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from project.langgraph_json import HTTP_NOT_SERVED, ProjectError, load_project
from server.app import create_app
from stream_store.settings import Settings
from tests.conftest import StartServer
from tests.processes import ROOT
from tests.test_project import _runstream, write_project

PROJECT = ROOT / "tests" / "projects" / "http"
UI = "https://ui.example"


@pytest.fixture
def lifespan_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "lifespan.log"
    monkeypatch.setenv("HTTP_PROJECT_LIFESPAN_LOG", str(log))
    return log


async def test_custom_routes_answer_beside_runstreams(
    start_server: StartServer, lifespan_log: Path
) -> None:
    server = await start_server(config_path=str(PROJECT / "langgraph.json"))
    async with httpx.AsyncClient(base_url=server.url) as client:
        hello = await client.get("/hello")
        assert hello.json() == {"hello": "from the custom app", "started": True}
        # a form is fine here: runstream's JSON-only rule is for its own API
        form = await client.post("/form", data={"name": "ada"})
        assert form.json() == {"name": "ada"}
        assert (await client.get("/healthz")).status_code == 200
    await server.stop()
    logged = await asyncio.to_thread(lifespan_log.read_text)
    assert logged.split() == ["startup", "shutdown"]  # once each


async def test_a_colliding_path_goes_where_langgraph_sends_it(
    start_server: StartServer, lifespan_log: Path
) -> None:
    """Custom routes come first for the path and method they serve; `/ok` cannot be shadowed;
    a method the custom route lacks still reaches runstream's route."""
    server = await start_server(config_path=str(PROJECT / "langgraph.json"))
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert (await client.get("/info")).json() == {"custom": "info"}
        assert (await client.get("/ok")).json() == {"ok": True}
        assert (await client.get("/threads/search")).json() == {"custom": "GET /threads/search"}
        searched = await client.post("/threads/search", json={})
        assert searched.status_code == 200 and searched.json() == []


async def test_cors_preflight_of_a_custom_route_is_langgraphs(
    start_server: StartServer, lifespan_log: Path
) -> None:
    """The headers `langgraph dev` answered with for the same `http.cors`."""
    server = await start_server(config_path=str(PROJECT / "langgraph.json"))
    async with httpx.AsyncClient(base_url=server.url) as client:
        preflight = await client.options(
            "/hello",
            headers={
                "Origin": UI,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "x-custom",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == UI
        assert preflight.headers["access-control-allow-methods"] == "GET, POST"
        assert preflight.headers["access-control-allow-credentials"] == "true"
        assert preflight.headers["access-control-max-age"] == "123"
        assert "x-custom" in preflight.headers["access-control-allow-headers"]
        refused = await client.options(
            "/hello",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
        )
        assert refused.status_code == 400
        assert "access-control-allow-origin" not in refused.headers
        simple = await client.get("/hello", headers={"Origin": UI})
        assert simple.headers["access-control-allow-origin"] == UI
        assert simple.headers["access-control-expose-headers"] == "x-exposed"


async def test_http_cors_is_runstreams_policy_too(
    start_server: StartServer, lifespan_log: Path
) -> None:
    """One policy: runstream's own routes answer the project's origins, and the browser guard
    lets their writes through."""
    server = await start_server(config_path=str(PROJECT / "langgraph.json"))
    async with httpx.AsyncClient(base_url=server.url) as client:
        preflight = await client.options(
            "/threads", headers={"Origin": UI, "Access-Control-Request-Method": "POST"}
        )
        assert preflight.status_code == 204  # Litestar's; LangGraph's (Starlette's) says 200
        assert preflight.headers["access-control-allow-origin"] == UI
        assert preflight.headers["access-control-max-age"] == "123"
        written = await client.post("/threads", json={}, headers={"Origin": UI})
        assert written.status_code == 200, written.text
        assert written.headers["access-control-allow-origin"] == UI
        foreign = await client.post("/threads", json={}, headers={"Origin": "https://evil.example"})
        assert foreign.status_code == 403


async def test_custom_routes_keep_the_browser_guard(
    start_server: StartServer, lifespan_log: Path
) -> None:
    server = await start_server(config_path=str(PROJECT / "langgraph.json"))
    async with httpx.AsyncClient(base_url=server.url) as client:
        rebound = await client.get("/hello", headers={"Host": "attacker.example"})
        assert rebound.status_code == 400
        assert rebound.json()["error"]["code"] == "host_not_allowed"
        forged = await client.post(
            "/form", data={"name": "x"}, headers={"Origin": "https://evil.example"}
        )
        assert forged.status_code == 403


def _auth_project(folder: Path, enabled: bool) -> Path:
    shutil.copy(PROJECT / "app.py", folder / "app.py")
    shutil.copy(PROJECT / "graph.py", folder / "graph.py")
    http: dict[str, Any] = {"app": "./app.py:app", "enable_custom_route_auth": enabled}
    return write_project(folder, {"graphs": {"agent": "./graph.py:builder"}, "http": http})


@pytest.mark.parametrize("enabled", [False, True])
async def test_auth_applies_to_custom_routes_only_when_asked(
    start_server: StartServer, tmp_path: Path, lifespan_log: Path, enabled: bool
) -> None:
    """As on LangGraph's server: custom routes are public unless
    `http.enable_custom_route_auth`, then they take the API's credentials."""
    path = _auth_project(tmp_path, enabled)
    server = await start_server(config_path=str(path), api_keys={"key-1": "owner-1"})
    async with httpx.AsyncClient(base_url=server.url) as client:
        anonymous = await client.get("/hello")
        assert anonymous.status_code == (401 if enabled else 200)
        signed = await client.get("/hello", headers={"x-api-key": "key-1"})
        assert signed.status_code == 200
        assert (await client.get("/threads/search")).status_code == (401 if enabled else 200)


@pytest.mark.parametrize(
    ("http", "files", "cause"),
    [
        ({"app": "./missing.py:app"}, {}, "is not a file"),
        ({"app": "./app.py:nothing"}, {"app.py": "x = 1\n"}, "does not exist"),
        ({"app": "./app.py:app"}, {"app.py": "app = object()\n"}, "not a Starlette or FastAPI"),
        ({"app": "./app.py:app"}, {"app.py": "import nowhere_at_all\n"}, "ModuleNotFoundError"),
        ({"app": "./app.py"}, {}, "names no attribute"),
    ],
)
def test_a_bad_http_app_refuses_the_start_naming_key_and_file(
    tmp_path: Path, http: dict[str, Any], files: dict[str, str], cause: str
) -> None:
    path = write_project(
        tmp_path,
        {"graphs": {"agent": "tests.custom_graphs:builder"}, "http": http},
        **files,
    )
    with pytest.raises(ProjectError) as caught:
        create_app(Settings(config_path=str(path)))
    assert caught.value.key == "http.app"
    assert caught.value.file == str(path)
    assert cause in caught.value.cause


@pytest.mark.parametrize("key", sorted(HTTP_NOT_SERVED))
def test_http_keys_not_served_are_refused(tmp_path: Path, key: str) -> None:
    value: Any = "/prefix" if key == "mount_prefix" else {"includes": ["x-*"]}
    if key.startswith("disable_"):
        value = True
    elif key == "middleware_order":
        value = "auth_first"
    path = write_project(
        tmp_path, {"graphs": {"agent": "tests.custom_graphs:builder"}, "http": {key: value}}
    )
    with pytest.raises(ProjectError) as caught:
        load_project(path)
    assert caught.value.key == f"http.{key}"
    assert "not served" in caught.value.cause


def test_http_keys_at_their_defaults_are_accepted(tmp_path: Path) -> None:
    http = {key: False for key in HTTP_NOT_SERVED if key.startswith("disable_")}
    http.update({"disable_mcp": True, "disable_a2a": True, "disable_webhooks": True})
    path = write_project(
        tmp_path, {"graphs": {"agent": "tests.custom_graphs:builder"}, "http": http}
    )
    assert load_project(path).http.app is None


def test_a_bad_cors_value_is_refused_naming_it(tmp_path: Path) -> None:
    path = write_project(
        tmp_path,
        {
            "graphs": {"agent": "tests.custom_graphs:builder"},
            "http": {"cors": {"allow_origins": "https://one.example"}},
        },
    )
    with pytest.raises(ProjectError) as caught:
        load_project(path)
    assert caught.value.key == "http.cors.allow_origins"


@pytest.mark.slow
@pytest.mark.parametrize("processes", ["1", "2"])
def test_runstream_serve_refuses_a_bad_http_app_with_one_line(
    tmp_path: Path, processes: str
) -> None:
    path = write_project(
        tmp_path,
        {"graphs": {"agent": "tests.custom_graphs:builder"}, "http": {"app": "./app.py:app"}},
        **{"app.py": json.dumps(None) + "\napp = 3\n"},
    )
    done = _runstream("serve", "--processes", processes, "--config", str(path))
    assert done.returncode == 2, done.stderr
    assert f"runstream: {path}: http.app: " in done.stderr
    assert "Traceback" not in done.stderr
