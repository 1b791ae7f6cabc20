"""An auth handler's metadata filter means the same read by id (Python) and in a search (SQL):
LangGraph's `$eq`, `$contains`, `$and`, `$or` (stream_store/metadata_filters.py)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from stream_store.metadata_filters import FilterError, matches, sql_condition
from stream_store.settings import Settings

DOCS: list[dict[str, Any]] = [
    {},
    {"owner": "alice", "tags": ["a", "b"], "n": 1},
    {"owner": "bob", "tags": ["b"], "n": 2, "nested": {"x": 1}},
    {"owner": "alice", "tags": "a"},  # not a list: `$contains` does not match
]

FILTERS: list[dict[str, Any]] = [
    {},
    {"owner": "alice"},
    {"owner": {"$eq": "bob"}},
    {"tags": {"$contains": "a"}},
    {"tags": {"$contains": ["a", "b"]}},
    {"nested": {"$eq": {"x": 1}}},
    {"$or": [{"owner": "bob"}, {"n": 1}]},
    {"$and": [{"owner": "alice"}, {"tags": {"$contains": "b"}}], "n": 1},
    {"owner": "alice", "missing": None},
]


@pytest.mark.parametrize("filters", FILTERS)
async def test_python_and_sql_agree(settings: Settings, filters: dict[str, Any]) -> None:
    condition, params = sql_condition("metadata", filters)
    async with await psycopg.AsyncConnection.connect(str(settings.database_url)) as conn:
        for doc in DOCS:
            cur = await conn.execute(
                f"SELECT {condition} AS ok FROM (SELECT %s::jsonb AS metadata) t",
                [*params, Jsonb(doc)],
            )
            row = await cur.fetchone()
            assert row is not None
            assert row[0] is matches(doc, filters), (doc, filters)


def test_expected_matches() -> None:
    assert [matches(d, {"owner": "alice"}) for d in DOCS] == [False, True, False, True]
    assert [matches(d, {"tags": {"$contains": "a"}}) for d in DOCS] == [False, True, False, False]


@pytest.mark.parametrize(
    "filters",
    [
        {"$or": [{"a": 1}]},  # fewer than two
        {"a": {"$gt": 1}},  # not LangGraph's operator
        {"$or": [{"$or": [{"$or": [{"a": 1}, {"a": 2}]}, {"a": 3}]}, {"a": 4}]},  # too deep
    ],
)
def test_a_filter_that_is_not_one_is_refused(filters: dict[str, Any]) -> None:
    with pytest.raises(FilterError):
        matches({"a": 1}, filters)
    with pytest.raises(FilterError):
        sql_condition("metadata", filters)
