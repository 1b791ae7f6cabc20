"""Which way this deployment authenticates its callers: the project's own auth (`auth.path`
in its langgraph.json), JWTs, or API keys (docs/security.md, "Signing in")."""

from __future__ import annotations

from runner.graphs import GraphRegistry
from stream_store.settings import Settings, SettingsError

from .auth import ApiKeys, SignIn
from .jwt_auth import JwtSignIn
from .project_auth import ProjectAuth

__all__ = ["sign_in_for"]


def sign_in_for(settings: Settings, graphs: GraphRegistry) -> SignIn:
    """The deployment's one sign-in.

    Raises:
        SettingsError: the project has its own auth and the settings name another (API keys or
            JWTs): which would name the owner is not for runstream to guess. A `ProjectError`
            when the project's `Auth` cannot be loaded.
    """
    if graphs.auth is not None:
        if settings.auth_enabled:
            raise SettingsError(
                f"the project's langgraph.json has auth ({graphs.auth.where}) and"
                f" {settings.sign_in_setting} is set: a deployment authenticates its callers one"
                f" way, unset {settings.sign_in_setting}"
            )
        return ProjectAuth.load(graphs.auth)
    if settings.jwt_secret or settings.jwt_jwks_url:
        return JwtSignIn(settings)
    return ApiKeys(settings)
