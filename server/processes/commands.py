"""What `runstream serve|worker|migrate|up|eval` run: the server and worker processes (one, or N
on one port), the migrations, both together with embedded Redis and Postgres, and the
assistant's evaluation set.

Each takes the one `Settings` of its process, built by `cli.py` from the environment; a
spawned child of `--processes N` configures its logging anew.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from stream_store.settings import Settings, SettingsError
from stream_store.tracing import tracer_provider_from_env

from .heap import settle_heap
from .logs import configure_logging
from .multiprocess import bound_socket, listening_socket, run_processes

if TYPE_CHECKING:
    from project.langgraph_json import Project
    from runner.graph_registry import GraphRegistry
    from stream_store.store import StoreOptions

    from .embedded import EmbeddedServices

__all__ = ["KEEP_ALIVE_S", "evaluate", "migrate", "serve", "serve_on", "up", "worker"]

# How long the server keeps an idle HTTP connection open: past httpx's pool expiry (5 s, what
# LangGraph's Python SDK uses) and undici's (4 s), so that the client, not the server, closes
# an idle connection. With uvicorn's 5 s the two closed it at the same moment, and a POST sent
# on it then failed with a read error the client does not retry (seen in the tests, 2026-12-07).
KEEP_ALIVE_S = 20

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


def _read_project(settings: Settings) -> Project | None:
    """The project `settings` name (`RUNSTREAM_CONFIG`, `--config`), read and checked; None
    without one. The one read of the file in a `runstream` process: each command reads it at
    its start and hands the `Project` down (to its graphs, its app, its spawned children).

    Raises:
        ProjectError: the file cannot be served (`runstream` prints the one line, exits 2).
    """
    if settings.config_path is None:
        return None
    from project.langgraph_json import load_project

    return load_project(settings.config_path)


def _load_graphs(settings: Settings, project: Project | None) -> GraphRegistry:
    """The process's graphs, `project`'s among them, imported and checked (the project's env
    and import paths put in place first: once per process, here).

    Raises:
        SettingsError: one cannot be served (`runstream` prints the one line, exits 2).
    """
    from runner.graph_registry import GraphRegistry

    return GraphRegistry.for_project(settings, project)


def _check_sign_in(settings: Settings, graphs: GraphRegistry) -> None:
    """Load the deployment's sign-in once before listening, so that a project's `Auth` that
    cannot be served is refused with one line (`SettingsError`)."""
    from server.callers.sign_in import sign_in_for

    sign_in_for(settings, graphs.auth)


def serve(settings: Settings, host: str, port: int, processes: int = 1) -> int:
    """The HTTP server; with `processes` > 1, that many server processes on one port."""
    return _serve(settings, host, port, processes, sock=None)


def serve_on(settings: Settings, sock: socket.socket, processes: int = 1) -> int:
    """The HTTP server on a socket its starter bound (`serve --fd`): a port the starter had
    the kernel pick is never free between being picked and being served."""
    host, port = sock.getsockname()[:2]
    return _serve(settings, host, port, processes, sock)


def _serve(
    settings: Settings, host: str, port: int, processes: int, sock: socket.socket | None
) -> int:
    project = _read_project(settings)  # the sign-in decided on the read the graphs come from
    project_auth = project is not None and project.auth is not None
    if not (settings.auth_enabled or project_auth):
        if not _is_loopback(host):
            logger.error(
                "refusing to listen beyond loopback without authentication (RUNSTREAM_API_KEYS,"
                " RUNSTREAM_JWT_SECRET or RUNSTREAM_JWT_JWKS_URL, or auth in langgraph.json)",
                host=host,
            )
            return 2
        logger.warning("no RUNSTREAM_API_KEYS: no authentication, serving loopback only")
    # with any sign-in, a signing key is required
    settings.stream_token_keys(project_auth=project_auth)
    settings.require_services()
    graphs = _load_graphs(settings, project)  # a bad project refused before anything starts
    _check_sign_in(settings, graphs)
    from server.app import project_http

    project_http(project)  # its custom app too (`http.app`), before any child starts
    _prepare_store(graphs, settings)
    _announce_model(settings)
    logger.info(
        "listening",
        url=f"http://{host}:{port}",
        docs=f"http://{host}:{port}/schema",
        processes=processes,
    )
    if processes == 1:
        return _serve_process(settings, host, port, graphs, sock)
    sock = sock or listening_socket(host, port)
    children = [(settings, project, host, port, index, sock) for index in range(processes)]
    return run_processes("server", _serve_child, children, stop_timeout_s=30)


def _serve_child(
    settings: Settings,
    project: Project | None,
    host: str,
    port: int,
    index: int,
    sock: socket.socket,
) -> None:
    """One child of `serve --processes N` (spawned: it configures its logging anew, and loads
    its graphs from the project its parent read)."""
    configure_logging(settings.log_level, settings.log_json, process=index)
    graphs = _load_graphs(settings, project)
    raise SystemExit(_serve_process(settings, host, port, graphs, sock))


def _serve_process(
    settings: Settings,
    host: str,
    port: int,
    graphs: GraphRegistry,
    sock: socket.socket | None = None,
) -> int:
    """One server process, its `graphs` loaded: on `sock` when given (inherited, or shared
    with its siblings), else it binds."""
    import uvicorn

    from server.app import create_app, serving
    from server.header_limit import bounded_httptools

    tracer_provider = tracer_provider_from_env("server")
    app = create_app(settings, tracer_provider=tracer_provider, graphs=graphs)
    settle_heap()  # server/processes/heap.py

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
        serving(app),
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=KEEP_ALIVE_S,
        http=bounded_httptools(settings.max_header_bytes),
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
    project = _read_project(settings)
    graphs = _load_graphs(settings, project)  # a bad project refused before anything starts
    _prepare_store(graphs, settings)
    _announce_model(settings)
    if processes == 1:
        return _worker_process(settings, graphs)
    port = settings.worker_metrics_port
    children = [
        (replace(settings, worker_metrics_port=port + index if port else 0), project, index)
        for index in range(processes)
    ]
    grace_s = settings.shutdown_grace_s + 30  # the runs' grace, then the hand-backs
    return run_processes("worker", _worker_child, children, stop_timeout_s=grace_s)


def _worker_child(settings: Settings, project: Project | None, index: int) -> None:
    """One child of `worker --processes N` (spawned: it configures its logging anew, and loads
    its graphs from the project its parent read)."""
    configure_logging(settings.log_level, settings.log_json, process=index)
    raise SystemExit(_worker_process(settings, _load_graphs(settings, project)))


def _worker_process(settings: Settings, graphs: GraphRegistry) -> int:
    from runner.worker import build_worker

    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:  # uvloop's event loop, as uvicorn runs serve on
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    tracer_provider = tracer_provider_from_env("worker")
    try:
        worker = build_worker(settings, tracer_provider=tracer_provider, graphs=graphs)
        settle_heap()  # server/processes/heap.py: about a third of the worker's CPU per token
        worker.run(loop_factory)
    finally:
        if tracer_provider is not None:
            tracer_provider.shutdown()  # exports the spans still batched
    return 0


def migrate(settings: Settings) -> int:
    """Apply the migrations; with a project, those of its `store.index` too (so `up` finds a
    database without pgvector before it starts a server or a worker)."""
    return _migrate(settings, _read_project(settings))


def _migrate(settings: Settings, project: Project | None) -> int:
    """`migrate` with the process's project read already (`up` reads it once)."""
    from stream_store.store import StoreOptions

    store = StoreOptions()
    # With a project's `store`, its embeddings are imported (its graphs are not). A project
    # without one (the bundled assistant, served by default) needs nothing imported here: `up`
    # migrates before it starts anything, so this is start-up time.
    if project is not None and (project.store_index is not None or project.store_ttl is not None):
        from project.store_index import store_options

        project.prepare()
        store = store_options(project)
    applied = asyncio.run(_apply_migrations(settings, store))
    logger.info("migrated", applied=applied, schema=settings.database_schema)
    return 0


