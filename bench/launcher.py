"""Real runstream processes: start `python -m server.processes.cli serve|worker` children, wait
until they are ready, signal them, stop them all.

The one launcher of the fault tests (`tests/processes.py`) and the benchmarks (`bench/`); it
lives in `bench/` because that package, like `tests/`, stays out of the wheel, mypy checks it,
and it must not import `tests/` (pytest).

The rule kept here: a child gets its configuration only through the environment, from the
`RUNSTREAM_*` values its cluster's `config` gives; nothing of this process's own environment
that starts with `RUNSTREAM_` or `OPENAI_` leaks into it. A child's output goes to a temporary
file, kept after it stops (so a failure can show what it said on the way down) until
`Cluster.close`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

import httpx

__all__ = [
    "ROOT",
    "Cluster",
    "Process",
    "ProcessError",
    "Server",
    "child_env",
    "cpu_seconds",
    "free_port",
    "listening_socket",
    "rss_bytes",
]

ROOT = Path(__file__).resolve().parent.parent
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ProcessError(RuntimeError):
    """A child process died or did not become ready; the message carries its output's tail."""


def free_port() -> int:
    """A port free now, for a child that binds it itself (Redis, PgBouncer): another process
    may take it before the child does, so such a child must be checked to be the one that
    answers there. A runstream server gets a socket instead (`listening_socket`)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening_socket(port: int = 0) -> socket.socket:
    """A listening loopback socket on `port` (0: one the kernel picks), to hand to a child
    (`runstream serve --fd`): the port is never free between being picked and being served,
    so a server can never answer another test's requests, nor its readiness check."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart on the same port
    sock.bind(("127.0.0.1", port))
    sock.listen(2048)
    return sock


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


def child_env(config: Mapping[str, str], **extra: str) -> dict[str, str]:
    """The environment of a runstream child: ours without `RUNSTREAM_*`/`OPENAI_*`, then
    info logging and unbuffered output, then `config`, then `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNSTREAM_", "OPENAI_"))}
    env.update(RUNSTREAM_LOG_LEVEL="info", PYTHONUNBUFFERED="1")
    env.update(config)
    env.update(extra)
    return env


class Process:
    """A runstream child with its output in a temporary file."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        *,
        log_prefix: str = "rs-",
        cwd: Path = ROOT,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        self.name = name
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
            prefix=f"{log_prefix}{name}-", suffix=".log", delete=False
        )
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT, pass_fds=pass_fds
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

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout_s: float = 20) -> None:
        """SIGTERM (after SIGCONT, in case it is paused); SIGKILL after `timeout_s`."""
        if self.alive():
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()

    async def terminate(self, timeout_s: float = 20) -> int:
        """SIGTERM and wait for the exit code; ProcessError if it ignores the signal."""
        self.signal(signal.SIGTERM)
        try:
            return await asyncio.to_thread(self.proc.wait, timeout_s)
        except subprocess.TimeoutExpired:
            raise ProcessError(
                f"{self.name} did not exit {timeout_s} s after SIGTERM\n{self.tail()}"
            ) from None

    def remove_log(self) -> None:
        Path(self.log.name).unlink(missing_ok=True)


class Server(NamedTuple):
    process: Process
    url: str

    @property
    def port(self) -> int:
        """Its port: pass it to `Cluster.server` to start a server in its place."""
        return int(self.url.rsplit(":", 1)[1])


