"""What a web page from another site can make a browser do to this server: nothing.

Three checks run before every route, in this order (docs/security.md, docs/protocol.md
section 1). Each refusal is an `ApiError`, so `errors.py` answers it like any other error, and
none reads the body or touches state.

1. **Host**. Without API keys, the `Host` header must name an allowed host: `localhost`, a
   loopback address (`127.0.0.0/8`, `::1`), `RUNSTREAM_HOST`, or one of
   `RUNSTREAM_ALLOWED_HOSTS`; any port. Else 400 `host_not_allowed`. This stops DNS rebinding:
   a page whose own name was re-pointed at 127.0.0.1 still sends its own name as `Host`.
   With API keys only a missing or malformed `Host` is refused: the key, which a browser never
   sends by itself, is the credential, and a deployment's public names are not known in advance.
2. **Origin** (every mode). A POST, PUT, PATCH or DELETE that carries `Origin` must come from
   the server's own origin (its host and port equal the `Host` header) or from an allowed host
   (any port); `Origin: null` never passes. One without `Origin` but with
   `Sec-Fetch-Site: cross-site` or `same-site` is refused too. Else 403 `origin_not_allowed`.
   This stops cross-site request forgery: a form or `fetch` from another site is refused
   before it changes anything. Clients that are not browsers send neither header.
   Reads are not checked: without CORS answers the browser shows a page from another origin
   nothing of them. Except without a sign-in when the CORS policy lets in origins it does not
   name one by one (a project's `http.cors.allow_origins: ["*"]`, or a regex): then any page
   could read every thread, so a request of any method from such an origin is refused the
   same way, unless `RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN` is set.
3. **JSON bodies** (every mode). A request with a body must say `Content-Type:
   application/json`, else 415 `unsupported_media_type`. A browser sends a cross-site
   "simple request" (no preflight) only as `text/plain`, a form or multipart, so this closes
   that door even where no `Origin` is sent.

Litestar's `AllowedHostsConfig` is not used: it matches the whole `Host` header, port
included (so "any port" needs an entry per port), and answers with its own bare 400 body,
outside the error handlers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from litestar.datastructures import Headers
from litestar.types import ASGIApp, HTTPScope, Receive, Scope, Send

from stream_store.settings import Settings

from .errors import ApiError

__all__ = ["BrowserGuard", "browser_guard"]

_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_UNSAFE_FETCH_SITES = frozenset({"cross-site", "same-site"})
_UNSPECIFIED = frozenset({"", "0.0.0.0", "::"})  # bind-all addresses name no host


def _normal_host(host: str) -> str:
    """Lower case, no brackets, an IP address in its canonical form."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _host_of(netloc: str) -> str | None:
    """The host name of a `host[:port]` (a `Host` header), or None when it is malformed."""
    if "@" in netloc:
        return None
    try:
        parts = urlsplit(f"//{netloc}")
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return None
    if not parts.hostname or parts.netloc != netloc:
        return None
    return _normal_host(parts.hostname)


def _origin_of(origin: str) -> tuple[str, str] | None:
    """(`host[:port]`, host name) of an `Origin` header, or None for `null` or a malformed one."""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or parts.path or parts.query:
        return None
    host = _host_of(parts.netloc)
    return None if host is None else (parts.netloc.lower(), host)