async def _apply_migrations(settings: Settings, store: StoreOptions) -> int:
    from stream_store.connections import open_pg_pool, session_pool
    from stream_store.migrations import migrate as apply

    pool = await open_pg_pool(settings, max_size=2)
    try:
        async with session_pool(settings, pool) as migrating:
            return await apply(migrating, settings.database_schema, store)
    finally:
        await pool.close()


def _prepare_store(graphs: GraphRegistry, settings: Settings) -> None:
    """With the project's `store.index`: its embeddings checked and its tables made, so that a
    database without pgvector, or embeddings of other dimensions, are refused here in one line
    (`runstream` exits 2) rather than in the middle of the process's start-up.

    Raises:
        SettingsError: a `ProjectError` or `VectorsUnavailable` saying what to change.
    """
    project = graphs.project
    if project is None or project.store_index is None:
        return
    from project.store_index import check_embeddings, store_options

    store = store_options(project)

    async def run() -> None:
        await check_embeddings(store, project)
        await _apply_migrations(settings, store)

    asyncio.run(run())


def up(
    settings: Settings,
    host: str,
    port: int,
    processes: int = 1,
    sock: socket.socket | None = None,
) -> int:
    """Server and worker as supervised child processes (`server/processes/supervisor.py`), each with
    `processes` processes of its own, and private Redis/Postgres if none are set; until
    SIGINT or SIGTERM.

    The server's socket (bound here on `host`:`port` once the data folder is ours, or `sock`,
    inherited) is held for `up`'s life and handed to each server child (`serve --fd`): a
    server restarted by the supervisor finds its port still ours, and a client connecting
    meanwhile waits in the socket's queue for the next server instead of being refused."""
    from dataclasses import replace
    from pathlib import Path

    from .embedded import EmbeddedServices
    from .up_folder import SIGNING_KEY_FILE, hold_data_folder, kept_secret
    from .up_record import UpRecord, remove_up_record, write_up_record

    # refuse before starting anything, as `serve` would; the project's file read once here
    # (its graphs import in the children, which read it themselves)
    project = _read_project(settings)
    project_auth = project is not None and project.auth is not None
    settings.stream_token_keys()  # the operator's own sign-in takes the operator's key
    # one `up` per data folder, for this process's life: before anything is started there
    data_dir = Path(settings.data_dir).resolve()
    lock = hold_data_folder(data_dir)
    env = dict(os.environ)
    services = EmbeddedServices(data_dir)
    record: Path | None = None
    try:
        sock = sock or bound_socket(host, port)
        host, port = sock.getsockname()[:2]
        address = f"http://{host}:{port}"
        record = write_up_record(data_dir, UpRecord(pid=os.getpid(), address=address))
        if project_auth and not (settings.signing_key or settings.signing_keys):
            # the one-command local run: a key of its own, kept with its services' data
            settings = replace(settings, signing_key=kept_secret(data_dir, SIGNING_KEY_FILE))
            env.update(settings.environment("signing_key"))
        settings.stream_token_keys(project_auth=project_auth)
        # until the supervisor takes over, SIGTERM stops the start-up as Ctrl-C does (also
        # when started in the background, where SIGINT is ignored)
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)
        if not (settings.redis_url and settings.database_url):
            redis_url, database_url = services.start(
                redis=not settings.redis_url, postgres=not settings.database_url
            )
            record = write_up_record(
                data_dir,
                UpRecord(
                    pid=os.getpid(),
                    address=address,
                    redis_url=redis_url,
                    database_url=database_url,
                ),
            )
            settings = replace(
                settings,
                redis_url=settings.redis_url or redis_url,
                database_url=settings.database_url or database_url,
            )
            env.update(settings.environment("redis_url", "database_url"))
            print(f"embedded services under {services.data_dir} (kept for the next start)")
        return _up(settings, project, sock, env, processes, services)
    except KeyboardInterrupt:
        return 0  # stopped during start-up, as asked
    finally:
        if record is not None:
            remove_up_record(record)
        services.stop()
        lock.release()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _up(
    settings: Settings,
    project: Project | None,
    sock: socket.socket,
    env: dict[str, str],
    processes: int,
    services: EmbeddedServices,
) -> int:
    """Migrate, then supervise the server and worker (and the embedded services) until a
    signal; the exit status: 0, or 1 when a child failed to stop, 2 when one's settings do
    not hold."""
    import functools

    from .parent_death import signal_when_parent_dies
    from .supervisor import SupervisedChild, Supervisor

    _announce_model(settings)
    _migrate(settings, project)
    exe = [sys.executable, "-m", "server.processes.cli"]
    each = ["--processes", str(processes)]
    # the project `up` resolved (server/processes/cli.py `with_project`), or none: the children do
    # not look for a default of their own
    each += ["--config", settings.config_path or "none"]

    def launcher(
        *argv: str, pass_fds: tuple[int, ...] = ()
    ) -> Callable[[], subprocess.Popen[bytes]]:
        stop_with_up = signal_when_parent_dies(signal.SIGTERM)
        return lambda: subprocess.Popen(
            [*exe, *argv, *each],
            env=env,
            process_group=0,
            preexec_fn=stop_with_up,
            pass_fds=pass_fds,
        )

    embedded = [
        SupervisedChild(
            name,
            functools.partial(services.relaunch, name),
            stop_signal=signal.SIGINT,  # postgres's "fast" shutdown; valkey saves and exits
            stop_timeout_s=20,
            process=process,
        )
        for name, process in services.processes
    ]
    # Each child in a process group of its own: a Ctrl-C in the terminal reaches only `up`,
    # which stops them in order. The stop timeouts are a little over those of the children's
    # own `--processes N` parents.
    app = [
        SupervisedChild(
            "server",
            launcher("serve", "--fd", str(sock.fileno()), pass_fds=(sock.fileno(),)),
            stop_timeout_s=40,
        ),
        SupervisedChild(
            "worker", launcher("worker"), stop_timeout_s=settings.shutdown_grace_s + 40
        ),
    ]
    host, port = sock.getsockname()[:2]
    supervisor = Supervisor([embedded, app])
    signal.signal(signal.SIGTERM, supervisor.request_stop)
    signal.signal(signal.SIGINT, supervisor.request_stop)
    try:
        supervisor.start()
        model = (
            "the FAKE model (echoes you; set OPENAI_API_KEY)"
            if settings.model == "fake"
            else settings.model
        )
        print(f"runstream is up: open http://{host}:{port}/ in a browser to chat")
        print(f"API docs: http://{host}:{port}/schema")
        print(f"model: {model}; chat in a terminal: runstream chat --url http://{host}:{port}")
        sys.stdout.flush()
        settings_fail = supervisor.run()
    finally:
        stopped = supervisor.stop()
    return settings_fail or stopped


def evaluate(settings: Settings, path: str | None, *, as_json: bool = False) -> int:
    """`runstream eval`: the assistant's evaluation set run with the configured model (the
    rules offline); the figures printed. 2 when the set cannot be read, else 0 whatever the
    scores (docs/memory.md, "Evaluating the memory"). Needs no Redis or Postgres."""
    from pathlib import Path

    from runner.assistant.evalset import DEFAULT_SET, EvalSetError, load_evalset, score_all
    from runner.assistant.evalset import as_json as json_of
    from runner.models import make_chat_model

    try:
        evalset = load_evalset(Path(path) if path else DEFAULT_SET)
    except EvalSetError as exc:
        print(f"runstream eval: {exc}", file=sys.stderr)
        return 2
    model = make_chat_model(settings, {})
    scores = asyncio.run(score_all(model, evalset))
    print(json_of(scores) if as_json else f"model: {settings.model}\n{scores.report()}")
    return 0
