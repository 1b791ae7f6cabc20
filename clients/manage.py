"""`runstream runs ...` and `runstream threads ...`: one caller's runs and threads, through the
HTTP API with `AsyncClient`, exactly as any client sees them.

Each command prints an aligned table, or with `as_json` the API's own objects (`runs list`:
`{"runs": [...]}`, `threads list`: the API's page). Errors are the client's exceptions; the
caller turns them into a message and an exit status.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, TextIO

import msgspec

from wire.events import RunStatus
from wire.responses import RunList, RunOut

from ._client import AsyncClient
from .tables import ago, cell, duration, fields, table

__all__ = [
    "cancel_run",
    "delete_thread",
    "list_runs",
    "list_threads",
    "show_run",
    "show_thread",
]


def _print_json(value: Any, out: TextIO) -> None:
    out.write(json.dumps(msgspec.to_builtins(value), indent=2) + "\n")


def _took(run: RunOut, now: datetime) -> str:
    if run.started_at is None:
        return "-"
    return duration(((run.finished_at or now) - run.started_at).total_seconds())


def _runs_table(runs: list[RunOut], now: datetime, *, with_thread: bool) -> str:
    headers = ["RUN", "STATUS", "ATTEMPT", "GRAPH", "CREATED", "TOOK", "ERROR"]
    if with_thread:
        headers.insert(1, "THREAD")
    rows = []
    for run in runs:
        error = run.error.get("code") if run.error else None
        row = [run.run_id, run.status, run.attempt, run.graph, ago(run.created_at, now)]
        row += [_took(run, now), error]
        if with_thread:
            row.insert(1, run.thread_id)
        rows.append(row)
    return table(headers, rows)


async def list_runs(
    client: AsyncClient,
    *,
    thread_id: str | None,
    threads: int,
    status: str | None,
    as_json: bool,
    out: TextIO,
) -> int:
    """The runs of one thread, or of the caller's `threads` newest threads; oldest first."""
    if thread_id is not None:
        runs = (await client.thread_runs(thread_id)).runs
    else:
        page = await client.list_threads(limit=threads)
        runs = [run for t in page.threads for run in (await client.thread_runs(t.thread_id)).runs]
        runs.sort(key=lambda run: run.created_at)
    if status is not None:
        runs = [run for run in runs if run.status == status]
    if as_json:
        _print_json(RunList(runs=runs), out)
    elif runs:
        out.write(_runs_table(runs, datetime.now(UTC), with_thread=thread_id is None) + "\n")
    else:
        out.write("no runs\n")
    return 0


def _run_fields(run: RunOut, now: datetime) -> str:
    error = f"{run.error.get('code')}: {run.error.get('message')}" if run.error else None
    return fields(
        [
            ("run", run.run_id),
            ("thread", run.thread_id),
            ("status", run.status),
            ("graph", run.graph),
            ("attempt", run.attempt),
            ("created", f"{run.created_at:%Y-%m-%d %H:%M:%S}Z ({ago(run.created_at, now)})"),
            ("started", ago(run.started_at, now)),
            ("finished", ago(run.finished_at, now)),
            ("took", _took(run, now)),
            ("last event", run.last_event_id),
            ("error", error),
            ("interrupt", json.dumps(run.interrupt) if run.interrupt is not None else None),
            ("multitask", run.multitask),
            ("metadata", json.dumps(run.metadata) if run.metadata else None),
        ]
    )


async def show_run(client: AsyncClient, run_id: str, *, as_json: bool, out: TextIO) -> int:
    run = await client.get(run_id)
    if as_json:
        _print_json(run, out)
    else:
        out.write(_run_fields(run, datetime.now(UTC)) + "\n")
    return 0


async def cancel_run(client: AsyncClient, run_id: str, *, as_json: bool, out: TextIO) -> int:
    """Cancel; a running run is stopped by its worker, so its answer may still say running."""
    run = await client.cancel(run_id)
    if as_json:
        _print_json(run, out)
    elif run.status == RunStatus.CANCELLED:
        out.write(f"run {run.run_id} cancelled\n")
    else:
        out.write(f"run {run.run_id} is {run.status}: its worker is stopping it\n")
    return 0


async def list_threads(
    client: AsyncClient, *, limit: int, cursor: str | None, as_json: bool, out: TextIO
) -> int:
    """One page of the caller's threads, newest first; the footer names the next page."""
    page = await client.list_threads(limit=limit, cursor=cursor)
    if as_json:
        _print_json(page, out)
        return 0
    if not page.threads:
        out.write("no threads\n")
        return 0
    now = datetime.now(UTC)
    rows = [
        (t.thread_id, t.status, ago(t.created_at, now), ago(t.updated_at, now), cell(t.title, 60))
        for t in page.threads
    ]
    out.write(table(["THREAD", "STATUS", "CREATED", "UPDATED", "TITLE"], rows) + "\n")
    if page.next_cursor:
        out.write(f"more: runstream threads list --cursor {page.next_cursor}\n")
    return 0


async def show_thread(client: AsyncClient, thread_id: str, *, as_json: bool, out: TextIO) -> int:
    """The thread and its messages (`--json`: the API's thread object); the table adds its runs."""
    thread = await client.get_thread(thread_id)
    if as_json:
        _print_json(thread, out)
        return 0
    now = datetime.now(UTC)
    runs = (await client.thread_runs(thread_id)).runs
    out.write(
        fields(
            [
                ("thread", thread.thread_id),
                ("title", thread.title),
                ("status", thread.status),
                ("created", ago(thread.created_at, now)),
                ("updated", ago(thread.updated_at, now)),
                ("metadata", json.dumps(thread.metadata) if thread.metadata else None),
            ]
        )
        + "\n"
    )
    out.write(f"\nmessages ({len(thread.messages)}):\n")
    for message in thread.messages:
        content = message.content
        text = content if isinstance(content, str) else json.dumps(content)
        out.write(f"  {message.role}: {cell(text, 300)}\n")
    out.write(f"\nruns ({len(runs)}):\n")
    if runs:
        out.write(_runs_table(runs, now, with_thread=False) + "\n")
    return 0


async def delete_thread(client: AsyncClient, thread_id: str, *, as_json: bool, out: TextIO) -> int:
    await client.delete_thread(thread_id)
    if as_json:
        _print_json({"thread_id": thread_id, "deleted": True}, out)
    else:
        out.write(f"thread {thread_id} deleted, with its runs\n")
    return 0
