"""`runstream up`'s data folder: one `up` at a time on it, and the secrets it keeps there.

`up` takes an exclusive lock (`flock`) on `up.lock` in its data folder before it starts
anything and holds it for its life (the kernel drops it when the process ends, however it
ends): a second `up` on the same folder is refused in one line naming the running one's pid
and address (from its `up.json`, `server/processes/up_record.py`). Secrets `up` makes for itself
(the signing key of a project with `auth.path`) are kept in 0600 files beside it, created once and
read at each later start. Nothing here follows a symbolic link.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from pathlib import Path

from stream_store.settings import SettingsError

from .up_record import read_up_record

__all__ = ["DataFolderLock", "hold_data_folder", "kept_secret", "private_folder"]

_LOCK = "up.lock"
SIGNING_KEY_FILE = "signing_key"


def private_folder(path: Path) -> Path:
    """`path` made if missing (0700), and refused if it is a symbolic link or not a folder;
    ours (as root, a folder an older `up` gave to `nobody` is taken back: the folder only)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        raise SettingsError(f"{path} is not a folder (a symbolic link?): remove it") from None
    try:
        if os.geteuid() == 0 and os.fstat(fd).st_uid != 0:
            os.fchown(fd, 0, 0)
    finally:
        os.close(fd)
    return path


class DataFolderLock:
    """The open `up.lock` whose lock this process holds; `release()` at the end (or exit)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def hold_data_folder(data_dir: Path) -> DataFolderLock:
    """Lock `data_dir` for this `up`, creating it (0700) if missing.

    Raises:
        SettingsError: another `up` holds it (the line names its pid and address).
    """
    private_folder(data_dir)
    path = data_dir / _LOCK
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise SettingsError(f"cannot open {path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        record = read_up_record(data_dir)
        who = "another `runstream up`"
        if record is not None:
            who += f" (pid {record.pid}, {record.address or 'starting'})"
        raise SettingsError(
            f"{who} is running on {data_dir}: stop it first, or give this one another "
            "folder with RUNSTREAM_DATA_DIR"
        ) from None
    return DataFolderLock(fd, path)


def kept_secret(data_dir: Path, name: str, *, nbytes: int = 32) -> str:
    """The secret kept in `data_dir/name` (0600), made at the first call: random, hex."""
    path = data_dir / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "r") as existing:
            secret = existing.read().strip()
        if not secret:
            raise SettingsError(f"{path} is empty: remove it to have a new one made") from None
        return secret
    secret = secrets.token_hex(nbytes)
    with os.fdopen(fd, "w") as created:
        created.write(secret + "\n")
    return secret
