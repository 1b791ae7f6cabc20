"""The client's exceptions.

RunstreamError          any error answer from the server ({"error": {"code", "message",
                        "request_id"}}); `request_id` is the one to quote in a report
├── NotFound            404: unknown, deleted or not yours
├── Conflict            409: the run or thread is not in a state that allows it
├── StreamGone          410: the run's events are no longer kept (or were reset)
├── TooManyRequests     429: a per-caller limit; `retry_after_s` says when to try again
└── Unavailable         503: the server could not reach Redis or Postgres
"""

from __future__ import annotations

import contextlib

import httpx

__all__ = [
    "Conflict",
    "NotFound",
    "RunstreamError",
    "StreamGone",
    "TooManyRequests",
    "Unavailable",
]


class RunstreamError(Exception):
    def __init__(self, status: int, code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id


class NotFound(RunstreamError):
    pass


class Conflict(RunstreamError):
    pass


class StreamGone(RunstreamError):
    pass


class TooManyRequests(RunstreamError):
    retry_after_s: float = 1.0  # the server's Retry-After


class Unavailable(RunstreamError):
    pass


_BY_STATUS: dict[int, type[RunstreamError]] = {
    404: NotFound,
    409: Conflict,
    410: StreamGone,
    429: TooManyRequests,
    503: Unavailable,
}


def raise_for_error(response: httpx.Response) -> None:
    """Raise the matching RunstreamError for an error answer (the body must be read)."""
    if response.status_code < 400:
        return
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", response.text[:200]
    kind = _BY_STATUS.get(response.status_code, RunstreamError)
    error = kind(response.status_code, code, message, response.headers.get("x-request-id"))
    if isinstance(error, TooManyRequests):
        with contextlib.suppress(ValueError):  # an HTTP date or garbage: keep the default
            error.retry_after_s = max(0.0, float(response.headers.get("retry-after", "1")))
    raise error
