"""The operator's commands of `runstream`: `status`, `runs list|show|cancel` and
`threads list|show|delete`.

`status` reads Redis and Postgres directly (`server.processes.status`): it is about the deployment,
not
one caller; beside `runstream up`, it finds up's embedded services (`server.processes.up_record`).
`runs` and `threads` go through the HTTP API with the Python client (`clients.manage`), so they see
exactly what that API key's owner sees, and a run or thread of another owner is "not found" as
it is for any client. Output is an aligned table, or JSON
with `--json`; the API key is never printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import httpx
import msgspec

from clients import AsyncClient, NotFound, RunstreamError, manage
from stream_store.settings import Settings

__all__ = ["COMMANDS", "add_commands", "run_command"]

COMMANDS = ("status", "runs", "threads")
_DEFAULT_URL = "http://127.0.0.1:8000"
_API_TIMEOUT_S = 15.0


def _api_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", default=None, help=f"the server; default RUNSTREAM_URL or {_DEFAULT_URL}"
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="default RUNSTREAM_API_KEY (prefer it: arguments show in `ps`)",
    )
    parser.add_argument("--json", action="store_true", help="print the API's JSON objects")


def add_commands(commands: Any) -> None:
    """Add `status`, `runs` and `threads` to the `runstream` parser's subcommands."""
    sub = commands.add_parser(
        "status",
        help="the deployment: services, workers, queue, stuck runs",
        description="Reads Redis and Postgres directly (RUNSTREAM_REDIS_URL, "
        "RUNSTREAM_DATABASE_URL, as `serve` does; where unset, those of the `runstream up` "
        "running on RUNSTREAM_DATA_DIR). Exit status 1 when either is down.",
    )
    sub.add_argument("--json", action="store_true", help="print the report as JSON")

    runs = commands.add_parser("runs", help="an API key's runs, through the HTTP API")
    verbs = runs.add_subparsers(dest="verb", required=True)
    sub = verbs.add_parser(
        "list",
        help="runs of one thread, or of the newest threads",
        description="With --thread, that thread's runs; without, the runs of the caller's "
        "newest threads (--threads of them). Oldest first.",
    )
    sub.add_argument("--thread", default=None, help="only this thread's runs")
    sub.add_argument("--threads", type=int, default=10, help="without --thread: newest N threads")
    sub.add_argument("--status", default=None, help="only runs in this status (e.g. running)")
    _api_options(sub)
    for verb, text in (("show", "one run"), ("cancel", "cancel a run")):
        sub = verbs.add_parser(verb, help=text)
        sub.add_argument("run_id")
        _api_options(sub)

    threads = commands.add_parser("threads", help="an API key's threads, through the HTTP API")
    verbs = threads.add_subparsers(dest="verb", required=True)
    sub = verbs.add_parser("list", help="the caller's threads, newest first")
    sub.add_argument("--limit", type=int, default=20, help="threads per page (1-100)")
    sub.add_argument("--cursor", default=None, help="the next page, as the last one said")
    _api_options(sub)
    for verb, text in (
        ("show", "a thread, its messages and runs"),
        ("delete", "delete a thread, its runs and checkpoints, for good"),
    ):
        sub = verbs.add_parser(verb, help=text)
        sub.add_argument("thread_id")
        _api_options(sub)


def _status(settings: Settings, as_json: bool, out: TextIO) -> int:
    from .status import gather_status  # Redis and Postgres drivers: only here
    from .status_report import render_status
    from .up_record import with_up_services

    status = asyncio.run(gather_status(with_up_services(settings)))
    if as_json:
        out.write(json.dumps(msgspec.to_builtins(status), indent=2) + "\n")
    else:
        out.write(render_status(status) + "\n")
    return 0 if status.healthy else 1


def _api_call(args: argparse.Namespace, out: TextIO) -> Callable[[AsyncClient], Awaitable[int]]:
    as_json: bool = args.json
    if args.command == "runs":
        if args.verb == "list":
            return lambda c: manage.list_runs(
                c,
                thread_id=args.thread,
                threads=args.threads,
                status=args.status,
                as_json=as_json,
                out=out,
            )
        action = manage.show_run if args.verb == "show" else manage.cancel_run
        return lambda c: action(c, args.run_id, as_json=as_json, out=out)
    if args.verb == "list":
        return lambda c: manage.list_threads(
            c, limit=args.limit, cursor=args.cursor, as_json=as_json, out=out
        )
    on_thread = manage.show_thread if args.verb == "show" else manage.delete_thread
    return lambda c: on_thread(c, args.thread_id, as_json=as_json, out=out)


def _explain(exc: RunstreamError) -> str:
    where = f"; request id {exc.request_id}" if exc.request_id else ""
    text = f"{exc.message} ({exc.status} {exc.code}{where})"
    if isinstance(exc, NotFound):
        text += ": unknown, deleted, or not this API key's"
    return text


def run_command(
    settings: Settings, args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Run one of `COMMANDS`; 0 on success, 1 when the server refused or could not be reached
    (or, for `status`, when Redis or Postgres is down)."""
    if args.command == "status":
        return _status(settings, args.json, out)
    url = args.url or settings.client_url or _DEFAULT_URL
    call = _api_call(args, out)

    async def main() -> int:
        async with AsyncClient(
            url, args.api_key or settings.client_api_key, timeout_s=_API_TIMEOUT_S
        ) as client:
            return await call(client)

    try:
        return asyncio.run(main())
    except RunstreamError as exc:
        err.write(f"runstream: {_explain(exc)}\n")
    except httpx.TransportError as exc:
        err.write(f"runstream: cannot reach {url}: {exc or type(exc).__name__}\n")
    return 1
