"""Process settings: read once from the environment (and `.env`) at the entry point.

Nothing else in runstream reads `os.environ`; the `Settings` built here is passed down to
every component. It is frozen: a value cannot change after it was read. Its length is the
number of settings (a field and a line of `from_env` each), not the length of any one rule.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from dotenv import dotenv_values

from . import limits

__all__ = ["SINGLE_KEY_ID", "Settings", "SettingsError"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")
_KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")

SINGLE_KEY_ID = "default"  # the key id of RUNSTREAM_SIGNING_KEY's one key
# Without API keys every caller is `local`: a token can grant nothing a request without one
# does not, so a fixed secret does (this mode listens on loopback only).
_NO_AUTH_KEY = ("local", "runstream-no-auth")


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


def _items(
    env: Mapping[str, str], name: str, sep: str, *, secret: bool = False
) -> list[tuple[str, str]]:
    """Parse `a<sep>b,c<sep>d` lists (RUNSTREAM_API_KEYS, RUNSTREAM_GRAPHS, ...), in order.

    With `secret` (the right-hand sides are secrets), an error never shows an item.
    """
    result: list[tuple[str, str]] = []
    for item in (env.get(name) or "").split(","):
        left, found, right = (part.strip() for part in item.strip().partition(sep))
        if not (left or found or right):
            continue
        if not found or not left or not right:
            shown = "one is incomplete" if secret else f"got {item.strip()!r}"
            raise SettingsError(f"{name}: expected 'x{sep}y' items, {shown}")
        result.append((left, right))
    return result


def _pairs(env: Mapping[str, str], name: str, sep: str, *, secret: bool = False) -> dict[str, str]:
    return dict(_items(env, name, sep, secret=secret))


def _signing_keys(env: Mapping[str, str], name: str) -> tuple[tuple[str, str], ...]:
    """Parse RUNSTREAM_SIGNING_KEYS, `key_id:secret,...` (the first signs), in order.

    Errors name the key id, never the secret.
    """
    keys = _items(env, name, ":", secret=True)
    for index, (key_id, _) in enumerate(keys):
        if not _KEY_ID.match(key_id):
            raise SettingsError(
                f"{name}: a key id is 1-32 characters from A-Z a-z 0-9 _ -, got {key_id[:40]!r}"
            )
        if any(key_id == earlier for earlier, _ in keys[:index]):
            raise SettingsError(f"{name}: key id {key_id!r} is given twice")
    return tuple(keys)


def _flag(env: Mapping[str, str], name: str) -> bool:
    """A yes/no setting: `true`/`1`/`yes` or `false`/`0`/`no` (unset: no)."""
    raw = (env.get(name) or "").strip().lower()
    if raw in ("", "false", "0", "no"):
        return False
    if raw in ("true", "1", "yes"):
        return True
    raise SettingsError(f"{name} must be true or false, got {raw!r}")


def _origins(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Parse a comma list of web origins (RUNSTREAM_CORS_ORIGINS): `scheme://host[:port]`."""
    result: list[str] = []
    for item in (env.get(name) or "").split(","):
        origin = item.strip().lower().rstrip("/")
        if not origin:
            continue
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path:
            raise SettingsError(f"{name}: expected origins like https://app.example, got {item!r}")
        result.append(origin)
    return tuple(result)


