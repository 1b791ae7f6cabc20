"""The one-door matrix's project auth (tests/test_one_door.py): one identity, alice, signed in
three ways, and bob. A token's permission says what every handler answers: nothing (allowed),
a refusal, or a filter that no resource matches."""

from __future__ import annotations

from typing import Any

from langgraph_sdk import Auth

auth = Auth()

USERS: dict[str, dict[str, Any]] = {
    "token-alice": {"identity": "alice", "permissions": ["all"]},
    "token-alice-refused": {"identity": "alice", "permissions": ["refused"]},
    "token-alice-filtered": {"identity": "alice", "permissions": ["filtered"]},
    "token-bob": {"identity": "bob", "permissions": ["all"]},
}

# A metadata filter nothing in the matrix carries.
NOTHING_MATCHES = {"door": "closed"}


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    _, _, token = (authorization or "").partition(" ")
    user = USERS.get(token)
    if user is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="sign in first")
    return user  # type: ignore[return-value]


@auth.on
async def by_permission(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> Any:
    if "refused" in ctx.permissions:
        return False
    if "filtered" in ctx.permissions:
        return dict(NOTHING_MATCHES)
    return None
