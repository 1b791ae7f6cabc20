"""Configuration and the command line: one Settings from the environment, safe defaults."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.launcher import ROOT, child_env, listening_socket
from server.processes.commands import serve, up
from server.processes.multiprocess import inherited_socket
from stream_store import settings_docs
from stream_store.settings import GROUPS, Settings, SettingsError, declarations


class TestSettings:
    """The environment is read once, strictly: bad values are refused with their name."""

    def test_defaults_follow_design(self) -> None:
        settings = Settings.from_env({}, env_file="")
        assert (settings.host, settings.port) == ("127.0.0.1", 8000)
        assert settings.model == "fake" and settings.fake_token_delay_ms == 20
        assert settings.stream_ttl_s == 24 * 3600 and settings.ping_interval_s == 15.0
        assert settings.api_keys == {} and not settings.auth_enabled

    def test_limits_between_callers_are_off_for_the_one_caller_without_api_keys(self) -> None:
        """A developer on `./scripts/up` (no keys, loopback) never meets a per-caller limit;
        with keys every one is on at its default, and one set is kept either way."""
        shared = [
            "max_submits_per_minute",
            "max_writes_per_minute",
            "max_queries_per_minute",
            "max_concurrent_queries",
            "max_active_runs",
            "max_sse_connections",
            "max_sse_connections_per_token",
            "max_assistants",
            "max_assistant_versions",
            "max_crons",
            "max_store_items",
            "max_thread_checkpoints",
        ]
        alone = Settings.from_env({}, env_file="")
        keyed = Settings.from_env({"RUNSTREAM_API_KEYS": "k1:alice"}, env_file="")
        for name in shared:
            assert getattr(alone, name) == 0, name
            assert getattr(keyed, name) == getattr(Settings(), name) > 0, name
        # the bounds on bytes and time protect the machine, callers or not; so does the
        # memory assistant's cap on facts (one message could state thousands)
        for name in ("max_store_bytes", "max_checkpoint_bytes", "query_timeout_ms", "max_facts"):
            assert getattr(alone, name) == getattr(keyed, name) == getattr(Settings(), name)
        assert alone.max_facts == 200
        chosen = Settings.from_env(
            {"RUNSTREAM_MAX_SUBMITS_PER_MINUTE": "7", "RUNSTREAM_MAX_FACTS": "0"}, env_file=""
        )
        assert chosen.max_submits_per_minute == 7 and chosen.max_facts == 0

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
        local = Settings.from_env({"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}, env_file="")
        assert local.model == "gpt-4o-mini"  # an endpoint of one's own is a model, key or not
        assert Settings.from_env({}, env_file="").model == "fake"

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("RUNSTREAM_API_KEYS", "no-owner"),
            ("RUNSTREAM_PORT", "eighty"),
            ("RUNSTREAM_STREAM_TTL", "0"),
            ("RUNSTREAM_INTERRUPTED_TTL", "0"),
            ("RUNSTREAM_MAX_RUN_EVENTS", "0"),
            ("RUNSTREAM_MAX_RUN_STREAM_BYTES", "100"),
            ("RUNSTREAM_MAX_REPLAY_BYTES", "100"),
            ("RUNSTREAM_DATABASE_SCHEMA", "bad;schema"),
            ("RUNSTREAM_ALLOWED_HOSTS", "http://runstream.example"),
            ("RUNSTREAM_ALLOWED_HOSTS", "runstream.example:8000"),
            ("RUNSTREAM_ALLOWED_HOSTS", "*.example.com"),
            ("RUNSTREAM_CORS_ORIGINS", "ui.example"),
            ("RUNSTREAM_CORS_ORIGINS", "https://ui.example/app"),
        ],
    )
    def test_bad_values_are_refused_by_name(self, name: str, value: str) -> None:
        with pytest.raises(SettingsError, match=name):
            Settings.from_env({name: value}, env_file="")

    def test_allowed_hosts_are_a_lower_cased_list(self) -> None:
        """RUNSTREAM_ALLOWED_HOSTS (issue 9): names and addresses, IPv6 with or without brackets."""
        assert Settings.from_env({}, env_file="").allowed_hosts == ()
        value = " Runstream.Internal, 10.0.0.7,[fd00::1],, fd00::2 "
        settings = Settings.from_env({"RUNSTREAM_ALLOWED_HOSTS": value}, env_file="")
        assert settings.allowed_hosts == ("runstream.internal", "10.0.0.7", "fd00::1", "fd00::2")

    def test_cors_origins_are_a_lower_cased_list(self) -> None:
        assert Settings.from_env({}, env_file="").cors_origins == ()
        value = "https://UI.example, http://localhost:3000/"
        settings = Settings.from_env({"RUNSTREAM_CORS_ORIGINS": value}, env_file="")
        assert settings.cors_origins == ("https://ui.example", "http://localhost:3000")

    def test_dotenv_file_is_read_and_environment_wins(self, tmp_path: object) -> None:
        from pathlib import Path

        env_file = Path(str(tmp_path)) / ".env"
        env_file.write_text("RUNSTREAM_PORT=9001\nRUNSTREAM_MODEL=fake\nRUNSTREAM_HOST=::1\n")
        settings = Settings.from_env({"RUNSTREAM_HOST": "127.0.0.2"}, env_file=str(env_file))
        assert settings.port == 9001 and settings.host == "127.0.0.2"


class TestDeclaredOnce:
    """Each setting is declared once (variable, default, bounds, concern, meaning) and both the
    reader and docs/operations.md are made from the declarations."""

    def test_every_field_is_declared_with_a_variable_of_its_own_in_a_concern(self) -> None:
        declared = dict(declarations())
        assert set(declared) == set(Settings.__dataclass_fields__)
        variables = [each.env for each in declared.values()]
        assert len(set(variables)) == len(variables)
        assert {each.group for each in declared.values()} == set(GROUPS)
        assert all(each.doc and each.parse.accepts for each in declared.values())

    def test_operations_md_shows_every_setting_as_declared(self) -> None:
        """Run `python -m stream_store.settings_docs` after changing a declaration."""
        document = settings_docs.OPERATIONS_MD.read_text()
        assert settings_docs.with_tables(document) == document
        for _, each in declarations():
            assert f"| `{each.env}` |" in document

    def test_the_other_docs_name_only_declared_variables_with_their_declared_defaults(
        self,
    ) -> None:
        """The prose elsewhere (docs/protocol.md's limits, docs/security.md, the README) names
        variables and quotes defaults too: a renamed setting or a changed default shows here.
        `RUNSTREAM_TEST_*`, `_BENCH_*` and `_SKIP_*` are the test suite's, not settings."""
        defaults = Settings()
        declared = {
            each.env: each.parse.write(getattr(defaults, name))
            for name, each in declarations()
            if getattr(defaults, name) is not None
        }
        known = {each.env for _, each in declarations()}
        root = settings_docs.OPERATIONS_MD.parent.parent
        for document in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
            text = document.read_text()
            for name in re.findall(r"\b(RUNSTREAM_[A-Z0-9_]*[A-Z0-9])\b", text):
                if not name.startswith(("RUNSTREAM_TEST_", "RUNSTREAM_BENCH_", "RUNSTREAM_SKIP_")):
                    assert name in known, (document, name)
            quoted = re.findall(r"`(RUNSTREAM_[A-Z_]+)` \(default (\d+)(?: s)?[,)]", text)
            quoted += [
                (name, value)
                for value, name in re.findall(
                    r"\| (\d+)(?: \([^)]*\))? \| `(RUNSTREAM_[A-Z_]+)` \|", text
                )
            ]
            for name, value in quoted:
                assert declared.get(name) == value, (document, name, value)

    def test_an_empty_environment_gives_the_declared_defaults(self) -> None:
        """But for the defaults declared to depend on other settings (`unset`)."""
        read, declared = Settings.from_env({}, env_file=""), Settings()
        for name, each in declarations():
            if each.unset is None:
                assert getattr(read, name) == getattr(declared, name), name

    def test_durations_in_milliseconds_are_held_in_seconds(self) -> None:
        env = {"RUNSTREAM_LEASE_MS": "2500", "RUNSTREAM_THREAD_RETENTION": "0"}
        settings = Settings.from_env(env, env_file="")
        assert settings.lease_s == 2.5 and settings.thread_retention_s is None
        with pytest.raises(SettingsError, match="RUNSTREAM_LEASE_MS must be >= 100, got 99"):
            Settings.from_env({"RUNSTREAM_LEASE_MS": "99"}, env_file="")

    @pytest.mark.parametrize(
        ("name", "value", "expects"),
        [
            ("RUNSTREAM_PORT", "70000", "<= 65535"),
            ("RUNSTREAM_LOG_FORMAT", "xml", "'console' or 'json'"),
            ("RUNSTREAM_LOG_LEVEL", "loud", "'debug' or 'info'"),
            ("RUNSTREAM_REDIS_PREFIX", "a{b}", "braces"),
        ],
    )
    def test_a_value_out_of_its_bounds_names_the_variable_and_what_it_takes(
        self, name: str, value: str, expects: str
    ) -> None:
        with pytest.raises(SettingsError, match=name) as refused:
            Settings.from_env({name: value}, env_file="")
        assert expects in str(refused.value)

    def test_choices_are_read_in_any_case(self) -> None:
        env = {"RUNSTREAM_LOG_FORMAT": "JSON", "RUNSTREAM_LOG_LEVEL": "Warning"}
        settings = Settings.from_env(env, env_file="")
        assert settings.log_json and settings.log_level == "warning"

    def test_a_child_processes_environment_reads_back_as_the_same_settings(self) -> None:
        """`Settings.environment` (what `tests/processes.py` hands its children) writes each
        value as its parser reads it: milliseconds, lists, maps, choices and flags."""
        env = {
            "RUNSTREAM_API_KEYS": "k1:alice,k2:bob",
            "RUNSTREAM_SIGNING_KEYS": "new:s1,old:s2",
            "RUNSTREAM_LEASE_MS": "2500",
            "RUNSTREAM_ALLOWED_HOSTS": "fd00::1,runstream.internal",
            "RUNSTREAM_CORS_ORIGINS": "https://ui.example",
            "RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN": "yes",
            "RUNSTREAM_LOG_FORMAT": "json",
            "RUNSTREAM_GRAPHS": "mine=pkg.mod:graph",
            "RUNSTREAM_THREAD_RETENTION": "60",
            "OPENAI_BASE_URL": "http://127.0.0.1:8080/v1",
        }
        for settings in (Settings.from_env(env, env_file=""), Settings.from_env({}, env_file="")):
            assert Settings.from_env(settings.environment(), env_file="") == settings
        given = Settings(poll_delay_s=0.02, fake_token_delay_ms=0, redis_url="redis://r:1/0")
        assert given.environment(
            "poll_delay_s", "fake_token_delay_ms", "redis_url", "jwt_issuer"
        ) == {
            "RUNSTREAM_POLL_DELAY_MS": "20",
            "RUNSTREAM_FAKE_TOKEN_DELAY_MS": "0",
            "RUNSTREAM_REDIS_URL": "redis://r:1/0",
        }

    def test_secrets_stay_out_of_the_repr(self) -> None:
        env = {
            "RUNSTREAM_API_KEYS": "topsecret1:alice",
            "RUNSTREAM_SIGNING_KEYS": "k1:topsecret2",
            "OPENAI_API_KEY": "topsecret3",
            "RUNSTREAM_API_KEY": "topsecret4",
        }
        shown = repr(Settings.from_env(env, env_file=""))
        shown += repr(Settings(jwt_secret="topsecret5" * 4, signing_key="topsecret6"))
        assert "topsecret" not in shown and "alice" not in shown


class TestServeRefusesOpenBinds:
    """Without API keys the server refuses to listen beyond loopback."""

    def test_no_keys_and_a_public_host_exits_with_an_error(self) -> None:
        settings = Settings(redis_url="redis://127.0.0.1:1/0", database_url="postgresql://x")
        assert serve(settings, "0.0.0.0", 8000) == 2

    def test_missing_service_urls_are_named(self) -> None:
        with pytest.raises(SettingsError, match="RUNSTREAM_REDIS_URL and RUNSTREAM_DATABASE_URL"):
            Settings().require_services()


class TestServeOnAnInheritedSocket:
    """`serve --fd N`: the server takes its starter's socket (the port never free in between);
    a descriptor that is no TCP socket, or one given with an address, is refused up front.
    Every test that starts `runstream serve` (tests/processes.py) serves this way."""

    def serve(self, *args: str, pass_fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "server.processes.cli", "serve", *args]
        env = child_env({"RUNSTREAM_CONFIG": "none"})
        return subprocess.run(
            argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, pass_fds=pass_fds
        )

    def test_an_address_beside_the_socket_is_refused(self) -> None:
        with listening_socket() as sock:
            fd = sock.fileno()
            done = self.serve("--fd", str(fd), "--port", "8000", pass_fds=(fd,))
        assert done.returncode == 2, done.stderr
        assert "--fd serves on the socket's own address: no --host or --port" in done.stderr

    def test_a_descriptor_that_is_not_open_is_refused(self) -> None:
        done = self.serve("--fd", "97")
        assert done.returncode == 2, done.stderr
        assert "--fd 97: not an open socket" in done.stderr

    def test_a_descriptor_that_is_not_a_tcp_socket_is_refused(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            fd = os.dup(udp.fileno())
        with pytest.raises(SettingsError, match=f"--fd {fd}: not a TCP socket"):
            inherited_socket(fd)
        with pytest.raises(OSError):
            os.fstat(fd)  # closed by the refusal: nothing is kept open


class TestUpHoldsItsPort:
    """`up` binds its port once the data folder is its own, before it starts anything, and
    holds it for its life (each server child serves on it, `serve --fd`): a port another
    process listens on is refused at once."""

    def test_a_port_in_use_is_refused_before_anything_starts(self, tmp_path: Path) -> None:
        with listening_socket() as taken:
            port = taken.getsockname()[1]
            env = child_env({"RUNSTREAM_DATA_DIR": str(tmp_path / "rs")})
            done = subprocess.run(
                [sys.executable, "-m", "server.processes.cli", "up", "--port", str(port)],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
        assert done.returncode == 2, done.stderr
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
        assert not (tmp_path / "rs" / "services-secret").exists()  # no service started


class TestSigningKeys:
    """Stream-token keys (issue 9): `RUNSTREAM_SIGNING_KEYS=id:secret,...`, the first signing,
    or one `RUNSTREAM_SIGNING_KEY`; errors name the setting and never echo a secret."""

    def test_signing_keys_are_a_list_in_order(self) -> None:
        value = " k2:new-secret , k1:old:secret:with:colons "
        settings = Settings.from_env({"RUNSTREAM_SIGNING_KEYS": value}, env_file="")
        expected = (("k2", "new-secret"), ("k1", "old:secret:with:colons"))
        assert settings.signing_keys == expected
        assert settings.stream_token_keys() == expected

    def test_one_signing_key_is_the_list_of_one_key_named_default(self) -> None:
        settings = Settings.from_env({"RUNSTREAM_SIGNING_KEY": "s3cret"}, env_file="")
        assert settings.stream_token_keys() == (("default", "s3cret"),)

    @pytest.mark.parametrize(
        "value",
        [
            "k1",
            "k1:",
            ":topsecret",
            "bad id:topsecret",
            "k\u00e9:topsecret",
            "k" * 33 + ":topsecret",
            "k1:topsecret,k1:topsecret2",
        ],
        ids=["no-colon", "no-secret", "no-id", "space-in-id", "non-ascii-id", "long-id", "twice"],
    )
    def test_malformed_signing_keys_are_refused_without_echoing_secrets(self, value: str) -> None:
        with pytest.raises(SettingsError, match="RUNSTREAM_SIGNING_KEYS") as refused:
            Settings.from_env({"RUNSTREAM_SIGNING_KEYS": value}, env_file="")
        assert "topsecret" not in str(refused.value)

    def test_malformed_api_keys_are_refused_without_echoing_keys(self) -> None:
        with pytest.raises(SettingsError, match="RUNSTREAM_API_KEYS") as refused:
            Settings.from_env({"RUNSTREAM_API_KEYS": "topsecret:alice,topsecret2"}, env_file="")
        assert "topsecret" not in str(refused.value)

    @pytest.mark.parametrize(
        ("owner", "problem"),
        [("a" * 300, "longer than 256 bytes"), ("ops\x1bteam", "non-printable")],
    )
    def test_an_api_keys_owner_no_caller_could_be_refuses_start(
        self, owner: str, problem: str
    ) -> None:
        """An owner is a caller's identity, checked as a JWT's `sub` is (server/callers/auth.py)."""
        with pytest.raises(SettingsError, match=problem) as refused:
            Settings.from_env({"RUNSTREAM_API_KEYS": f"topsecret:{owner}"}, env_file="")
        assert "topsecret" not in str(refused.value)

    def test_an_api_key_longer_than_a_bearer_token_may_be_refuses_start(self) -> None:
        key = "k" * 20_000
        with pytest.raises(SettingsError, match="a key is longer than 16384") as refused:
            Settings.from_env({"RUNSTREAM_API_KEYS": f"{key}:alice"}, env_file="")
        assert key not in str(refused.value)

    def test_both_forms_at_once_are_refused(self) -> None:
        env = {"RUNSTREAM_SIGNING_KEY": "a", "RUNSTREAM_SIGNING_KEYS": "k1:b"}
        with pytest.raises(SettingsError, match="not both"):
            Settings.from_env(env, env_file="")

    def test_api_keys_without_a_signing_key_have_no_token_keys(self) -> None:
        settings = Settings.from_env({"RUNSTREAM_API_KEYS": "k:alice"}, env_file="")
        with pytest.raises(SettingsError, match="RUNSTREAM_SIGNING_KEY"):
            settings.stream_token_keys()


class TestProductionNeedsASigningKey:
    """With API keys configured, `serve` and `up` refuse to start without a signing key: stream
    URLs must not be signed with a key derived from, or guessed without, a secret (issue 9)."""

    @pytest.mark.parametrize("command", ["serve", "up"])
    def test_api_keys_without_a_signing_key_refuse_to_start(self, command: str) -> None:
        settings = Settings(
            redis_url="redis://127.0.0.1:1/0",
            database_url="postgresql://127.0.0.1:1/none",
            api_keys={"k": "alice"},
        )
        with pytest.raises(SettingsError, match="RUNSTREAM_SIGNING_KEY"):
            if command == "serve":
                serve(settings, "127.0.0.1", 8000)
            else:
                up(settings, "127.0.0.1", 8000)
