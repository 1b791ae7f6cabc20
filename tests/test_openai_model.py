"""The `ChatOpenAI` path, for real: a run streamed from an OpenAI-compatible endpoint.

The endpoint is a minimal ASGI app served by uvicorn on loopback in the test's event loop. It
answers `POST /v1/chat/completions` with `stream: true` the way OpenAI does (server-sent
`chat.completion.chunk` objects ending with `data: [DONE]`) and records every request, so the
tests can check both what runstream streamed to its clients and what it sent upstream.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.conftest import StartServer, StartWorker, free_port, serve_in_loop
from tests.sse import Received, read_events, reassemble

REPLY = "Hello from the loopback model"
# One delta per word, the whitespace before a word travelling with it, as models stream.
REPLY_CHUNKS = ["Hello", " from", " the", " loopback", " model"]
MODEL = "loopback-gpt"
API_KEY = "sk-test-not-a-secret"
USER_TEXT = "Please greet me from the loopback"

assert "".join(REPLY_CHUNKS) == REPLY


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class LoopbackOpenAI:
    """An OpenAI-compatible chat completions endpoint (streaming only) as an ASGI app."""

    reply_chunks: list[str]
    fail_status: int | None = None
    requests: list[RecordedRequest] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            payload: Any = json.loads(body) if body else None
        except ValueError:
            payload = body.decode("latin-1")
        self.requests.append(RecordedRequest(scope["method"], scope["path"], headers, payload))

        if scope["method"] != "POST" or scope["path"] != "/v1/chat/completions":
            await self._json(send, 404, {"error": {"message": "no such route", "type": "x"}})
            return
        if self.fail_status is not None:
            error = {"message": "the loopback model exploded", "type": "server_error"}
            await self._json(send, self.fail_status, {"error": error})
            return
        if not isinstance(payload, dict) or payload.get("stream") is not True:
            error = {"message": "this endpoint only streams", "type": "invalid_request_error"}
            await self._json(send, 400, {"error": error})
            return
        await self._stream(send, payload)

    async def _json(self, send: Any, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})

    async def _stream(self, send: Any, payload: dict[str, Any]) -> None:
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": payload.get("model", MODEL),
                "system_fingerprint": "fp_loopback",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ],
            }

        chunks = [chunk({"role": "assistant", "content": ""})]
        chunks += [chunk({"content": text}) for text in self.reply_chunks]
        chunks.append(chunk({}, finish_reason="stop"))
        if (payload.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
            chunks.append({**chunk({}), "choices": [], "usage": usage})

        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        for item in chunks:
            frame = f"data: {json.dumps(item)}\n\n".encode()
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            await asyncio.sleep(0.005)  # really stream: one write per chunk
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


@pytest.fixture
async def loopback() -> AsyncIterator[tuple[LoopbackOpenAI, str]]:
    """The endpoint app and its base URL (`http://127.0.0.1:<port>/v1`)."""
    app = LoopbackOpenAI(reply_chunks=list(REPLY_CHUNKS))
    handle = await serve_in_loop(app, lifespan="off")
    try:
        yield app, f"{handle.url}/v1"
    finally:
        await handle.stop()


def model_settings(base_url: str) -> dict[str, Any]:
    return {"model": MODEL, "openai_api_key": API_KEY, "openai_base_url": base_url}


async def start_services(
    start_server: StartServer, start_worker: StartWorker, base_url: str
) -> httpx.AsyncClient:
    """A server and a worker whose model is `ChatOpenAI` on `base_url`; a client for them."""
    server = await start_server(**model_settings(base_url))
    await start_worker(**model_settings(base_url))
    return httpx.AsyncClient(base_url=server.url, timeout=30)


async def run_to_end(client: httpx.AsyncClient) -> tuple[dict[str, Any], list[Received]]:
    """Submit one run and read all its events."""
    body = {"input": {"messages": [{"role": "user", "content": USER_TEXT}]}}
    response = await client.post("/v1/runs", json=body)
    assert response.status_code == 202, response.text
    run = response.json()
    events = await asyncio.wait_for(read_events(client, f"/v1/runs/{run['run_id']}/events"), 90)
    return run, events


class TestChatOpenAIStreaming:
    """A real `ChatOpenAI` against the loopback endpoint streams through the whole product."""

    async def test_tokens_message_and_thread_agree_with_the_streamed_reply(
        self,
        loopback: tuple[LoopbackOpenAI, str],
        start_server: StartServer,
        start_worker: StartWorker,
    ) -> None:
        endpoint, base_url = loopback
        async with await start_services(start_server, start_worker, base_url) as client:
            run, events = await run_to_end(client)
            names = [e.event for e in events]
            assert events[0].event == "run" and events[0].data == {"status": "queued", "attempt": 1}
            assert names[-1] == "done", names
            assert events[-1].data["status"] == "succeeded"
            assert "error" not in names and names.count("done") == 1

            # Every delta of the endpoint became one token event, in order, of one message.
            tokens = [e for e in events if e.event == "token"]
            assert [t.data["text"] for t in tokens] == REPLY_CHUNKS
            assert "".join(t.data["text"] for t in tokens) == REPLY
            message_ids = {t.data["message_id"] for t in tokens}
            assert len(message_ids) == 1, message_ids
            (message_id,) = message_ids
            assert reassemble(events) == {message_id: REPLY}

            messages = [e.data["message"] for e in events if e.event == "message"]
            assert [m["role"] for m in messages] == ["user", "assistant"]
            assert messages[0]["content"] == USER_TEXT
            assistant = messages[1]
            assert assistant["id"] == message_id
            assert assistant["content"] == REPLY
            # The `message` event follows the message's tokens.
            last_token = max(i for i, e in enumerate(events) if e.event == "token")
            assistant_at = next(
                i
                for i, e in enumerate(events)
                if e.event == "message" and e.data["message"]["role"] == "assistant"
            )
            assert last_token < assistant_at

            output = events[-1].data["output"]
            assert output["id"] == message_id and output["content"] == REPLY
            assert output["role"] == "assistant"

            thread = (await client.get(f"/v1/threads/{run['thread_id']}")).json()
            assert [m["role"] for m in thread["messages"]] == ["user", "assistant"]
            assert thread["messages"][0]["content"] == USER_TEXT
            assert thread["messages"][0]["id"] == messages[0]["id"]
            final = thread["messages"][-1]
            assert final["id"] == message_id
            assert final["content"] == assistant["content"] == REPLY

            polled = (await client.get(f"/v1/runs/{run['run_id']}")).json()
            assert polled["status"] == "succeeded" and polled["error"] is None

        # What runstream sent upstream: one streaming request with the conversation and key.
        assert len(endpoint.requests) == 1, endpoint.requests
        request = endpoint.requests[0]
        assert (request.method, request.path) == ("POST", "/v1/chat/completions")
        assert request.headers["authorization"] == f"Bearer {API_KEY}"
        assert request.body["model"] == MODEL
        assert request.body["stream"] is True
        assert request.body["messages"] == [{"role": "user", "content": USER_TEXT}]

    @pytest.mark.parametrize("failure", ["http_500", "connection_refused"])
    async def test_failing_endpoint_fails_the_run_without_leaking_the_key(
        self,
        loopback: tuple[LoopbackOpenAI, str],
        start_server: StartServer,
        start_worker: StartWorker,
        failure: str,
    ) -> None:
        endpoint, base_url = loopback
        if failure == "http_500":
            endpoint.fail_status = 500
        else:
            base_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
        async with await start_services(start_server, start_worker, base_url) as client:
            run, events = await run_to_end(client)
            names = [e.event for e in events]
            assert names[-1] == "error", names
            assert names.count("error") == 1 and "done" not in names
            assert "token" not in names
            statuses = [e.data["status"] for e in events if e.event == "run"]
            assert statuses == ["queued", "running", "failed"]
            error_event = events[-1].data
            assert isinstance(error_event["code"], str) and error_event["code"]
            assert isinstance(error_event["message"], str) and error_event["message"]

            response = await client.get(f"/v1/runs/{run['run_id']}")
            assert response.status_code == 200
            polled = response.json()
            assert polled["status"] == "failed"
            assert polled["finished_at"]
            assert isinstance(polled["error"], dict)
            assert polled["error"] == {
                "code": error_event["code"],
                "message": error_event["message"],
            }

            # The key appears nowhere a client can read: not in the error, not in any event.
            assert API_KEY not in polled["error"]["message"]
            assert API_KEY not in response.text
            assert API_KEY not in json.dumps([e.data for e in events])

            thread = (await client.get(f"/v1/threads/{run['thread_id']}")).json()
            assert thread["status"] == "idle"

        if failure == "http_500":
            # The request did reach the endpoint, with the key (so the key was in play).
            assert endpoint.requests, "the endpoint was never called"
            assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in endpoint.requests)
        else:
            assert endpoint.requests == []
