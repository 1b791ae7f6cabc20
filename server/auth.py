"""Who is calling: API keys (`RUNSTREAM_API_KEYS`) map to owners; stream URLs carry tokens.

With no keys configured every caller is the owner `local`, and the CLI refuses to listen
beyond loopback. Stream tokens exist because `EventSource` cannot send headers: a token names
one run and one owner, expires, and is checked again on every reconnect.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass

from litestar import Request

from stream_store.settings import Settings

__all__ = ["LOCAL_OWNER", "Caller", "StreamTokens", "Unauthorized", "caller_from_request"]

LOCAL_OWNER = "local"


class Unauthorized(Exception):
    """No valid credentials (401)."""


@dataclass(frozen=True, slots=True)
class Caller:
    owner: str


def _presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth and auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def caller_from_request(request: Request, settings: Settings) -> Caller:
    """The caller named by the request's API key.

    Raises:
        Unauthorized: keys are configured and none (or an unknown one) was presented.
    """
    if not settings.auth_enabled:
        return Caller(owner=LOCAL_OWNER)
    key = _presented_key(request)
    if key:
        for known, owner in settings.api_keys.items():
            if hmac.compare_digest(known.encode(), key.encode()):
                return Caller(owner=owner)
    raise Unauthorized("a valid API key is required (Authorization: Bearer <key>)")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StreamTokens:
    """HMAC-signed `run_id.owner.expiry` tokens; every server with the same config agrees."""

    def __init__(self, settings: Settings) -> None:
        secret = settings.signing_key or "runstream-derived:" + ",".join(
            f"{k}:{v}" for k, v in sorted(settings.api_keys.items())
        )
        self._key = hashlib.sha256(secret.encode()).digest()
        self.ttl_s = settings.stream_token_ttl_s

    def _sign(self, payload: bytes) -> str:
        return _b64(hmac.new(self._key, payload, hashlib.sha256).digest())

    def issue(self, run_id: str, owner: str, now: float | None = None) -> str:
        expires = int((now or time.time()) + self.ttl_s)
        payload = f"{run_id}\n{owner}\n{expires}".encode()
        return f"{_b64(payload)}.{self._sign(payload)}"

    def verify(self, token: str, run_id: str, now: float | None = None) -> Caller:
        """The caller the token was issued to, if it is genuine, unexpired and for `run_id`."""
        try:
            encoded, signature = token.split(".", 1)
            payload = _unb64(encoded)
            token_run, owner, expires = payload.decode().split("\n")
        except ValueError:
            raise Unauthorized("malformed stream token") from None
        if not hmac.compare_digest(self._sign(payload), signature):
            raise Unauthorized("invalid stream token")
        if token_run != run_id:
            raise Unauthorized("stream token is for another run")
        if int(expires) < (now or time.time()):
            raise Unauthorized("stream token expired; GET the run for a fresh stream_url")
        return Caller(owner=owner)
