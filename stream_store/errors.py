"""The exceptions of the storage layer; Redis and psycopg errors become these where they enter.

StoreError
├── StoreUnavailable     Redis or Postgres did not answer                     (503)
├── NotFound             no such run or thread for this owner                 (404)
├── Conflict             the request does not fit the current state           (409)
├── IdempotencyMismatch  an Idempotency-Key reused with a different body      (422)
├── Fenced               a newer attempt owns the run; the write was refused
├── StreamGone           the run's stream expired or was lost                 (410)
├── StreamTooLarge       the run's stream is at a bound; the worker fails the run
├── LimitReached         the caller is at one of its per-caller limits        (429)
├── QuotaExceeded        the caller keeps as much of something as it may      (413)
└── QueryTimeout         a query the caller shaped ran past its timeout       (422)

Redis errors are translated in one place, `redis_errors` (`from_redis` for an error a pipeline
returns instead of raising): the stream scripts' `FENCED`, `GONE` and `TOO_LARGE` replies become
`Fenced`, `StreamGone` and `StreamTooLarge`, any other `RedisError` `StoreUnavailable`: Redis's
`OOM` too (at `maxmemory` with `noeviction`), so a write it refused is retried, never taken as
the run's fault. Postgres errors are translated in `postgres_errors`: the ones of a server or
connection that failed become `StoreUnavailable`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import psycopg
from psycopg_pool import PoolTimeout
from redis.exceptions import RedisError, ResponseError

__all__ = [
    "Conflict",
    "Fenced",
    "IdempotencyMismatch",
    "LimitReached",
    "NotFound",
    "QueryTimeout",
    "QuotaExceeded",
    "StoreError",
    "StoreUnavailable",
    "StreamGone",
    "StreamTooLarge",
    "from_redis",
    "postgres_errors",
    "redis_errors",
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


class StreamTooLarge(StoreError):
    """The run's stream holds as many events, or bytes, as one run may (`TOO_LARGE` reply)."""

    code = "stream_too_large"

    # The bound a `TOO_LARGE <which> <limit>` reply names: its setting and unit.
    _BOUNDS = {
        "events": ("RUNSTREAM_MAX_RUN_EVENTS", "events"),
        "bytes": ("RUNSTREAM_MAX_RUN_STREAM_BYTES", "bytes of event data"),
    }

    @classmethod
    def from_reply(cls, reply: str) -> StreamTooLarge:
        _, which, limit = reply.split(maxsplit=2)  # as append_batch.lua spells it
        setting, unit = cls._BOUNDS[which]
        return cls(
            f"the run's event stream reached its bound of {limit} {unit} ({setting}); "
            "the run was stopped there, and the events before it are kept"
        )


class LimitReached(StoreError):
    """The caller is at a per-caller limit (submits per minute, active runs, SSE connections).

    `retry_after_s` (at least 1) is when to try again: exact for submits, a hint otherwise.
    """

    code = "too_many_requests"

    def __init__(self, message: str, *, code: str, retry_after_s: int) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = max(1, retry_after_s)


class QuotaExceeded(StoreError):
    """The caller keeps as much of something as it may (store items or bytes, checkpoints,
    versions): waiting does not help, deleting does (413)."""

    code = "quota_exceeded"


class QueryTimeout(StoreError):
    """Postgres cancelled a query the caller shaped at its statement timeout (422): the same
    request would take as long again."""

    code = "query_timeout"


def from_redis(exc: RedisError, run_id: str | None = None) -> StoreError:
    """What a Redis error means: fenced out, the run gone, or Redis not answering.

    `FENCED`, `GONE` and `TOO_LARGE` are the error replies of the stream scripts
    (`stream_store/scripts`).
    """
    message = str(exc)
    if isinstance(exc, ResponseError) and message.startswith("FENCED"):
        return Fenced(f"run {run_id}: {message}")
    if isinstance(exc, ResponseError) and message.startswith("GONE"):
        return StreamGone(f"run {run_id}: {message}")
    if isinstance(exc, ResponseError) and message.startswith("TOO_LARGE"):
        return StreamTooLarge.from_reply(message)
    return StoreUnavailable(f"redis: {exc}")


@contextlib.contextmanager
def redis_errors(run_id: str | None = None) -> Iterator[None]:
    """Raise ours for any `RedisError` raised inside (see `from_redis`), chained to it."""
    try:
        yield
    except RedisError as exc:
        raise from_redis(exc, run_id) from exc


@contextlib.asynccontextmanager
async def postgres_errors() -> AsyncIterator[None]:
    """Raise `StoreUnavailable` for psycopg's `OperationalError` (the server gone, the
    connection lost, a statement cancelled) or a pool timeout inside; other errors pass."""
    try:
        yield
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise StoreUnavailable(f"postgres: {exc}") from exc
