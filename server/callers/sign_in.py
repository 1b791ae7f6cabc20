"""Which way this deployment authenticates its callers: the project's own auth (`auth.path`
in its langgraph.json), JWTs, or API keys (docs/security.md, "Signing in")."""

from __future__ import annotations

from project.langgraph_json import GraphSource
from stream_store.settings import Settings, SettingsError

from .auth import ApiKeys, SignIn
from .jwt_auth import JwtSignIn
from .project_auth import ProjectAuth

__all__ = ["sign_in_for"]


def sign_in_for(settings: Settings, project_auth: GraphSource | None) -> SignIn:
    """The deployment's one sign-in; `project_auth` is the project's `auth.path`, if any.

    Raises:
        SettingsError: the project has its own auth and the settings name another (API keys or
            JWTs): which would name the owner is not for runstream to guess. A `ProjectError`
            when the project's `Auth` cannot be loaded.
    """
    if project_auth is not None:
        if settings.auth_enabled:
            raise SettingsError(
                f"the project's langgraph.json has auth ({project_auth.where}) and"
                f" {settings.sign_in_setting} is set: a deployment authenticates its callers one"
                f" way, unset {settings.sign_in_setting}"
            )
        return ProjectAuth.load(project_auth)
    if settings.jwt_secret or settings.jwt_jwks_url:
        return JwtSignIn(settings)
    return ApiKeys(settings)
