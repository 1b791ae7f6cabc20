"""The embedded services `runstream up` starts, run as root: nothing chowned through a link,
no predictable shared path, logs of ours, both services as `nobody`, and a password for both
that another local account cannot read (issue 32)."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
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

from server.embedded import EmbeddedServices

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
