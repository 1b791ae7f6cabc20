"""One bound on a request's head, `RUNSTREAM_MAX_HEADER_BYTES`: 431 past it, from the HTTP
server `runstream serve` runs (before the head is parsed further) and from the app itself
(whatever server runs it); and a sign-in flood of oversized tokens leaves other callers
answered (docs/security.md, "Signing in", server/header_limit.py)."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

import httpx
import pytest

from server.app import create_app, serving
from stream_store.limits import DEFAULT_MAX_HEADER_BYTES
from stream_store.settings import Settings, SettingsError
from tests.conftest import StartServer

SECRET = "a-secret-of-at-least-thirty-two-characters"


def assert_too_large(answer: httpx.Response) -> None:
    assert answer.status_code == 431, answer.text[:200]
    error = answer.json()["error"]
    assert error["code"] == "headers_too_large"
    assert "RUNSTREAM_MAX_HEADER_BYTES" in error["message"]


class TestTheSetting:
    def test_the_default_and_the_setting(self) -> None:
        assert Settings.from_env({}, env_file="").max_header_bytes == DEFAULT_MAX_HEADER_BYTES
        env = {"RUNSTREAM_MAX_HEADER_BYTES": "32768"}
        assert Settings.from_env(env, env_file="").max_header_bytes == 32768
        with pytest.raises(SettingsError, match="RUNSTREAM_MAX_HEADER_BYTES must be >= 4096"):
            Settings.from_env({"RUNSTREAM_MAX_HEADER_BYTES": "100"}, env_file="")


class TestTheServer:
    async def test_a_head_over_the_bound_is_a_431_in_every_mode(
        self, start_server: StartServer
    ) -> None:
        open_server = await start_server()
        jwt_server = await start_server(jwt_secret=SECRET)
        big = "a" * (DEFAULT_MAX_HEADER_BYTES + 1024)
        async with httpx.AsyncClient(timeout=30) as http:
            assert_too_large(await http.get(f"{open_server.url}/healthz", headers={"x-big": big}))
            assert_too_large(
                await http.get(f"{open_server.url}/v1/threads", headers={"cookie": f"c={big}"})
            )
            assert_too_large(
                await http.post(
                    f"{jwt_server.url}/threads/search",
                    json={},
                    headers={"authorization": f"Bearer {big}"},
                )
            )

    async def test_a_head_a_browser_sends_is_answered(self, start_server: StartServer) -> None:
        """Cookies of other local apps and all: well under the default."""
        served = await start_server()
        cookies = "; ".join(f"c{i}={'x' * 4000}" for i in range(8))  # ~32 KiB
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
            answer = await http.get("/healthz", headers={"cookie": cookies})
        assert answer.status_code == 200

    async def test_the_setting_moves_the_bound(self, start_server: StartServer) -> None:
        served = await start_server(max_header_bytes=8192)
        async with httpx.AsyncClient(base_url=served.url, timeout=30) as http:
            assert (await http.get("/healthz", headers={"x-a": "a" * 4000})).status_code == 200
            assert_too_large(await http.get("/healthz", headers={"x-a": "a" * 10_000}))

    async def test_a_head_is_refused_while_it_arrives(self, start_server: StartServer) -> None:
        """A head that passes the bound is answered and its connection ended before it is
        complete: the server neither waits for its end nor parses the rest."""
        served = await start_server(max_header_bytes=8192)
        port = int(served.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-a: ")
        for _ in range(50):  # 100 KB of one header, never ended
            writer.write(b"a" * 2000)
            await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)  # to the server's end of the stream
        writer.close()
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert b'"headers_too_large"' in answer


class TestTheApp:
    async def test_the_app_refuses_a_large_head_whatever_server_runs_it(
        self, settings: Settings
    ) -> None:
        """The ASGI app itself answers 431, before any route: a server with no bound of its own
        (here httpx's in-memory transport) gets the same answer."""
        app = serving(create_app(replace(settings, max_header_bytes=8192)))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            assert_too_large(await http.get("/healthz", headers={"x-a": "a" * 10_000}))
            assert_too_large(await http.get("/v1/threads", headers={"x-a": "a" * 10_000}))


def send_raw(port: int, head: bytes) -> bytes:
    """`head` sent on a connection of its own (blocking; for a thread), and all the server
    answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


class TestAFlood:
    async def test_oversized_tokens_leave_another_callers_health_checks_answered(
        self, start_server: StartServer
    ) -> None:
        """Issue 32: one 24 MB bearer token held /healthz for seconds. Now a flood of them,
        sent from other threads, is refused with 431 while another caller's /healthz is
        answered (statuses only: the figures are in the issue's note)."""
        served = await start_server(jwt_secret=SECRET)
        port = int(served.url.rsplit(":", 1)[1])
        head = (
            b"POST /threads/search HTTP/1.1\r\nhost: localhost\r\n"
            b"content-type: application/json\r\ncontent-length: 2\r\n"
            b"authorization: Bearer " + b"a" * (24 * 1024 * 1024) + b"\r\n\r\n{}"
        )

        def flood() -> list[bytes]:
            return [send_raw(port, head)[:13] for _ in range(2)]

        flooders = [asyncio.create_task(asyncio.to_thread(flood)) for _ in range(4)]
        statuses = []
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as http:
            while not all(f.done() for f in flooders) or len(statuses) < 40:
                statuses.append((await http.get("/healthz")).status_code)
        refusals = [line for f in flooders for line in f.result()]
        assert set(statuses) == {200}
        assert refusals == [b"HTTP/1.1 431 "] * 8
