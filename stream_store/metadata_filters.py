"""The filters a LangGraph auth handler returns, which narrow what a caller may see by metadata.

A filter is LangGraph's `FilterType` (`langgraph_sdk.auth.types`): `{key: value}` or
`{key: {"$eq": value}}` (the key's value equals it), `{key: {"$contains": v}}` (the key holds a
list containing `v`, or every item of `v` when `v` is a list), and `$and` / `$or` over lists of
at least two filters, nested at most twice, all of it an implicit AND. The same filter is read
two ways: `matches` for one resource already read (a read by id: no match is a 404), and
`sql_condition` for a search, so a filtered search pages as an unfiltered one does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg.types.json import Jsonb

__all__ = ["FilterError", "matches", "sql_condition"]

_MAX_NESTING = 2


class FilterError(ValueError):
    """An auth handler returned a filter that is not one (the server's fault: a 500)."""


def _groups(filters: Mapping[str, Any], operator: str, nesting: int) -> list[Mapping[str, Any]]:
    groups = filters[operator]
    if not isinstance(groups, list) or len(groups) < 2:
        raise FilterError(f"an auth handler's {operator} must be a list of at least 2 filters")
    if nesting + 1 > _MAX_NESTING:
        raise FilterError("an auth handler's filter nests operators more than 2 deep")
    for group in groups:
        if not isinstance(group, Mapping):
            raise FilterError(f"an auth handler's {operator} holds a {type(group).__name__}")
    return groups


def _condition(value: Any) -> tuple[str, Any]:
    """(operator, operand) of one key's condition."""
    if isinstance(value, Mapping):
        if len(value) != 1 or next(iter(value)) not in ("$eq", "$contains"):
            raise FilterError(f"an auth handler's filter operator is $eq or $contains: {value}")
        ((operator, operand),) = value.items()
        return operator, operand
    return "$eq", value


def matches(
    metadata: Mapping[str, Any], filters: Mapping[str, Any] | None, nesting: int = 0
) -> bool:
    """Whether `metadata` (one resource's) satisfies `filters`."""
    if not filters:
        return True
    for operator, combine in (("$or", any), ("$and", all)):
        if operator in filters:
            groups = _groups(filters, operator, nesting)
            if not combine(matches(metadata, group, nesting + 1) for group in groups):
                return False
    for key, value in filters.items():
        if key in ("$or", "$and"):
            continue
        operator, operand = _condition(value)
        if key not in metadata:
            return False
        held = metadata[key]
        if operator == "$eq":
            if held != operand:
                return False
        elif not isinstance(held, list) or not all(
            item in held for item in (operand if isinstance(operand, list) else [operand])
        ):
            return False
    return True


def sql_condition(
    column: str, filters: Mapping[str, Any] | None, nesting: int = 0
) -> tuple[str, list[Any]]:
    """A SQL boolean over the jsonb `column` (a trusted column name) that `filters` hold for,
    with its parameters. `$eq` is jsonb equality; `$contains` is jsonb array containment."""
    if not filters:
        return "true", []
    parts: list[str] = []
    params: list[Any] = []
    for operator, joiner in (("$or", " OR "), ("$and", " AND ")):
        if operator in filters:
            groups = [
                sql_condition(column, group, nesting + 1)
                for group in _groups(filters, operator, nesting)
            ]
            parts.append("(" + joiner.join(f"({sql})" for sql, _ in groups) + ")")
            params.extend(p for _, group_params in groups for p in group_params)
    for key, value in filters.items():
        if key in ("$or", "$and"):
            continue
        operator, operand = _condition(value)
        if operator == "$eq":
            parts.append(f"({column} ? %s::text AND {column} -> %s::text = %s)")
            params.extend([key, key, Jsonb(operand)])
        else:
            wanted = operand if isinstance(operand, list) else [operand]
            parts.append(
                f"coalesce(jsonb_typeof({column} -> %s::text) = 'array'"
                f" AND {column} -> %s::text @> %s, false)"
            )
            params.extend([key, key, Jsonb(wanted)])
    return " AND ".join(parts) or "true", params
