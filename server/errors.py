"""Every error the API answers, as `{"error": {"code", "message"}}`, mapped in one place.

ApiError          bad input found by the server itself (400, 401, 413 ...)
StoreError        from stream_store: 404, 409, 410, 422, 503
Unauthorized      401
HTTPException     Litestar's own (validation 400, unknown route 404, 405, 413)
anything else     500, logged with its traceback, never shown to the client
"""

from __future__ import annotations

from typing import Any

import structlog
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from stream_store.errors import (
    Conflict,
    IdempotencyMismatch,
    NotFound,
    StoreError,
    StoreUnavailable,
    StreamGone,
)

from .auth import Unauthorized

__all__ = ["EXCEPTION_HANDLERS", "ApiError", "error_response"]

logger = structlog.get_logger()


class ApiError(Exception):
    """A request the server refuses before touching any state."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


_STORE_STATUS: list[tuple[type[StoreError], int]] = [
    (NotFound, 404),
    (Conflict, 409),
    (StreamGone, 410),
    (IdempotencyMismatch, 422),
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


def error_response(status: int, code: str, message: str) -> Response[Any]:
    return Response(
        {"error": {"code": code, "message": message}},
        status_code=status,
        headers={"Cache-Control": "no-store"},
    )


def _api_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[Any]:
    return error_response(exc.status, exc.code, exc.message)


def _store_error(_: Request[Any, Any, Any], exc: StoreError) -> Response[Any]:
    status = next((s for kind, s in _STORE_STATUS if isinstance(exc, kind)), 500)
    if status >= 500:
        logger.warning("storage unavailable", error=exc.message)
    return error_response(status, exc.code, exc.message)


def _unauthorized(_: Request[Any, Any, Any], exc: Unauthorized) -> Response[Any]:
    response = error_response(401, "unauthorized", str(exc))
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _validation(_: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    details = exc.extra if isinstance(exc.extra, list) else []
    parts = [
        f"{d.get('key') or 'body'}: {d.get('message')}" for d in details if isinstance(d, dict)
    ]
    message = "; ".join(parts) or exc.detail
    return error_response(400, "invalid_request", message)


def _http(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    status = exc.status_code
    if status >= 500:
        logger.error("http error", status=status, detail=exc.detail)
    return error_response(status, _HTTP_CODES.get(status, "error"), exc.detail)


def _internal(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    logger.exception("unhandled error", path=request.url.path, exc_info=exc)
    return error_response(500, "internal", "internal server error")


EXCEPTION_HANDLERS: dict[int | type[Exception], Any] = {
    ApiError: _api_error,
    StoreError: _store_error,
    Unauthorized: _unauthorized,
    ValidationException: _validation,
    HTTPException: _http,
    Exception: _internal,
}
