"""The `runstream` command: serve, worker, migrate, up; chat and attach; and the operator's
status, runs and threads (`server/operator_cli.py`).

Each subcommand builds the one `Settings` of its process from the environment and passes it
down; logging is configured here and nowhere else.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

import structlog

from stream_store.settings import Settings, SettingsError

from . import operator_cli
from .logs import configure_logging

__all__ = ["main"]

logger = structlog.get_logger()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _announce_model(settings: Settings) -> None:
    if settings.model == "fake":
        logger.warning(
            "USING THE FAKE MODEL: replies echo the last user message "
            "(set OPENAI_API_KEY and RUNSTREAM_MODEL for a real one)",
            token_delay_ms=settings.fake_token_delay_ms,
        )
    else:
        logger.info("model", model=settings.model, base_url=settings.openai_base_url or "default")


def serve(settings: Settings, host: str, port: int) -> int:
    import uvicorn

    from .app import create_app

    if not settings.auth_enabled:
        if not _is_loopback(host):
            logger.error("refusing to listen beyond loopback without RUNSTREAM_API_KEYS", host=host)
            return 2
        logger.warning("no RUNSTREAM_API_KEYS: no authentication, serving loopback only")
    settings.stream_token_keys()  # with API keys, a signing key is required
    settings.require_services()
    _announce_model(settings)
    logger.info("listening", url=f"http://{host}:{port}", docs=f"http://{host}:{port}/schema")
    app = create_app(settings)

    class Server(uvicorn.Server):
        """On SIGTERM/SIGINT, also end every SSE response at once (not after the timeout)."""

        loop: asyncio.AbstractEventLoop | None = None

        def handle_exit(self, sig: int, frame: object) -> None:
            super().handle_exit(sig, frame)  # type: ignore[arg-type]
            resources = getattr(app.state, "resources", None)
            if resources is not None and self.loop is not None:
                self.loop.call_soon_threadsafe(resources.follower.close_all)

        async def serve(self, sockets: object = None) -> None:
            self.loop = asyncio.get_running_loop()
            await super().serve(sockets)  # type: ignore[arg-type]

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    Server(config).run()
    return 0


def worker(settings: Settings, concurrency: int | None) -> int:
    from dataclasses import replace

    from runner.worker import build_worker

    if concurrency is not None:
        settings = replace(settings, worker_concurrency=concurrency)
    settings.require_services()
    _announce_model(settings)
    try:  # arq runs on the thread's event loop: make it uvloop's, as uvicorn does for serve
        import uvloop

        asyncio.set_event_loop(uvloop.new_event_loop())
    except ImportError:
        pass
    build_worker(settings).run()
    return 0


def migrate(settings: Settings) -> int:
    from stream_store.connections import open_pg_pool
    from stream_store.migrations import migrate as apply

    async def run() -> int:
        pool = await open_pg_pool(settings, max_size=2)
        try:
            return await apply(pool, settings.database_schema)
        finally:
            await pool.close()

    applied = asyncio.run(run())
    logger.info("migrated", applied=applied, schema=settings.database_schema)
    return 0


def up(settings: Settings, host: str, port: int) -> int:
    """Server and worker as child processes (and private Redis/Postgres if none are set)."""
    from dataclasses import replace
    from pathlib import Path

    from .embedded import EmbeddedServices

    settings.stream_token_keys()  # refuse before starting anything, as `serve` would
    env = dict(os.environ)
    services = EmbeddedServices(Path(settings.data_dir))
    if not (settings.redis_url and settings.database_url):
        redis_url, database_url = services.start(
            redis=not settings.redis_url, postgres=not settings.database_url
        )
        settings = replace(
            settings,
            redis_url=settings.redis_url or redis_url,
            database_url=settings.database_url or database_url,
        )
        env["RUNSTREAM_REDIS_URL"] = str(settings.redis_url)
        env["RUNSTREAM_DATABASE_URL"] = str(settings.database_url)
        print(f"embedded services under {services.data_dir} (kept for the next start)")
    try:
        return _up(settings, host, port, env)
    finally:
        services.stop()


def _up(settings: Settings, host: str, port: int, env: dict[str, str]) -> int:
    _announce_model(settings)
    migrate(settings)
    exe = [sys.executable, "-m", "server.cli"]
    children = [
        subprocess.Popen([*exe, "serve", "--host", host, "--port", str(port)], env=env),
        subprocess.Popen([*exe, "worker"], env=env),
    ]
    model = (
        "the FAKE model (echoes you; set OPENAI_API_KEY)"
        if settings.model == "fake"
        else settings.model
    )
    print(f"runstream is up: open http://{host}:{port}/ in a browser to chat")
    print(f"API docs: http://{host}:{port}/schema")
    print(f"model: {model}; chat in a terminal: runstream chat --url http://{host}:{port}")

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)  # also when started in the background (SIGINT ignored)
    try:
        while all(child.poll() is None for child in children):
            with contextlib.suppress(subprocess.TimeoutExpired):
                children[0].wait(timeout=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
    return max((child.returncode or 0) for child in children)


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runstream", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("serve", "run the HTTP server"), ("up", "run server and worker")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--host", default=None, help="default RUNSTREAM_HOST or 127.0.0.1")
        sub.add_argument("--port", type=int, default=None, help="default RUNSTREAM_PORT or 8000")
    sub = commands.add_parser("worker", help="run a worker")
    sub.add_argument("--concurrency", type=int, default=None, help="runs at once")
    commands.add_parser("migrate", help="create or upgrade the Postgres tables")
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
    operator_cli.add_commands(commands)
    args = parser.parse_args(argv)

    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"runstream: {exc}", file=sys.stderr)
        return 2
    quiet = ("chat", "attach", *operator_cli.COMMANDS)  # these print only their own output
    if args.command not in quiet:
        configure_logging(settings.log_level, settings.log_json)
    try:
        if args.command == "serve":
            return serve(settings, args.host or settings.host, args.port or settings.port)
        if args.command == "worker":
            return worker(settings, args.concurrency)
        if args.command == "migrate":
            return migrate(settings)
        if args.command in ("chat", "attach"):
            return terminal(settings, args)
        if args.command in operator_cli.COMMANDS:
            return operator_cli.run_command(settings, args)
        return up(settings, args.host or settings.host, args.port or settings.port)
    except SettingsError as exc:
        print(f"runstream: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
