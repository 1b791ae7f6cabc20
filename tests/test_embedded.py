"""The embedded services `runstream up` starts, run as root: nothing chowned through a link,
no predictable shared path, logs of ours, both services as `nobody`, and a password for both
that another local account cannot read (issue 32)."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
from redis import Redis

from server.processes import embedded
from server.processes.embedded import EmbeddedServices

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="as root only: the services then run as nobody (CI runs as root)"
)

NOBODY = pwd.getpwnam("nobody").pw_uid


def _base(mode: int) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="rs-embedded-"))
    os.chmod(base, mode)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def base() -> Iterator[Path]:
    yield from _base(0o755)  # nobody reaches the data folder's parent


@pytest.fixture
def closed_base() -> Iterator[Path]:
    yield from _base(0o700)  # as a 0700 home: nobody cannot reach the data folder


def start_and_stop(data_dir: Path, *, redis: bool = True) -> EmbeddedServices:
    services = EmbeddedServices(data_dir)
    try:
        services.start(redis=redis)
        return services
    finally:
        services.stop()


def uid_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}").st_uid


def test_links_planted_in_the_data_folder_are_never_followed(base: Path) -> None:
    victim = base / "root-only"
    victim.write_text("secret")
    victim.chmod(0o600)
    data_dir = base / "rs"
    data_dir.mkdir()
    (data_dir / "planted").symlink_to(victim)
    start_and_stop(data_dir)
    # nobody's folders: a link planted there at run time, before the next start
    for folder in ("postgres", "run", "valkey", "valkey/appendonlydir"):
        (data_dir / folder / "planted").symlink_to(victim)
    (data_dir / "valkey" / "hard").hardlink_to(victim)  # root's, two links: left alone
    start_and_stop(data_dir)
    found = victim.stat()
    assert (found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)) == (0, 0, 0o600)


def test_both_run_as_nobody_and_their_logs_are_ours(base: Path) -> None:
    data_dir = base / "rs"
    services = EmbeddedServices(data_dir)
    try:
        services.start()
        pids = {name: process.pid for name, process in services.processes}
        assert uid_of(pids["valkey"]) == NOBODY and uid_of(pids["postgres"]) == NOBODY
        for name in ("valkey", "postgres"):
            log = (data_dir / "logs" / f"{name}.log").lstat()
            assert (log.st_uid, stat.S_IMODE(log.st_mode)) == (0, 0o600)
        logs = (data_dir / "logs").lstat()
        assert (logs.st_uid, stat.S_IMODE(logs.st_mode)) == (0, 0o700)
        top = data_dir.lstat()
        assert (top.st_uid, stat.S_IMODE(top.st_mode)) == (0, 0o711)
    finally:
        services.stop()


def test_postgres_files_are_not_at_a_predictable_shared_path(closed_base: Path) -> None:
    data_dir = closed_base / "rs"
    # what the old code used: a path anyone could compute and make first
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    predictable = Path(tempfile.gettempdir()) / f"runstream-pg-{digest}"
    trap = closed_base / "trap"
    trap.mkdir(mode=0o700)
    predictable.symlink_to(trap)
    homes = []
    try:
        for _ in range(2):
            services = start_and_stop(data_dir, redis=False)
            homes.append(services.home)
            assert services.home != predictable and services.home.parent == predictable.parent
            found = services.home.lstat()
            assert stat.S_ISDIR(found.st_mode) and found.st_uid == 0
            assert stat.S_IMODE(found.st_mode) == 0o711
            assert (services.home / "postgres" / "PG_VERSION").exists()
        assert homes[0] == homes[1]  # found again: the threads are kept
        assert list(trap.iterdir()) == [] and trap.stat().st_uid == 0
    finally:
        predictable.unlink()
        for home in set(homes):
            shutil.rmtree(home, ignore_errors=True)


def test_a_postgres_home_no_longer_ours_is_not_used_again(closed_base: Path) -> None:
    data_dir = closed_base / "rs"
    first = start_and_stop(data_dir, redis=False).home
    second = None
    try:
        shutil.rmtree(first)  # e.g. $TMPDIR cleaned; then another account takes the name
        first.mkdir()
        os.chown(first, NOBODY, -1)
        second = start_and_stop(data_dir, redis=False).home
        assert second != first
        assert list(first.iterdir()) == []
    finally:
        for home in (first, second):
            if home is not None:
                shutil.rmtree(home, ignore_errors=True)


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"{parts.username or ''}@{parts.hostname}:{parts.port}").geturl()


def test_both_services_take_a_password_kept_in_the_data_folder(base: Path) -> None:
    data_dir = base / "rs"
    services = EmbeddedServices(data_dir)
    try:
        redis_url, database_url = services.start()
        assert redis_url and database_url
        secret = (data_dir / "services-secret").read_text().strip()
        found = (data_dir / "services-secret").lstat()
        assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (0, 0o600) and len(secret) == 64
        assert f":{secret}@" in redis_url and f":{secret}@" in database_url
        assert Redis.from_url(redis_url).ping()
        psycopg.connect(database_url).close()
        with pytest.raises(redis.AuthenticationError):
            Redis.from_url(_without_password(redis_url)).ping()
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(_without_password(database_url)).close()
        for _, process in services.processes:  # not on a command line `ps` shows everyone
            assert secret.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes()
        if shutil.which("runuser"):  # another local account: no secret to read, no way in
            another = subprocess.run(
                ["runuser", "-u", "nobody", "--", "cat", str(data_dir / "services-secret")],
                capture_output=True,
            )
            assert another.returncode != 0 and secret.encode() not in another.stdout
    finally:
        services.stop()
    again = EmbeddedServices(data_dir)  # the next start: the same secret, the old data
    try:
        redis_url, database_url = again.start()
        assert f":{secret}@" in str(redis_url) and f":{secret}@" in str(database_url)
    finally:
        again.stop()


def test_a_port_another_process_takes_first_is_never_joined(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each service's port is picked free and bound by the service: when another process
    listens there first, the service is started again on another port, not taken to be the
    process answering there."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks = iter([port, 0, port])  # each service's first pick (0: a free one)
        free_port = embedded._free_port
        monkeypatch.setattr(embedded, "_free_port", lambda: next(picks, 0) or free_port())
        services = EmbeddedServices(base / "rs")
        try:
            redis_url, database_url = services.start()
            assert redis_url and database_url
            assert urlsplit(redis_url).port not in (None, port)
            assert urlsplit(database_url).port not in (None, port)
            assert Redis.from_url(redis_url).ping()
            psycopg.connect(database_url).close()
            assert [name for name, _ in services.processes] == ["valkey", "postgres"]
            assert all(process.poll() is None for _, process in services.processes)
        finally:
            services.stop()
        assert next(picks, None) is None  # each service was offered the taken port first


# Run as another local account with the system Python and its standard library only (the
# virtual environment may sit under a 0700 home): one line of JSON per attempt to get in.
_PROBE = r"""
import errno, json, socket, struct, sys

