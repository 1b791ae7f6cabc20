"""Every answer carries the security headers, and no `/v1` answer may be cached (issue 9;
server/security_headers.py; docs/security.md).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from server.security_headers import NON_PAGE_CSP, PAGE_CSP
from tests.conftest import ServerHandle
from tests.test_bad_input import RANDOM_ID, run_body, send

ALWAYS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}


class Tags(HTMLParser):
    """Every tag of an HTML document, with its attributes."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {name: value or "" for name, value in attrs}))

    def urls(self) -> list[str]:
        return [attrs[name] for _, attrs in self.tags for name in ("src", "href") if name in attrs]


def csp_directives(policy: str) -> dict[str, list[str]]:
    parts = (part.split() for part in policy.split(";") if part.strip())
    return {words[0]: words[1:] for words in parts}


def assert_always(response: httpx.Response) -> None:
    for name, value in ALWAYS.items():
        assert response.headers.get(name) == value, (response.url, name, response.headers)
    assert len(response.headers.get_list("cache-control")) <= 1, response.headers


@pytest.fixture
async def ids(client: httpx.AsyncClient) -> AsyncIterator[dict[str, str]]:
    """One thread with one queued run (no worker runs it)."""
    thread = await client.post("/v1/threads", json={})
    assert thread.status_code == 201, thread.text
    run = await client.post("/v1/runs", json=run_body(thread_id=thread.json()["thread_id"]))
    assert run.status_code == 202, run.text
    yield {"thread": thread.json()["thread_id"], "run": run.json()["run_id"]}


class TestPageHeaders:
    """The page at `/` is unframeable, not sniffed, and runs under a CSP its own files satisfy."""

    async def test_page_has_a_strict_csp_and_the_security_headers(
        self, client: httpx.AsyncClient
    ) -> None:
        response = await client.get("/")
        assert response.status_code == 200
        assert_always(response)
        policy = response.headers["content-security-policy"]
        assert policy == PAGE_CSP
        directives = csp_directives(policy)
        assert directives["default-src"] == ["'none'"]
        assert directives["script-src"] == ["'self'"] and directives["style-src"] == ["'self'"]
        assert directives["frame-ancestors"] == ["'none'"]
        assert not any("unsafe" in word for words in directives.values() for word in words)

    async def test_page_needs_nothing_its_csp_forbids(self, client: httpx.AsyncClient) -> None:
        """No inline script, style or handler, and every URL it names is this origin's or data:."""
        tags = Tags((await client.get("/")).text)
        for tag, attrs in tags.tags:
            assert tag != "style" and "style" not in attrs, (tag, attrs)
            assert not any(name.startswith("on") for name in attrs), (tag, attrs)
            if tag == "script":
                assert attrs.get("src", "").startswith("/ui/"), attrs
        for url in tags.urls():
            assert (url.startswith("/") and not url.startswith("//")) or url.startswith("data:")

    async def test_page_assets_answer_with_the_headers(self, client: httpx.AsyncClient) -> None:
        urls = [u for u in Tags((await client.get("/")).text).urls() if u.startswith("/ui/")]
        assert len(urls) >= 2, urls
        for url in urls:
            response = await client.get(url)
            assert response.status_code == 200, url
            assert_always(response)
            assert response.headers["content-security-policy"] == NON_PAGE_CSP


def api_requests(ids: dict[str, str]) -> list[tuple[str, str, dict[str, Any], int]]:
    """JSON answers of every kind: success, empty, each family of error."""
    text = {"content": b"{}", "headers": {"content-type": "text/plain"}}
    return [
        ("GET", "/v1/threads", {}, 200),
        ("GET", f"/v1/threads/{ids['thread']}", {}, 200),
        ("GET", f"/v1/threads/{ids['thread']}/runs", {}, 200),
        ("GET", f"/v1/runs/{ids['run']}", {}, 200),
        ("POST", "/v1/threads", {"json": {}}, 201),
        ("POST", "/v1/runs", {"json": {"input": {}}}, 400),
        ("GET", "/v1/runs/not-a-uuid", {}, 400),
        ("GET", f"/v1/threads/{RANDOM_ID}", {}, 404),
        ("GET", "/v1/no-such-route", {}, 404),
        ("PUT", "/v1/threads", {"json": {}}, 405),
        ("POST", "/v1/runs", {"headers": {"Origin": "https://attacker.example"}}, 403),
        ("POST", "/v1/runs", text, 415),
        ("GET", "/v1/threads", {"headers": {"Host": "attacker.example"}}, 400),
        ("POST", f"/v1/runs/{ids['run']}/cancel", {}, 202),
        ("POST", f"/v1/runs/{ids['run']}/cancel", {}, 409),
        ("DELETE", f"/v1/threads/{ids['thread']}", {}, 204),
    ]


class TestApiHeaders:
    """Every `/v1` answer, errors included, is `no-store`, not sniffed and unframeable."""

    async def test_every_json_answer_is_no_store(
        self, client: httpx.AsyncClient, ids: dict[str, str]
    ) -> None:
        for method, url, kwargs, status in api_requests(ids):
            response = await send(client, method, url, **kwargs)
            assert response.status_code == status, (method, url, response.text)
            assert response.headers.get("cache-control") == "no-store", (method, url)
            assert_always(response)
            assert response.headers["content-security-policy"] == NON_PAGE_CSP
            if status != 204:
                assert response.headers["content-type"].startswith("application/json")
                json.loads(response.content)

    async def test_event_stream_is_no_store(
        self, server: ServerHandle, ids: dict[str, str]
    ) -> None:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=30) as client,
            client.stream("GET", f"/v1/runs/{ids['run']}/events") as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers.get("cache-control") == "no-store"
            assert_always(response)

    async def test_other_answers_carry_the_headers_too(self, client: httpx.AsyncClient) -> None:
        for url in ("/healthz", "/metrics", "/schema/openapi.json", "/no-such-page"):
            response = await client.get(url)
            assert_always(response)
            assert response.headers["content-security-policy"] == NON_PAGE_CSP, url