def _hosts(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Parse a comma list of host names or IP addresses (RUNSTREAM_ALLOWED_HOSTS), lower-cased.

    An IPv6 address may be given with or without brackets; a port, scheme or wildcard is refused.
    """
    result: list[str] = []
    for item in (env.get(name) or "").split(","):
        host = item.strip().lower()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not host:
            continue
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not _HOST_NAME.match(host):
                raise SettingsError(
                    f"{name}: expected host names or IP addresses (no scheme, port or wildcard), "
                    f"got {item.strip()!r}"
                ) from None
        result.append(host)
    return tuple(result)


@dataclass(frozen=True)
class Settings:
    """Everything a server or worker process is configured with (README.md configuration table)."""

    redis_url: str | None = None
    database_url: str | None = None
    database_schema: str = "public"
    # "transaction": database_url is a transaction-mode pooler (PgBouncer), which keeps no
    # session state, so runstream sends none and migrates through direct_database_url.
    database_pool_mode: str = "session"
    direct_database_url: str | None = None
    redis_prefix: str = "runstream"
    # On a Redis Cluster: how many hash tags a deployment's runs are spread over (keys.py).
    redis_cluster_shards: int = 16
    host: str = "127.0.0.1"
    port: int = 8000
    allowed_hosts: tuple[str, ...] = ()  # names the server is reached by, beyond loopback and host
    # Web origins whose pages may call the API from the browser (CORS); none by default.
    cors_origins: tuple[str, ...] = ()
    # Without a sign-in, pages of origins a project's `http.cors` lets in by `*` or a regex may
    # read too (server/browser_guard.py); refused unless this is set.
    cors_any_origin_without_sign_in: bool = False
    api_keys: dict[str, str] = field(default_factory=dict)
    # Sign-in with JWTs instead of API keys (server/callers/jwt_auth.py): an HS256 secret, or the
    # JWKS of an identity provider (RS256/ES256); the token's `sub` is the owner.
    jwt_secret: str = ""
    jwt_jwks_url: str | None = None
    jwt_issuer: str | None = None  # required in every token when set
    jwt_audience: str | None = None  # required in every token when set
    signing_key: str = ""  # one key, id SINGLE_KEY_ID; or signing_keys, not both
    signing_keys: tuple[tuple[str, str], ...] = ()  # (key id, secret); the first signs
    graphs: dict[str, str] = field(default_factory=dict)
    # A LangGraph project's langgraph.json (project/langgraph_json.py); `--config` or
    # ./langgraph.json
    config_path: str | None = None
    stream_ttl_s: int = 24 * 3600
    interrupted_ttl_s: int = limits.DEFAULT_INTERRUPTED_TTL_S  # until the run is resumed
    stream_token_ttl_s: int = 3600
    ping_interval_s: float = 15.0
    viewer_queue_size: int = 4096
    viewer_cut_off_s: float = 10.0
    max_body_bytes: int = 1024 * 1024
    max_header_bytes: int = limits.DEFAULT_MAX_HEADER_BYTES  # request line and headers
    max_message_chars: int = limits.DEFAULT_MAX_MESSAGE_CHARS
    max_run_messages: int = limits.DEFAULT_MAX_RUN_MESSAGES
    max_metadata_bytes: int = limits.DEFAULT_MAX_METADATA_BYTES
    max_metadata_keys: int = limits.DEFAULT_MAX_METADATA_KEYS
    max_resume_bytes: int = limits.DEFAULT_MAX_RESUME_BYTES
    # What one run's stream may hold; past either bound the run fails (`stream_too_large`).
    max_run_events: int = limits.DEFAULT_MAX_RUN_EVENTS
    max_run_stream_bytes: int = limits.DEFAULT_MAX_RUN_STREAM_BYTES
    # What one replay of a LangGraph stream may write (docs/security.md, "Replays").
    max_replay_bytes: int = limits.DEFAULT_MAX_REPLAY_BYTES
    # Per caller, across all servers; 0 turns one off (docs/security.md, "Per-caller limits").
    max_submits_per_minute: int = limits.DEFAULT_MAX_SUBMITS_PER_MINUTE
    max_active_runs: int = limits.DEFAULT_MAX_ACTIVE_RUNS
    max_sse_connections: int = limits.DEFAULT_MAX_SSE_CONNECTIONS
    max_sse_connections_per_token: int = limits.DEFAULT_MAX_SSE_CONNECTIONS_PER_TOKEN
    max_assistants: int = limits.DEFAULT_MAX_ASSISTANTS
    max_crons: int = limits.DEFAULT_MAX_CRONS
    # LangGraph's webhooks (docs/langgraph.md, "Webhooks"): a caller's deliveries not settled
    # yet; and whether a webhook may reach loopback and private addresses (tests, one host).
    max_pending_webhooks: int = limits.DEFAULT_MAX_PENDING_WEBHOOKS
    webhook_private_addresses: bool = False
    max_assistant_versions: int = limits.DEFAULT_MAX_ASSISTANT_VERSIONS
    max_writes_per_minute: int = limits.DEFAULT_MAX_WRITES_PER_MINUTE
    max_queries_per_minute: int = limits.DEFAULT_MAX_QUERIES_PER_MINUTE
    max_concurrent_queries: int = limits.DEFAULT_MAX_CONCURRENT_QUERIES
    query_timeout_ms: int = limits.DEFAULT_QUERY_TIMEOUT_MS
    max_store_items: int = limits.DEFAULT_MAX_STORE_ITEMS
    max_store_bytes: int = limits.DEFAULT_MAX_STORE_BYTES
    max_facts: int = limits.DEFAULT_MAX_FACTS  # the memory assistant's, per user
    max_thread_checkpoints: int = limits.DEFAULT_MAX_THREAD_CHECKPOINTS
    max_checkpoint_bytes: int = limits.DEFAULT_MAX_CHECKPOINT_BYTES
    worker_concurrency: int = 100
    worker_metrics_port: int = 0  # the worker's /metrics on RUNSTREAM_HOST; 0: none
    job_timeout_s: int = 3600
    poll_delay_s: float = 0.5  # only when a wake-up is lost: enqueues wake the workers
    lease_s: float = 5.0
    reaper_interval_s: float = 1.0
    cron_interval_s: float = 1.0  # how often a server fires due LangGraph crons; 0: never
    max_attempts: int = 3
    shutdown_grace_s: float = 10.0
    thread_retention_s: int | None = None
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    model: str = "fake"
    fake_token_delay_ms: int = 20
    data_dir: str = ".runstream"  # where `runstream up` keeps its embedded services' data
    client_api_key: str | None = None  # what the API's command-line clients present
    client_url: str | None = None  # the server they talk to (RUNSTREAM_URL)
    log_json: bool = False
    log_level: str = "info"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, env_file: str = ".env") -> Settings:
        """Build settings from `environ` (default `os.environ`) over an optional `.env` file.

        One line per setting, so it is as long as the list of settings.
        """
        env: dict[str, str] = {}
        if env_file and os.path.exists(env_file):
            env.update({k: v for k, v in dotenv_values(env_file).items() if v is not None})
        env.update(os.environ if environ is None else environ)

        prefix = env.get("RUNSTREAM_REDIS_PREFIX") or "runstream"
        if "{" in prefix or "}" in prefix:  # it is a hash tag on a Redis Cluster (keys.py)
            raise SettingsError(f"RUNSTREAM_REDIS_PREFIX may not contain braces: {prefix!r}")
        schema = env.get("RUNSTREAM_DATABASE_SCHEMA") or "public"
        if not _IDENTIFIER.match(schema):
            raise SettingsError(f"RUNSTREAM_DATABASE_SCHEMA is not an identifier: {schema!r}")
        pool_mode = env.get("RUNSTREAM_DATABASE_POOL_MODE") or "session"
        if pool_mode not in ("session", "transaction"):
            raise SettingsError(
                f"RUNSTREAM_DATABASE_POOL_MODE is 'session' or 'transaction', not {pool_mode!r}"
            )
        direct_url = env.get("RUNSTREAM_DIRECT_DATABASE_URL") or None
        if pool_mode == "transaction" and not direct_url:
            raise SettingsError(
                "RUNSTREAM_DATABASE_POOL_MODE=transaction needs RUNSTREAM_DIRECT_DATABASE_URL:"
                " migrations hold a session-level lock, which a transaction pooler cannot keep"
            )
        openai_key = env.get("OPENAI_API_KEY") or None
        # A key, or an OpenAI-compatible endpoint of your own (a local server needs no key)
        endpoint = openai_key or env.get("OPENAI_BASE_URL")
        model = env.get("RUNSTREAM_MODEL") or ("gpt-4o-mini" if endpoint else "fake")
        api_keys = _pairs(env, "RUNSTREAM_API_KEYS", ":", secret=True)
        _check_api_keys(api_keys)
        signing_key = env.get("RUNSTREAM_SIGNING_KEY") or ""
        signing_keys = _signing_keys(env, "RUNSTREAM_SIGNING_KEYS")
        if signing_key and signing_keys:
            raise SettingsError(
                "set RUNSTREAM_SIGNING_KEY (one key) or RUNSTREAM_SIGNING_KEYS (a list), not both"
            )

        jwt_secret = env.get("RUNSTREAM_JWT_SECRET") or ""
        jwt_jwks_url = env.get("RUNSTREAM_JWT_JWKS_URL") or None
        _check_jwt(env, api_keys, jwt_secret, jwt_jwks_url)
        authenticated = bool(api_keys or jwt_secret or jwt_jwks_url)

        def per_caller(name: str, default: int) -> int:
            """A limit that shares the service between callers: with no API keys or JWTs there
            is one caller (`local`, on loopback only), whom it would only get in the way of, so
            it is off unless set (docs/security.md, "Per-caller limits")."""
            return _int(env, name, default if authenticated else 0)

        return cls(
            redis_url=env.get("RUNSTREAM_REDIS_URL") or None,
            database_url=env.get("RUNSTREAM_DATABASE_URL") or None,
            database_schema=schema,
            database_pool_mode=pool_mode,
            direct_database_url=direct_url,
            redis_prefix=prefix,
            redis_cluster_shards=_int(env, "RUNSTREAM_REDIS_CLUSTER_SHARDS", 16, minimum=1),
            host=env.get("RUNSTREAM_HOST") or "127.0.0.1",
            port=_int(env, "RUNSTREAM_PORT", 8000),
            allowed_hosts=_hosts(env, "RUNSTREAM_ALLOWED_HOSTS"),
            cors_origins=_origins(env, "RUNSTREAM_CORS_ORIGINS"),
            cors_any_origin_without_sign_in=_flag(env, "RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN"),
            api_keys=api_keys,
            jwt_secret=jwt_secret,
            jwt_jwks_url=jwt_jwks_url,
            jwt_issuer=env.get("RUNSTREAM_JWT_ISSUER") or None,
            jwt_audience=env.get("RUNSTREAM_JWT_AUDIENCE") or None,
            signing_key=signing_key,
            signing_keys=signing_keys,
            graphs=_pairs(env, "RUNSTREAM_GRAPHS", "="),
            config_path=env.get("RUNSTREAM_CONFIG") or None,
            stream_ttl_s=_int(env, "RUNSTREAM_STREAM_TTL", 24 * 3600, minimum=1),
            interrupted_ttl_s=_int(
                env, "RUNSTREAM_INTERRUPTED_TTL", limits.DEFAULT_INTERRUPTED_TTL_S, minimum=1
            ),
            stream_token_ttl_s=_int(env, "RUNSTREAM_STREAM_TOKEN_TTL", 3600, minimum=1),
            ping_interval_s=_int(env, "RUNSTREAM_PING_INTERVAL_MS", 15000, minimum=10) / 1000,
            viewer_queue_size=_int(env, "RUNSTREAM_VIEWER_QUEUE_SIZE", 4096, minimum=1),
            viewer_cut_off_s=_int(env, "RUNSTREAM_VIEWER_CUT_OFF_MS", 10_000, minimum=100) / 1000,
            max_body_bytes=_int(env, "RUNSTREAM_MAX_BODY_BYTES", 1024 * 1024, minimum=1024),
            max_header_bytes=_int(
                env, "RUNSTREAM_MAX_HEADER_BYTES", limits.DEFAULT_MAX_HEADER_BYTES, minimum=4096
            ),
            max_message_chars=_int(
                env, "RUNSTREAM_MAX_MESSAGE_CHARS", limits.DEFAULT_MAX_MESSAGE_CHARS, minimum=1
            ),
            max_run_messages=_int(
                env, "RUNSTREAM_MAX_RUN_MESSAGES", limits.DEFAULT_MAX_RUN_MESSAGES, minimum=1
            ),
            max_metadata_bytes=_int(
                env, "RUNSTREAM_MAX_METADATA_BYTES", limits.DEFAULT_MAX_METADATA_BYTES, minimum=2
            ),
            max_metadata_keys=_int(
                env, "RUNSTREAM_MAX_METADATA_KEYS", limits.DEFAULT_MAX_METADATA_KEYS
            ),
            max_resume_bytes=_int(
                env, "RUNSTREAM_MAX_RESUME_BYTES", limits.DEFAULT_MAX_RESUME_BYTES, minimum=4
            ),
            max_run_events=_int(
                env, "RUNSTREAM_MAX_RUN_EVENTS", limits.DEFAULT_MAX_RUN_EVENTS, minimum=1
            ),
            max_run_stream_bytes=_int(
                env,
                "RUNSTREAM_MAX_RUN_STREAM_BYTES",
                limits.DEFAULT_MAX_RUN_STREAM_BYTES,
                minimum=1024,
            ),
            max_replay_bytes=_int(
                env, "RUNSTREAM_MAX_REPLAY_BYTES", limits.DEFAULT_MAX_REPLAY_BYTES, minimum=1024
            ),
            max_submits_per_minute=per_caller(
                "RUNSTREAM_MAX_SUBMITS_PER_MINUTE", limits.DEFAULT_MAX_SUBMITS_PER_MINUTE
            ),
            max_active_runs=per_caller("RUNSTREAM_MAX_ACTIVE_RUNS", limits.DEFAULT_MAX_ACTIVE_RUNS),
            max_assistants=per_caller("RUNSTREAM_MAX_ASSISTANTS", limits.DEFAULT_MAX_ASSISTANTS),
            max_crons=per_caller("RUNSTREAM_MAX_CRONS", limits.DEFAULT_MAX_CRONS),
            max_pending_webhooks=per_caller(
                "RUNSTREAM_MAX_PENDING_WEBHOOKS", limits.DEFAULT_MAX_PENDING_WEBHOOKS
            ),
            webhook_private_addresses=_flag(env, "RUNSTREAM_WEBHOOK_PRIVATE_ADDRESSES"),
            max_assistant_versions=per_caller(
                "RUNSTREAM_MAX_ASSISTANT_VERSIONS", limits.DEFAULT_MAX_ASSISTANT_VERSIONS
            ),
            max_writes_per_minute=per_caller(
                "RUNSTREAM_MAX_WRITES_PER_MINUTE", limits.DEFAULT_MAX_WRITES_PER_MINUTE
            ),
            max_queries_per_minute=per_caller(
                "RUNSTREAM_MAX_QUERIES_PER_MINUTE", limits.DEFAULT_MAX_QUERIES_PER_MINUTE
            ),
            max_concurrent_queries=per_caller(
                "RUNSTREAM_MAX_CONCURRENT_QUERIES", limits.DEFAULT_MAX_CONCURRENT_QUERIES
            ),
            query_timeout_ms=_int(
                env, "RUNSTREAM_QUERY_TIMEOUT_MS", limits.DEFAULT_QUERY_TIMEOUT_MS, minimum=1
            ),
            max_store_items=per_caller("RUNSTREAM_MAX_STORE_ITEMS", limits.DEFAULT_MAX_STORE_ITEMS),
            max_store_bytes=_int(env, "RUNSTREAM_MAX_STORE_BYTES", limits.DEFAULT_MAX_STORE_BYTES),
            max_facts=_int(env, "RUNSTREAM_MAX_FACTS", limits.DEFAULT_MAX_FACTS),
            max_thread_checkpoints=per_caller(
                "RUNSTREAM_MAX_THREAD_CHECKPOINTS", limits.DEFAULT_MAX_THREAD_CHECKPOINTS
            ),
            max_checkpoint_bytes=_int(
                env, "RUNSTREAM_MAX_CHECKPOINT_BYTES", limits.DEFAULT_MAX_CHECKPOINT_BYTES
            ),
            max_sse_connections=per_caller(
                "RUNSTREAM_MAX_SSE_CONNECTIONS", limits.DEFAULT_MAX_SSE_CONNECTIONS
            ),
            max_sse_connections_per_token=per_caller(
                "RUNSTREAM_MAX_SSE_CONNECTIONS_PER_TOKEN",
                limits.DEFAULT_MAX_SSE_CONNECTIONS_PER_TOKEN,
            ),
            worker_concurrency=_int(env, "RUNSTREAM_WORKER_CONCURRENCY", 100, minimum=1),
            worker_metrics_port=_int(env, "RUNSTREAM_WORKER_METRICS_PORT", 0),
            job_timeout_s=_int(env, "RUNSTREAM_JOB_TIMEOUT", 3600, minimum=1),
            poll_delay_s=_int(env, "RUNSTREAM_POLL_DELAY_MS", 500, minimum=1) / 1000,
            lease_s=_int(env, "RUNSTREAM_LEASE_MS", 5000, minimum=100) / 1000,
            reaper_interval_s=_int(env, "RUNSTREAM_REAPER_INTERVAL_MS", 1000, minimum=10) / 1000,
            cron_interval_s=_int(env, "RUNSTREAM_CRON_INTERVAL_MS", 1000) / 1000,
            max_attempts=_int(env, "RUNSTREAM_MAX_ATTEMPTS", 3, minimum=1),
            shutdown_grace_s=_int(env, "RUNSTREAM_SHUTDOWN_GRACE_MS", 10000) / 1000,
            thread_retention_s=_int(env, "RUNSTREAM_THREAD_RETENTION", 0, minimum=0) or None,
            openai_api_key=openai_key,
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            model=model,
            fake_token_delay_ms=_int(env, "RUNSTREAM_FAKE_TOKEN_DELAY_MS", 20),
            client_api_key=env.get("RUNSTREAM_API_KEY") or None,
            client_url=env.get("RUNSTREAM_URL") or None,
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

    def stream_token_keys(self, *, project_auth: bool = False) -> tuple[tuple[str, str], ...]:
        """The (key id, secret) pairs of stream tokens, the one that signs first.

        `RUNSTREAM_SIGNING_KEY=s` is the list `default:s`. Without any sign-in (API keys, JWTs,
        or `project_auth`: the project's langgraph.json has `auth`), and without a signing key,
        a fixed key (see `_NO_AUTH_KEY`).

        Raises:
            SettingsError: callers are authenticated but there is no signing key: a server that
                authenticates callers must not sign their stream URLs with a guessable key.
        """
        if self.signing_keys:
            return self.signing_keys
        if self.signing_key:
            return ((SINGLE_KEY_ID, self.signing_key),)
        if self.auth_enabled or project_auth:
            how = (
                "the project's auth (auth.path) is"
                if project_auth and not self.auth_enabled
                else f"{self.sign_in_setting} is"
            )
            raise SettingsError(
                f"{how} set but RUNSTREAM_SIGNING_KEY is not: set it to a long "
                "random secret (e.g. `openssl rand -hex 32`), the same on every server "
                "(or RUNSTREAM_SIGNING_KEYS=key_id:secret,... to rotate keys)"
            )
        return (_NO_AUTH_KEY,)

    @property
    def auth_enabled(self) -> bool:
        """Whether the settings authenticate callers (API keys or JWTs; a project's own auth
        is the project's, `project.langgraph_json`)."""
        return bool(self.api_keys or self.jwt_secret or self.jwt_jwks_url)

    @property
    def sign_in_setting(self) -> str:
        """The setting that authenticates callers, as messages name it."""
        if self.jwt_secret:
            return "RUNSTREAM_JWT_SECRET"
        if self.jwt_jwks_url:
            return "RUNSTREAM_JWT_JWKS_URL"
        return "RUNSTREAM_API_KEYS"


def _check_api_keys(api_keys: dict[str, str]) -> None:
    """Each key's owner is a caller's identity (`limits.identity_problem`), each key a bearer
    credential no longer than a presented one may be."""
    for key, owner in api_keys.items():
        problem = limits.identity_problem(owner)
        if problem is not None:
            raise SettingsError(f"RUNSTREAM_API_KEYS: the owner {owner!r} is refused: {problem}")
        if len(key) > limits.BEARER_TOKEN_MAX_CHARS:
            raise SettingsError(
                f"RUNSTREAM_API_KEYS: a key is longer than {limits.BEARER_TOKEN_MAX_CHARS}"
                " characters"
            )


def _check_jwt(
    env: Mapping[str, str], api_keys: dict[str, str], secret: str, jwks_url: str | None
) -> None:
    """One way to sign in: API keys or JWTs (an HS256 secret or a JWKS URL), not two, so that
    which credential names the owner is never a guess; an issuer or audience needs a JWT mode."""
    if secret and jwks_url:
        raise SettingsError("set RUNSTREAM_JWT_SECRET (HS256) or RUNSTREAM_JWT_JWKS_URL, not both")
    if (secret or jwks_url) and api_keys:
        raise SettingsError(
            "set RUNSTREAM_API_KEYS or a JWT sign-in (RUNSTREAM_JWT_SECRET,"
            " RUNSTREAM_JWT_JWKS_URL), not both: a deployment authenticates its callers one way"
        )
    if secret and len(secret) < 32:
        raise SettingsError(
            "RUNSTREAM_JWT_SECRET must be at least 32 characters (HS256 needs a 256-bit key)"
        )
    if jwks_url:
        parts = urlsplit(jwks_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SettingsError(f"RUNSTREAM_JWT_JWKS_URL must be an http(s) URL, got {jwks_url!r}")
    for name in ("RUNSTREAM_JWT_ISSUER", "RUNSTREAM_JWT_AUDIENCE"):
        if env.get(name) and not (secret or jwks_url):
            raise SettingsError(
                f"{name} is set but neither RUNSTREAM_JWT_SECRET nor RUNSTREAM_JWT_JWKS_URL is"
            )
