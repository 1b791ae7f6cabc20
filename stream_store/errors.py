"""The exceptions of the storage layer; Redis and psycopg errors become these where they enter.

StoreError
├── StoreUnavailable     Redis or Postgres did not answer                     (503)
├── NotFound             no such run or thread for this owner                 (404)
├── Conflict             the request does not fit the current state           (409)
├── IdempotencyMismatch  an Idempotency-Key reused with a different body      (422)
├── Fenced               a newer attempt owns the run; the write was refused
└── StreamGone           the run's stream expired or was lost                 (410)
"""

from __future__ import annotations

__all__ = [
    "Conflict",
    "Fenced",
    "IdempotencyMismatch",
    "NotFound",
    "StoreError",
    "StoreUnavailable",
    "StreamGone",
]


class StoreError(Exception):
    """Base of the storage errors; `code` is the machine-readable name clients see."""

    code = "store_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class StoreUnavailable(StoreError):
    """Redis or Postgres could not be reached or failed mid-operation."""

    code = "unavailable"


class NotFound(StoreError):
    """Unknown, deleted or another owner's run or thread: they look the same."""

    code = "not_found"


class Conflict(StoreError):
    """The run or thread is in a state that does not allow the request."""

    code = "conflict"


class IdempotencyMismatch(StoreError):
    """The Idempotency-Key was already used by this caller for a different request."""

    code = "idempotency_key_reused"


class Fenced(StoreError):
    """The writer's attempt is no longer the run's current attempt."""

    code = "fenced"


class StreamGone(StoreError):
    """The run's event stream no longer exists."""

    code = "stream_gone"
