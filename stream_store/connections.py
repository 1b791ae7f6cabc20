"""Opening the two services a process talks to, the same way in servers and workers."""

from __future__ import annotations

import contextvars
import select
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol, TypeAlias
from urllib.parse import urlsplit

from arq.connections import ArqRedis
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import Connection
from redis.commands.core import AsyncScript
from redis.connection import HiredisRespSerializer
from redis.exceptions import NoScriptError
from redis.utils import HIREDIS_AVAILABLE

from .errors import redis_errors
from .keys import KeySpace
from .settings import Settings, SettingsError

__all__ = [
    "ConnectionSource",
    "NestedCheckout",
    "PgPool",
    "RedisClients",
    "SchemaNotOnSearchPath",
    "check_search_path",
    "connect_pg",
    "open_pg_pool",
    "open_redis",
    "open_redis_clients",
    "pipelined_script",
    "register_script",
    "session_pool",
]

# The pools whose connection the current task (or the task that spawned it) holds.
_held: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "runstream_pools_held", default=frozenset()
)


class SchemaNotOnSearchPath(RuntimeError):
    """Through a transaction pooler, the configured schema is not the connections' default."""


class NestedCheckout(RuntimeError):
    """A task asked its pool for a second connection while holding one."""


class ConnectionSource(Protocol):
    """Where the records classes get their connections: a `PgPool`, or one caller's turn on
    the pool for the queries callers shape (`caller_queries.CallerQueries.for_caller`)."""

    def connection(self) -> AbstractAsyncContextManager[AsyncConnection[DictRow]]: ...


# A pooled connection idle this long is checked with a round trip before it is lent again.
CHECK_IDLE_AFTER_S = 5.0


class PgPool(AsyncConnectionPool[AsyncConnection[DictRow]]):
    """A connection pool that refuses to hand one task two connections at once, and checks a
    connection before lending it only when it may have died.

    A request that holds a connection (and perhaps row locks) while it waits for a second one
    deadlocks as soon as as many such requests run at once as the pool has connections; it
    passes every test that runs one request at a time. Refusing the second checkout makes the
    mistake fail on its first run instead: pass the held connection down instead.

    psycopg_pool's `check_connection` is an empty query, a round trip per checkout, and there
    are several checkouts between a submit and its first token. `check_if_doubtful` sends it
    only for a connection that may be dead: one never lent before, one idle for
    `CHECK_IDLE_AFTER_S`, or one the server has written to while it sat idle (a server that
    closes a connection, or a proxy that drops it, leaves the socket readable). A connection
    that dies unseen in the moment before it is used fails its statement, which
    `stream_store.errors.postgres_errors` turns into a 503, and the pool replaces it on its
    return.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._returned_at: weakref.WeakKeyDictionary[AsyncConnection[DictRow], float] = (
            weakref.WeakKeyDictionary()
        )
        super().__init__(*args, check=self.check_if_doubtful, **kwargs)

    async def check_if_doubtful(self, conn: AsyncConnection[DictRow]) -> None:
        returned_at = self._returned_at.get(conn)
        if (
            returned_at is None
            or time.monotonic() - returned_at > CHECK_IDLE_AFTER_S
            or _has_input(conn)
        ):
            await self.check_connection(conn)

    @asynccontextmanager
    async def connection(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (psycopg_pool's signature)
    ) -> AsyncIterator[AsyncConnection[DictRow]]:
        held = _held.get()
        if id(self) in held:
            raise NestedCheckout(
                f"pool {self.name}: this task already holds a connection; pass it down"
            )
        _held.set(held | {id(self)})
        try:
            async with super().connection(timeout) as conn:
                try:
                    yield conn
                finally:
                    self._returned_at[conn] = time.monotonic()
        finally:
            _held.set(held)


def _has_input(conn: AsyncConnection[Any]) -> bool:
    """Whether an idle connection's socket is readable, closed or in error: the server (or a
    proxy) said something unasked, which on an idle connection means it is going away."""
    if conn.closed:
        return True
    poller = select.poll()  # not select.select: a server's descriptors pass 1024
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))


# The client for run streams, records and caller quotas: a plain one on one Redis, a cluster
# client (which routes each key to its node) on a Redis Cluster.
StoreRedis: TypeAlias = Redis | RedisCluster

_CLIENT_OPTIONS: dict[str, Any] = {"health_check_interval": 30, "socket_keepalive": True}


class HiredisPackedConnection(Connection):
    """redis-py's asyncio connection, its commands packed by hiredis (C) with the serializer
    redis-py's sync client uses: the asyncio client (5.3) packs them in Python, which was a
    fifth of the CPU of a worker's token append (issue 36)."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        return self._packer.pack(*args)


