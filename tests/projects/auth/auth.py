"""The project's auth, as a LangGraph project writes it: bearer tokens to users, and rules."""

from __future__ import annotations

from typing import Any

from langgraph_sdk import Auth

auth = Auth()

USERS: dict[str, dict[str, Any]] = {
    "token-alice": {
        "identity": "alice",
        "display_name": "Alice",
        "permissions": ["threads:write"],
        "team": "red",
    },
    "token-bob": {"identity": "bob", "permissions": ["threads:write"]},
    # sees only the threads marked public, and may not create runs
    "token-victor": {"identity": "victor", "permissions": ["viewer"]},
}


def _value_error() -> Any:
    raise ValueError("that token is not of our shape")


# What an `authenticate` may answer beyond a user: tests/test_project_auth.py, TestSigningIn.
ODD_ANSWERS: dict[str, Any] = {
    "token-none": lambda: None,
    "token-value-error": _value_error,
    "token-nul": lambda: {"identity": "mallory\x00admin"},
    "token-long": lambda: "m" * 3000,
}


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    if not authorization:
        raise Auth.exceptions.HTTPException(status_code=401, detail="sign in first")
    _, _, token = authorization.partition(" ")
    if token in ODD_ANSWERS:
        return ODD_ANSWERS[token]()
    user = USERS.get(token)
    if user is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="unknown token")
    return user  # type: ignore[return-value]


@auth.on.threads.create
async def stamp_creator(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> None:
    value.setdefault("metadata", {})["created_by"] = ctx.user.identity


@auth.on.threads.delete
async def never_delete(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> bool:
    return False


@auth.on.threads.create_run
async def writers_run(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> None:
    assert "threads:write" in ctx.permissions, "viewers cannot start runs"
    value.setdefault("metadata", {})["run_by"] = ctx.user.identity


@auth.on.threads
async def viewers_see_public(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> Any:
    """Reads, searches and updates: a viewer only reaches the threads marked public."""
    if "viewer" in ctx.permissions:
        return {"visibility": {"$eq": "public"}}
    return None


@auth.on.store
async def own_namespace(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> None:
    """Every user's items live under their identity, as LangGraph's docs scope the store."""
    if value.get("namespace") is not None:
        value["namespace"] = (ctx.user.identity, *value["namespace"])


@auth.on.assistants.create
async def stamp_assistant(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> None:
    value.setdefault("metadata", {})["made_by"] = ctx.user.identity


@auth.on.assistants
async def viewers_see_the_graphs_own(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> Any:
    """A viewer reaches only the graphs' own assistants (LangGraph marks them so)."""
    if "viewer" in ctx.permissions:
        return {"created_by": "system"}
    return None


@auth.on.crons.create
async def stamp_cron(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> None:
    value.setdefault("metadata", {})["made_by"] = ctx.user.identity


@auth.on.crons.delete
async def keep_crons(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> bool:
    return False


@auth.on.crons.search
async def crons_of_the_maker(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> Any:
    return {"made_by": ctx.user.identity}
