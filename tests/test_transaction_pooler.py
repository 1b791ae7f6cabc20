"""Behind a transaction-mode pooler (PgBouncer), runstream keeps no session state.

`./scripts/test` runs the core tests a second time through a real PgBouncer in transaction
mode (tests/pgbouncer.py); these check the configuration rules that make that work.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from stream_store.connections import SchemaNotOnSearchPath
from stream_store.services import open_services
from stream_store.settings import Settings, SettingsError


class TestTransactionPoolMode:
    def test_transaction_mode_without_a_direct_url_is_refused_by_name(self) -> None:
        env = {
            "RUNSTREAM_DATABASE_URL": "postgresql://pgbouncer:6432/app",
            "RUNSTREAM_DATABASE_POOL_MODE": "transaction",
        }
        with pytest.raises(SettingsError, match="RUNSTREAM_DIRECT_DATABASE_URL"):
            Settings.from_env(env, env_file="")

    def test_an_unknown_pool_mode_is_refused(self) -> None:
        env = {"RUNSTREAM_DATABASE_POOL_MODE": "statement"}
        with pytest.raises(SettingsError, match="RUNSTREAM_DATABASE_POOL_MODE"):
            Settings.from_env(env, env_file="")

    async def test_a_schema_off_the_default_search_path_stops_start_up_with_a_reason(
        self, settings: Settings, test_id: str
    ) -> None:
        """runstream sends no search_path through the pooler, so its schema must be the
        connections' default; a schema that is not fails at start-up, not on a missing table."""
        schema = settings.database_schema
        if schema == "public":  # this run goes through PgBouncer: a database of its own
            schema = f"t_{test_id}"
        pooled = replace(
            settings,
            database_pool_mode="transaction",
            direct_database_url=settings.direct_database_url or settings.database_url,
            database_schema=schema,
        )
        with pytest.raises(SchemaNotOnSearchPath, match=f"'{schema}' must come first"):
            async with open_services(pooled):
                pass
