"""compose.yaml, checked structurally (no Docker engine runs where the suite runs)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def settings_variables() -> set[str]:
    """Every environment variable name the settings module reads."""
    source = (ROOT / "stream_store" / "settings.py").read_text()
    return set(re.findall(r'"((?:RUNSTREAM|OPENAI)_[A-Z_]+)"', source))


class TestCompose:
    """The compose file runs migrations first, health-checks services, and scales workers."""

    def test_services_health_checks_and_order(self) -> None:
        compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
        services = compose["services"]
        assert set(services) == {"valkey", "postgres", "migrate", "server", "worker"}
        for name in ("valkey", "postgres", "server"):
            assert services[name]["healthcheck"]["test"], name
        for name in ("server", "worker"):
            depends = services[name]["depends_on"]
            assert depends["migrate"]["condition"] == "service_completed_successfully"
            assert depends["postgres"]["condition"] == "service_healthy"
            assert depends["valkey"]["condition"] == "service_healthy"
        assert services["migrate"]["command"] == ["runstream", "migrate"]
        assert services["server"]["ports"] == ["8000:8000"]
        # `--scale worker=3` needs a worker without a fixed name or published port
        assert "container_name" not in services["worker"] and "ports" not in services["worker"]

    def test_valkey_has_a_memory_bound_and_never_evicts(self) -> None:
        """Evicting a stream key would lose a run's events silently; at the bound writes fail."""
        valkey = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["valkey"]
        args = valkey["command"]
        assert args[args.index("--maxmemory") + 1]
        assert args[args.index("--maxmemory-policy") + 1] == "noeviction"

    def test_environment_names_are_settings_names(self) -> None:
        compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
        known = settings_variables()
        assert {"RUNSTREAM_REDIS_URL", "RUNSTREAM_DATABASE_URL"} <= known
        for name in ("migrate", "server", "worker"):
            env = compose["services"][name]["environment"]
            assert set(env) <= known, set(env) - known
            assert env["RUNSTREAM_API_KEYS"].startswith(
                "${RUNSTREAM_API_KEYS:?"
            )  # 0.0.0.0 needs keys
            # and API keys need a signing key (issue 9): compose refuses to start without one
            assert env["RUNSTREAM_SIGNING_KEY"].startswith("${RUNSTREAM_SIGNING_KEY:?")
