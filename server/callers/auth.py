"""Who is calling: API keys (`RUNSTREAM_API_KEYS`) map to owners; stream URLs carry tokens.

A deployment authenticates its callers one way (`SignIn`): with API keys (this module), with
JWTs (`server/callers/jwt_auth.py`), or with its LangGraph project's own `Auth`
(`server/callers/project_auth.py`), which also decides what each caller may do (`Caller.authorize`).
With none of them every caller is the owner `local`, and the CLI refuses to listen beyond
loopback. Stream tokens exist because `EventSource` cannot send headers: a token names
one run and one owner, expires, and is checked again on every reconnect.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

from litestar import Request

from project.auth_user import AuthUser
from server.errors import Unauthorized
from stream_store.limits import BEARER_TOKEN_MAX_CHARS, identity_problem
from stream_store.settings import Settings

__all__ = [
    "LOCAL_OWNER",
    "ApiKeys",
    "Caller",
    "ResourceRules",
    "SignIn",
    "StreamTokens",
    "bounded_credential",
    "caller_from_request",
]

LOCAL_OWNER = "local"


class ResourceRules(Protocol):
    """What a caller may do to a resource (a project's `@auth.on` handlers)."""

    async def authorize(
        self, caller: Caller, resource: str, action: str, value: dict[str, Any]
    ) -> dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class Caller:
    """Whose data a request reaches (`owner`), and with a project's auth who signed in and
    the rules that narrow it further."""

    owner: str
    user: AuthUser | None = None
    rules: ResourceRules | None = None

    @classmethod
    def signed_in(
        cls, identity: object, user: AuthUser | None = None, rules: ResourceRules | None = None
    ) -> Caller:
        """The caller a sign-in names, its identity checked once, here, for every way of
        signing in (`stream_store.limits.identity_problem`): it becomes the owner on every row
        and key of the caller's data, which a NUL or a 3,000-character name would break.

        Raises:
            Unauthorized: the identity is refused (the message says why).
        """
        problem = identity_problem(identity)
        if problem is not None or not isinstance(identity, str):
            raise Unauthorized(f"the signed-in identity is refused: {problem}")
        return cls(owner=identity, user=user, rules=rules)

    async def authorize(
        self, resource: str, action: str, value: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The project's verdict on `action` on `resource`: None (allowed), or a metadata filter
        the resource must match (stream_store/metadata_filters.py). `value` is what the
        handler sees, and may change (metadata stamped on a create, a store namespace).

        Raises:
            ApiError: a handler refused (403, or the status it raised).
        """
        if self.rules is None:
            return None
        return await self.rules.authorize(self, resource, action, value)


class SignIn(Protocol):
    """How a deployment authenticates a request: one of API keys, JWTs, a project's Auth."""

    @property
    def description(self) -> str: ...

    async def caller(self, request: Request[Any, Any, Any]) -> Caller: ...


class ApiKeys:
    """`RUNSTREAM_API_KEYS` (or nobody: owner `local`, on loopback only)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.description = "api keys" if settings.api_keys else "none (loopback only)"

    async def caller(self, request: Request[Any, Any, Any]) -> Caller:
        return caller_from_request(request, self.settings)


def bounded_credential(credential: str) -> str:
    """`credential` (a bearer token or API key), if it is not longer than any real one.

    Raises:
        Unauthorized: it is longer than `BEARER_TOKEN_MAX_CHARS`: refused before it is decoded
            or compared, so an oversized one costs no more than a short one.
    """
    if len(credential) > BEARER_TOKEN_MAX_CHARS:
        raise Unauthorized(f"the credential is longer than {BEARER_TOKEN_MAX_CHARS} characters")
    return credential


def _presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth and auth.lower().startswith("bearer "):
        return bounded_credential(auth[7:].strip())
    key = request.headers.get("x-api-key")
    return None if key is None else bounded_credential(key)


def caller_from_request(request: Request, settings: Settings) -> Caller:
    """The caller named by the request's API key.

    Raises:
        Unauthorized: keys are configured and none (or an unknown one) was presented.
    """
    if not settings.api_keys:
        return Caller(owner=LOCAL_OWNER)
    key = _presented_key(request)
    if key:
        for known, owner in settings.api_keys.items():
            if hmac.compare_digest(known.encode(), key.encode()):
                return Caller(owner=owner)  # checked at start (`Settings.from_env`)
    raise Unauthorized(
        "a valid API key is required (header x-api-key: <key>, or Authorization: Bearer <key>)"
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# key id "." base64url(payload) "." base64url(signature): only ASCII ever reaches the decoder
# and `hmac.compare_digest` (which raises TypeError for a non-ASCII str).
_TOKEN = re.compile(r"([A-Za-z0-9_-]{1,32})\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]{43})")


class StreamTokens:
    """HMAC-signed `run_id, owner, expiry` tokens, each naming the key that signed it.

    The first of `Settings.stream_token_keys()` signs; every one of them is accepted, so a new
    key can be added in front of the old one and the old one dropped once its tokens expired
    (docs/security.md). Every server with the same keys agrees.
    """

    def __init__(self, settings: Settings, *, project_auth: bool = False) -> None:
        keys = settings.stream_token_keys(project_auth=project_auth)
        self._keys = {kid: hashlib.sha256(secret.encode()).digest() for kid, secret in keys}
        self._signing_kid = keys[0][0]
        self.ttl_s = settings.stream_token_ttl_s

    def _sign(self, kid: str, encoded: str) -> str:
        signed = f"{kid}.{encoded}".encode()  # the key id is signed too
        return _b64(hmac.new(self._keys[kid], signed, hashlib.sha256).digest())

    def issue(self, run_id: str, owner: str, now: float | None = None) -> str:
        expires = int((now or time.time()) + self.ttl_s)
        encoded = _b64(f"{run_id}\n{owner}\n{expires}".encode())
        kid = self._signing_kid
        return f"{kid}.{encoded}.{self._sign(kid, encoded)}"

    def verify(self, token: str, run_id: str, now: float | None = None) -> Caller:
        """The caller the token was issued to, if it is genuine, unexpired and for `run_id`.

        Raises:
            Unauthorized: anything else, including a token of the format before key ids.
        """
        match = _TOKEN.fullmatch(token)
        if match is None:
            if token.count(".") == 1:
                raise Unauthorized(
                    "stream token from an older version; GET the run for a fresh stream_url"
                )
            raise Unauthorized("malformed stream token")
        kid, encoded, signature = match.groups()
        if kid not in self._keys:
            raise Unauthorized(
                "stream token signed with a key this server no longer has; "
                "GET the run for a fresh stream_url"
            )
        if not hmac.compare_digest(self._sign(kid, encoded).encode(), signature.encode()):
            raise Unauthorized("invalid stream token")
        try:
            # The run id (a UUID) first and the expiry last: the owner between them is split
            # off by position, whatever characters it holds.
            token_run, rest = _unb64(encoded).decode().split("\n", 1)
            owner, expires = rest.rsplit("\n", 1)
            expires_at = int(expires)
        except ValueError:  # signed by us, so only if a key leaked or the format changed
            raise Unauthorized("malformed stream token") from None
        if token_run != run_id:
            raise Unauthorized("stream token is for another run")
        if expires_at < (now or time.time()):
            raise Unauthorized("stream token expired; GET the run for a fresh stream_url")
        return Caller(owner=owner)
