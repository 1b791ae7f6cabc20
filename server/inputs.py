"""Checks on input that Litestar's body validation cannot express: ids, headers, cursors."""

from __future__ import annotations

import base64
import uuid
from datetime import datetime

from stream_store.events import is_event_id

from .errors import ApiError

__all__ = ["decode_cursor", "encode_cursor", "event_id", "idempotency_key", "object_id"]


def object_id(value: str, kind: str) -> str:
    """A run or thread id in canonical form, or 400 for anything that is not a UUID."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ApiError(400, "invalid_id", f"{kind} id must be a UUID, got {value[:80]!r}") from None


def event_id(value: str | None) -> str:
    """The position to resume after ("0-0": from the start), or 400 for a malformed one."""
    if value is None or value == "":
        return "0-0"
    value = value.strip()
    if not is_event_id(value):
        raise ApiError(
            400,
            "invalid_last_event_id",
            f"Last-Event-ID must look like '1700000000000-0', got {value[:80]!r}",
        )
    return value


def idempotency_key(value: str | None) -> str | None:
    if value is None:
        return None
    if not 1 <= len(value) <= 255 or not value.isprintable():
        raise ApiError(
            400, "invalid_idempotency_key", "Idempotency-Key must be 1-255 printable characters"
        )
    return value


def encode_cursor(created_at: datetime, thread_id: str) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{thread_id}".encode()).decode()


def decode_cursor(value: str) -> tuple[datetime, str]:
    try:
        stamp, thread_id = base64.urlsafe_b64decode(value.encode()).decode().split("|")
        return datetime.fromisoformat(stamp), str(uuid.UUID(thread_id))
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "invalid_cursor", "cursor is not one this server issued") from None
