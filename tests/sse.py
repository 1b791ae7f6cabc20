"""A minimal SSE reader for tests: the server's framing, checked from the wire."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Received:
    id: str
    event: str
    data: Any


async def iter_events(
    client: httpx.AsyncClient,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> AsyncIterator[Received]:
    """Yield events until the server ends the response."""
    async with client.stream("GET", url, headers=headers, params=params) as response:
        async for event in events_of(response):
            yield event


async def events_of(response: httpx.Response) -> AsyncIterator[Received]:
    """The events of an open SSE response, until the server ends it (an event without an
    `id:` has the id "")."""
    assert response.status_code == 200, (response.status_code, await response.aread())
    assert response.headers["content-type"].startswith("text/event-stream")
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "event" in fields:
                yield Received(fields.get("id", ""), fields["event"], json.loads(fields["data"]))
            fields = {}
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


async def read_events(
    client: httpx.AsyncClient,
    url: str,
    *,
    limit: int | None = None,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
) -> list[Received]:
    """Events until the stream ends, or the first `limit` of them (then disconnect)."""
    received: list[Received] = []
    if limit == 0:
        return received
    async for event in iter_events(client, url, headers=headers, params=params):
        received.append(event)
        if limit is not None and len(received) >= limit:
            break
    return received


def reassemble(events: list[Received]) -> dict[str, str]:
    """Text per message id from `token` events, after applying `retry` discards."""
    texts: dict[str, str] = {}
    for event in events:
        if event.event == "token":
            mid = event.data["message_id"]
            texts[mid] = texts.get(mid, "") + event.data["text"]
        elif event.event == "retry":
            for mid in event.data["discard"]:
                texts.pop(mid, None)
    return texts
