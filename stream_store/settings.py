"""Process settings: each declared once, read once from the environment (and `.env`).

Every setting is one field of `Settings`, declared by `setting(...)` with all there is to know
of it: its environment variable, its default, the parser that reads it and checks its bounds
(`stream_store.setting_parsers`),
its concern (server, worker, storage, model, client) and what it means. `Settings.from_env` is
one reader over those declarations, and docs/operations.md's settings tables are made from
them (`python -m stream_store.settings_docs`), so neither can tell another story than the
fields.

Two kinds of rule belong to no one field: a default that depends on other settings (`unset=`
at the field: the per-caller limits, the model) and rules between settings (`_RELATIONS`,
checked once every field is read).

Nothing else in runstream reads `os.environ`; the `Settings` built here is passed down to
every component. It is frozen: a value cannot change after it was read. Secrets are kept out
of its repr.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Literal, get_args

from dotenv import dotenv_values

from . import limits
from .setting_parsers import (
    Parser,
    SettingsError,
    api_key_list,
    flag,
    graph_list,
    host_list,
    http_url,
    identifier,
    integer,
    is_set,
    key_prefix,
    milliseconds,
    one_of,
    origin_list,
    path,
    seconds_or_never,
    secret,
    service_url,
    signing_key_list,
    text,
)

__all__ = [
    "GROUPS",
    "SINGLE_KEY_ID",
    "Declared",
    "Group",
    "Settings",
    "SettingsError",
    "declarations",
    "env_name",
]

Group = Literal["server", "worker", "storage", "model", "client"]
GROUPS: tuple[Group, ...] = get_args(Group)

SINGLE_KEY_ID = "default"  # the key id of RUNSTREAM_SIGNING_KEY's one key
# Without API keys every caller is `local`: a token can grant nothing a request without one
# does not, so a fixed secret does (this mode listens on loopback only).
_NO_AUTH_KEY = ("local", "runstream-no-auth")


@dataclass(frozen=True)
class Declared:
    """One setting as declared: everything about it but its attribute name and default."""

    env: str
    group: Group
    doc: str
    parse: Parser
    # What an unset variable means, given the other settings and the field's default
    unset: Callable[[Settings, Any], Any] | None = None
    shown_default: str | None = None  # the docs' default, when the default is not one value


def setting(
    default: Any,
    env: str,
    group: Group,
    doc: str,
    parse: Parser,
    *,
    unset: Callable[[Settings, Any], Any] | None = None,
    shown_default: str | None = None,
) -> Any:
    """Declare a `Settings` field: the one place its variable, default, bounds and meaning are
    written."""
    declared = Declared(env, group, doc, parse, unset, shown_default)
    metadata = {"setting": declared}
    if isinstance(default, dict):
        return field(default_factory=default.copy, metadata=metadata, repr=not parse.secret)
    return field(default=default, metadata=metadata, repr=not parse.secret)


# Defaults that depend on other settings


def _off_without_sign_in(settings: Settings, default: int) -> int:
    """A limit that shares the service between callers: with no API keys or JWTs there is one
    caller (`local`, on loopback only), whom it would only get in the way of, so it is off
    unless set (docs/security.md, "Per-caller limits")."""
    return default if settings.auth_enabled else 0


def _model_of_endpoint(settings: Settings, default: str) -> str:
    """A key, or an OpenAI-compatible endpoint of one's own (a local server needs no key),
    makes the model `gpt-4o-mini`; otherwise the fake one."""
    return "gpt-4o-mini" if settings.openai_api_key or settings.openai_base_url else default


def per_caller(default: int, env: str, doc: str) -> Any:
    """Declare a per-caller limit: on at `default` with a sign-in, off (0) without one unless
    set; 0 always turns it off."""
    return setting(
        default,
        env,
        "server",
        f"{doc}; `0`: no limit",
        integer(),
        unset=_off_without_sign_in,
        shown_default=f"`{default}` (without a sign-in: `0`)",
    )


@dataclass(frozen=True)
class Settings:
    """Everything a server, worker or command-line client is configured with.

    Declared in docs/operations.md's order, by concern; that file's "Settings" tables are made
    from these declarations.
    """

    # --- server: listening, signing callers in, what a request and a caller may do ---
    host: str = setting(
        "127.0.0.1", "RUNSTREAM_HOST", "server", "where `serve` listens (an address)", text
    )
    port: int = setting(
        8000, "RUNSTREAM_PORT", "server", "the port `serve` listens on", integer(0, 65535)
    )
    allowed_hosts: tuple[str, ...] = setting(
        (),
        "RUNSTREAM_ALLOWED_HOSTS",
        "server",
        "names and addresses the server is reached by, beyond loopback names and addresses and"
        " `RUNSTREAM_HOST` (any port is allowed). Without API keys any other `Host` is refused"
        " (400); in every mode a browser's POST/PUT/PATCH/DELETE from another origin is refused"
        " (403) unless its host is listed (docs/security.md)",
        host_list,
    )
    cors_origins: tuple[str, ...] = setting(
        (),
        "RUNSTREAM_CORS_ORIGINS",
        "server",
        "web pages on other origins that may call the API from the browser (a LangGraph UI,"
        " say): they get CORS answers and may write (docs/langgraph.md)",
        origin_list,
        shown_default="unset (no CORS)",
    )
    cors_any_origin_without_sign_in: bool = setting(
        False,
        "RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN",
        "server",
        "`true`: with no sign-in, pages of origins a project's `http.cors` lets in by `*` or a"
        ' regex may read too (refused with 403 otherwise; docs/security.md, "Browsers";'
        " server/browser_guard.py)",
        flag,
    )
    # (`setting` gives a dict a default_factory: ruff cannot see it)
    api_keys: dict[str, str] = setting(  # noqa: RUF009
        {},
        "RUNSTREAM_API_KEYS",
        "server",
        "sign callers in with API keys, each naming its owner; unset: no sign-in, loopback only"
        " (unless JWTs or a project's `auth` sign callers in: one way at a time,"
        " docs/security.md)",
        api_key_list,
    )
    jwt_secret: str = setting(
        "",
        "RUNSTREAM_JWT_SECRET",
        "server",
        "sign callers in with HS256 JWTs instead (`Authorization: Bearer <jwt>`, the owner is"
        " `sub`; server/callers/jwt_auth.py)",
        secret(min_chars=32, why="HS256 needs a 256-bit key"),
    )
    jwt_jwks_url: str | None = setting(
        None,
        "RUNSTREAM_JWT_JWKS_URL",
        "server",
        "instead, your identity provider's JWKS URL: RS256/ES256 JWTs",
        http_url,
    )
    jwt_issuer: str | None = setting(
        None,
        "RUNSTREAM_JWT_ISSUER",
        "server",
        "with a JWT sign-in: the `iss` every token must carry",
        text,
    )
    jwt_audience: str | None = setting(
        None,
        "RUNSTREAM_JWT_AUDIENCE",
        "server",
        "with a JWT sign-in: the `aud` every token must carry",
        text,
    )
    signing_key: str = setting(
        "",
        "RUNSTREAM_SIGNING_KEY",
        "server",
        "the secret that signs `stream_url` tokens, the same on every server; required with"
        " `RUNSTREAM_API_KEYS`, a JWT sign-in or a project's `auth` (`serve` and `up` refuse to"
        " start without it, but `up` makes one for a project's `auth` and keeps it in its data"
        " folder). The same as `RUNSTREAM_SIGNING_KEYS=default:<secret>`",
        secret(),
        shown_default="unset (only without a sign-in: a fixed key)",
    )
    signing_keys: tuple[tuple[str, str], ...] = setting(
        (),
        "RUNSTREAM_SIGNING_KEYS",
        "server",
        "instead of `RUNSTREAM_SIGNING_KEY`, to rotate keys: the first signs, all verify"
        " (docs/security.md)",
        signing_key_list,
    )
    stream_token_ttl_s: int = setting(
        3600,
        "RUNSTREAM_STREAM_TOKEN_TTL",
        "server",
        "how long a `stream_url` token is valid",
        integer(1, unit="seconds"),
    )
    ping_interval_s: float = setting(
        15.0,
        "RUNSTREAM_PING_INTERVAL_MS",
        "server",
        "the interval of SSE `: ping` comments",
        milliseconds(10),
    )
    viewer_queue_size: int = setting(
        4096,
        "RUNSTREAM_VIEWER_QUEUE_SIZE",
        "server",
        "live events of one run a server keeps for its viewers: how far a viewer may fall"
        " behind before it catches up from Redis (server/streaming/feed.py)",
        integer(1, unit="events"),
    )
    viewer_cut_off_s: float = setting(
        10.0,
        "RUNSTREAM_VIEWER_CUT_OFF_MS",
        "server",
        "how long one write may wait on a client that stopped reading before its connection is"
        " closed",
        milliseconds(100),
    )
    cron_interval_s: float = setting(
        1.0,
        "RUNSTREAM_CRON_INTERVAL_MS",
        "server",
        "how often each server fires the LangGraph crons that are due (docs/langgraph.md,"
        ' "Crons"); `0`: this server fires none',
        milliseconds(),
    )
    max_body_bytes: int = setting(
        1024 * 1024,
        "RUNSTREAM_MAX_BODY_BYTES",
        "server",
        "a request body's limit (413 above it)",
        integer(1024, unit="bytes"),
    )
    max_header_bytes: int = setting(
        limits.DEFAULT_MAX_HEADER_BYTES,
        "RUNSTREAM_MAX_HEADER_BYTES",
        "server",
        "a request's head (request line and headers) limit, in every mode (431 above it, before"
        " it is parsed further; docs/security.md)",
        integer(4096, unit="bytes"),
    )
    max_message_chars: int = setting(
        limits.DEFAULT_MAX_MESSAGE_CHARS,
        "RUNSTREAM_MAX_MESSAGE_CHARS",
        "server",
        "characters of one input message (413 above it)",
        integer(1),
    )
    max_run_messages: int = setting(
        limits.DEFAULT_MAX_RUN_MESSAGES,
        "RUNSTREAM_MAX_RUN_MESSAGES",
        "server",
        "input messages of one run (413 above it)",
        integer(1),
    )
    max_metadata_bytes: int = setting(
        limits.DEFAULT_MAX_METADATA_BYTES,
        "RUNSTREAM_MAX_METADATA_BYTES",
        "server",
        "run or thread metadata as JSON (413 above it)",
        integer(2, unit="bytes"),
    )
    max_metadata_keys: int = setting(
        limits.DEFAULT_MAX_METADATA_KEYS,
        "RUNSTREAM_MAX_METADATA_KEYS",
        "server",
        "top-level keys of run or thread metadata (413 above it)",
        integer(),
    )
    max_resume_bytes: int = setting(
        limits.DEFAULT_MAX_RESUME_BYTES,
        "RUNSTREAM_MAX_RESUME_BYTES",
        "server",
        "a resume value as JSON (413 above it)",
        integer(4, unit="bytes"),
    )
    max_replay_bytes: int = setting(
        limits.DEFAULT_MAX_REPLAY_BYTES,
        "RUNSTREAM_MAX_REPLAY_BYTES",
        "server",
        "what one replay of a LangGraph stream may write (its frames from before the client"
        " attached); past it the stream ends with an `error` event (`ReplayTooLarge`), and a"
        ' rejoin with the last id goes on (docs/security.md, "Replays")',
        integer(1024, unit="bytes"),
    )
    max_submits_per_minute: int = per_caller(
        limits.DEFAULT_MAX_SUBMITS_PER_MINUTE,
        "RUNSTREAM_MAX_SUBMITS_PER_MINUTE",
        "`POST`s of runs and threads one caller may make in any 60 s, across all servers (429"
        " above it)",
    )
    max_active_runs: int = per_caller(
        limits.DEFAULT_MAX_ACTIVE_RUNS,
        "RUNSTREAM_MAX_ACTIVE_RUNS",
        "one caller's queued and running runs (429 for a submit above it)",
    )
    max_sse_connections: int = per_caller(
        limits.DEFAULT_MAX_SSE_CONNECTIONS,
        "RUNSTREAM_MAX_SSE_CONNECTIONS",
        "one caller's open event streams, across all servers (429 above it)",
    )
    max_sse_connections_per_token: int = per_caller(
        limits.DEFAULT_MAX_SSE_CONNECTIONS_PER_TOKEN,
        "RUNSTREAM_MAX_SSE_CONNECTIONS_PER_TOKEN",
        "open event streams per `stream_url` token (429 above it)",
    )
    max_assistants: int = per_caller(
        limits.DEFAULT_MAX_ASSISTANTS,
        "RUNSTREAM_MAX_ASSISTANTS",
        "assistants one caller may keep (LangGraph API; 409 `too_many_assistants` above it)",
    )
    max_crons: int = per_caller(
        limits.DEFAULT_MAX_CRONS,
        "RUNSTREAM_MAX_CRONS",
        "crons one caller may keep (LangGraph API; 409 `too_many_crons` above it)",
    )
    # LangGraph's webhooks (docs/langgraph.md, "Webhooks")
    max_pending_webhooks: int = per_caller(
        limits.DEFAULT_MAX_PENDING_WEBHOOKS,
        "RUNSTREAM_MAX_PENDING_WEBHOOKS",
        "one caller's webhook deliveries not settled yet (LangGraph API; a submit with a"
        " `webhook` is 429 `too_many_pending_webhooks` at it)",
    )
    webhook_private_addresses: bool = setting(
        False,
        "RUNSTREAM_WEBHOOK_PRIVATE_ADDRESSES",
        "server",
        "`true`: a LangGraph run's `webhook` may reach loopback and private addresses (one host,"
        " a private network); servers check it at submit, workers before each POST: set it on"
        ' both (docs/operations.md, "Webhooks")',
        flag,
    )
    webhook_lease_s: int = setting(
        60,
        "RUNSTREAM_WEBHOOK_LEASE",
        "worker",
        "seconds a worker holds a webhook delivery it claimed; a delivery whose worker died is"
        " taken by another once it runs out (keep it above 30, the POST's timeout, or a slow"
        " receiver may get a delivery twice)",
        integer(1, unit="seconds"),
    )
    max_assistant_versions: int = per_caller(
        limits.DEFAULT_MAX_ASSISTANT_VERSIONS,
        "RUNSTREAM_MAX_ASSISTANT_VERSIONS",
        "versions kept of one assistant (409 `too_many_versions` for a `PATCH` above it)",
    )
    max_writes_per_minute: int = per_caller(
        limits.DEFAULT_MAX_WRITES_PER_MINUTE,
        "RUNSTREAM_MAX_WRITES_PER_MINUTE",
        "other writes one caller may make in any 60 s (store puts and deletes, thread copies,"
        " state writes, patches, deletes, cancels; 429 `too_many_writes`)",
    )
    max_queries_per_minute: int = per_caller(
        limits.DEFAULT_MAX_QUERIES_PER_MINUTE,
        "RUNSTREAM_MAX_QUERIES_PER_MINUTE",
        "queries one caller shapes in any 60 s (store reads and searches, thread, assistant and"
        " cron searches and counts, history; 429 `too_many_queries`)",
    )
    max_concurrent_queries: int = per_caller(
        limits.DEFAULT_MAX_CONCURRENT_QUERIES,
        "RUNSTREAM_MAX_CONCURRENT_QUERIES",
        "of those, how many of one caller's run at once in one server process (the others wait"
        " their turn, 429 after 10 s)",
    )
    max_store_items: int = per_caller(
        limits.DEFAULT_MAX_STORE_ITEMS,
        "RUNSTREAM_MAX_STORE_ITEMS",
        "items one caller may keep in LangGraph's store, by the store routes and its graphs'"
        " `runtime.store` together (413 `store_full` on a route, `QuotaExceeded` in a graph)",
    )
    max_store_bytes: int = setting(
        limits.DEFAULT_MAX_STORE_BYTES,
        "RUNSTREAM_MAX_STORE_BYTES",
        "server",
        "bytes of the values one caller keeps in LangGraph's store, with or without a sign-in"
        " (as `RUNSTREAM_MAX_STORE_ITEMS`); `0`: no limit",
        integer(unit="bytes"),
    )
    max_thread_checkpoints: int = per_caller(
        limits.DEFAULT_MAX_THREAD_CHECKPOINTS,
        "RUNSTREAM_MAX_THREAD_CHECKPOINTS",
        "checkpoints of one thread past which a state write or a copy is refused (413"
        " `too_many_checkpoints`; runs are not stopped)",
    )
    max_checkpoint_bytes: int = setting(
        limits.DEFAULT_MAX_CHECKPOINT_BYTES,
        "RUNSTREAM_MAX_CHECKPOINT_BYTES",
        "server",
        "bytes of all of one caller's checkpoints past which a state write or a copy is refused"
        " (413 `checkpoints_full`; runs are not stopped), with or without a sign-in; `0`: no"
        " limit",
        integer(unit="bytes"),
    )
    log_json: bool = setting(
        False,
        "RUNSTREAM_LOG_FORMAT",
        "server",
        "how every process (server, worker, `up`) writes its log lines",
        one_of({"console": False, "json": True}),
    )
    log_level: str = setting(
        "info",
        "RUNSTREAM_LOG_LEVEL",
        "server",
        "the least level every process logs",
        one_of({level: level for level in ("debug", "info", "warning", "error", "critical")}),
    )

    # --- worker: running graphs ---
    config_path: str | None = setting(
        None,
        "RUNSTREAM_CONFIG",
        "worker",
        "a LangGraph project's `langgraph.json` to serve and run (what `--config` gives;"
        ' README, "Your own LangGraph project"); `none`: the built-in graphs only',
        path,
        shown_default="`./langgraph.json` if present, else the bundled memory assistant"
        " (`runner/assistant/langgraph.json`)",
    )
    graphs: dict[str, str] = setting(  # noqa: RUF009
        {},
        "RUNSTREAM_GRAPHS",
        "worker",
        "extra graphs (a builder or a compiled graph each); the module's"
        ' `CONFIGURABLE_KEYS = {"attr": {...}}` may list the `config.configurable` keys each'
        " takes (unlisted: any key not reserved)",
        graph_list,
        shown_default="`chat`, `approval` built in",
    )
    worker_concurrency: int = setting(
        100,
        "RUNSTREAM_WORKER_CONCURRENCY",
        "worker",
        "runs one worker executes at once",
        integer(1),
    )
    worker_metrics_port: int = setting(
        0,
        "RUNSTREAM_WORKER_METRICS_PORT",
        "worker",
        "the port of a worker's Prometheus `/metrics`, on `RUNSTREAM_HOST` (`--metrics-port`"
        ' overrides it); `0`: not served ("Metrics" above)',
        integer(0, 65535),
    )
    job_timeout_s: int = setting(
        3600,
        "RUNSTREAM_JOB_TIMEOUT",
        "worker",
        "how long one attempt of a run may take before the worker stops it",
        integer(1, unit="seconds"),
    )
    poll_delay_s: float = setting(
        0.5,
        "RUNSTREAM_POLL_DELAY_MS",
        "worker",
        "how often an idle worker reads the queue anyway (enqueues wake it at once)",
        milliseconds(1),
    )
    lease_s: float = setting(
        5.0,
        "RUNSTREAM_LEASE_MS",
        "worker",
        "a running attempt's lease; a worker that stops renewing it (paused, cut off) loses the"
        " run after this; a crashed one loses it at once (its Redis connection is gone)",
        milliseconds(100),
    )
    reaper_interval_s: float = setting(
        1.0,
        "RUNSTREAM_REAPER_INTERVAL_MS",
        "worker",
        "how often each worker's reaper retries runs of crashed workers and with expired"
        " leases, and enqueues stranded ones",
        milliseconds(10),
    )
    max_attempts: int = setting(
        3,
        "RUNSTREAM_MAX_ATTEMPTS",
        "worker",
        "attempts per run before it fails with `attempts_exhausted`",
        integer(1),
    )
    shutdown_grace_s: float = setting(
        10.0,
        "RUNSTREAM_SHUTDOWN_GRACE_MS",
        "worker",
        "on SIGTERM, how long a worker lets its runs finish before handing them back",
        milliseconds(),
    )

    # --- storage: Redis and Postgres, and what they keep ---
    redis_url: str | None = setting(
        None,
        "RUNSTREAM_REDIS_URL",
        "storage",
        "Redis: one server, or any node of a Redis Cluster",
        service_url,
        shown_default="`up`: embedded; `serve`/`worker`: required",
    )
    database_url: str | None = setting(
        None,
        "RUNSTREAM_DATABASE_URL",
        "storage",
        "PostgreSQL",
        service_url,
        shown_default="`up`: embedded; `serve`/`worker`: required",
    )
    database_schema: str = setting(
        "public",
        "RUNSTREAM_DATABASE_SCHEMA",
        "storage",
        "the Postgres schema of all tables",
        identifier,
    )
    database_pool_mode: str = setting(
        "session",
        "RUNSTREAM_DATABASE_POOL_MODE",
        "storage",
        "`transaction` when `RUNSTREAM_DATABASE_URL` is a transaction-mode pooler (PgBouncer),"
        " which keeps no session state: runstream sends none and migrates through"
        " `RUNSTREAM_DIRECT_DATABASE_URL` (docs/scaling.md)",
        one_of({"session": "session", "transaction": "transaction"}),
    )
    direct_database_url: str | None = setting(
        None,
        "RUNSTREAM_DIRECT_DATABASE_URL",
        "storage",
        "Postgres itself, for migrations, when the pool mode is `transaction` (required then)",
        service_url,
    )
    redis_prefix: str = setting(
        "runstream",
        "RUNSTREAM_REDIS_PREFIX",
        "storage",
        "the prefix of every Redis key and of the queue",
        key_prefix,
    )
    redis_cluster_shards: int = setting(
        16,
        "RUNSTREAM_REDIS_CLUSTER_SHARDS",
        "storage",
        "on a Redis Cluster: the hash tags a deployment's runs are spread over (docs/scaling.md)",
        integer(1),
    )
    data_dir: str = setting(
        ".runstream",
        "RUNSTREAM_DATA_DIR",
        "storage",
        "where `runstream up` keeps its embedded services' data",
        path,
        shown_default="`./.runstream`",
    )
    stream_ttl_s: int = setting(
        24 * 3600,
        "RUNSTREAM_STREAM_TTL",
        "storage",
        "how long a finished run's stream is kept",
        integer(1, unit="seconds"),
    )
    interrupted_ttl_s: int = setting(
        limits.DEFAULT_INTERRUPTED_TTL_S,
        "RUNSTREAM_INTERRUPTED_TTL",
        "storage",
        "how long an interrupted run's stream is kept unless it is resumed; the run stays"
        " resumable after it (docs/protocol.md 3.3)",
        integer(1, unit="seconds"),
    )
    thread_retention_s: int | None = setting(
        None,
        "RUNSTREAM_THREAD_RETENTION",
        "storage",
        "how long after its last run a thread with none active is deleted",
        seconds_or_never,
        shown_default="unset (kept)",
    )
    max_run_events: int = setting(
        limits.DEFAULT_MAX_RUN_EVENTS,
        "RUNSTREAM_MAX_RUN_EVENTS",
        "storage",
        "events one run's stream may hold; past it the run fails with `stream_too_large`",
        integer(1),
    )
    max_run_stream_bytes: int = setting(
        limits.DEFAULT_MAX_RUN_STREAM_BYTES,
        "RUNSTREAM_MAX_RUN_STREAM_BYTES",
        "storage",
        "bytes of event names and data one run's stream may hold; past it the run fails with"
        " `stream_too_large`",
        integer(1024, unit="bytes"),
    )
    query_timeout_ms: int = setting(
        limits.DEFAULT_QUERY_TIMEOUT_MS,
        "RUNSTREAM_QUERY_TIMEOUT_MS",
        "storage",
        "the statement timeout of the store's queries (422 `query_timeout` past it)",
        integer(1, unit="milliseconds"),
    )

    # --- model: the chat model graphs use ---
    model: str = setting(
        "fake",
        "RUNSTREAM_MODEL",
        "model",
        "a `ChatOpenAI` model name, or `fake` (echoes the last user message)",
        text,
        unset=_model_of_endpoint,
        shown_default="`fake`; with `OPENAI_API_KEY` or `OPENAI_BASE_URL`: `gpt-4o-mini`",
    )
    openai_api_key: str | None = setting(
        None, "OPENAI_API_KEY", "model", "the key `ChatOpenAI` presents", secret()
    )
    openai_base_url: str | None = setting(
        None,
        "OPENAI_BASE_URL",
        "model",
        "an OpenAI-compatible endpoint of your own (it needs no key)",
        service_url,
    )
    fake_token_delay_ms: int = setting(
        20,
        "RUNSTREAM_FAKE_TOKEN_DELAY_MS",
        "model",
        "the fake model's delay between chunks",
        integer(unit="milliseconds"),
    )
    max_facts: int = setting(
        limits.DEFAULT_MAX_FACTS,
        "RUNSTREAM_MAX_FACTS",
        "model",
        "facts the memory assistant keeps of one user; past it, it remembers nothing new and"
        " says so (docs/memory.md); with or without a sign-in; `0`: no limit",
        integer(),
    )

    # --- client: the command-line clients (`runstream chat`, `attach`, `runs`, `threads`) ---
    client_api_key: str | None = setting(
        None,
        "RUNSTREAM_API_KEY",
        "client",
        "the key `runstream chat`, `attach`, `runs` and `threads` present",
        secret(),
    )
    client_url: str | None = setting(
        None,
        "RUNSTREAM_URL",
        "client",
        "the server `runstream runs` and `threads` (and `chat`, `attach`) talk to",
        service_url,
        shown_default="`http://127.0.0.1:8000` (`chat`: `RUNSTREAM_HOST`:`RUNSTREAM_PORT`)",
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, env_file: str = ".env") -> Settings:
        """Build settings from `environ` (default `os.environ`) over an optional `.env` file.

        Each declared variable that is set (and not empty) is read by its parser; the others
        keep their default, or what their `unset` makes of the other settings. Then the rules
        between settings are checked.
        """
        env: dict[str, str] = {}
        if env_file and os.path.exists(env_file):
            env.update({k: v for k, v in dotenv_values(env_file).items() if v is not None})
        env.update(os.environ if environ is None else environ)
        given: dict[str, Any] = {}
        for name, declared in declarations():
            raw = env.get(declared.env)
            if raw:
                given[name] = declared.parse.read(declared.env, raw)
        settings = cls(**given)
        settings = replace(
            settings,
            **{
                name: declared.unset(settings, getattr(settings, name))
                for name, declared in declarations()
                if declared.unset is not None and name not in given
            },
        )
        for relation in _RELATIONS:
            relation(settings)
        return settings

    def environment(self, *names: str) -> dict[str, str]:
        """The variables that give a child process these settings' `names` (none: all of
        them), as `from_env` reads them back; an unset one is left out. Secrets included."""
        wanted = set(names)
        return {
            declared.env: declared.parse.write(value)
            for name, declared in declarations()
            if (not wanted or name in wanted) and is_set(value := getattr(self, name))
        }

    def require_services(self) -> tuple[str, str]:
        """The Redis and Postgres URLs, or a clear error naming what is missing."""
        missing = [
            env_name(name) for name in ("redis_url", "database_url") if not getattr(self, name)
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
                f"{how} set but {env_name('signing_key')} is not: set it to a long random"
                " secret (e.g. `openssl rand -hex 32`), the same on every server (or"
                f" {env_name('signing_keys')}=key_id:secret,... to rotate keys)"
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
            return env_name("jwt_secret")
        if self.jwt_jwks_url:
            return env_name("jwt_jwks_url")
        return env_name("api_keys")


def declarations() -> Iterator[tuple[str, Declared]]:
    """Each setting's attribute name and declaration, in declaration order."""
    for each in fields(Settings):
        yield each.name, _declared(each)


