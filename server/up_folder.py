"""`runstream up`'s data folder: one `up` at a time on it, and the secrets it keeps there.

`up` takes an exclusive lock (`flock`) on `up.lock` in its data folder before it starts
anything and holds it for its life (the kernel drops it when the process ends, however it
ends): a second `up` on the same folder is refused in one line naming the running one's pid
and address (from its `up.json`, `server/up_record.py`). Nothing here follows a symbolic link.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from stream_store.settings import SettingsError

from .up_record import read_up_record

__all__ = ["DataFolderLock", "hold_data_folder", "private_folder"]

_LOCK = "up.lock"


def private_folder(path: Path) -> Path:
    """`path` made if missing (0700), and refused if it is a symbolic link or not a folder."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise SettingsError(f"{path} is not a folder (a symbolic link?): remove it")
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
