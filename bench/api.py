"""The few HTTP calls the scenarios make (submit, poll), over one keep-alive httpx client."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import httpx

from stream_store.run_status import TERMINAL as TERMINAL_STATUSES

__all__ = ["TERMINAL_STATUSES", "Api", "words"]


def words(count: int) -> str:
    """A message the fake model echoes as exactly `count` token events."""
    return " ".join(f"w{i}" for i in range(count))


def parse_time(value: str | None) -> float | None:
    """An API timestamp as epoch seconds."""
    return datetime.fromisoformat(value).timestamp() if value else None


class Api:
    def __init__(self, base_url: str, *, connections: int = 100) -> None:
        self.base_url = base_url
        self.http = httpx.AsyncClient(
            base_url=base_url,
            timeout=120,
            limits=httpx.Limits(
                max_connections=connections,
                max_keepalive_connections=connections,
                # below uvicorn's 5 s keep-alive timeout: a connection the server is closing
                # is never reused for a POST (which cannot be retried blindly)
                keepalive_expiry=1.0,
            ),
        )

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def submit(
        self,
        text: str,
        *,
        delay_ms: int,
        graph: str = "chat",
        thread_id: str | None = None,
    ) -> dict[str, Any]:
        """POST /v1/runs; the run object of the 202."""
        body: dict[str, Any] = {
            "input": {"messages": [{"role": "user", "content": text}]},
            "graph": graph,
            "config": {"configurable": {"fake_token_delay_ms": delay_ms}},
        }
        if thread_id:
            body["thread_id"] = thread_id
        response = await self.http.post("/v1/runs", json=body)
        if response.status_code != 202:
            raise RuntimeError(f"submit answered {response.status_code}: {response.text[:300]}")
        return dict(response.json())

    async def run(self, run_id: str) -> dict[str, Any]:
        for attempt in range(3):
            try:
                response = await self.http.get(f"/v1/runs/{run_id}")
                break
            except httpx.TransportError:
                if attempt == 2:
                    raise
        response.raise_for_status()
        return dict(response.json())

    async def wait_status(
        self, run_id: str, statuses: frozenset[str], timeout_s: float = 120
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            run = await self.run(run_id)
            if run["status"] in statuses:
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {run['status']} after {timeout_s} s")
            await asyncio.sleep(0.05)
