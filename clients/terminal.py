"""`runstream chat` and `runstream attach`: a terminal chat on the Python client.

The reply is printed as tokens arrive. If the server restarts mid-answer the client's stream
reconnects with its last event id, so no text repeats. Ctrl-C leaves the run running on the
server and prints how to come back to it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, TextIO

import msgspec

from wire.approvals import (
    Action,
    ActionRequest,
    ApproveDecision,
    Decision,
    DecisionType,
    EditDecision,
    HITLRequest,
    HITLResponse,
    RejectDecision,
    is_review_request,
)
from wire.events import Event, MessageData, PendingData, RetryData, RunStatus, TokenData

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
    """Print the run until it ends; ask the user each interrupt's answer; Ctrl-C detaches."""
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
                if run.status == RunStatus.INTERRUPTED:
                    break
        else:
            out.write("\n")
            return
        await client.resume(run_id, await _answer(pending.interrupt if pending else None, out))


_CHOICES: dict[str, str] = {"approve": "[a]pprove", "edit": "[e]dit", "reject": "[r]eject"}


async def _decide(action: ActionRequest, allowed: list[DecisionType], out: TextIO) -> Decision:
    """Ask about one proposed call until the answer is one of the `allowed` decisions.

    End of input rejects it, as a "no": nothing runs that nobody approved.
    """
    allowed = allowed or ["approve", "edit", "reject"]
    out.write(f"\n{action.description or f'Run {action.name}?'}\n")
    out.write(f"  {action.name}({json.dumps(action.args, ensure_ascii=False)})\n")
    out.flush()
    choices = ", ".join(_CHOICES[d] for d in allowed)
    while True:
        line = await _read_line(f"{choices}: ")
        if line is None:
            return RejectDecision()
        answer = line.strip().lower()
        chosen = next((d for d in allowed if answer and d.startswith(answer)), None)
        if chosen == "approve":
            return ApproveDecision()
        if chosen == "reject":
            reason = ((await _read_line("reason, for the model (Enter for none): ")) or "").strip()
            return RejectDecision(message=reason or None)
        if chosen == "edit":
            args: dict[str, Any] = {}
            for name, value in action.args.items():
                shown = value if isinstance(value, str) else json.dumps(value)
                typed = await _read_line(f"{name} [{shown}]: ")
                args[name] = _typed_arg(typed, value) if typed else value
            return EditDecision(edited_action=Action(name=action.name, args=args))


def _typed_arg(typed: str, original: Any) -> Any:
    """A typed argument: as typed for a text argument, else JSON when it parses."""
    if isinstance(original, str):
        return typed
    try:
        return json.loads(typed)
    except ValueError:
        return typed


async def _answer(interrupt: Any, out: TextIO) -> Any:
    """The resume value: decisions for a review request, else a JSON value typed in."""
    if is_review_request(interrupt):
        request = msgspec.convert(interrupt, HITLRequest)
        allowed = {c.action_name: c.allowed_decisions for c in request.review_configs}
        decisions = [
            await _decide(action, allowed.get(action.name, []), out)
            for action in request.action_requests
        ]
        return msgspec.to_builtins(HITLResponse(decisions=decisions))
    out.write(f"\nThe run waits for an answer to: {json.dumps(interrupt, ensure_ascii=False)}\n")
    while True:
        typed = ((await _read_line("answer (JSON, Enter for null): ")) or "").strip()
        try:
            return json.loads(typed) if typed else None
        except ValueError as error:
            out.write(f"not JSON: {error}\n")


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