def env_name(attribute: str) -> str:
    """The variable a field is read from, as messages name it."""
    return _declared(Settings.__dataclass_fields__[attribute]).env


def _declared(each: Field[Any]) -> Declared:
    declared = each.metadata.get("setting")
    assert isinstance(declared, Declared), f"Settings.{each.name} is not declared by setting()"
    return declared


# Rules between settings, checked once every one is read


def _transaction_pooler_has_a_direct_url(settings: Settings) -> None:
    if settings.database_pool_mode == "transaction" and not settings.direct_database_url:
        raise SettingsError(
            f"{env_name('database_pool_mode')}=transaction needs"
            f" {env_name('direct_database_url')}: migrations hold a session-level lock, which a"
            " transaction pooler cannot keep"
        )


def _one_form_of_signing_key(settings: Settings) -> None:
    if settings.signing_key and settings.signing_keys:
        raise SettingsError(
            f"set {env_name('signing_key')} (one key) or {env_name('signing_keys')} (a list),"
            " not both"
        )


def _one_way_to_sign_in(settings: Settings) -> None:
    """API keys or JWTs (an HS256 secret or a JWKS URL), not two, so that which credential
    names the owner is never a guess; an issuer or audience needs a JWT mode."""
    secret, jwks = env_name("jwt_secret"), env_name("jwt_jwks_url")
    jwt = settings.jwt_secret or settings.jwt_jwks_url
    if settings.jwt_secret and settings.jwt_jwks_url:
        raise SettingsError(f"set {secret} (HS256) or {jwks}, not both")
    if jwt and settings.api_keys:
        raise SettingsError(
            f"set {env_name('api_keys')} or a JWT sign-in ({secret}, {jwks}), not both: a"
            " deployment authenticates its callers one way"
        )
    for name in ("jwt_issuer", "jwt_audience"):
        if getattr(settings, name) and not jwt:
            raise SettingsError(f"{env_name(name)} is set but neither {secret} nor {jwks} is")


_RELATIONS: tuple[Callable[[Settings], None], ...] = (
    _transaction_pooler_has_a_direct_url,
    _one_form_of_signing_key,
    _one_way_to_sign_in,
)
