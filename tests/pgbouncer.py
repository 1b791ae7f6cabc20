"""A private PgBouncer in transaction mode in front of the tests' Postgres.

`RUNSTREAM_TEST_PGBOUNCER=1` runs the tests through it (`./scripts/test` does so for the core
tests): each test then gets a database of its own, reached through the pooler, and runstream
is configured as a deployment behind PgBouncer is (`RUNSTREAM_DATABASE_POOL_MODE=transaction`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from bench.launcher import free_port

__all__ = ["PgBouncer"]

_CONFIG = """\
[databases]
* = host={host} port={port} user={user}{password}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 8
server_idle_timeout = 10
; a transaction left open past a lease is ended, as idle_in_transaction_session_timeout
; does on a direct connection (docs/scaling.md)
idle_transaction_timeout = 5
logfile = {log}
pidfile =
"""


class PgBouncer:
    """One pgbouncer process, for the whole test session; `url(db)` reaches `db` through it."""

    def __init__(self, database_url: str) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.path.exists(binary):
            raise RuntimeError(
                "pgbouncer is not installed: apt-get install pgbouncer (./scripts/test does)"
            )
        self._dir = Path(tempfile.mkdtemp(prefix="rs-test-pgbouncer-"))
        os.chmod(self._dir, 0o755)  # as root it runs as postgres, who must read its config
        # pgbouncer binds its port itself: a port picked free may be taken by another test
        # process first, so a start counts only when its own log says it listens there
        for _ in range(5):
            self.port = free_port()
            self._process = self._spawn(binary, urlsplit(database_url))
            if self._listening():
                return
        raise RuntimeError("pgbouncer found no free port in five tries")

    def _spawn(self, binary: str, target: SplitResult) -> subprocess.Popen[bytes]:
        config = self._dir / "pgbouncer.ini"
        config.write_text(
            _CONFIG.format(
                host=target.hostname or "127.0.0.1",
                port=target.port or 5432,
                user=target.username or "postgres",
                # the embedded PostgreSQL's password (server/processes/embedded.py), when it has one
                password=f" password={target.password}" if target.password else "",
                listen=self.port,
                log=self._log,
            )
        )
        os.chmod(config, 0o600)  # it may hold the embedded PostgreSQL's password
        command = [binary, str(config)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "postgres"]  # pgbouncer refuses to run as root
            os.chown(config, pwd.getpwnam("postgres").pw_uid, -1)
            os.chmod(self._dir, 0o777)  # ... and writes its log here as postgres
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    @property
    def _log(self) -> Path:
        return self._dir / "pgbouncer.log"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _listening(self) -> bool:
        """Whether it listens on `self.port`, as its log says; False when another process
        holds the port (it exited: "Address already in use")."""
        deadline = time.monotonic() + 10
        listening = f"listening on 127.0.0.1:{self.port}"
        while time.monotonic() < deadline:
            log = self._log.read_text() if self._log.exists() else ""
            if listening in log:
                return True
            if self._process.poll() is not None:
                if "Address already in use" in log:
                    self._log.unlink()
                    return False
                raise RuntimeError(f"pgbouncer exited: {log}")
            time.sleep(0.05)
        raise RuntimeError("pgbouncer did not start listening in 10 s")
