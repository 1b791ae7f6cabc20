"""`runstream serve` keeps an idle HTTP connection open longer than its clients' pools keep
it (httpx: 5 s), so that the client closes it first: a request sent on a connection the server
closed at the same moment fails with a read error the client does not retry."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httpx
import pytest

from server.processes.commands import KEEP_ALIVE_S
from tests.processes import Cluster

pytestmark = pytest.mark.slow  # a real server process, and a 6 s wait


async def _get_healthz(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = int(
        next(
            line.split(b":", 1)[1]
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
    )
    await asyncio.wait_for(reader.readexactly(length), 10)
    return head.split(b"\r\n", 1)[0]


async def test_an_idle_connection_outlives_the_clients_pool_expiry(cluster: Cluster) -> None:
    expiry = httpx.Limits().keepalive_expiry
    assert expiry is not None and expiry + 5 < KEEP_ALIVE_S
    _, url = await cluster.server()
    address = urlsplit(url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    try:
        assert await _get_healthz(reader, writer) == b"HTTP/1.1 200 OK"
        await asyncio.sleep(expiry + 1)  # idle past the client pool's expiry
        assert not reader.at_eof()
        assert await _get_healthz(reader, writer) == b"HTTP/1.1 200 OK"  # the same connection
    finally:
        writer.close()
