"""What `runstream serve|worker|migrate|up` run: the server and worker processes (one, or N on
one port), the migrations, and both together with embedded Redis and Postgres.

Each takes the one `Settings` of its process, built by `cli.py` from the environment; a
spawned child of `--processes N` configures its logging anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys

import structlog

from stream_store.settings import Settings, SettingsError
from stream_store.tracing import tracer_provider_from_env

from .heap import settle_heap
from .logs import configure_logging
from .multiprocess import listening_socket, run_processes

__all__ = ["migrate", "serve", "up", "worker"]

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


def serve(settings: Settings, host: str, port: int, processes: int = 1) -> int:
    """The HTTP server; with `processes` > 1, that many server processes on one port."""
    if not settings.auth_enabled:
        if not _is_loopback(host):
            logger.error("refusing to listen beyond loopback without RUNSTREAM_API_KEYS", host=host)
            return 2
        logger.warning("no RUNSTREAM_API_KEYS: no authentication, serving loopback only")
    settings.stream_token_keys()  # with API keys, a signing key is required
    settings.require_services()
    _announce_model(settings)
    logger.info(
        "listening",
        url=f"http://{host}:{port}",
        docs=f"http://{host}:{port}/schema",
        processes=processes,
    )
    if processes == 1:
        return _serve_process(settings, host, port)
    sock = listening_socket(host, port)
    children = [(settings, host, port, index, sock) for index in range(processes)]
    return run_processes("server", _serve_child, children, stop_timeout_s=30)


def _serve_child(settings: Settings, host: str, port: int, index: int, sock: socket.socket) -> None:
    """One child of `serve --processes N` (spawned: it configures its logging anew)."""
    configure_logging(settings.log_level, settings.log_json, process=index)
    raise SystemExit(_serve_process(settings, host, port, sock))


def _serve_process(
    settings: Settings, host: str, port: int, sock: socket.socket | None = None
) -> int:
    """One server process: on `sock` when given (shared with its siblings), else it binds."""
    import uvicorn

    from .app import create_app
    from .event_stream import with_server_send

    tracer_provider = tracer_provider_from_env("server")
    app = create_app(settings, tracer_provider=tracer_provider)
    settle_heap()  # server/heap.py

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
        with_server_send(app),
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    try:
        Server(config).run(sockets=[sock] if sock is not None else None)
    finally:
        if tracer_provider is not None:
            tracer_provider.shutdown()  # exports the spans still batched
    return 0


def worker(
    settings: Settings,
    concurrency: int | None,
    metrics_port: int | None = None,
    processes: int = 1,
) -> int:
    """A worker; with `processes` > 1, that many worker processes (child i serves its metrics,
    if on, at the metrics port + i)."""
    from dataclasses import replace

    if concurrency is not None:
        settings = replace(settings, worker_concurrency=concurrency)
    if metrics_port is not None:
        settings = replace(settings, worker_metrics_port=metrics_port)
    if not 0 <= settings.worker_metrics_port <= 65535:
        raise SettingsError(f"metrics port must be 0 to 65535, got {settings.worker_metrics_port}")
    last_port = settings.worker_metrics_port + processes - 1
    if settings.worker_metrics_port and last_port > 65535:
        raise SettingsError(f"metrics ports up to {last_port}: past 65535")
    settings.require_services()
    _announce_model(settings)
    if processes == 1:
        return _worker_process(settings)
    port = settings.worker_metrics_port
    children = [
        (replace(settings, worker_metrics_port=port + index if port else 0), index)
        for index in range(processes)
    ]
    grace_s = settings.shutdown_grace_s + 30  # the runs' grace, then the hand-backs
    return run_processes("worker", _worker_child, children, stop_timeout_s=grace_s)


def _worker_child(settings: Settings, index: int) -> None:
    """One child of `worker --processes N` (spawned: it configures its logging anew)."""
    configure_logging(settings.log_level, settings.log_json, process=index)
    raise SystemExit(_worker_process(settings))


def _worker_process(settings: Settings) -> int:
    from runner.worker import build_worker

    try:  # arq runs on the thread's event loop: make it uvloop's, as uvicorn does for serve
        import uvloop

        asyncio.set_event_loop(uvloop.new_event_loop())
    except ImportError:
        pass
    tracer_provider = tracer_provider_from_env("worker")
    try:
        worker = build_worker(settings, tracer_provider=tracer_provider)
        settle_heap()  # server/heap.py: about a third of the worker's CPU per token
        worker.run()
    finally:
        if tracer_provider is not None:
            tracer_provider.shutdown()  # exports the spans still batched
    return 0


def migrate(settings: Settings) -> int:
    from stream_store.connections import open_pg_pool, session_pool
    from stream_store.migrations import migrate as apply

    async def run() -> int:
        pool = await open_pg_pool(settings, max_size=2)
        try:
            async with session_pool(settings, pool) as migrating:
                return await apply(migrating, settings.database_schema)
        finally:
            await pool.close()

    applied = asyncio.run(run())
    logger.info("migrated", applied=applied, schema=settings.database_schema)
    return 0


def up(settings: Settings, host: str, port: int, processes: int = 1) -> int:
    """Server and worker as child processes, each with `processes` processes of its own (and
    private Redis/Postgres if none are set)."""
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
        return _up(settings, host, port, env, processes)
    finally:
        services.stop()


def _up(settings: Settings, host: str, port: int, env: dict[str, str], processes: int) -> int:
    _announce_model(settings)
    migrate(settings)
    exe = [sys.executable, "-m", "server.cli"]
    each = ["--processes", str(processes)]
    children = [
        subprocess.Popen([*exe, "serve", "--host", host, "--port", str(port), *each], env=env),
        subprocess.Popen([*exe, "worker", *each], env=env),
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
