"""Who may use the desk, as a LangGraph project writes it (`langgraph_sdk.Auth`).

Bearer tokens map to users (`DESK_TOKENS`, "token:user,..."); each thread is stamped with its
creator, and a user reaches only the threads they created.
"""

from __future__ import annotations

import os
from typing import Any

from langgraph_sdk import Auth

auth = Auth()


def _users() -> dict[str, str]:
    pairs = (pair.partition(":") for pair in os.environ.get("DESK_TOKENS", "").split(","))
    return {token: user for token, _, user in pairs if token and user}


@auth.authenticate
async def authenticate(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    user = _users().get(token) if scheme.lower() == "bearer" else None
    if user is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="a desk token is required")
    return user


@auth.on.threads.create
async def stamp_creator(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> None:
    value.setdefault("metadata", {})["owner"] = ctx.user.identity


@auth.on.threads
async def own_threads_only(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> Any:
    return {"owner": ctx.user.identity}
