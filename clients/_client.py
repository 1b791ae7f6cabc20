"""`AsyncClient`: the runstream HTTP API on httpx, with a stream that reconnects by itself.

`stream()` yields typed events and survives network errors, server restarts and proxies that
cut connections: it reconnects with the last id it saw (so nothing is lost or repeated),
backing off exponentially, and stops after the terminal event. SSE parsing is httpx-sse's.
An answer 429 (a per-caller limit) is retried after the server's `Retry-After`, when that is
within `max_retry_after_s` (tenacity does the retrying).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, TypeVar

import httpx
import msgspec
from httpx_sse import aconnect_sse
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from wire.events import (
    TERMINAL_EVENTS,
    DoneData,
    ErrorData,
    Event,
    MessageData,
    PendingData,
    RetryData,
    RunStatus,
    RunStatusData,
    TokenData,
)
from wire.responses import RunList, RunOut, ThreadDetail, ThreadList, ThreadOut

from ._errors import RunstreamError, TooManyRequests, Unavailable, raise_for_error

__all__ = ["AsyncClient"]

T = TypeVar("T")

_DATA_TYPES: dict[str, type[Any]] = {
    "run": RunStatusData,
    "token": TokenData,
    "message": MessageData,
    "pending": PendingData,
    "retry": RetryData,
    "done": DoneData,
    "error": ErrorData,
}


def _event(event_id: str, name: str, data: str) -> Event:
    kind = _DATA_TYPES.get(name)
    decoded = msgspec.json.decode(data, type=kind) if kind else msgspec.json.decode(data)
    return Event(id=event_id, event=name, data=decoded)


class AsyncClient:
    """An async client for one runstream server; use it as an async context manager."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 30.0,
        max_backoff_s: float = 5.0,
        max_retry_after_s: float = 30.0,
        rate_limit_attempts: int = 4,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout_s, transport=transport
        )
        self.max_backoff_s = max_backoff_s
        self.max_retry_after_s = max_retry_after_s
        self.rate_limit_attempts = rate_limit_attempts
        self.reconnects = 0

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _worth_waiting(self, exc: BaseException) -> bool:
        return isinstance(exc, TooManyRequests) and exc.retry_after_s <= self.max_retry_after_s

    @staticmethod
    def _retry_after(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return exc.retry_after_s if isinstance(exc, TooManyRequests) else 1.0

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; a 429 is sent again after `Retry-After` (a refused request changed
        nothing on the server, so sending it again is safe)."""
        retrying = AsyncRetrying(
            retry=retry_if_exception(self._worth_waiting),
            wait=self._retry_after,
            stop=stop_after_attempt(self.rate_limit_attempts),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                response = await self._http.request(method, path, **kwargs)
                raise_for_error(response)
        return response

    async def _answer(self, answer: type[T], method: str, path: str, **kwargs: Any) -> T:
        """One request's answer, decoded as `answer`."""
        response = await self._call(method, path, **kwargs)
        return msgspec.json.decode(response.content, type=answer)

    # -- runs ---------------------------------------------------------------------------------

    async def submit(
        self,
        message: str | list[dict[str, str]],
        *,
        thread_id: str | None = None,
        graph: str = "chat",
        config: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        multitask: str = "reject",
        idempotency_key: str | None = None,
    ) -> RunOut:
        """Start a run; a string is one user message. Returns the queued run."""
        messages = [{"role": "user", "content": message}] if isinstance(message, str) else message
        body: dict[str, Any] = {
            "input": {"messages": messages},
            "graph": graph,
            "multitask": multitask,
            "metadata": metadata or {},
            "config": config or {},
        }
        if thread_id:
            body["thread_id"] = thread_id
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return await self._answer(RunOut, "POST", "/v1/runs", json=body, headers=headers)

    async def get(self, run_id: str) -> RunOut:
        return await self._answer(RunOut, "GET", f"/v1/runs/{run_id}")

    async def cancel(self, run_id: str) -> RunOut:
        return await self._answer(RunOut, "POST", f"/v1/runs/{run_id}/cancel")

    async def resume(self, run_id: str, value: Any) -> RunOut:
        return await self._answer(
            RunOut, "POST", f"/v1/runs/{run_id}/resume", json={"resume": value}
        )

    async def stream(
        self, run_id: str, *, last_event_id: str | None = None
    ) -> AsyncIterator[Event]:
        """Every event after `last_event_id` (all of them if None), until the terminal one.

        Reconnects with the last id after any transport error or cut connection; raises
        `RunstreamError` for answers that retrying cannot fix (404, 410, 401, 400).
        """
        last = last_event_id
        failures = 0
        while True:
            headers = {"Last-Event-ID": last} if last else {}
            try:
                async with aconnect_sse(
                    self._http, "GET", f"/v1/runs/{run_id}/events", headers=headers
                ) as source:
                    if source.response.status_code >= 400:
                        await source.response.aread()
                        raise_for_error(source.response)
                    async for sse in source.aiter_sse():
                        if not sse.event or (sse.event == "message" and not sse.id):
                            continue  # comments and pings
                        event = _event(sse.id, sse.event, sse.data)
                        last = event.id
                        failures = 0
                        yield event
                        if event.event in TERMINAL_EVENTS:
                            return
            except (httpx.TransportError, Unavailable):
                pass
            except TooManyRequests as exc:  # no free event-stream slot yet
                if not self._worth_waiting(exc):
                    raise
                self.reconnects += 1
                await asyncio.sleep(exc.retry_after_s)
                continue
            except RunstreamError as exc:
                if exc.status < 500:
                    raise
            failures += 1
            self.reconnects += 1
            delay = min(self.max_backoff_s, 0.05 * 2 ** min(failures, 10))
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))

    async def wait(self, run_id: str) -> RunOut:
        """Follow the run until it is terminal or waiting on `/resume`, then return it."""
        async for event in self.stream(run_id):
            if event.event == "pending":
                run = await self.get(run_id)
                if run.status == RunStatus.INTERRUPTED:
                    return run
        return await self.get(run_id)

    # -- threads ------------------------------------------------------------------------------

    async def create_thread(self, metadata: dict[str, Any] | None = None) -> ThreadOut:
        return await self._answer(
            ThreadOut, "POST", "/v1/threads", json={"metadata": metadata or {}}
        )

    async def list_threads(self, limit: int = 20, cursor: str | None = None) -> ThreadList:
        params: dict[str, Any] = {"limit": limit}
        if cursor:
            params["cursor"] = cursor
        return await self._answer(ThreadList, "GET", "/v1/threads", params=params)

    async def get_thread(self, thread_id: str) -> ThreadDetail:
        return await self._answer(ThreadDetail, "GET", f"/v1/threads/{thread_id}")

    async def thread_runs(self, thread_id: str) -> RunList:
        """The thread's runs, oldest first."""
        return await self._answer(RunList, "GET", f"/v1/threads/{thread_id}/runs")

    async def delete_thread(self, thread_id: str) -> None:
        await self._call("DELETE", f"/v1/threads/{thread_id}")