valkey_port, postgres_port, postgres_socket = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def valkey(*commands):
    answers = []
    with socket.create_connection(("127.0.0.1", valkey_port), timeout=5) as sock:
        reader = sock.makefile("rb")
        for words in commands:
            encoded = b"".join(b"$%d\r\n%s\r\n" % (len(w), w.encode()) for w in words)
            sock.sendall(b"*%d\r\n" % len(words) + encoded)
            answers.append(reader.readline().decode().strip())
    return answers

def postgres(sock):
    # a protocol-3 StartupMessage, no password: what the server answers, until it asks for
    # one, refuses, or is ready for queries
    body = struct.pack("!i", 196608) + b"user\0runstream\0database\0postgres\0\0"
    sock.sendall(struct.pack("!i", len(body) + 4) + body)
    reader, seen = sock.makefile("rb"), []
    while True:
        head = reader.read(5)
        if len(head) < 5:
            return seen + ["closed"]
        kind, size = head[:1].decode(), struct.unpack("!i", head[1:])[0]
        payload = reader.read(size - 4)
        if kind == "R":
            code = struct.unpack("!i", payload[:4])[0]
            seen.append("R%d" % code)
            if code != 0:
                return seen
        elif kind == "E":
            fields = dict((f[:1].decode(), f[1:].decode()) for f in payload.split(b"\0") if f)
            return seen + ["E" + fields.get("C", "")]
        else:
            seen.append(kind)
            if kind == "Z":
                return seen

