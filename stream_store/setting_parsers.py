"""How a setting's text in the environment becomes its value: one parser per kind of value.

`stream_store.settings` names one of these at each field it declares. A parser's `read(name,
text)` refuses a malformed or out-of-bounds value with a `SettingsError` that names the
variable and what it takes; its `accepts` is that same rule in words, for the docs' tables
(docs/operations.md, "Settings"). Parsers of secrets never echo one.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from . import limits

__all__ = [
    "Parser",
    "SettingsError",
    "api_key_list",
    "flag",
    "graph_list",
    "host_list",
    "http_url",
    "identifier",
    "integer",
    "is_set",
    "key_prefix",
    "milliseconds",
    "one_of",
    "origin_list",
    "path",
    "seconds_or_never",
    "secret",
    "service_url",
    "signing_key_list",
    "text",
]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")
_KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


class SettingsError(ValueError):
    """A configuration value is missing or malformed."""


def _joined(items: Iterable[str]) -> str:
    """A list as its variable spells it: `a,b,...`."""
    return ",".join(items)


@dataclass(frozen=True)
class Parser:
    """How one variable's text becomes a value, and back.

    `read(name, text)` raises a `SettingsError` that names the variable; `accepts` says what it
    takes (the docs' bounds column); `write(value)` is text that `read` takes back to the value
    (a child process's environment, the docs' defaults); a `secret`'s value stays out of the
    repr and out of every error.
    """

    read: Callable[[str, str], Any]
    accepts: str
    write: Callable[[Any], str] = str
    secret: bool = False

    def show(self, value: Any) -> str:
        """A default as the docs show it: an empty one is `unset`."""
        return f"`{self.write(value)}`" if is_set(value) else "unset"


def is_set(value: Any) -> bool:
    """Whether a setting's value is one its variable would be set for: not None or empty."""
    return value is not None and value != "" and value != () and value != {}


def _text_read(name: str, raw: str) -> str:
    return raw


text = Parser(_text_read, "text")
path = Parser(_text_read, "a path")
service_url = Parser(_text_read, "a URL")


def secret(min_chars: int = 0, why: str = "") -> Parser:
    """A secret: never shown in an error, the repr or the docs; `why` it needs `min_chars`."""

    def read(name: str, raw: str) -> str:
        if len(raw) < min_chars:
            raise SettingsError(f"{name} must be at least {min_chars} characters ({why})")
        return raw

    at_least = f", at least {min_chars} characters" if min_chars else ""
    return Parser(read, f"a secret{at_least}", secret=True)


def integer(minimum: int = 0, maximum: int | None = None, unit: str = "an integer") -> Parser:
    """A whole number from `minimum` (to `maximum`)."""

    def read(name: str, raw: str) -> int:
        return _bounded_int(name, raw, minimum, maximum)

    return Parser(read, _range(unit, minimum, maximum))


def milliseconds(minimum: int = 0) -> Parser:
    """A duration given in milliseconds, held in seconds."""

    def read(name: str, raw: str) -> float:
        return _bounded_int(name, raw, minimum, None) / 1000

    return Parser(read, _range("milliseconds", minimum, None), write=lambda s: str(round(s * 1000)))


def _seconds_or_never_read(name: str, raw: str) -> int | None:
    return _bounded_int(name, raw, 0, None) or None


# Seconds, where 0 (or unset) is never
seconds_or_never = Parser(
    _seconds_or_never_read, "seconds >= 0 (`0`: never)", write=lambda s: str(s or 0)
)


def _bounded_int(name: str, raw: str, minimum: int, maximum: int | None) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SettingsError(f"{name} must be <= {maximum}, got {value}")
    return value


def _range(unit: str, minimum: int, maximum: int | None) -> str:
    return f"{unit} >= {minimum}" if maximum is None else f"{unit} {minimum} to {maximum}"


def _flag_read(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("", "false", "0", "no"):
        return False
    if value in ("true", "1", "yes"):
        return True
    raise SettingsError(f"{name} must be true or false, got {value!r}")


flag = Parser(
    _flag_read, "`true` or `false` (also `1`/`0`, `yes`/`no`)", write=lambda b: str(b).lower()
)


def one_of(choices: Mapping[str, Any]) -> Parser:
    """One word of `choices` (any case), read as the value it maps to."""
    names = list(choices)
    spelled = ", ".join(f"`{name}`" for name in names[:-1]) + f" or `{names[-1]}`"
    word_of = {value: name for name, value in choices.items()}

    def read(name: str, raw: str) -> Any:
        word = raw.strip().lower()
        if word not in choices:
            quoted = " or ".join(repr(choice) for choice in names)
            raise SettingsError(f"{name} is {quoted}, not {raw!r}")
        return choices[word]

    return Parser(read, spelled, write=word_of.__getitem__)


def _identifier_read(name: str, raw: str) -> str:
    if not _IDENTIFIER.match(raw):
        raise SettingsError(f"{name} is not an identifier: {raw!r}")
    return raw


identifier = Parser(_identifier_read, "an SQL identifier (`A-Z a-z 0-9 _`, 1-63)")


def _key_prefix_read(name: str, raw: str) -> str:
    if "{" in raw or "}" in raw:  # it is a hash tag on a Redis Cluster (keys.py)
        raise SettingsError(f"{name} may not contain braces: {raw!r}")
    return raw


key_prefix = Parser(_key_prefix_read, "text without `{` `}`")


def _http_url_read(name: str, raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SettingsError(f"{name} must be an http(s) URL, got {raw!r}")
    return raw


http_url = Parser(_http_url_read, "an http(s) URL")


def _items(name: str, raw: str, sep: str, *, secret: bool = False) -> list[tuple[str, str]]:
    """Parse `a<sep>b,c<sep>d` lists (RUNSTREAM_API_KEYS, RUNSTREAM_GRAPHS, ...), in order.

    With `secret` (the right-hand sides are secrets), an error never shows an item.
    """
    result: list[tuple[str, str]] = []
    for item in raw.split(","):
        left, found, right = (part.strip() for part in item.strip().partition(sep))
        if not (left or found or right):
            continue
        if not found or not left or not right:
            shown = "one is incomplete" if secret else f"got {item.strip()!r}"
            raise SettingsError(f"{name}: expected 'x{sep}y' items, {shown}")
        result.append((left, right))
    return result


def _graphs_read(name: str, raw: str) -> dict[str, str]:
    return dict(_items(name, raw, "="))


graph_list = Parser(
    _graphs_read,
    "`name=module:attr,...`",
    write=lambda m: _joined(f"{k}={v}" for k, v in m.items()),
)


def _api_keys_read(name: str, raw: str) -> dict[str, str]:
    """`key:owner,...`. Each owner is a caller's identity (`limits.identity_problem`), each key
    a bearer credential no longer than a presented one may be; no error shows a key."""
    api_keys = dict(_items(name, raw, ":", secret=True))
    for key, owner in api_keys.items():
        problem = limits.identity_problem(owner)
        if problem is not None:
            raise SettingsError(f"{name}: the owner {owner!r} is refused: {problem}")
        if len(key) > limits.BEARER_TOKEN_MAX_CHARS:
            raise SettingsError(
                f"{name}: a key is longer than {limits.BEARER_TOKEN_MAX_CHARS} characters"
            )
    return api_keys


api_key_list = Parser(
    _api_keys_read,
    "`key:owner,...`",
    write=lambda m: _joined(f"{k}:{v}" for k, v in m.items()),
    secret=True,
)


def _signing_keys_read(name: str, raw: str) -> tuple[tuple[str, str], ...]:
    """`key_id:secret,...` (the first signs), in order; errors name the key id, never the
    secret."""
    keys = _items(name, raw, ":", secret=True)
    for index, (key_id, _) in enumerate(keys):
        if not _KEY_ID.match(key_id):
            raise SettingsError(
                f"{name}: a key id is 1-32 characters from A-Z a-z 0-9 _ -, got {key_id[:40]!r}"
            )
        if any(key_id == earlier for earlier, _ in keys[:index]):
            raise SettingsError(f"{name}: key id {key_id!r} is given twice")
    return tuple(keys)


signing_key_list = Parser(
    _signing_keys_read,
    "`key_id:secret,...`, key ids 1-32 of `A-Z a-z 0-9 _ -`",
    write=lambda keys: _joined(f"{k}:{v}" for k, v in keys),
    secret=True,
)


def _origins_read(name: str, raw: str) -> tuple[str, ...]:
    """A comma list of web origins, `scheme://host[:port]`, lower-cased."""
    result: list[str] = []
    for item in raw.split(","):
        origin = item.strip().lower().rstrip("/")
        if not origin:
            continue
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path:
            raise SettingsError(f"{name}: expected origins like https://app.example, got {item!r}")
        result.append(origin)
    return tuple(result)


origin_list = Parser(_origins_read, "`scheme://host[:port],...`, http(s)", write=_joined)


def _hosts_read(name: str, raw: str) -> tuple[str, ...]:
    """A comma list of host names or IP addresses, lower-cased. An IPv6 address may be given
    with or without brackets; a port, scheme or wildcard is refused."""
    result: list[str] = []
    for item in raw.split(","):
        host = item.strip().lower()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not host:
            continue
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not _HOST_NAME.match(host):
                raise SettingsError(
                    f"{name}: expected host names or IP addresses (no scheme, port or wildcard), "
                    f"got {item.strip()!r}"
                ) from None
        result.append(host)
    return tuple(result)


host_list = Parser(_hosts_read, "`name,address,...`: no scheme, port or wildcard", write=_joined)
