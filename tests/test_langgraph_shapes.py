"""One declaration per shape: an assistant's fields are declared once (`AssistantFields`), a
cron's once (`CronFields`); the records, the tables' column lists and LangGraph's wire shapes
derive from them. These tests hold the derived shapes to what LangGraph's server sends (the
key sets written out here) and to the tables the migrations make.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_args

import msgspec
import pytest

from server.langgraph.conversions import assistant_id_for
from server.langgraph.crons import cron_view
from server.langgraph.views import assistant_view, version_view
from server.langgraph.wire import (
    Assistant,
    AssistantField,
    AssistantVersion,
    Cron,
    CronField,
)
from stream_store.assistant_records import AssistantRecord
from stream_store.assistant_records import AssistantVersion as StoredVersion
from stream_store.cron_records import CronRecord, SavedCron
from stream_store.settings import Settings
from tests.conftest import schema_connection

# As LangGraph's server sends them (langgraph_sdk.schema `Assistant`, `AssistantVersion`,
# `Cron`); an assistant's in the order runstream has always sent them.
ASSISTANT_ORDER = [
    "assistant_id",
    "graph_id",
    "name",
    "description",
    "config",
    "context",
    "metadata",
    "version",
    "created_at",
    "updated_at",
]
ASSISTANT_KEYS = set(ASSISTANT_ORDER)
VERSION_KEYS = ASSISTANT_KEYS - {"updated_at"}
CRON_KEYS = {
    "cron_id",
    "assistant_id",
    "thread_id",
    "on_run_completed",
    "end_time",
    "schedule",
    "timezone",
    "created_at",
    "updated_at",
    "payload",
    "user_id",
    "next_run_date",
    "metadata",
    "enabled",
}

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def wire_names(shape: type[msgspec.Struct]) -> list[str]:
    return [field.encode_name for field in msgspec.structs.fields(shape)]


def field_names(shape: type[msgspec.Struct]) -> set[str]:
    return {field.name for field in msgspec.structs.fields(shape)}


def as_json(view: msgspec.Struct) -> dict[str, Any]:
    decoded: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(view))
    return decoded


def an_assistant(**changes: Any) -> AssistantRecord:
    fields: dict[str, Any] = {
        "assistant_id": "7f1c6c7e-1d2a-4f57-9d43-0a6f3e1c2b11",
        "owner": "alice",
        "graph": "chat",
        "name": "Support",
        "description": None,
        "config": {"configurable": {"model": "small"}},
        "context": {"model": "small"},
        "metadata": {"team": "a"},
        "version": 3,
        "created_at": NOW,
        "updated_at": NOW,
    }
    return AssistantRecord(**(fields | changes))


def a_cron(**changes: Any) -> CronRecord:
    fields: dict[str, Any] = {
        "cron_id": "2b0f8a6e-54d4-4a43-8d0c-43f1f6b7c9d2",
        "owner": "alice",
        "graph": "chat",
        "assistant_id": None,
        "thread_id": None,
        "schedule": "*/5 * * * *",
        "timezone": None,
        "payload": {"assistant_id": "chat", "input": {"messages": []}},
        "metadata": {},
        "on_run_completed": "delete",
        "enabled": True,
        "end_time": None,
        "next_run_date": NOW,
        "created_at": NOW,
        "updated_at": NOW,
    }
    return CronRecord(**(fields | changes))


def test_the_wire_assistant_is_the_record_less_its_owner_graph_named_graph_id() -> None:
    record_fields = field_names(AssistantRecord) - {"owner"}
    assert {"graph_id" if name == "graph" else name for name in record_fields} == ASSISTANT_KEYS
    assert set(wire_names(Assistant)) == ASSISTANT_KEYS
    assert set(wire_names(AssistantVersion)) == VERSION_KEYS
    assert field_names(AssistantVersion) == field_names(StoredVersion)


def test_the_wire_cron_is_the_saved_cron_with_langgraphs_user_id() -> None:
    assert set(wire_names(Cron)) == field_names(SavedCron) | {"user_id"} == CRON_KEYS
    assert field_names(CronRecord) - field_names(SavedCron) == {"owner", "graph"}


def test_every_field_of_a_shape_is_one_a_search_may_select() -> None:
    assert set(get_args(AssistantField)) == ASSISTANT_KEYS
    assert set(get_args(CronField)) == CRON_KEYS


def test_an_assistant_record_shows_as_langgraph_sends_it() -> None:
    record = an_assistant()
    shown = as_json(assistant_view(record))
    assert list(shown) == ASSISTANT_ORDER
    assert shown["graph_id"] == "chat"
    assert shown["description"] is None  # sent as null, not left out
    assert shown["config"] == record.config
    assert shown["created_at"] == "2025-01-02T03:04:05Z"
    assert set(as_json(version_view(record))) == VERSION_KEYS


def test_a_cron_record_shows_as_langgraph_sends_it() -> None:
    shown = as_json(cron_view(a_cron()))
    assert set(shown) == CRON_KEYS
    assert shown["assistant_id"] == assistant_id_for("chat")  # the graph's own assistant
    assert shown["user_id"] is None
    assert shown["thread_id"] is None  # sent as null, not left out
    assert shown["end_time"] is None
    created = "5b6c2f0e-9c1e-4d7e-8f5a-1e2d3c4b5a69"
    assert as_json(cron_view(a_cron(assistant_id=created)))["assistant_id"] == created


@pytest.mark.parametrize(
    ("table", "shape", "not_fields"),
    [
        ("runstream_assistants", AssistantRecord, set()),
        ("runstream_assistant_versions", StoredVersion, set()),
        ("runstream_crons", CronRecord, {"claimed_until"}),  # the scheduler's lease
    ],
)
async def test_a_record_has_a_field_for_every_column_of_its_table(
    settings: Settings, table: str, shape: type[msgspec.Struct], not_fields: set[str]
) -> None:
    async with await schema_connection(settings) as conn:
        cur = await conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = %s",
            (table,),
        )
        columns = {row[0] for row in await cur.fetchall()}
    assert columns - not_fields == field_names(shape)
