"""The signed-in user as LangGraph hands it over: to auth handlers (`ctx.user`) and to a run's
graph (`config["configurable"]["langgraph_auth_user"]`).

LangGraph's server wraps what `authenticate` returned in a `ProxyUser`
(`langgraph_api/auth/custom.py`): `identity`, `display_name` (the identity unless given),
`is_authenticated` (True unless given) and `permissions` as attributes, and every field, these
included, as keys. A run's worker is another process: the user travels with the run as its
record (JSON), and is rebuilt here from it, so a graph reads the same attributes and keys.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec

__all__ = ["AuthUser"]


def _record_of(user: Any) -> dict[str, Any]:
    """The fields of what `authenticate` returned, as LangGraph's `ProxyUser.dict` lists them."""
    if isinstance(user, str):
        return {"identity": user}
    if isinstance(user, Mapping):
        return dict(user)
    if not hasattr(user, "identity"):  # None, a number, ...: `AuthUser.of` says what it may be
        return {}
    dump = getattr(user, "model_dump", None)
    if callable(dump):
        return {"identity": user.identity, **dump(mode="json")}
    as_dict = getattr(user, "dict", None)
    fields = as_dict() if callable(as_dict) else {}
    return {"identity": user.identity, **fields}


class AuthUser(Mapping[str, Any]):
    """One user: attributes and keys over its record (JSON-safe, so a run can keep it)."""

    __slots__ = ("_record", "_source")

    def __init__(self, record: Mapping[str, Any], source: Any = None) -> None:
        self._record = dict(record)
        self._source = source  # the object `authenticate` returned, for its other attributes

    @classmethod
    def of(cls, user: Any, permissions: Sequence[str]) -> AuthUser:
        """The user `authenticate` returned (a str, a dict with `identity`, or an object with
        an `identity` attribute) and the permissions that came with it.

        Raises:
            ValueError: it names no identity (a str).
        """
        record = _record_of(user)
        identity = record.get("identity")
        if not isinstance(identity, str) or not identity:
            raise ValueError(
                "authenticate must return a user id (str), a dict with an 'identity' (str),"
                f" or an object with an identity attribute; got {type(user).__name__}"
            )
        record = {
            "identity": identity,
            "is_authenticated": bool(record.get("is_authenticated", True)),
            "display_name": record.get("display_name") or identity,
            **{k: v for k, v in record.items() if k not in ("identity", "display_name")},
            "permissions": list(permissions),
        }
        # What a run can keep: anything JSON cannot hold is written as its str().
        safe = msgspec.json.decode(msgspec.json.encode(record, enc_hook=str))
        return cls(safe, None if isinstance(user, str | Mapping) else user)

    @property
    def identity(self) -> str:
        return str(self._record["identity"])

    @property
    def display_name(self) -> str:
        return str(self._record.get("display_name") or self.identity)

    @property
    def is_authenticated(self) -> bool:
        return bool(self._record.get("is_authenticated", True))

    @property
    def permissions(self) -> list[str]:
        return list(self._record.get("permissions") or [])

    def record(self) -> dict[str, Any]:
        """Every field, JSON-safe: what a run keeps."""
        return dict(self._record)

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return self.record()

    def dict(self) -> builtins.dict[str, Any]:  # LangGraph's ProxyUser has it
        return self.record()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # a slot not set yet (a copy being made), or a dunder
            raise AttributeError(name)
        if name in self._record:
            return self._record[name]
        if self._source is not None:
            return getattr(self._source, name)
        raise AttributeError(f"the user has no {name!r}")

    def __getitem__(self, key: str) -> Any:
        return self._record[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._record)

    def __len__(self) -> int:
        return len(self._record)

    def __repr__(self) -> str:
        return f"AuthUser({self.identity!r})"
