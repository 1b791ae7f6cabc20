"""Configuration and the command line: one Settings from the environment, safe defaults."""

from __future__ import annotations

import pytest

from server.cli import serve
from stream_store.settings import Settings, SettingsError


class TestSettings:
    """The environment is read once, strictly: bad values are refused with their name."""

    def test_defaults_follow_design(self) -> None:
        settings = Settings.from_env({}, env_file="")
        assert (settings.host, settings.port) == ("127.0.0.1", 8000)
        assert settings.model == "fake" and settings.fake_token_delay_ms == 20
        assert settings.stream_ttl_s == 24 * 3600 and settings.ping_interval_s == 15.0
        assert settings.api_keys == {} and not settings.auth_enabled

    def test_lists_and_model_choice(self) -> None:
        settings = Settings.from_env(
            {
                "RUNSTREAM_API_KEYS": "k1:alice, k2:bob",
                "RUNSTREAM_GRAPHS": "mine=pkg.mod:graph",
                "OPENAI_API_KEY": "sk-x",
            },
            env_file="",
        )
        assert settings.api_keys == {"k1": "alice", "k2": "bob"}
        assert settings.graphs == {"mine": "pkg.mod:graph"}
        assert settings.model != "fake"

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("RUNSTREAM_API_KEYS", "no-owner"),
            ("RUNSTREAM_PORT", "eighty"),
            ("RUNSTREAM_STREAM_TTL", "0"),
            ("RUNSTREAM_DATABASE_SCHEMA", "bad;schema"),
        ],
    )
    def test_bad_values_are_refused_by_name(self, name: str, value: str) -> None:
        with pytest.raises(SettingsError, match=name):
            Settings.from_env({name: value}, env_file="")

    def test_dotenv_file_is_read_and_environment_wins(self, tmp_path: object) -> None:
        from pathlib import Path

        env_file = Path(str(tmp_path)) / ".env"
        env_file.write_text("RUNSTREAM_PORT=9001\nRUNSTREAM_MODEL=fake\nRUNSTREAM_HOST=::1\n")
        settings = Settings.from_env({"RUNSTREAM_HOST": "127.0.0.2"}, env_file=str(env_file))
        assert settings.port == 9001 and settings.host == "127.0.0.2"


class TestServeRefusesOpenBinds:
    """Without API keys the server refuses to listen beyond loopback."""

    def test_no_keys_and_a_public_host_exits_with_an_error(self) -> None:
        settings = Settings(redis_url="redis://127.0.0.1:1/0", database_url="postgresql://x")
        assert serve(settings, "0.0.0.0", 8000) == 2

    def test_missing_service_urls_are_named(self) -> None:
        with pytest.raises(SettingsError, match="RUNSTREAM_REDIS_URL and RUNSTREAM_DATABASE_URL"):
            Settings().require_services()
