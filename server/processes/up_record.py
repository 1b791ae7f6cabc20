"""Where `runstream up`'s embedded Valkey and Postgres listen, for the commands run beside it.

`up` writes `up.json` into its data folder (default `./.runstream/`) as soon as it holds the
folder's lock (`server/processes/up_folder.py`), with its pid and address, again with the embedded
services' URLs once they are up, and removes it when it stops; `runstream status` reads it for
a URL that `RUNSTREAM_REDIS_URL` or `RUNSTREAM_DATABASE_URL` does not set, and so finds the
services `up`'s own server and worker use. The URLs carry the embedded services' password
(`server/processes/embedded.py`): the record is 0600. A record whose process is gone (an `up` killed
before it could remove it) is ignored.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path

import msgspec

from stream_store.settings import Settings

__all__ = ["UpRecord", "read_up_record", "remove_up_record", "with_up_services", "write_up_record"]

_NAME = "up.json"


class UpRecord(msgspec.Struct, kw_only=True):
    pid: int  # the `runstream up` that started the services
    address: str | None = None  # where its server listens, http://host:port
    redis_url: str | None = None  # None: not embedded (up was given a URL)
    database_url: str | None = None


def _path(data_dir: str | Path) -> Path:
    return Path(data_dir) / _NAME


def write_up_record(data_dir: str | Path, record: UpRecord) -> Path:
    """Write the record whole (a reader never sees half of it); returns its path."""
    path = _path(data_dir)
    partial = path.with_suffix(".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()  # a file or a link left there: never written through
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(partial, flags, 0o600), "wb") as output:
        output.write(msgspec.json.encode(record))
    partial.replace(path)
    return path


def remove_up_record(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def read_up_record(data_dir: str | Path) -> UpRecord | None:
    """The record of the `up` running on `data_dir`, or None (no `up`, or a dead one's)."""
    try:
        record = msgspec.json.decode(_path(data_dir).read_bytes(), type=UpRecord)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):  # also unreadable to us
        return None
    return record if _alive(record.pid) else None


def with_up_services(settings: Settings) -> Settings:
    """`settings` with the URLs it lacks taken from the `up` running on its data folder."""
    if settings.redis_url and settings.database_url:
        return settings
    record = read_up_record(settings.data_dir)
    if record is None:
        return settings
    return replace(
        settings,
        redis_url=settings.redis_url or record.redis_url,
        database_url=settings.database_url or record.database_url,
    )