def postgres_tcp():
    with socket.create_connection(("127.0.0.1", postgres_port), timeout=5) as sock:
        return postgres(sock)

def postgres_unix():
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(postgres_socket)
            return postgres(sock)
    except OSError as exc:
        return ["OSError " + errno.errorcode.get(exc.errno, str(exc.errno))]

print(json.dumps({
    "valkey": valkey(["PING"], ["AUTH", "not-the-secret"], ["GET", "x"]),
    "postgres_tcp": postgres_tcp(),
    "postgres_unix": postgres_unix(),
}))
"""
SYSTEM_PYTHON = "/usr/bin/python3"
ANOTHER_UID = 65533  # not root, not `nobody` (the services' own user, who may use the socket)


def _probe(argv_prefix: list[str], *args: str) -> dict[str, list[str]]:
    found = subprocess.run(
        [*argv_prefix, SYSTEM_PYTHON, "-I", "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )
    assert found.returncode == 0, found.stderr
    answers: dict[str, list[str]] = json.loads(found.stdout)
    return answers


def _got_in(seen: list[str]) -> bool:
    return "R0" in seen and seen[-1] == "Z"  # AuthenticationOk, then ReadyForQuery


@pytest.mark.skipif(
    not os.access(SYSTEM_PYTHON, os.X_OK)
    or not (shutil.which("setpriv") or shutil.which("runuser")),
    reason=f"needs {SYSTEM_PYTHON} and setpriv or runuser to act as another local account",
)
def test_another_local_account_cannot_connect_to_either_service(base: Path) -> None:
    data_dir = base / "rs"
    services = EmbeddedServices(data_dir)
    try:
        redis_url, database_url = services.start()
        valkey_port, postgres_port = urlsplit(str(redis_url)).port, urlsplit(str(database_url)).port
        socket_path = services.home / "run" / f".s.PGSQL.{postgres_port}"
        args = (str(valkey_port), str(postgres_port), str(socket_path))
        if shutil.which("setpriv"):
            uid = ANOTHER_UID
            account = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
        else:  # runuser needs a name: `nobody`, the services' own user, who may use the socket
            uid = NOBODY
            account = ["runuser", "-u", "nobody", "--"]

        # the probe itself, as root: it does get in through the socket, where the services'
        # user and root need no password (so a refusal below is the services', not the probe's)
        assert _got_in(_probe([], *args)["postgres_unix"])

        found = _probe(account, *args)
        ping, wrong_auth, get = found["valkey"]
        assert ping.startswith("-NOAUTH"), found
        assert wrong_auth.startswith(("-WRONGPASS", "-ERR")), found
        assert get.startswith("-NOAUTH"), found  # a wrong password did not let it in either
        # over TCP: asked for the password (SASL, 10, or MD5, 5) or refused, never let in
        tcp = found["postgres_tcp"]
        assert not _got_in(tcp) and tcp[0] in ("R10", "R5", "E28P01", "E28000"), found
        if uid != services.uid:  # the socket's 0700 folder: not even reached
            assert found["postgres_unix"] == ["OSError EACCES"], found
    finally:
        services.stop()
