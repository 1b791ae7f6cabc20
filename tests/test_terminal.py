"""`runstream chat` in a pseudo-terminal: live tokens, approval, Ctrl-C detaches (issue 3)."""

from __future__ import annotations

import asyncio
import io
import os
import re
import sys

import httpx
import pexpect
import pytest

from runner.job_loop import JobLoop
from tests.conftest import ServerHandle, StartWorker
from tests.processes import ROOT, Cluster

pytestmark = pytest.mark.slow  # starts the whole product: ./scripts/test runs it


def spawn_chat(url: str, *extra: str) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTREAM_")}
    return pexpect.spawn(
        sys.executable,
        ["-m", "server.processes.cli", "chat", "--url", url, *extra],
        cwd=str(ROOT),
        env=env,
        encoding="utf-8",
        timeout=20,
    )


async def expect(child: pexpect.spawn, pattern: str, within_s: float = -1) -> None:
    await child.expect(pattern, timeout=within_s, async_=True)  # -1: the spawn's 20 s


class TestTerminalChat:
    """A person types, sees the answer stream in, and can leave a run running."""

    async def test_chat_answers_and_ctrl_c_detaches(
        self, server: ServerHandle, start_worker: StartWorker
    ) -> None:
        await start_worker(fake_token_delay_ms=10)
        child = spawn_chat(server.url)
        try:
            await expect(child, "> ")
            child.sendline("hello from a terminal")
            await expect(child, "hello from a terminal\r\n")  # the echo of the typed line
            await expect(child, "hello from a terminal")  # the streamed answer
            await expect(child, "> ")
            words = " ".join(f"w{i}" for i in range(400))
            child.sendline(words)
            await expect(child, "w399\r\n")  # the echo of the typed line
            await expect(child, "w5 ")  # the answer has started streaming
            child.sendintr()
            await expect(child, r"runstream attach ([0-9a-f-]{36})")
            run_id = child.match.group(1)
        finally:
            child.terminate(force=True)
        async with httpx.AsyncClient(base_url=server.url) as http:
            for _ in range(200):
                run = (await http.get(f"/v1/runs/{run_id}")).json()
                if run["status"] == "succeeded":
                    break
                await asyncio.sleep(0.05)
            assert run["status"] == "succeeded"  # it went on without the terminal

    async def test_thread_continues_and_approval_is_asked(
        self, server: ServerHandle, worker: JobLoop
    ) -> None:
        async with httpx.AsyncClient(base_url=server.url) as http:
            thread = (await http.post("/v1/threads")).json()
        child = spawn_chat(server.url, "--thread", thread["thread_id"], "--graph", "approval")
        try:
            await expect(child, "> ")
            child.sendline("buy milk")
            await expect(child, r"Run save_note\?")
            await expect(child, r'save_note\(\{"content": "buy milk"\}\)')
            await expect(child, r"\[a\]pprove, \[e\]dit, \[r\]eject: ")
            child.sendline("a")
            await expect(child, r"\[tool: saved note \(8 characters\)\]")
            await expect(child, "buy milk")  # the model's answer after the tool
            await expect(child, "> ")
            child.sendline("buy bread")
            await expect(child, r"\[a\]pprove, \[e\]dit, \[r\]eject: ")
            child.sendline("e")
            await expect(child, r"content \[buy bread\]: ")
            child.sendline("buy rye bread")
            await expect(child, r"\[tool: saved note \(13 characters\); a reviewer edited")
            await expect(child, "> ")
            child.sendline("buy eggs")
            await expect(child, r"\[a\]pprove, \[e\]dit, \[r\]eject: ")
            child.sendline("r")
            await expect(child, r"reason, for the model \(Enter for none\): ")
            child.sendline("we have eggs")
            await expect(child, r"\[tool: User rejected the tool call for `save_note` with reason")
            await expect(child, "> ")
        finally:
            child.terminate(force=True)
        async with httpx.AsyncClient(base_url=server.url) as http:
            detail = (await http.get(f"/v1/threads/{thread['thread_id']}")).json()
        assert [m["role"] for m in detail["messages"]] == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ] * 3
        assert [m["content"] for m in detail["messages"] if m["role"] == "tool"] == [
            "saved note (8 characters)",
            'saved note (13 characters); a reviewer edited the call, it ran with {"content":'
            ' "buy rye bread"}',
            "User rejected the tool call for `save_note` with reason: we have eggs",
        ]

    async def test_chat_survives_the_server_being_killed_mid_answer(
        self, cluster: Cluster, start_worker: StartWorker
    ) -> None:
        await start_worker(fake_token_delay_ms=100)
        started = await cluster.server()
        first, url = started
        text = " ".join(f"piece{i}" for i in range(80))  # about 8 s of tokens
        child = spawn_chat(url)
        child.logfile_read = screen = io.StringIO()
        try:
            await expect(child, "> ")
            child.sendline(text)
            await expect(child, "piece79\r\n")  # the echo of the typed line
            await expect(child, "piece5 ")  # the answer has started streaming
            first.kill()
            shown = screen.getvalue()
            echo_end = shown.index(text + "\r\n") + len(text) + 2
            assert "piece79" not in shown[echo_end:]  # killed mid-answer, not after it
            _, again = await cluster.server(port=started.port)
            assert again == url
            await expect(child, "piece79\r\n> ", within_s=120)  # the whole answer, then a prompt
            answer = screen.getvalue()[echo_end:].removesuffix("\r\n> ")
            assert re.findall(r"piece\d+", answer) == text.split()  # each piece once, in order
            assert answer == text  # and nothing else: no repeat, no error
            child.sendline("a second message")
            await expect(child, "a second message\r\n")  # the echo
            await expect(child, "a second message\r\n> ", within_s=60)
        finally:
            child.terminate(force=True)
        async with httpx.AsyncClient(base_url=url) as http:
            (thread,) = (await http.get("/v1/threads")).json()["threads"]
            detail = (await http.get(f"/v1/threads/{thread['thread_id']}")).json()
        assert [(m["role"], m["content"]) for m in detail["messages"]] == [
            ("user", text),
            ("assistant", text),
            ("user", "a second message"),
            ("assistant", "a second message"),
        ]
