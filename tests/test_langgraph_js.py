"""The LangGraph API, driven by the official JS SDK (`@langchain/langgraph-sdk`) under node.

`tests/js/stream_run.mjs` streams a run with `client.runs.stream` through a TCP proxy that cuts
every connection after a few kilobytes, so the SDK has to reconnect by itself, several times
while the run is still going: to the `Location` of the first response, with `Last-Event-ID`.
Every part must then arrive exactly once.

`tests/js/use_stream.mjs` renders the SDK's React hook `useStream`, which chat UIs such as
agent-chat-ui are built on (react-test-renderer, no browser): a chat, a page reload mid-run
that must rejoin the run by itself, and an interrupt resumed with a `Command`.

The tests need node; `scripts/test` installs the SDK (`npm ci` in tests/js) when npm is there,
and these tests do it too when tests/js/node_modules is missing.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner.job_loop import JobLoop
from tests.conftest import ServerHandle
from tests.processes import TcpProxy

pytestmark = pytest.mark.slow  # starts the whole product: ./scripts/test runs it


JS = Path(__file__).parent / "js"
SCRIPT = JS / "stream_run.mjs"
USE_STREAM = JS / "use_stream.mjs"
CANCEL_RUN = JS / "cancel_run.mjs"

# The fake model echoes the last user message, one whitespace-split word per `messages` part,
# `TOKEN_DELAY_MS` apart: about 8 s of run and some 90 KB of stream. Numbered words make any
# repeated or missing part show in the text.
WORDS = 160
TEXT = " ".join(f"word{i:03d}" for i in range(WORDS))
TOKEN_DELAY_MS = 50
# Each connection the proxy carries is cut after this many bytes from the server: several cuts
# per run. The SDK waits 1-2 s before each reconnect, so more cuts mean a slower test.
CUT_EVERY_BYTES = 24_000
NODE_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def node() -> str:
    """The `node` binary, with the SDK installed in tests/js/node_modules (`npm ci`)."""
    binary = shutil.which("node")
    if binary is None:
        pytest.skip("node is not on PATH: the JS SDK test needs node and npm")
    if not (JS / "node_modules" / "react-test-renderer").is_dir():
        npm = shutil.which("npm")
        assert npm is not None, "node is on PATH but npm is not: cannot install tests/js"
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=JS,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, (
            f"`npm ci` in {JS} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return binary


async def run_node(
    node: str,
    *args: str,
    on_created: Callable[[dict[str, Any]], None] = lambda created: None,
    script: Path = SCRIPT,
) -> tuple[int, list[dict[str, Any]], str]:
    """Run `node <script> *args`: (exit code, its JSON lines, stderr).

    `on_created` gets the first line (run and thread ids) as soon as node prints it. Node is
    killed, and the test failed, after `NODE_TIMEOUT_S`.
    """
    proc = await asyncio.create_subprocess_exec(
        node,
        str(script),
        *args,
        cwd=JS,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=2**24,
    )
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout, proc.stderr
    lines: list[dict[str, Any]] = []

    async def read() -> tuple[int, str]:
        errors = asyncio.ensure_future(stderr.read())
        while line := await stdout.readline():
            lines.append(json.loads(line))
            if len(lines) == 1:
                on_created(lines[0])
        return await proc.wait(), (await errors).decode()

    try:
        code, err = await asyncio.wait_for(read(), NODE_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail(f"node did not finish within {NODE_TIMEOUT_S} s; last lines: {lines[-3:]}")
    return code, lines, err


def text_by_message(parts: list[dict[str, Any]]) -> dict[str, str]:
    """The `messages` chunks' content, concatenated per message id, in order."""
    texts: dict[str, str] = defaultdict(str)
    for part in parts:
        if part["event"] == "messages":
            chunk, _metadata = part["data"]
            texts[chunk["id"]] += chunk["content"]
    return dict(texts)