@dataclass(frozen=True)
class BrowserGuard:
    """The three checks, with the allowed hosts resolved once from the settings."""

    allowed_names: frozenset[str]
    check_host: bool
    cors_origins: frozenset[str] = frozenset()
    check_read_origins: bool = False  # no sign-in, and CORS lets in origins it does not name

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        cors_origins: frozenset[str] | None = None,
        *,
        project_auth: bool = False,
        cors_any_origin: bool = False,
    ) -> BrowserGuard:
        """`cors_origins`: the CORS policy's listed origins (server/cors.py); by default
        RUNSTREAM_CORS_ORIGINS. `project_auth`: the project authenticates callers (its
        langgraph.json `auth`), as API keys or JWTs do: no host check then.
        `cors_any_origin`: the policy lets in origins it does not list (`CorsPolicy.any_origin`)."""
        if cors_origins is None:
            cors_origins = frozenset(settings.cors_origins)
        names = {"localhost", *settings.allowed_hosts}
        if settings.host not in _UNSPECIFIED:
            names.add(settings.host)
        signed_in = settings.auth_enabled or project_auth
        return cls(
            allowed_names=frozenset(_normal_host(name) for name in names),
            check_host=not signed_in,
            cors_origins=cors_origins,
            check_read_origins=(
                not signed_in and cors_any_origin and not settings.cors_any_origin_without_sign_in
            ),
        )

    def allows(self, host: str) -> bool:
        """Whether `host` (a normalised host name, no port) is an allowed host."""
        if host in self.allowed_names:
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def check(self, method: str, headers: Headers, *, json_bodies: bool = True) -> None:
        """Refuse the request, as the module docstring says, or return; without
        `json_bodies`, the first two checks only (for a project's custom routes).

        Raises:
            ApiError: 400 `host_not_allowed`, 403 `origin_not_allowed` or 415
                `unsupported_media_type`.
        """
        host_header = headers.get("host", "")
        host = _host_of(host_header)
        if host is None:
            raise ApiError(400, "host_not_allowed", f"malformed Host header {host_header!r}")
        if self.check_host and not self.allows(host):
            raise ApiError(
                400,
                "host_not_allowed",
                f"Host {host_header!r} is not allowed here; "
                "add its name to RUNSTREAM_ALLOWED_HOSTS if clients use it",
            )
        if method not in _WRITE_METHODS:
            if self.check_read_origins:
                self._check_read_origin(headers, host_header)
        else:
            self._check_origin(headers, host_header)
            if json_bodies and _has_body(headers) and not _is_json(headers.get("content-type", "")):
                raise ApiError(
                    415,
                    "unsupported_media_type",
                    "request bodies must be JSON sent as Content-Type: application/json",
                )

    def _check_read_origin(self, headers: Headers, host_header: str) -> None:
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, host_header):
            raise ApiError(
                403,
                "origin_not_allowed",
                f"pages from {origin!r} cannot read this server: it has no sign-in and its CORS"
                " lets in any origin; list the origin in http.cors.allow_origins or set"
                " RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN=true",
            )

    def _check_origin(self, headers: Headers, host_header: str) -> None:
        origin = headers.get("origin")
        if origin is None:
            if headers.get("sec-fetch-site", "").lower() in _UNSAFE_FETCH_SITES:
                raise ApiError(403, "origin_not_allowed", "cross-site requests cannot change state")
            return
        if self._origin_allowed(origin, host_header):
            return
        raise ApiError(
            403,
            "origin_not_allowed",
            f"requests from {origin!r} cannot change state here; "
            "add its host to RUNSTREAM_ALLOWED_HOSTS if it is yours",
        )

    def _origin_allowed(self, origin: str, host_header: str) -> bool:
        """The server's own origin, one on an allowed host, or one the CORS policy names."""
        if origin.strip().lower().rstrip("/") in self.cors_origins:
            return True  # a page the operator let in (RUNSTREAM_CORS_ORIGINS or http.cors)
        parsed = _origin_of(origin)
        if parsed is None:
            return False
        netloc, host = parsed
        return netloc == host_header.lower() or self.allows(host)


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    return "transfer-encoding" in headers or (length is not None and length.strip() != "0")


def _is_json(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def browser_guard(guard: BrowserGuard) -> Callable[[ASGIApp], ASGIApp]:
    """The Litestar middleware that runs `guard.check` before every HTTP route."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                guard.check(cast("HTTPScope", scope)["method"], Headers.from_scope(scope))
            await app(scope, receive, send)

        return guarded

    return middleware
