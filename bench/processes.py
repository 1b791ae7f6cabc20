"""Services, namespaces and the real runstream processes a scenario runs against.

`Services` are the Redis and Postgres the whole invocation uses (given URLs, or embedded ones
started here). A `Namespace` is one scenario's private Postgres schema and Redis key prefix,
dropped when the scenario ends. A `Cluster` starts `python -m server.cli serve` and
`python -m server.cli worker` children on a namespace and stops them all at the end.

The rule kept here: child processes get their configuration only through the environment
(as `runstream` reads it), built from the namespace; nothing of the bench's own environment
that starts with `RUNSTREAM_` or `OPENAI_` leaks into them.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from redis.asyncio import Redis

__all__ = [
    "ROOT",
    "Cluster",
    "Namespace",
    "Process",
    "ProcessError",
    "Services",
    "cpu_seconds",
    "free_port",
    "machine_cpu",
    "rss_bytes",
]

ROOT = Path(__file__).resolve().parent.parent
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ProcessError(RuntimeError):
    """A child process died or did not become ready; the message carries its output's tail."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc/PID/status (VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise ProcessError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


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
    embedded: object | None = None  # server.embedded.EmbeddedServices when we started them
    data_dir: Path | None = None

    @classmethod
    def resolve(cls, redis_url: str | None, database_url: str | None) -> Services:
        """Use the given URLs; start embedded Valkey/PostgreSQL for any that is missing."""
        if redis_url and database_url:
            return cls(redis_url, database_url)
        from server.embedded import EmbeddedServices

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

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a runstream child process on this namespace."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNSTREAM_", "OPENAI_"))}
        env.update(
            RUNSTREAM_REDIS_URL=self.services.redis_url,
            RUNSTREAM_DATABASE_URL=self.services.database_url,
            RUNSTREAM_DATABASE_SCHEMA=self.schema,
            RUNSTREAM_REDIS_PREFIX=self.prefix,
            RUNSTREAM_SIGNING_KEY=self.signing_key,
            RUNSTREAM_MODEL="fake",
            RUNSTREAM_LOG_LEVEL="info",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def redis(self) -> Redis:
        return Redis.from_url(self.services.redis_url)

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
                jobs = [
                    f"{run_id}:{d}"
                    for run_id, last in await cur.fetchall()
                    for d in range(1, last + 1)
                ]
            except psycopg.errors.UndefinedTable:
                jobs = []
            await conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        redis = self.redis()
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
            async for key in redis.scan_iter(match=f"{self.prefix}:*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    await redis.unlink(*batch)
                    batch = []
            if batch:
                await redis.unlink(*batch)
        finally:
            await redis.aclose()


class Process:
    """A runstream child with its output in a temporary file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
            prefix=f"rs-bench-{name}-", suffix=".log", delete=False
        )
        self.proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def tail(self, chars: int = 4000) -> str:
        return f"----- {self.name} (pid {self.pid}) -----\n{self.output()[-chars:]}"

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 20) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)


@dataclass
class Server:
    process: Process
    url: str
    port: int


class Cluster:
    """The servers and workers of one scenario; `stop()` ends them all."""

    def __init__(self, namespace: Namespace) -> None:
        self.namespace = namespace
        self.processes: list[Process] = []

    def _spawn(self, kind: str, argv: list[str], env: dict[str, str]) -> Process:
        process = Process(f"{kind}{len(self.processes)}", argv, self.namespace.env(**env))
        self.processes.append(process)
        return process

    async def server(self, **env: str) -> Server:
        """Start `runstream serve` on a free port and wait for /readyz."""
        return (await self.servers(1, **env))[0]

    async def servers(self, count: int, **env: str) -> list[Server]:
        started = []
        for _ in range(count):
            port = free_port()
            argv = [sys.executable, "-m", "server.cli", "serve", "--port", str(port)]
            process = self._spawn("server", argv, env)
            started.append(Server(process, f"http://127.0.0.1:{port}", port))
        await asyncio.gather(*(self._wait_ready(s) for s in started))
        return started

    async def worker(self, concurrency: int | None = None, **env: str) -> Process:
        """Start `runstream worker` and wait for "worker ready" in its output."""
        return (await self.workers(1, concurrency, **env))[0]

    async def workers(
        self, count: int, concurrency: int | None = None, **env: str
    ) -> list[Process]:
        argv = [sys.executable, "-m", "server.cli", "worker"]
        if concurrency is not None:
            argv += ["--concurrency", str(concurrency)]
        started = [self._spawn("worker", argv, env) for _ in range(count)]
        await asyncio.gather(*(self._wait_worker(p) for p in started))
        return started

    async def _wait_ready(self, server: Server, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(base_url=server.url) as http:
            while True:
                if not server.process.alive():
                    raise ProcessError(f"server exited while starting\n{server.process.tail()}")
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise ProcessError(
                        f"server not ready in {timeout_s} s\n{server.process.tail()}"
                    )
                await asyncio.sleep(0.05)

    async def _wait_worker(self, process: Process, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while "worker ready" not in process.output():
            if not process.alive():
                raise ProcessError(f"worker exited while starting\n{process.tail()}")
            if time.monotonic() > deadline:
                raise ProcessError(f"worker not ready in {timeout_s} s\n{process.tail()}")
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM every child at once, then wait for each (SIGKILL after 20 s)."""
        for process in self.processes:
            if process.alive():
                process.resume()
                process.proc.terminate()
        for process in self.processes:
            process.stop()
        self.processes.clear()

    def tails(self) -> str:
        return "\n".join(p.tail() for p in self.processes)
