"""Every error the API answers, as `{"error": {"code", "message", "request_id"}}`, mapped in
one place.

ApiError          bad input found by the server itself (400, 401, 413 ...)
StoreError        from stream_store: 404, 409, 410, 422, 429 (with Retry-After), 503
Unauthorized      401
HTTPException     Litestar's own (validation 400, unknown route 404, 405, 413)
anything else     500, logged with its traceback, never shown to the client

The rule kept here: a 4xx message describes the caller's request, in words written for the
caller; a 5xx message is one of two fixed sentences (`internal`, `unavailable`), never the text
of an exception (a driver's message names hosts, ports and timeouts). What happened goes to the
log, with the `request_id` the body and the `X-Request-ID` header carry (`request_ids.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from stream_store.errors import (
    Conflict,
    IdempotencyMismatch,
    LimitReached,
    NotFound,
    QueryTimeout,
    QuotaExceeded,
    StoreError,
    StoreUnavailable,
    StreamGone,
)

from .request_ids import request_id

__all__ = [
    "EXCEPTION_HANDLERS",
    "INTERNAL_MESSAGE",
    "UNAVAILABLE_MESSAGE",
    "ApiError",
    "error_response",
]

INTERNAL_MESSAGE = "internal server error; quote the request_id when you report it"
UNAVAILABLE_MESSAGE = "the service is briefly unavailable; try again in a few seconds"

logger = structlog.get_logger()


class Unauthorized(Exception):
    """No valid credentials (401)."""


class ApiError(Exception):
    """A request the server refuses before touching any state."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})  # a project's auth handler may give some


_STORE_STATUS: list[tuple[type[StoreError], int]] = [
    (NotFound, 404),
    (Conflict, 409),
    (StreamGone, 410),
    (IdempotencyMismatch, 422),
    (QuotaExceeded, 413),
    (QueryTimeout, 422),
    (LimitReached, 429),
    (StoreUnavailable, 503),
]

_HTTP_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
}


def error_response(
    request: Request[Any, Any, Any], status: int, code: str, message: str
) -> Response[Any]:
    """The error answer. A 4xx is logged here; a 5xx by its caller, with what went wrong."""
    rid = request_id(request.scope)
    if status < 500:
        logger.info("request refused", status=status, code=code, reason=message, request_id=rid)
    return Response(
        {"error": {"code": code, "message": message, "request_id": rid}},
        status_code=status,
        headers={"Cache-Control": "no-store"},
    )


def _server_error(request: Request[Any, Any, Any], status: int) -> Response[Any]:
    """The fixed body of a 5xx: what went wrong was logged, not put here."""
    if status == 503:
        return error_response(request, 503, "unavailable", UNAVAILABLE_MESSAGE)
    return error_response(request, status, "internal", INTERNAL_MESSAGE)


def _api_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[Any]:
    response = error_response(request, exc.status, exc.code, exc.message)
    response.headers.update(exc.headers)
    return response


def _store_error(request: Request[Any, Any, Any], exc: StoreError) -> Response[Any]:
    status = next((s for kind, s in _STORE_STATUS if isinstance(exc, kind)), 500)
    if status < 500:
        response = error_response(request, status, exc.code, exc.message)
        if isinstance(exc, LimitReached):
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    rid = request_id(request.scope)
    cause = exc.__cause__
    if isinstance(exc, StoreUnavailable):
        logger.warning(
            "storage unavailable",
            path=request.url.path,
            error=exc.message,
            cause=type(cause).__name__ if cause else None,
            request_id=rid,
        )
    else:
        logger.error("store error", path=request.url.path, request_id=rid, exc_info=exc)
    return _server_error(request, status)


def _unauthorized(request: Request[Any, Any, Any], exc: Unauthorized) -> Response[Any]:
    response = error_response(request, 401, "unauthorized", str(exc))
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _validation(request: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    details = exc.extra if isinstance(exc.extra, list) else []
    parts = [
        _missing_body(d) or f"{d.get('key') or 'body'}: {d.get('message')}"
        for d in details
        if isinstance(d, dict)
    ]
    message = "; ".join(parts) or exc.detail
    return error_response(request, 400, "invalid_request", message)


def _missing_body(detail: dict[str, Any]) -> str | None:
    """Litestar reports an absent body as the KeyError of its `data` parameter: say it plainly."""
    if detail.get("key") == "data" and detail.get("message") == "'data'":
        return "the request needs a body: a JSON object (Content-Type: application/json)"
    return None


def _http(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    status = exc.status_code
    if status >= 500:
        logger.error(
            "http error",
            status=status,
            detail=exc.detail,
            path=request.url.path,
            request_id=request_id(request.scope),
        )
        return _server_error(request, status)
    return error_response(request, status, _HTTP_CODES.get(status, "error"), exc.detail)


def _internal(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    logger.error(
        "unhandled error",
        path=request.url.path,
        request_id=request_id(request.scope),
        exc_info=exc,
    )
    return _server_error(request, 500)


EXCEPTION_HANDLERS: dict[int | type[Exception], Any] = {
    ApiError: _api_error,
    StoreError: _store_error,
    Unauthorized: _unauthorized,
    ValidationException: _validation,
    HTTPException: _http,
    Exception: _internal,
}
