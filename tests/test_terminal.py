"""`runstream chat` in a pseudo-terminal: live tokens, approval, Ctrl-C detaches (issue 3)."""

from __future__ import annotations

import asyncio
import os
import sys

import httpx
import pexpect
from arq.worker import Worker

from tests.conftest import ServerHandle, StartWorker
from tests.processes import ROOT


def spawn_chat(url: str, *extra: str) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTREAM_")}
    return pexpect.spawn(
        sys.executable,
        ["-m", "server.cli", "chat", "--url", url, *extra],
        cwd=str(ROOT),
        env=env,
        encoding="utf-8",
        timeout=20,
    )


async def expect(child: pexpect.spawn, pattern: str) -> None:
    await child.expect(pattern, async_=True)


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
        self, server: ServerHandle, worker: Worker
    ) -> None:
        async with httpx.AsyncClient(base_url=server.url) as http:
            thread = (await http.post("/v1/threads")).json()
        child = spawn_chat(server.url, "--thread", thread["thread_id"], "--graph", "approval")
        try:
            await expect(child, "> ")
            child.sendline("buy milk")
            await expect(child, r"Run save_note\? \[y/N\] ")
            child.sendline("y")
            await expect(child, r"\[tool: saved note")
            await expect(child, "buy milk")  # the model's answer after the tool
            await expect(child, "> ")
        finally:
            child.terminate(force=True)
        async with httpx.AsyncClient(base_url=server.url) as http:
            detail = (await http.get(f"/v1/threads/{thread['thread_id']}")).json()
        assert [m["role"] for m in detail["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert detail["messages"][-1]["content"] == "buy milk"
