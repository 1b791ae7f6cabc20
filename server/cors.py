"""The one CORS policy of a server: which web pages on other origins may call it.

It comes from `RUNSTREAM_CORS_ORIGINS` (runstream's fixed methods and headers, below), or from
the project's `http.cors` when its langgraph.json has one (LangGraph's `CorsConfig`, with the
defaults of Starlette's `CORSMiddleware`, which LangGraph's server builds from it; its
`allow_origins` defaults to `RUNSTREAM_CORS_ORIGINS`). Every place that enforces CORS takes it
from here: Litestar's `CORSConfig` for runstream's routes, Starlette's `CORSMiddleware` for the
project's custom routes (server/custom_routes.py), and the browser guard's list of origins
whose writes it lets through (server/browser_guard.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar.config.cors import CORSConfig

from project.langgraph_json import CorsSettings
from stream_store.settings import Settings

__all__ = ["CorsPolicy", "cors_policy"]

# What runstream's own clients need when only RUNSTREAM_CORS_ORIGINS is set: they read
# `Location`/`Content-Location` (the SDKs reconnect with them) and send `Last-Event-ID` and
# `x-api-key`.
_METHODS = ("GET", "POST", "PATCH", "DELETE", "OPTIONS")
_HEADERS = (
    "Content-Type",
    "Authorization",
    "X-Api-Key",
    "Last-Event-ID",
    "Idempotency-Key",
    "X-Request-ID",
    "X-Trace-ID",
)
_EXPOSE = ("Location", "Content-Location", "X-Request-ID", "X-Trace-ID", "Retry-After")


@dataclass(frozen=True)
class CorsPolicy:
    allow_origins: tuple[str, ...]
    allow_methods: tuple[str, ...]
    allow_headers: tuple[str, ...]
    allow_credentials: bool
    allow_origin_regex: str | None
    expose_headers: tuple[str, ...]
    max_age: int

    @property
    def listed_origins(self) -> frozenset[str]:
        """The origins named one by one (not `*`, not the regex): the browser guard lets their
        writes through, and only theirs."""
        return frozenset(o.strip().lower().rstrip("/") for o in self.allow_origins if o != "*")

    @property
    def any_origin(self) -> bool:
        """Whether origins not named one by one are let in (`*` or a regex): without a sign-in,
        the browser guard refuses their reads unless the operator says otherwise
        (`RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN`)."""
        return "*" in self.allow_origins or self.allow_origin_regex is not None

    def litestar_config(self) -> CORSConfig:
        return CORSConfig(
            allow_origins=list(self.allow_origins),
            allow_methods=list(self.allow_methods),  # type: ignore[arg-type]
            allow_headers=list(self.allow_headers),
            allow_credentials=self.allow_credentials,
            allow_origin_regex=self.allow_origin_regex,
            expose_headers=list(self.expose_headers),
            max_age=self.max_age,
        )

    def starlette_middleware(self, app: Any) -> Any:
        """`app` behind Starlette's `CORSMiddleware` (imported here: Starlette comes with the
        project's custom app, runstream does not need it otherwise)."""
        from starlette.middleware.cors import CORSMiddleware

        return CORSMiddleware(
            app,
            allow_origins=self.allow_origins,
            allow_methods=self.allow_methods,
            allow_headers=self.allow_headers,
            allow_credentials=self.allow_credentials,
            allow_origin_regex=self.allow_origin_regex,
            expose_headers=self.expose_headers,
            max_age=self.max_age,
        )


def cors_policy(settings: Settings, project: CorsSettings | None) -> CorsPolicy | None:
    """The server's policy, or None when no page on another origin may call it."""
    if project is not None:
        origins = (
            tuple(project.allow_origins)
            if project.allow_origins is not None
            else settings.cors_origins
        )
        return CorsPolicy(
            allow_origins=origins,
            allow_methods=tuple(project.allow_methods),
            allow_headers=tuple(project.allow_headers),
            allow_credentials=project.allow_credentials,
            allow_origin_regex=project.allow_origin_regex,
            expose_headers=tuple(project.expose_headers),
            max_age=project.max_age,
        )
    if not settings.cors_origins:
        return None
    return CorsPolicy(
        allow_origins=tuple(settings.cors_origins),
        allow_methods=_METHODS,
        allow_headers=_HEADERS,
        allow_credentials=False,
        allow_origin_regex=None,
        expose_headers=_EXPOSE,
        max_age=600,
    )
