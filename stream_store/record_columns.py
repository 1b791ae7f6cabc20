"""SQL column lists from a Struct's fields: a table's columns are named once, by the Struct
that holds its rows (`AssistantRecord`, `CronRecord`), so a new field is one line there and a
column in a migration, not one more name in each statement.

A field's name is its column's name; the Structs these read into hold no renames (the wire's
do, server/langgraph/wire.py).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import msgspec
from psycopg.types.json import Jsonb

__all__ = ["column_names", "parameters", "placeholders", "select_list"]


def column_names(shape: type[msgspec.Struct]) -> tuple[str, ...]:
    """`shape`'s fields in declaration order: its columns."""
    return tuple(field.name for field in msgspec.structs.fields(shape))


def select_list(
    shape: type[msgspec.Struct], *, as_text: Collection[str] = (), table: str = ""
) -> str:
    """`shape`'s columns for a SELECT or RETURNING. `as_text`: uuid columns, read as text into
    the Struct's `str`; `table`: the name or alias that qualifies each column."""
    prefix = f"{table}." if table else ""
    return ", ".join(
        f"{prefix}{name}::text" if name in as_text else f"{prefix}{name}"
        for name in column_names(shape)
    )


def placeholders(columns: Collection[str]) -> str:
    """One `%s` per column, for a VALUES list."""
    return ", ".join(["%s"] * len(columns))


def parameters(record: msgspec.Struct, columns: Iterable[str]) -> tuple[Any, ...]:
    """`record`'s values of `columns` as psycopg parameters: an object or a list is a jsonb
    column's value."""
    return tuple(
        Jsonb(value) if isinstance(value, dict | list) else value
        for value in (getattr(record, name) for name in columns)
    )
