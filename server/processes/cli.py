"""The `runstream` command: serve, worker, migrate, up, eval (`server/processes/commands.py`); chat
and attach; and the operator's status, runs and threads (`server/processes/operator_cli.py`).

Each subcommand builds the one `Settings` of its process from the environment and passes it
down; logging is configured here (and in each spawned child of `--processes N`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from importlib.resources import files

from stream_store.settings import Settings, SettingsError

from . import operator_cli
from .commands import evaluate, migrate, serve, serve_on, up, worker
from .logs import configure_logging
from .multiprocess import inherited_socket

__all__ = ["BUNDLED_PROJECT", "NO_PROJECT", "main", "with_project"]

DEFAULT_PROJECT = "langgraph.json"
# The memory-aware assistant (docs/memory.md), served when no project is named: its
# langgraph.json ships in the package beside its code.
BUNDLED_PROJECT = str(files("runner.assistant") / "langgraph.json")
NO_PROJECT = "none"  # `--config none` / RUNSTREAM_CONFIG=none: the built-in graphs only


def _positive(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def terminal(settings: Settings, args: argparse.Namespace) -> int:
    from clients.terminal import attach, chat

    url = args.url or settings.client_url or f"http://{settings.host}:{settings.port}"
    key = settings.client_api_key
    try:
        if args.command == "attach":
            return asyncio.run(attach(url, key, args.run_id))
        return asyncio.run(chat(url, key, args.thread, args.graph))
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runstream", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("serve", "run the HTTP server"), ("up", "run server and worker")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--host", default=None, help="default RUNSTREAM_HOST or 127.0.0.1")
        sub.add_argument("--port", type=int, default=None, help="default RUNSTREAM_PORT or 8000")
        sub.add_argument(
            "--fd",
            type=int,
            default=None,
            help="serve on the socket inherited as this file descriptor (bound by whoever"
            " started it, as systemd's socket activation does; --host and --port are then the"
            " socket's)",
        )
        sub.add_argument(
            "--processes",
            type=_positive,
            default=None,
            help="server processes on the port (and, for up, worker processes too); default 1,"
            " for up the machine's cores",
        )
        _config_option(sub)
    sub = commands.add_parser("worker", help="run a worker")
    _config_option(sub)
    sub.add_argument("--concurrency", type=int, default=None, help="runs at once")
    sub.add_argument("--processes", type=_positive, default=1, help="worker processes (default 1)")
    sub.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve /metrics on RUNSTREAM_HOST at this port (default"
        " RUNSTREAM_WORKER_METRICS_PORT; 0: off)",
    )
    sub = commands.add_parser("migrate", help="create or upgrade the Postgres tables")
    _config_option(sub)  # a project's store.index has tables of its own
    for name, text in (("chat", "chat in the terminal"), ("attach", "follow a run")):
        sub = commands.add_parser(name, help=text)
        if name == "attach":
            sub.add_argument("run_id")
        else:
            sub.add_argument("--thread", default=None, help="continue this thread")
            sub.add_argument("--graph", default="chat", help="the graph new runs use")
        sub.add_argument(
            "--url", default=None, help="default RUNSTREAM_URL or http://RUNSTREAM_HOST:PORT"
        )
    sub = commands.add_parser("eval", help="score the assistant's memory on its evaluation set")
    sub.add_argument("--set", default=None, metavar="PATH", help="default the shipped one")
    sub.add_argument("--json", action="store_true", help="print the figures as JSON")
    operator_cli.add_commands(commands)
    return parser


def _config_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--config",
        default=None,
        metavar="PATH",
        help="a LangGraph project's langgraph.json to serve (default RUNSTREAM_CONFIG, else"
        " ./langgraph.json when there is one, else the bundled memory assistant; 'none': only"
        " the built-in graphs)",
    )


def with_project(settings: Settings, config: str | None) -> Settings:
    """`settings` with the project to serve: `--config`, else RUNSTREAM_CONFIG, else
    ./langgraph.json if there is one (as `langgraph dev` finds it), else the bundled memory
    assistant (`runner/assistant/langgraph.json`), as an absolute path (`up` hands it to its
    children); `none` names no project (the built-in `chat` and `approval` only).

    This is the one place the default lives: a process given its `Settings` directly (the
    tests' in-process servers and workers) serves what those settings name, nothing more."""
    from dataclasses import replace

    path = config or settings.config_path
    if path == NO_PROJECT:
        return replace(settings, config_path=None)
    if path is None:
        path = DEFAULT_PROJECT if os.path.isfile(DEFAULT_PROJECT) else BUNDLED_PROJECT
    return replace(settings, config_path=os.path.abspath(path))


def _run(settings: Settings, args: argparse.Namespace) -> int:
    """The parsed command, run with the process's settings."""
    if args.command in ("serve", "worker", "up", "migrate"):
        settings = with_project(settings, args.config)
    sock = None
    if args.command in ("serve", "up") and args.fd is not None:
        if args.host is not None or args.port is not None:
            raise SettingsError("--fd serves on the socket's own address: no --host or --port")
        sock = inherited_socket(args.fd)
    if args.command == "serve":
        if sock is not None:
            return serve_on(settings, sock, args.processes or 1)
        host, port = args.host or settings.host, args.port or settings.port
        return serve(settings, host, port, args.processes or 1)
    if args.command == "worker":
        return worker(settings, args.concurrency, args.metrics_port, args.processes)
    if args.command == "migrate":
        return migrate(settings)
    if args.command in ("chat", "attach"):
        return terminal(settings, args)
    if args.command == "eval":
        return evaluate(settings, args.set, as_json=args.json)
    if args.command in operator_cli.COMMANDS:
        return operator_cli.run_command(settings, args)
    processes = args.processes or os.cpu_count() or 1
    return up(settings, args.host or settings.host, args.port or settings.port, processes, sock)


def main(argv: Sequence[str] | None = None) -> int:
    """`runstream`'s exit status: 2 for settings that do not hold, else the command's."""
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"runstream: {exc}", file=sys.stderr)
        return 2
    quiet = ("chat", "attach", *operator_cli.COMMANDS)  # these print only their own output
    if args.command not in quiet:
        configure_logging(settings.log_level, settings.log_json)
    try:
        return _run(settings, args)
    except SettingsError as exc:
        print(f"runstream: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
