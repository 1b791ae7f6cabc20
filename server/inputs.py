"""Checks on input that Litestar's body validation cannot express: ids, headers, boolean query
flags, cursors, and the bounds of `stream_store.limits` (413 `input_too_large`), some of them
set by the operator. Each is read here once, for both dialects.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar.params import Parameter

from project.configurable import ConfigurableRefused
from project.graph_catalog import GraphCatalog
from stream_store.limits import IDEMPOTENCY_KEY_MAX_CHARS, METADATA_KEY_MAX_CHARS
from stream_store.settings import Settings
from wire.events import is_event_id

from .errors import ApiError

__all__ = [
    "FlagQuery",
    "InvalidId",
    "configurable",
    "decode_cursor",
    "encode_cursor",
    "event_id",
    "flag",
    "idempotency_key",
    "last_event_id",
    "message_texts",
    "metadata",
    "object_id",
    "resume_value",
]


class InvalidId(ApiError):
    """A malformed id: 400 `invalid_id` (LangGraph's routes answer 422, as LangGraph's server,
    `server/langgraph/api.py`); `kind` says what it is the id of."""

    def __init__(self, kind: str, value: str) -> None:
        super().__init__(400, "invalid_id", f"{kind} id must be a UUID, got {value[:80]!r}")
        self.kind = kind


def object_id(value: str, kind: str) -> str:
    """A run or thread id in canonical form, or 400 for anything that is not a UUID."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidId(kind, value) from None


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


# How a route declares where the client asks to resume (both read by `last_event_id`), so that
# the API's document shows both ways.
LastEventIdHeader = Annotated[
    str | None,
    Parameter(
        header="last-event-id",
        required=False,
        description="the id of the last event received: the stream resumes after it",
    ),
]
LastEventIdQuery = Annotated[
    str | None,
    Parameter(
        query="last_event_id",
        required=False,
        description="as the Last-Event-ID header, for a client that can set no header",
    ),
]


def last_event_id(header: str | None, query: str | None) -> str | None:
    """Where the client asks to resume, as it sent it: the `Last-Event-ID` header (an
    EventSource's reconnect, the SDKs' rejoin), else the `last_event_id` query parameter (a
    browser's first attach, which can set no header); None when it sent neither. What the
    value means is the route's: `event_id` for `/v1`, `langgraph.rejoin` for LangGraph's."""
    return header if header is not None else query


# How a route declares a boolean query flag: taken as text, and read by `flag`.
FlagQuery = Annotated[
    str | None, Parameter(required=False, description="true or false (or 1 or 0)")
]

_TRUE = ("true", "1")
_FALSE = ("false", "0")


def flag(value: str | None, name: str) -> bool:
    """A boolean query parameter: `true` or `1`, `false` or `0`, in any case (what the SDKs
    send); absent is false. Anything else is refused (400 `invalid_request`, 422 on LangGraph's
    paths like its other validation errors) rather than read as false, so that a misspelt
    `wait=yes` does not quietly do the opposite of what was asked."""
    if value is None:
        return False
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ApiError(
        400, "invalid_request", f"{name} must be true or false (or 1 or 0), got {value[:40]!r}"
    )


def idempotency_key(value: str | None) -> str | None:
    if value is None:
        return None
    if not 1 <= len(value) <= IDEMPOTENCY_KEY_MAX_CHARS or not value.isprintable():
        raise ApiError(
            400,
            "invalid_idempotency_key",
            f"Idempotency-Key must be 1-{IDEMPOTENCY_KEY_MAX_CHARS} printable characters",
        )
    return value


def _too_large(what: str, size: str, limit: int, setting: str = "") -> ApiError:
    named = f" ({setting})" if setting else ""
    return ApiError(413, "input_too_large", f"{what} {size}; the limit is {limit}{named}")


def message_texts(texts: Sequence[str], settings: Settings, where: str = "input.messages") -> None:
    """413 for more messages (`texts`: their contents' text, at `where`), or a longer
    message, than the operator allows: `/v1`'s input, and any messages a LangGraph run's
    input gives."""
    if len(texts) > settings.max_run_messages:
        raise _too_large(
            where,
            f"has {len(texts)} messages",
            settings.max_run_messages,
            "RUNSTREAM_MAX_RUN_MESSAGES",
        )
    for index, text in enumerate(texts):
        if len(text) > settings.max_message_chars:
            raise _too_large(
                f"{where}[{index}].content",
                f"is {len(text)} characters",
                settings.max_message_chars,
                "RUNSTREAM_MAX_MESSAGE_CHARS",
            )


def metadata(value: Mapping[str, Any], settings: Settings) -> None:
    """413 for run or thread metadata with too many keys, a long key, or too many bytes."""
    if len(value) > settings.max_metadata_keys:
        size = f"has {len(value)} keys"
        raise _too_large(
            "metadata", size, settings.max_metadata_keys, "RUNSTREAM_MAX_METADATA_KEYS"
        )
    for key in value:
        if len(key) > METADATA_KEY_MAX_CHARS:
            raise _too_large(
                f"metadata key {key[:40]!r}...", f"is {len(key)} characters", METADATA_KEY_MAX_CHARS
            )
    _json_within(value, "metadata", settings.max_metadata_bytes, "RUNSTREAM_MAX_METADATA_BYTES")


def resume_value(value: Any, settings: Settings) -> None:
    """413 for a resume value bigger than the operator allows."""
    _json_within(value, "resume", settings.max_resume_bytes, "RUNSTREAM_MAX_RESUME_BYTES")


def _json_within(value: Any, what: str, limit: int, setting: str) -> None:
    encoded = len(msgspec.json.encode(value))
    if encoded > limit:
        raise _too_large(what, f"is {encoded} bytes as JSON", limit, setting)


def configurable(values: Mapping[str, Any], graphs: GraphCatalog, graph: str) -> None:
    """400 `invalid_request` for a `configurable` key the graph does not take (or a bad value)."""
    try:
        graphs.check_configurable(graph, values)
    except ConfigurableRefused as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None


def encode_cursor(created_at: datetime, thread_id: str) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{thread_id}".encode()).decode()


def decode_cursor(value: str) -> tuple[datetime, str]:
    try:
        stamp, thread_id = base64.urlsafe_b64decode(value.encode()).decode().split("|")
        return datetime.fromisoformat(stamp), str(uuid.UUID(thread_id))
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "invalid_cursor", "cursor is not one this server issued") from None
