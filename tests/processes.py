"""Real runstream processes (and a private Redis) for fault-injection tests.

Servers and workers are started by the launcher the benchmarks use (`bench/launcher.py`); this
module adds what only tests need: a cluster configured from a test's `Settings`, a private
redis-server, and a TCP proxy that can cut connections.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile

from bench import launcher, redis_server
from bench.launcher import ROOT
from stream_store.settings import Settings

__all__ = ["ROOT", "Cluster", "PrivateRedis", "TcpProxy"]


def _config(settings: Settings) -> dict[str, str]:
    """The `RUNSTREAM_*` environment that gives a child process `settings`."""
    return settings.environment(
        "redis_url",
        "database_url",
        "database_schema",
        "database_pool_mode",
        "direct_database_url",
        "redis_prefix",
        "signing_key",
        "graphs",
        "fake_token_delay_ms",
        "lease_s",
        "reaper_interval_s",
        "max_attempts",
        "poll_delay_s",
        "shutdown_grace_s",
    )


class Cluster(launcher.Cluster):
    """Servers and workers of one test, configured from `settings` (a test may replace it
    before starting more); everything is stopped at teardown."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(lambda: _config(self.settings), log_prefix="rs-", ready_timeout_s=60)
        self.settings = settings

    async def standby_worker(self, **env: str) -> launcher.Process:
        """A ready worker, paused (SIGSTOP) so that it takes no run until `.resume()`.

        For a take-over: started before the run and resumed before the first worker dies, it
        takes the run over at once, where one started mid-run could take longer to start than
        the run lasts on a loaded machine (a paused worker reads no queue; its connections stay).
        """
        worker = await self.ready_worker(**env)
        worker.pause()
        return worker

    def dump(self) -> str:
        return self.tails(6000)


class PrivateRedis:
    """A redis-server of the test's own, so FLUSHALL and restarts touch nothing else; checked
    at each start to be what answers on its port (bench/redis_server.py)."""

    def __init__(self) -> None:
        self.port = 0  # picked at the first start; a restart keeps it (clients hold the URL)
        self.dir = tempfile.mkdtemp(prefix="rs-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if not self.port:
            self.proc, self.port = redis_server.start_redis(self._command)
            return
        self.proc = subprocess.Popen(
            self._command(self.port), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        assert redis_server.answers_as(self.proc, self.port), (
            f"port {self.port} was taken while the private Redis was down"
        )

    def _command(self, port: int) -> list[str]:
        return [
            redis_server.server_binary(),
            *("--port", str(port), "--bind", "127.0.0.1"),
            *("--save", "", "--appendonly", "no", "--dir", self.dir),
        ]

    def stop(self) -> None:
        if self.proc is not None:
            redis_server.stop(self.proc)


class TcpProxy:
    """A loopback TCP proxy that can cut every connection and refuse new ones (an outage)."""

    def __init__(self, target_host: str, target_port: int, cut_every_bytes: int = 0) -> None:
        self.target = (target_host, target_port)
        self.cut_every_bytes = cut_every_bytes  # > 0: drop each connection after that many
        self.cuts = 0
        self.connections = 0  # connections accepted while up
        self.port = 0  # the kernel picks it at the first start; a restart takes it again
        self.up = True
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.close()
            return
        self.connections += 1
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
