"""Plain-text tables for the command line: aligned columns, ages instead of timestamps.

Every cell goes through `cell`, which escapes control characters: titles and messages are
what callers typed, and an operator's terminal must not run their escape sequences.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

__all__ = ["ago", "cell", "duration", "fields", "table"]


def cell(value: object, max_chars: int = 0) -> str:
    """`value` as one printable line (`-` for None), cut to `max_chars` when that is set."""
    if value is None:
        return "-"
    text = str(value)
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    if max_chars and len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return text


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns aligned on the widest cell, headers first; no trailing spaces."""
    lines = [list(headers), *([cell(value) for value in row] for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def fields(pairs: Iterable[tuple[str, object]]) -> str:
    """`name: value` lines, the values aligned."""
    items = [(name, cell(value)) for name, value in pairs]
    width = max((len(name) for name, _ in items), default=0) + 1
    return "\n".join(f"{name + ':':<{width}} {value}" for name, value in items)


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `2h03m`, `4d02h`: two units at most."""
    total = max(0, int(seconds))
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    if total < 86400:
        return f"{total // 3600}h{total % 3600 // 60:02d}m"
    return f"{total // 86400}d{total % 86400 // 3600:02d}h"


def ago(when: datetime | None, now: datetime) -> str:
    return "-" if when is None else f"{duration((now - when).total_seconds())} ago"