def open_redis(settings: Settings) -> ArqRedis:
    """An ArqRedis (a redis-py client that can also enqueue jobs) on the configured URL. A
    `rediss://` or `unix://` URL names its own connection class, which redis-py keeps."""
    url, _ = settings.require_services()
    packed_by = HiredisPackedConnection if HIREDIS_AVAILABLE else Connection  # a dependency
    return ArqRedis.from_url(url, connection_class=packed_by, **_CLIENT_OPTIONS)


class RedisClients:
    """The Redis clients of one process, and the key layout that goes with them.

    On one Redis `store` and `queue` are the same client. On a Redis Cluster `store` routes
    each key to its node, and `queue` talks to the node that owns the deployment's slot (the
    arq queue, its jobs, the workers' beats): arq runs MULTI/WATCH there, which a cluster client
    does not. A reshard that moves that slot makes `queue` fail with MOVED until the process
    restarts (docs/scaling.md).
    """

    def __init__(self, store: StoreRedis, queue: ArqRedis, keys: KeySpace, queue_url: str) -> None:
        self.store = store
        self.queue = queue
        self.keys = keys
        self.queue_url = queue_url  # the queue node's: pub/sub, the workers' presence connections

    @property
    def cluster(self) -> bool:
        return isinstance(self.store, RedisCluster)

    def node_url(self, key: str) -> str:
        """The URL of the node that owns `key` (the configured URL on one Redis)."""
        if not isinstance(self.store, RedisCluster):
            return self.queue_url
        node = self.store.get_node_from_key(key)
        return _with_host(self.queue_url, node.host, int(node.port))

    async def aclose(self) -> None:
        await self.queue.aclose()
        if self.store is not self.queue:
            await self.store.aclose()


async def open_redis_clients(settings: Settings) -> RedisClients:
    """Connect to the configured Redis, as a cluster when it is a node of a Redis Cluster
    (`INFO cluster`), so one `RUNSTREAM_REDIS_URL` serves both."""
    url, _ = settings.require_services()
    single = open_redis(settings)
    try:
        with redis_errors():
            info = await single.info("cluster")
    except BaseException:
        await single.aclose()
        raise
    if not info.get("cluster_enabled"):
        return RedisClients(single, single, KeySpace(settings.redis_prefix), url)
    await single.aclose()
    keys = KeySpace(settings.redis_prefix, shards=settings.redis_cluster_shards)
    store = RedisCluster.from_url(url, **_CLIENT_OPTIONS)
    try:
        with redis_errors():
            await store.initialize()
        node = store.get_node_from_key(keys.queue())
    except BaseException:
        await store.aclose()
        raise
    queue_url = _with_host(url, node.host, int(node.port))
    return RedisClients(store, ArqRedis.from_url(queue_url, **_CLIENT_OPTIONS), keys, queue_url)


def register_script(redis: StoreRedis, source: str) -> AsyncScript:
    """redis-py's script object, on a cluster client too (typed for a plain one only): EVALSHA
    goes to the node of the script's keys, SCRIPT LOAD to every primary."""
    return AsyncScript(redis, source)  # type: ignore[arg-type]


async def pipelined_script(
    redis: StoreRedis, script: AsyncScript, calls: Sequence[tuple[list[str], list[Any]]]
) -> list[Any]:
    """One EVALSHA of `script` per call (keys, args), in one pipeline: one round trip for all
    of them (on a cluster, one per node); errors are returned in place, not raised.

    Called through `Script` with a pipeline, redis-py would first ask `SCRIPT EXISTS` for the
    script, a second round trip each time (and a cluster pipeline would not load it at all).
    Here the script is loaded only when Redis says it lacks it (restarted, or `SCRIPT FLUSH`):
    a NOSCRIPT reply means nothing ran.
    """
    results: list[Any] = [NoScriptError()] * len(calls)
    for retry in (False, True):
        missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if not missing:
            break
        if retry:
            await redis.script_load(script.script)
        async with redis.pipeline(transaction=False) as pipe:
            for i in missing:
                keys, args = calls[i]
                # A cluster pipeline refuses `pipe.evalsha` (the method), not the command:
                # it routes EVALSHA by its keys, which share a slot in every runstream script.
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            replies = await pipe.execute(raise_on_error=False)
        for i, reply in zip(missing, replies, strict=True):
            results[i] = reply
    return results