class Cluster:
    """The servers and workers of one test or scenario; `stop()` ends them all.

    Args:
        config: the `RUNSTREAM_*` values of the children, called at each start.
        log_prefix: the start of the children's log file names.
        ready_timeout_s: how long a child may take to become ready.
        root: the source tree the children run (their working directory and `PYTHONPATH`);
            another checkout than this one runs that checkout's code on the same venv.
    """

    def __init__(
        self,
        config: Callable[[], Mapping[str, str]],
        *,
        log_prefix: str = "rs-",
        ready_timeout_s: float = 60,
        root: Path = ROOT,
    ) -> None:
        self.config = config
        self.root = root
        self.log_prefix = log_prefix
        self.ready_timeout_s = ready_timeout_s
        self.processes: list[Process] = []
        # a tree from before `serve --fd` (`bench --against` an older revision) binds its port
        self.serves_on_fd = '"--fd"' in (root / "server/processes/cli.py").read_text()

    def _spawn(
        self, kind: str, argv: list[str], env: dict[str, str], pass_fds: tuple[int, ...] = ()
    ) -> Process:
        name = f"{kind}{len(self.processes)}"
        if self.root != ROOT:  # `python -m` finds the package in its cwd; imports follow it
            env = {"PYTHONPATH": str(self.root), **env}
        process = Process(
            name,
            argv,
            child_env(self.config(), **env),
            log_prefix=self.log_prefix,
            cwd=self.root,
            pass_fds=pass_fds,
        )
        self.processes.append(process)
        return process

    def _spawn_server(self, port: int, processes: int, env: dict[str, str]) -> Server:
        """`runstream serve` on a socket bound here (`listening_socket`), closed here once the
        child holds it: when the child dies, nothing listens on the port."""
        argv = [sys.executable, "-m", "server.processes.cli", "serve"]
        if processes > 1:
            argv += ["--processes", str(processes)]
        if not self.serves_on_fd:
            port = port or free_port()
            process = self._spawn("server", [*argv, "--port", str(port)], env)
            return Server(process, f"http://127.0.0.1:{port}")
        with listening_socket(port) as sock:
            fd = sock.fileno()
            process = self._spawn("server", [*argv, "--fd", str(fd)], env, pass_fds=(fd,))
            return Server(process, f"http://127.0.0.1:{sock.getsockname()[1]}")

    async def server(self, port: int = 0, processes: int = 1, **env: str) -> Server:
        """A ready `runstream serve` on `port` (default one the kernel picks; pass a server's
        `.port` to start one in its place), with `--processes` when more than one."""
        server = self._spawn_server(port, processes, env)
        await self._wait_server(server)
        return server

    async def servers(self, count: int, **env: str) -> list[Server]:
        """`count` servers on ports the kernel picks, started together."""
        started = [self._spawn_server(0, 1, env) for _ in range(count)]
        await asyncio.gather(*(self._wait_server(s) for s in started))
        return started

    def worker(self, concurrency: int | None = None, **env: str) -> Process:
        """Start `runstream worker` without waiting for it."""
        argv = [sys.executable, "-m", "server.processes.cli", "worker"]
        if concurrency is not None:
            argv += ["--concurrency", str(concurrency)]
        return self._spawn("worker", argv, env)

    async def ready_worker(self, concurrency: int | None = None, **env: str) -> Process:
        """Start `runstream worker` and wait for "worker ready" in its output."""
        return (await self.workers(1, concurrency, **env))[0]

    async def workers(
        self, count: int, concurrency: int | None = None, **env: str
    ) -> list[Process]:
        """`count` ready workers, started together."""
        started = [self.worker(concurrency, **env) for _ in range(count)]
        await asyncio.gather(*(self._wait_worker(p) for p in started))
        return started

    async def _wait_server(self, server: Server) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
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
                        f"server not ready in {self.ready_timeout_s} s\n{server.process.tail()}"
                    )
                await asyncio.sleep(0.05)

    async def _wait_worker(self, process: Process) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while "worker ready" not in process.output():
            if not process.alive():
                raise ProcessError(f"worker exited while starting\n{process.tail()}")
            if time.monotonic() > deadline:
                raise ProcessError(
                    f"worker not ready in {self.ready_timeout_s} s\n{process.tail()}"
                )
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM every child at once, then wait for each (SIGKILL after 20 s); logs stay."""
        for process in self.processes:
            if process.alive():
                process.resume()
                process.proc.terminate()
        for process in self.processes:
            process.stop()

    def close(self) -> None:
        """Stop every child and remove their logs."""
        self.stop()
        for process in self.processes:
            process.remove_log()
        self.processes.clear()

    def tails(self, chars: int = 4000) -> str:
        return "\n".join(p.tail(chars) for p in self.processes)
