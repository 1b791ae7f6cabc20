"""The services and namespaces a scenario runs against.

`Services` are the Redis and Postgres the whole invocation uses (given URLs, or embedded ones
started here). A `Namespace` is one scenario's private Postgres schema and Redis key prefix,
dropped when the scenario ends; its `config` is what the scenario's `Cluster` of server and
worker children (`bench/launcher.py`) gets as `RUNSTREAM_*` environment, and nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from redis.asyncio import Redis

from .launcher import ProcessError

if TYPE_CHECKING:
    from stream_store.connections import RedisClients

__all__ = ["Namespace", "Services", "add_service_options", "machine_cpu"]

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _env(*names: str) -> str | None:
    """The first of these environment variables that is set and not empty."""
    return next((os.environ[name] for name in names if os.environ.get(name)), None)


def add_service_options(parser: argparse.ArgumentParser) -> None:
    """`--redis-url` and `--database-url`, by default RUNSTREAM_BENCH_*, else RUNSTREAM_TEST_*;
    neither: `Services.resolve` starts embedded ones."""
    parser.add_argument(
        "--redis-url", default=_env("RUNSTREAM_BENCH_REDIS_URL", "RUNSTREAM_TEST_REDIS_URL")
    )
    parser.add_argument(
        "--database-url",
        default=_env("RUNSTREAM_BENCH_DATABASE_URL", "RUNSTREAM_TEST_DATABASE_URL"),
    )


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values[:8])
    return (total - idle) / _CLOCK_TICKS, total / _CLOCK_TICKS


@dataclass
class Services:
    """The Redis and Postgres of this invocation; `close()` stops embedded ones."""

    redis_url: str
    database_url: str
    # server.processes.embedded.EmbeddedServices when we started them
    embedded: object | None = None
    data_dir: Path | None = None

    @classmethod
    def resolve(cls, redis_url: str | None, database_url: str | None) -> Services:
        """Use the given URLs; start embedded Valkey/PostgreSQL for any that is missing."""
        if redis_url and database_url:
            return cls(redis_url, database_url)
        from server.processes.embedded import EmbeddedServices

        base = Path(tempfile.mkdtemp(prefix="rs-bench-services-"))
        os.chmod(base, 0o755)  # as root, Postgres runs as `nobody`, who must reach the folder
        embedded = EmbeddedServices(base / "data")
        started_redis, started_db = embedded.start(redis=not redis_url, postgres=not database_url)
        return cls(
            str(redis_url or started_redis),
            str(database_url or started_db),
            embedded=embedded,
            data_dir=base,
        )

    async def wait_ready(self) -> None:
        """A just-started embedded Postgres may refuse connections for a moment."""
        for _ in range(200):
            try:
                async with await psycopg.AsyncConnection.connect(self.database_url):
                    return
            except psycopg.OperationalError:
                await asyncio.sleep(0.1)
        raise ProcessError(f"Postgres at {self.database_url} does not answer")

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()  # type: ignore[attr-defined]
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)


@dataclass
class Namespace:
    """One scenario's Postgres schema and Redis key prefix (and its stream signing key)."""

    services: Services
    schema: str
    prefix: str
    signing_key: str = field(default_factory=lambda: secrets.token_hex(16))

    @classmethod
    def new(cls, services: Services, invocation: str, scenario: str) -> Namespace:
        tag = f"{invocation}_{scenario}"
        return cls(services, schema=f"bench_{tag}", prefix=f"rs-bench-{tag}")

    def config(self) -> dict[str, str]:
        """The `RUNSTREAM_*` environment of a runstream child process on this namespace."""
        return {
            "RUNSTREAM_REDIS_URL": self.services.redis_url,
            "RUNSTREAM_DATABASE_URL": self.services.database_url,
            "RUNSTREAM_DATABASE_SCHEMA": self.schema,
            "RUNSTREAM_REDIS_PREFIX": self.prefix,
            "RUNSTREAM_SIGNING_KEY": self.signing_key,
            "RUNSTREAM_MODEL": "fake",
            # one_run_throughput sends one message of THROUGHPUT_WORDS words (~129k characters),
            # over the default per-message limit (100k); the body stays under 1 MiB.
            "RUNSTREAM_MAX_MESSAGE_CHARS": "1000000",
            # The scenarios measure capacity with one caller: no per-caller limits.
            "RUNSTREAM_MAX_SUBMITS_PER_MINUTE": "0",
            "RUNSTREAM_MAX_ACTIVE_RUNS": "0",
            "RUNSTREAM_MAX_SSE_CONNECTIONS": "0",
            "RUNSTREAM_MAX_SSE_CONNECTIONS_PER_TOKEN": "0",
        }

    def redis(self) -> Redis:
        """A plain client: one Redis only (on a cluster, use `clients`)."""
        return Redis.from_url(self.services.redis_url)

    async def clients(self) -> RedisClients:
        """Redis as runstream's processes see it: on a Redis Cluster a cluster client and the
        cluster's key layout (keys.py), on one Redis a plain client and the usual names."""
        from stream_store.connections import open_redis_clients
        from stream_store.settings import Settings

        return await open_redis_clients(
            Settings(
                redis_url=self.services.redis_url,
                database_url=self.services.database_url,
                redis_prefix=self.prefix,
            )
        )

    async def drop(self) -> None:
        """Drop the schema and delete every key under the prefix, and arq's keys of its jobs."""
        from arq.constants import in_progress_key_prefix, job_key_prefix, retry_key_prefix

        async with await psycopg.AsyncConnection.connect(
            self.services.database_url, autocommit=True
        ) as conn:
            try:
                cur = await conn.execute(
                    f'SELECT run_id, dispatch FROM "{self.schema}".runstream_runs'
                )
                runs = await cur.fetchall()
            except psycopg.errors.UndefinedTable:
                runs = []
            await conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        clients = await self.clients()
        redis, keys = clients.store, clients.keys
        jobs = [keys.job_id(str(run_id), d) for run_id, last in runs for d in range(1, last + 1)]
        # on a cluster the deployment's keys start with its hash tag, `{prefix}`
        patterns = [f"{self.prefix}:*"] + ([f"{{{self.prefix}}}:*"] if clients.cluster else [])
        try:
            for start in range(0, len(jobs), 500):
                await redis.unlink(
                    *(
                        prefix + job
                        for job in jobs[start : start + 500]
                        for prefix in (job_key_prefix, in_progress_key_prefix, retry_key_prefix)
                    )
                )
            batch: list[bytes] = []
            for pattern in patterns:
                async for key in redis.scan_iter(match=pattern, count=1000):
                    batch.append(key)
                    if len(batch) >= 1000:
                        await redis.unlink(*batch)
                        batch = []
            if batch:
                await redis.unlink(*batch)
        finally:
            await clients.aclose()