async def test_runs_stream_reconnects_through_a_proxy_cutting_every_few_kilobytes(
    node: str, server: ServerHandle, worker: JobLoop
) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    proxy = TcpProxy("127.0.0.1", port, cut_every_bytes=CUT_EVERY_BYTES)
    await proxy.start()
    # How many cuts came while the run was still going, watched on the server, not the proxy.
    cuts_while_running: list[int] = []
    watchers: list[asyncio.Task[None]] = []

    async def watch(created: dict[str, Any]) -> None:
        path = f"/threads/{created['thread_id']}/runs/{created['run_id']}"
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as direct:
            while True:
                status = (await direct.get(path)).json()["status"]
                if status not in ("pending", "running"):
                    break
                await asyncio.sleep(0.05)
        cuts_while_running.append(proxy.cuts)

    started = time.monotonic()
    try:
        code, lines, err = await run_node(
            node,
            f"http://127.0.0.1:{proxy.port}",
            TEXT,
            str(TOKEN_DELAY_MS),
            on_created=lambda created: watchers.append(asyncio.create_task(watch(created))),
        )
        elapsed = time.monotonic() - started
        assert code == 0, f"node exited with {code}\nstderr: {err}\nlast lines: {lines[-3:]}"
        assert len(watchers) == 1
        await asyncio.wait_for(watchers[0], 10)
    finally:
        for task in watchers:
            task.cancel()
        await proxy.stop()
    created, parts = lines[0], lines[1:]
    assert set(created) == {"run_id", "thread_id"}, created
    events = [p["event"] for p in parts]
    print(
        f"{len(parts)} parts, {proxy.connections} connections, {proxy.cuts} cuts"
        f" ({cuts_while_running[0]} while the run went on), {elapsed:.1f} s"
    )

    # The SDK had to reconnect by itself, more than once while the run was producing parts.
    assert cuts_while_running[0] >= 2, (
        f"{proxy.cuts} cuts, {cuts_while_running[0]} during the run: raise WORDS or lower the cut"
    )
    assert proxy.connections > proxy.cuts

    # metadata first, once; the stream ends with `end` (or ends naturally after the last values).
    assert events[0] == "metadata", events[:5]
    assert events.count("metadata") == 1
    assert parts[0]["data"]["run_id"] == created["run_id"]
    assert "error" not in events, [p for p in parts if p["event"] == "error"]
    if "end" in events:
        assert events.index("end") == len(events) - 1
    body = [p for p in parts if p["event"] != "end"]
    assert body[-1]["event"] == "values", events[-5:]

    # No part twice: every part carries an id (a reconnect resumes after the last one), the
    # opening `metadata` too, as in LangGraph's resumable streams, and the ids only go up; a
    # resumed stream opens with no second `metadata`.
    assert all(p["id"] is not None for p in parts), [p for p in parts if p["id"] is None][:3]
    ids = [tuple(int(n) for n in p["id"].split("-")) for p in parts]
    assert ids == sorted(set(ids)), "a part arrived twice, or out of order"
    assert len(ids) == len(parts)

    # The final values hold the answer; its chunks, concatenated, give it exactly once.
    final = body[-1]["data"]["messages"]
    assert [m["type"] for m in final] == ["human", "ai"]
    answer = final[-1]
    assert answer["content"] == TEXT
    texts = text_by_message(parts)
    assert texts == {answer["id"]: TEXT}, {k: (len(v), v[:80], v[-80:]) for k, v in texts.items()}
    assert events.count("messages") == WORDS


async def use_stream(node: str, url: str, *args: str) -> list[dict[str, Any]]:
    """The JSON lines of `node use_stream.mjs <url> <key> *args`, which must exit 0."""
    code, lines, err = await run_node(node, url, "any-key", *args, script=USE_STREAM)
    assert code == 0, f"node exited with {code}\nstderr: {err}\nlines: {lines}"
    return lines


def assert_answered_once(messages: list[dict[str, Any]], question: str, answer: str) -> None:
    """The hook shows the question, then the answer, each once and whole."""
    assert [(m["type"], m["content"]) for m in messages] == [("human", question), ("ai", answer)]
    assert messages[1]["id"], "the answer has no id: the hook could not merge its chunks"


async def test_use_stream_shows_the_streamed_answer_once(
    node: str, server: ServerHandle, worker: JobLoop
) -> None:
    question = " ".join(f"w{i}" for i in range(30))
    [seen] = await use_stream(node, server.url, "chat", question, "5")
    assert_answered_once(seen["messages"], question, question)


async def test_use_stream_rejoins_a_running_run_after_a_reload(
    node: str, server: ServerHandle, worker: JobLoop
) -> None:
    """The first page goes away mid-answer; the reloaded page finds the run id in its storage,
    joins the run's stream from the start and shows the whole answer once."""
    lines = await use_stream(node, server.url, "reload", TEXT, str(TOKEN_DELAY_MS), "20")
    first, reloaded = lines
    partial = first["before"][1]["content"]
    assert len(partial.split(" ")) < WORDS, "the run ended before the first page went away"
    assert TEXT.startswith(partial)
    assert_answered_once(reloaded["after"], TEXT, TEXT)
    # it joined the run the first page started rather than starting another
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as direct:
        runs = (await direct.get(f"/threads/{first['thread_id']}/runs")).json()
    assert [r["run_id"] for r in runs] == [first["run_id"]]
    assert runs[0]["status"] == "success"


async def test_use_stream_shows_an_interrupt_and_resumes_it(
    node: str, server: ServerHandle, worker: JobLoop
) -> None:
    paused, done = await use_stream(node, server.url, "interrupt", "note this")
    [action] = paused["interrupt"]["action_requests"]
    assert (action["name"], action["args"]) == ("save_note", {"content": "note this"})
    assert paused["interrupt"]["review_configs"][0]["allowed_decisions"] == [
        "approve",
        "edit",
        "reject",
    ]
    assert [m["type"] for m in paused["messages"]] == ["human", "ai"]
    # the approved call ran, and the graph answered after it
    assert [m["type"] for m in done["messages"]] == ["human", "ai", "tool", "ai"]
    assert done["messages"][2]["content"].startswith("saved note")


async def test_runs_cancel_with_wait_resolves_once_the_run_is_cancelled(
    node: str, server: ServerHandle, worker: JobLoop
) -> None:
    """`runs.cancel(thread, run, true)` resolves when the answer's body has come, and LangGraph
    answers 200 with the outcome once the run is cancelled: a `runs.get` right after sees the
    run `interrupted`. (A 202 is read as "accepted": the SDK would go on at once.)"""
    code, lines, err = await run_node(
        node,
        server.url,
        "chat",
        json.dumps({"messages": [{"type": "human", "content": TEXT}]}),
        json.dumps({"configurable": {"fake_token_delay_ms": TOKEN_DELAY_MS}}),
        "1500",
        script=CANCEL_RUN,
    )
    assert code == 0, f"node exited with {code}\nstderr: {err}\nlines: {lines}"
    [seen] = lines
    assert seen["before"] == "running", seen
    assert seen["cancelled"] == {}, seen  # LangGraph's body: no values after the cancel
    assert seen["status"] == "interrupted", seen
