"""`bench.langgraph_diff`'s A2A calls: the same JSON-RPC calls to one server's `/a2a` (message
send and stream, task get and cancel, A2A 1.0's names, the errors), its answers as text with ids,
times and the server's address masked, so two servers' can be diffed. docs/langgraph.md, "A2A",
names the differences it shows and why; a new one means LangGraph's endpoint changed."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from typing import Any

import httpx

from stream_store.assistant_ids import assistant_id_for

__all__ = ["a2a_transcript"]

ECHO, FAILS, SLOW, PLAIN, ASKS = (
    assistant_id_for(g) for g in ("echo", "fails", "slow", "plain", "asks_in_messages")
)
_MASKS = (
    (re.compile(r"lc_run--"), ""),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r'"[0-9a-f]{32}"'), '"<hex>"'),
    (re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00"), "<time>"),
    (re.compile(r"https?://[^/\"]+"), "<base>"),
)


def message(text: str, **extra: Any) -> dict[str, Any]:
    parts = [{"kind": "text", "text": text}]
    return {"message": {"role": "user", "parts": parts, "messageId": str(uuid.uuid4()), **extra}}


class Transcript:
    """One server's answers, in the order asked, as text."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        headers = {"X-Api-Key": api_key} if api_key else {}
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=60)
        self.lines: list[str] = []

    def note(self, label: str, response: httpx.Response) -> Any:
        self.lines.append(f"### {label}: {response.status_code}")
        try:
            body = response.json()
        except ValueError:
            self.lines.append(response.text)
            return None
        self.lines.extend(json.dumps(body, indent=1, sort_keys=True).splitlines())
        return body

    def rpc(self, label: str, assistant: str, method: str, params: Any, **extra: Any) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        headers = {"Accept": "application/json", **extra.pop("headers", {})}
        post = self.http.post(f"/a2a/{assistant}", json=body, headers=headers, **extra)
        return self.note(label, post)

    def stream(self, label: str, assistant: str, params: Any, method: str) -> list[Any]:
        body = {"jsonrpc": "2.0", "id": "s", "method": method, "params": params}
        events = []
        headers = {"Accept": "text/event-stream"}
        with self.http.stream("POST", f"/a2a/{assistant}", json=body, headers=headers) as reply:
            self.lines.append(f"### {label}: {reply.status_code}")
            for line in reply.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    self.lines.append(json.dumps(events[-1], sort_keys=True))
        return events

    def masked(self) -> list[str]:
        text = "\n".join(self.lines)
        for pattern, mask in _MASKS:
            text = pattern.sub(mask, text)
        return text.splitlines()


def drive(server: Transcript) -> None:
    """Every call, in one order, whatever the answers."""
    sent = server.rpc("send", ECHO, "message/send", message("hello there"))["result"]
    server.rpc("get", ECHO, "tasks/get", {"id": sent["id"]})
    server.rpc("get, last message", ECHO, "tasks/get", {"id": sent["id"], "historyLength": 1})
    server.rpc(
        "send on the context", ECHO, "message/send", message("again", contextId=sent["contextId"])
    )
    v1 = {"message": {"role": "ROLE_USER", "parts": [{"text": "v1"}], "messageId": "m1"}}
    v1_task = server.rpc("SendMessage", ECHO, "SendMessage", v1)["result"]["task"]
    server.rpc("GetTask", ECHO, "GetTask", {"id": v1_task["id"]})
    server.rpc("send, failing graph", FAILS, "message/send", message("x"))
    server.rpc("text to a graph without messages", PLAIN, "message/send", message("x"))
    data = {"message": {"role": "user", "parts": [{"data": {"x": 1}}], "messageId": "d1"}}
    server.rpc("data to a graph without messages", PLAIN, "message/send", data)
    server.rpc("non-UUID assistant", "nope", "message/send", message("x"))
    server.rpc("unknown assistant", str(uuid.uuid4()), "message/send", message("x"))
    server.rpc("no message", ECHO, "message/send", {})
    server.rpc("no messageId", ECHO, "message/send", {"message": {"role": "user", "parts": []}})
    server.rpc("unknown task", ECHO, "tasks/get", {"id": "nope"})
    server.rpc("get without id", ECHO, "tasks/get", {})
    server.rpc("cancel finished", ECHO, "tasks/cancel", {"id": sent["id"]})
    server.rpc("unknown method", ECHO, "bogus", {})
    server.rpc("Accept: text/html", ECHO, "tasks/get", {"id": "x"}, headers={"Accept": "text/html"})
    server.note("card", server.http.get(f"/a2a/{ECHO}/.well-known/agent-card.json"))
    server.note("card, unknown", server.http.get(f"/a2a/{uuid.uuid4()}"))
    server.stream("stream", ECHO, message("hi stream"), "message/stream")
    server.stream("stream, failing graph", FAILS, message("x"), "message/stream")
    server.stream("SendStreamingMessage", ECHO, message("v1 stream"), "SendStreamingMessage")
    # a running task, cancelled while a send waits for it
    waiting: dict[str, Any] = {}
    send = threading.Thread(
        target=lambda: waiting.update(
            r=server.http.post(
                f"/a2a/{SLOW}",
                json={
                    "jsonrpc": "2.0",
                    "id": 9,
                    "method": "message/send",
                    "params": message("slow"),
                },
                headers={"Accept": "application/json"},
            )
        )
    )
    send.start()
    time.sleep(3)
    [thread] = server.http.post("/threads/search", json={"status": "busy", "limit": 1}).json()
    [run] = server.http.get(f"/threads/{thread['thread_id']}/runs").json()
    task_id = f"{thread['thread_id']}:{run['run_id']}"
    server.rpc("get running", SLOW, "tasks/get", {"id": task_id})
    server.rpc("cancel running", SLOW, "tasks/cancel", {"id": task_id})
    send.join()
    server.note("the waiting send", waiting["r"])
    server.rpc("get cancelled", SLOW, "tasks/get", {"id": task_id})
    # a task that asks, answered by text and by a data part's resume
    asked = server.rpc("send, interrupt", ASKS, "message/send", message("go"))["result"]
    server.rpc("get, input required", ASKS, "tasks/get", {"id": asked["id"]})
    server.stream("stream, interrupt", ASKS, message("go2"), "message/stream")
    server.rpc("answer by text", ASKS, "message/send", message("yes", taskId=asked["id"]))
    server.rpc("terminal task", ASKS, "message/send", message("more", taskId=asked["id"]))
    again = server.rpc("send, interrupt again", ASKS, "message/send", message("go"))["result"]
    resume = {"role": "user", "parts": [{"kind": "data", "data": {"resume": "by data"}}]}
    server.rpc(
        "answer by data",
        ASKS,
        "message/send",
        {"message": {**resume, "messageId": "r1", "taskId": again["id"]}},
    )
    server.rpc("cancel input required", ASKS, "tasks/cancel", {"id": again["id"]})


def a2a_transcript(base_url: str) -> list[str]:
    """Every call of `drive` to the server at `base_url`, its answers masked (blocking: the
    caller runs it in a thread)."""
    server = Transcript(base_url, None)
    try:
        drive(server)
    finally:
        server.http.close()
    return server.masked()
