"""`runstream chat` and `runstream attach`: a terminal chat on the Python client.

The reply is printed as tokens arrive. If the server restarts mid-answer the client's stream
reconnects with its last event id, so no text repeats. Ctrl-C leaves the run running on the
server and prints how to come back to it.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from stream_store.events import Event, MessageData, PendingData, RetryData, TokenData

from ._client import AsyncClient

__all__ = ["attach", "chat"]


async def _read_line(prompt: str) -> str | None:
    try:
        return await asyncio.to_thread(input, prompt)
    except EOFError:
        return None


def _print_event(event: Event, out: TextIO) -> None:
    data = event.data
    if isinstance(data, TokenData):
        out.write(data.text)
    elif isinstance(data, RetryData) and data.discard:
        out.write("\n[the worker restarted; the answer starts again]\n")
    elif isinstance(data, MessageData) and data.message.role == "tool":
        out.write(f"\n[tool: {data.message.content}]\n")
    elif event.event == "error":
        out.write(f"\n[error: {data.message}]\n")
    out.flush()


async def _follow(client: AsyncClient, run_id: str, out: TextIO) -> None:
    """Print the run until it ends; answer approval prompts; Ctrl-C detaches."""
    last: str | None = None
    while True:
        pending: PendingData | None = None
        async for event in client.stream(run_id, last_event_id=last):
            last = event.id
            if isinstance(event.data, MessageData) and event.data.message.role == "user":
                continue
            _print_event(event, out)
            if isinstance(event.data, PendingData):
                pending = event.data
                run = await client.get(run_id)
                if run.status == "interrupted":
                    break
        else:
            out.write("\n")
            return
        interrupt = pending.interrupt if pending and isinstance(pending.interrupt, dict) else {}
        question = str(interrupt.get("question", "Approve?"))
        answer = await _read_line(f"\n{question} [y/N] ")
        await client.resume(run_id, {"approve": (answer or "").strip().lower() in ("y", "yes")})


async def attach(url: str, api_key: str | None, run_id: str, out: TextIO = sys.stdout) -> int:
    async with AsyncClient(url, api_key) as client:
        try:
            await _follow(client, run_id, out)
        except asyncio.CancelledError:
            out.write(f"\n[detached; the run goes on: runstream attach {run_id}]\n")
            raise
    return 0


async def chat(
    url: str,
    api_key: str | None,
    thread_id: str | None,
    graph: str = "chat",
    out: TextIO = sys.stdout,
) -> int:
    async with AsyncClient(url, api_key) as client:
        if thread_id is None:
            threads = (await client.list_threads(limit=10)).threads
            for number, thread in enumerate(threads, 1):
                out.write(f"  {number}. {thread.title or '(empty)'}  [{thread.thread_id}]\n")
            choice = await _read_line("thread number, or Enter for a new one: ") if threads else ""
            if choice and choice.strip().isdigit() and 0 < int(choice) <= len(threads):
                thread_id = threads[int(choice) - 1].thread_id
        if thread_id is not None:
            for message in (await client.get_thread(thread_id)).messages:
                out.write(f"{message.role}: {message.content}\n")
        out.write("Ctrl-C leaves an answer running; Ctrl-D quits.\n")
        while True:
            line = await _read_line("> ")
            if line is None:
                return 0
            if not line.strip():
                continue
            run = await client.submit(line, thread_id=thread_id, graph=graph)
            thread_id = run.thread_id
            try:
                await _follow(client, run.run_id, out)
            except asyncio.CancelledError:
                out.write(f"\n[detached; the run goes on: runstream attach {run.run_id}]\n")
                out.flush()
                raise
