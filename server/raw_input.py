"""Checks on a request before Litestar decodes it: what no parser or database should be handed.

Every refusal is a 400 `invalid_request` (`ApiError`, answered by `errors.py`) raised before a
handler runs, so it changes nothing (docs/protocol.md section 1).

- **JSON depth.** A JSON body nested deeper than `JSON_MAX_DEPTH` arrays and objects is refused
  before it is decoded: msgspec decodes recursively, and past Python's recursion limit it raised
  `RecursionError` (a 500).
- **NUL.** Postgres text and jsonb cannot hold the character U+0000, and every JSON body ends up
  in Postgres (messages, metadata, config, resume values). A string or object key with NUL
  anywhere in a JSON body is refused, naming where it is; so is a NUL in the URL path (a static
  file lookup raised `ValueError: embedded null byte`) and one anywhere in the query string (a
  checkpoint id of `?before=%00` reached Postgres). Ids and headers have their own checks
  (`inputs.py`, `auth.py`), which refuse NUL too.

`ApiRequest` is the app's `request_class`, so the JSON checks run wherever Litestar decodes a
body; `refuse_nul_in_url` runs before every handler, so no route has to remember it.
"""

from __future__ import annotations

from typing import Any

from litestar import Request

from stream_store.limits import JSON_MAX_DEPTH

from .errors import ApiError

__all__ = ["ApiRequest", "json_too_deep", "nul_location", "refuse_nul_in_url"]

_NUL = "\x00"
_OPENERS = b"[{"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_too_deep(raw: bytes, limit: int = JSON_MAX_DEPTH) -> bool:
    """Whether the JSON text `raw` nests arrays and objects more than `limit` deep.

    Linear in the body, and string contents are skipped with C-level byte operations; only the
    brackets outside strings are counted one by one, and only when there are more than `limit`.
    Text that is not valid JSON may be judged either way: the decoder refuses it anyway.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    # Escapes first (`\\` pairs, then `\"`), so every quote left delimits a string.
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside_strings = b"".join(unescaped.split(b'"')[::2])
    depth = 0
    for byte in outside_strings.translate(None, _NOT_BRACKETS):
        if byte in _OPENERS:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
            if depth < 0:  # a closer without an opener: the decoder stops here
                return False
    return False


def _child(where: str, key: str) -> str:
    shown = key[:40] + ("..." if len(key) > 40 else "")
    if shown.isidentifier():
        return f"{where}.{shown}" if where else shown
    return f"{where}[{shown!r}]"


def nul_location(value: Any) -> str | None:
    """Where in a decoded JSON value the first string or key holding NUL is, or None.

    The location reads like the validation errors' (`input.messages[0].content`); the body
    itself is `body`. Iterative, in document order.
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if _NUL in item:
                return where or "body"
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                path = _child(where, key)
                if _NUL in key:
                    return f"{path} (the key)"
                children.append((child, path))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(reversed([(child, f"{where}[{i}]") for i, child in enumerate(item)]))
    return None


class ApiRequest(Request[Any, Any, Any]):
    """Litestar's request, with the JSON checks above in front of its decoder."""

    async def json(self) -> Any:
        raw = await self.body()
        # Checked on the bytes at a fixed depth: msgspec's own limit moves with the stack depth,
        # and a value it decodes can still overflow later (jsonb, deepcopy in the worker).
        if json_too_deep(raw):
            raise ApiError(
                400,
                "invalid_request",
                f"body: JSON nested more than {JSON_MAX_DEPTH} arrays or objects deep",
            )
        value = await super().json()
        if b"\\u0000" in raw and (where := nul_location(value)) is not None:
            raise ApiError(
                400,
                "invalid_request",
                f"{where}: text must not contain the NUL character (\\u0000)",
            )
        return value


def refuse_nul_in_url(path: str, query_string: bytes) -> None:
    """400 for NUL (`%00`) in the URL path (decoded by the server) or anywhere in the raw
    query string, whichever parameter it is in; called before every handler (app.py)."""
    if _NUL in path:
        raise ApiError(400, "invalid_request", "the URL path must not contain NUL (%00)")
    if b"%00" in query_string or b"\x00" in query_string:
        raise ApiError(400, "invalid_request", "the query string must not contain NUL (%00)")