def _with_host(url: str, host: str, port: int) -> str:
    """`url` (its scheme, credentials and options) pointed at another node."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@{host}:{port}" if credentials else f"{host}:{port}"
    return parts._replace(netloc=netloc).geturl()


def _session_options(settings: Settings) -> str:
    """The session settings runstream's connections start with (none through a transaction
    pooler: it refuses them, and would not keep them across transactions)."""
    return (
        f"-c search_path={settings.database_schema}"
        # A paused or partitioned process must not hold row locks (the checkpoint fence's
        # FOR SHARE) past its lease: Postgres ends such sessions on its own. Through
        # PgBouncer, its `idle_transaction_timeout` does this (docs/scaling.md).
        f" -c idle_in_transaction_session_timeout={max(1000, int(settings.lease_s * 1000))}"
    )


async def connect_pg(settings: Settings) -> AsyncConnection[DictRow]:
    """One connection, as the pool's are, for a short-lived command (`runstream status`).

    No pool: a command that reports Postgres down must fail at once, not retry for 10 s.
    """
    _, url = settings.require_services()
    if settings.database_pool_mode == "transaction":
        return await AsyncConnection.connect(
            url, autocommit=True, row_factory=dict_row, prepare_threshold=None
        )
    return await AsyncConnection.connect(
        url,
        autocommit=True,
        row_factory=dict_row,
        options=f"-c search_path={settings.database_schema}",
    )


# Runs of one statement on a connection before it is prepared there (psycopg's default): a
# statement run once or twice, a migration's or a rare search's, is not kept on the server.
PREPARE_AFTER = 5


async def open_pg_pool(settings: Settings, max_size: int = 10, *, direct: bool = False) -> PgPool:
    """A psycopg pool in autocommit with dict rows, on the configured schema.

    These are the connection settings the LangGraph Postgres checkpointer requires; our own
    queries open explicit transactions where they need one. On a session of its own a
    connection prepares a statement it has run `PREPARE_AFTER` times (psycopg's default), as
    LangGraph's own saver does from its first: planning is most of a short statement's time
    in Postgres (0.5-1 ms of the worker's claim, issue 36). Through a transaction pooler no
    statement is prepared (`prepare_threshold=None`): the next transaction may be on another
    server connection, which lacks it (PgBouncer before 1.21). `direct` opens the pool on
    `direct_database_url` instead, bypassing such a pooler.
    """
    url = settings.direct_database_url if direct else settings.require_services()[1]
    if url is None:
        raise SettingsError("set RUNSTREAM_DIRECT_DATABASE_URL: migrations need a session")
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "prepare_threshold": None,
        "row_factory": dict_row,
    }
    if direct or settings.database_pool_mode == "session":
        kwargs["options"] = _session_options(settings)
        kwargs["prepare_threshold"] = PREPARE_AFTER
    pool = PgPool(
        url,
        connection_class=AsyncConnection[DictRow],
        min_size=1,
        max_size=max_size,
        open=False,
        timeout=10,
        # psycopg_pool retries a lost connection with a doubling delay and no cap, so after a
        # 30 s outage its next try can be 30 s away. Giving up a slot after 8 s (tries at
        # 0, 1, 3, 7 s) frees it, and the next request opens a fresh one at once.
        reconnect_timeout=8,
        kwargs=kwargs,
    )
    await pool.open(wait=True, timeout=10)
    return pool


@asynccontextmanager
async def session_pool(settings: Settings, pool: PgPool) -> AsyncIterator[PgPool]:
    """A pool whose connections keep session state, for migrations (a session-level advisory
    lock, `CREATE INDEX CONCURRENTLY`): `pool` itself, or a direct one when `pool` goes
    through a transaction pooler."""
    if settings.database_pool_mode == "session":
        yield pool
        return
    direct = await open_pg_pool(settings, max_size=1, direct=True)
    try:
        yield direct
    finally:
        await direct.close()


async def table_missing(conn: AsyncConnection[DictRow], table: str) -> bool:
    """`table` is not on `conn`'s search path (a schema's first start-up)."""
    cur = await conn.execute("SELECT to_regclass(%s) IS NULL AS missing", (table,))
    row = await cur.fetchone()
    return row is not None and bool(row["missing"])


def plain_index_builds(statement: str) -> str:
    """`statement` with its index builds made plain, for tables that are new and empty: a
    `CONCURRENTLY` build waits for every transaction running in the database at its start, in
    any schema, so one long transaction elsewhere held a first start-up for as long as it ran."""
    return statement.replace("CREATE INDEX CONCURRENTLY", "CREATE INDEX")


async def check_search_path(settings: Settings, pool: PgPool) -> None:
    """Through a transaction pooler runstream sets no search_path, so the schema must be the
    connections' own default; say so at start-up rather than fail on a missing table later."""
    if settings.database_pool_mode == "session":
        return
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT current_schemas(false) AS path")
        row = await cur.fetchone()
    path = row["path"] if row is not None else []
    if not path or path[0] != settings.database_schema:
        raise SchemaNotOnSearchPath(
            f"through a transaction pooler the schema {settings.database_schema!r} must come"
            f" first in the role's search_path (now {path}): ALTER ROLE ... SET search_path"
        )
