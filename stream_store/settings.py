"""Process settings: read once from the environment (and `.env`) at the entry point.

Nothing else in runstream reads `os.environ`; the `Settings` built here is passed down to
every component. It is frozen: a value cannot change after it was read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from dotenv import dotenv_values

__all__ = ["Settings", "SettingsError"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class SettingsError(ValueError):
    """A configuration value is missing or malformed."""


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name} must be >= {minimum}, got {value}")
    return value


def _pairs(env: Mapping[str, str], name: str, sep: str) -> dict[str, str]:
    """Parse `a<sep>b,c<sep>d` lists such as RUNSTREAM_API_KEYS and RUNSTREAM_GRAPHS."""
    result: dict[str, str] = {}
    for item in (env.get(name) or "").split(","):
        item = item.strip()
        if not item:
            continue
        left, found, right = item.partition(sep)
        if not found or not left.strip() or not right.strip():
            raise SettingsError(f"{name}: expected 'x{sep}y' items, got {item!r}")
        result[left.strip()] = right.strip()
    return result


@dataclass(frozen=True)
class Settings:
    """Everything a server or worker process is configured with (design.md section 5)."""

    redis_url: str | None = None
    database_url: str | None = None
    database_schema: str = "public"
    redis_prefix: str = "runstream"
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: dict[str, str] = field(default_factory=dict)
    signing_key: str = ""
    graphs: dict[str, str] = field(default_factory=dict)
    stream_ttl_s: int = 24 * 3600
    stream_token_ttl_s: int = 3600
    ping_interval_s: float = 15.0
    viewer_queue_size: int = 4096
    max_body_bytes: int = 1024 * 1024
    worker_concurrency: int = 100
    job_timeout_s: int = 3600
    poll_delay_s: float = 0.5  # only when a wake-up is lost: enqueues wake the workers
    lease_s: float = 5.0
    reaper_interval_s: float = 1.0
    max_attempts: int = 3
    shutdown_grace_s: float = 10.0
    thread_retention_s: int | None = None
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    model: str = "fake"
    fake_token_delay_ms: int = 20
    data_dir: str = ".runstream"  # where `runstream up` keeps its embedded services' data
    client_api_key: str | None = None  # what `runstream chat`/`attach` present
    log_json: bool = False
    log_level: str = "info"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, env_file: str = ".env") -> Settings:
        """Build settings from `environ` (default `os.environ`) over an optional `.env` file."""
        env: dict[str, str] = {}
        if env_file and os.path.exists(env_file):
            env.update({k: v for k, v in dotenv_values(env_file).items() if v is not None})
        env.update(os.environ if environ is None else environ)

        schema = env.get("RUNSTREAM_DATABASE_SCHEMA") or "public"
        if not _IDENTIFIER.match(schema):
            raise SettingsError(f"RUNSTREAM_DATABASE_SCHEMA is not an identifier: {schema!r}")
        openai_key = env.get("OPENAI_API_KEY") or None
        model = env.get("RUNSTREAM_MODEL") or ("gpt-4o-mini" if openai_key else "fake")
        api_keys = _pairs(env, "RUNSTREAM_API_KEYS", ":")
        return cls(
            redis_url=env.get("RUNSTREAM_REDIS_URL") or None,
            database_url=env.get("RUNSTREAM_DATABASE_URL") or None,
            database_schema=schema,
            redis_prefix=env.get("RUNSTREAM_REDIS_PREFIX") or "runstream",
            host=env.get("RUNSTREAM_HOST") or "127.0.0.1",
            port=_int(env, "RUNSTREAM_PORT", 8000),
            api_keys=api_keys,
            signing_key=env.get("RUNSTREAM_SIGNING_KEY") or "",
            graphs=_pairs(env, "RUNSTREAM_GRAPHS", "="),
            stream_ttl_s=_int(env, "RUNSTREAM_STREAM_TTL", 24 * 3600, minimum=1),
            stream_token_ttl_s=_int(env, "RUNSTREAM_STREAM_TOKEN_TTL", 3600, minimum=1),
            ping_interval_s=_int(env, "RUNSTREAM_PING_INTERVAL_MS", 15000, minimum=10) / 1000,
            viewer_queue_size=_int(env, "RUNSTREAM_VIEWER_QUEUE_SIZE", 4096, minimum=1),
            max_body_bytes=_int(env, "RUNSTREAM_MAX_BODY_BYTES", 1024 * 1024, minimum=1024),
            worker_concurrency=_int(env, "RUNSTREAM_WORKER_CONCURRENCY", 100, minimum=1),
            job_timeout_s=_int(env, "RUNSTREAM_JOB_TIMEOUT", 3600, minimum=1),
            poll_delay_s=_int(env, "RUNSTREAM_POLL_DELAY_MS", 500, minimum=1) / 1000,
            lease_s=_int(env, "RUNSTREAM_LEASE_MS", 5000, minimum=100) / 1000,
            reaper_interval_s=_int(env, "RUNSTREAM_REAPER_INTERVAL_MS", 1000, minimum=10) / 1000,
            max_attempts=_int(env, "RUNSTREAM_MAX_ATTEMPTS", 3, minimum=1),
            shutdown_grace_s=_int(env, "RUNSTREAM_SHUTDOWN_GRACE_MS", 10000) / 1000,
            thread_retention_s=_int(env, "RUNSTREAM_THREAD_RETENTION", 0, minimum=0) or None,
            openai_api_key=openai_key,
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            model=model,
            fake_token_delay_ms=_int(env, "RUNSTREAM_FAKE_TOKEN_DELAY_MS", 20),
            client_api_key=env.get("RUNSTREAM_API_KEY") or None,
            data_dir=env.get("RUNSTREAM_DATA_DIR") or ".runstream",
            log_json=(env.get("RUNSTREAM_LOG_FORMAT") or "console") == "json",
            log_level=(env.get("RUNSTREAM_LOG_LEVEL") or "info").lower(),
        )

    def require_services(self) -> tuple[str, str]:
        """The Redis and Postgres URLs, or a clear error naming what is missing."""
        missing = [
            name
            for name, value in (
                ("RUNSTREAM_REDIS_URL", self.redis_url),
                ("RUNSTREAM_DATABASE_URL", self.database_url),
            )
            if not value
        ]
        if missing:
            raise SettingsError(f"set {' and '.join(missing)} (or use `runstream up`)")
        assert self.redis_url and self.database_url
        return self.redis_url, self.database_url

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys)
