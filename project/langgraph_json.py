"""A user's LangGraph project: its `langgraph.json` read into graph sources, env and paths.

The keys and their meanings are LangGraph's (`langgraph_cli/schemas.py` `Config`, and how
`langgraph dev` and `langgraph_api/graph.py` use them). A key runstream serves is read here;
a key that only shapes LangGraph's Docker image is accepted and ignored; a key that a later
version will serve (`ui`, ...) is refused, so that nothing a project relies
on, above all its auth, is silently dropped; so is a part of `store`, `checkpointer` or `http`
runstream does not serve (a custom store or checkpointer, `serde`, `keep_latest`, ...). Every
refusal is a `ProjectError` naming the file, the key and the cause, which `runstream` prints as
one line before exiting with 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import structlog
from dotenv import dotenv_values

from stream_store.settings import SettingsError
from stream_store.store import HALFVEC_MAX_DIMS

from .errors import ProjectContractError
from .webhooks import PAYLOAD_FIELDS, WebhooksSpec, resolve_headers

__all__ = [
    "AUTH_IGNORED_KEYS",
    "BUILD_ONLY_KEYS",
    "HTTP_NOT_SERVED",
    "NOT_SERVED_YET",
    "CorsSettings",
    "GraphSource",
    "HttpSettings",
    "Project",
    "ProjectError",
    "StoreIndexSpec",
    "StoreTTLSpec",
    "ThreadTTLSpec",
    "load_project",
]

logger = structlog.get_logger()

# Keys that only concern the Docker image `langgraph build` makes: the user installs their
# packages into runstream's environment, so there is nothing to build.
BUILD_ONLY_KEYS = frozenset(
    {
        "python_version",
        "node_version",
        "api_version",
        "base_image",
        "image_distro",
        "pip_config_file",
        "pip_installer",
        "source",
        "dockerfile_lines",
        "keep_pkg_tools",
        "_INTERNAL_docker_tag",
    }
)

# Keys a later version serves. Until then a project with one of them does not start: running
# it without its auth would expose its data, without its routes or store it would half-work.
NOT_SERVED_YET: dict[str, str] = {
    "ui": "generative UI components (ui) are not served",
    "ui_config": "generative UI components (ui_config) are not served",
    "encryption": "custom encryption is not served",
    "priority": "run priorities are not served",
}

# `http` keys (`langgraph_api/config/schemas.py` `HttpConfig`) not served: a project giving one
# a value other than its default does not start.
HTTP_NOT_SERVED: dict[str, str] = {
    "disable_assistants": "removing built-in routes is not served yet",
    "disable_threads": "removing built-in routes is not served yet",
    "disable_runs": "removing built-in routes is not served yet",
    "disable_store": "removing built-in routes is not served yet",
    "disable_meta": "removing built-in routes is not served yet",
    "disable_event_streaming": "removing built-in routes is not served yet",
    "mount_prefix": "serving the API under a prefix is not served yet",
    "configurable_headers": "request headers as configurable values are not served yet",
    "logging_headers": "choosing the logged request headers is not served",
    "middleware_order": "runstream does not run the custom app's middleware on its own routes",
}
# Served: the first three, `disable_mcp`, `disable_a2a` and `disable_webhooks`; the
# others disable what runstream does not have (LangGraph's generative UI), so they hold
# whatever their value.
_HTTP_SERVED = frozenset(
    {
        "app",
        "cors",
        "enable_custom_route_auth",
        "disable_ui",
        "disable_mcp",
        "disable_a2a",
        "disable_webhooks",
    }
)

# Keys LangGraph itself refuses now (`langgraph_cli/config.py` validate_config).
_NO_LONGER_SUPPORTED = {
    "project_root": "top-level project_root is no longer supported by LangGraph (source.root)",
    "package": "top-level package is no longer supported by LangGraph (source.package)",
}

# Parts of `store` and `checkpointer` that runstream does not serve: its store and its
# checkpointer are its own Postgres ones, with LangGraph's serializer.
_NOT_SERVED_PARTS: dict[tuple[str, str], str] = {
    ("store", "path"): "a custom store (store.path) is not served: the store is runstream's"
    " Postgres store (store.index and store.ttl configure it)",
    ("checkpointer", "path"): "a custom checkpointer (checkpointer.path) is not served: the"
    " checkpointer is runstream's Postgres one",
    ("checkpointer", "serde"): "checkpointer.serde is not served: checkpoints are written with"
    " LangGraph's default serializer",
}

# `$schema` points editors at LangGraph's JSON schema; nothing to serve.
_SERVED = frozenset(
    {
        "graphs",
        "env",
        "dependencies",
        "auth",
        "http",
        "store",
        "checkpointer",
        "webhooks",
        "$schema",
    }
)

# `auth` keys accepted without effect (langgraph_cli/schemas.py `AuthConfig`), and why.
AUTH_IGNORED_KEYS: dict[str, str] = {
    # LangSmith Studio's own sign-in is not served: every request goes through `authenticate`,
    # as LangGraph does with `disable_studio_auth: true`.
    "disable_studio_auth": "there is no Studio sign-in to disable: every request is authenticated",
    # Only documents the scheme in LangGraph's OpenAPI document.
    "openapi": "the security scheme is not added to /schema",
    # A cache of `authenticate`'s answers: without it every request is authenticated afresh.
    "cache": "authenticate runs on every request (nothing is cached)",
}
_JS_SUFFIXES = (".ts", ".mts", ".cts", ".js", ".mjs", ".cjs", ".tsx", ".jsx")


class ProjectError(ProjectContractError, SettingsError):
    """The project cannot be served: one line naming the file, the key and the cause."""

    def __init__(self, file: str | Path, key: str, cause: str) -> None:
        super().__init__(f"{file}: {key}: {cause}")
        self.file = str(file)
        self.key = key
        self.cause = cause


class _GraphDef(msgspec.Struct):
    """A graph given as an object: `{"path": "./agent.py:graph", "description": "..."}`."""

    path: str
    description: str | None = None


_Minutes = Annotated[float, msgspec.Meta(gt=0)]


class StoreIndexSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`store.index`: the store's semantic search (LangGraph's `IndexConfig`). `embed` is a
    `provider:model` for LangChain's `init_embeddings` or a `./file.py:name`
    (`runner.embeddings` resolves it); `fields` the JSON paths embedded (None: the whole
    value, LangGraph's `["$"]`)."""

    dims: Annotated[int, msgspec.Meta(ge=1, le=HALFVEC_MAX_DIMS)]  # what pgvector's HNSW takes
    embed: Annotated[str, msgspec.Meta(min_length=1)]
    fields: list[str] | None = None


class StoreTTLSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`store.ttl` (LangGraph's `TTLConfig`), in minutes: `default_ttl` for items put without
    one (None: no TTL), how often expired items are deleted (None: hourly, runstream's own
    sweep), whether reads restart an item's TTL by default."""

    refresh_on_read: bool = True
    default_ttl: _Minutes | None = None
    sweep_interval_minutes: _Minutes | None = None  # LangGraph's is an int; a fraction works


class ThreadTTLSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`checkpointer.ttl` (LangGraph's `ThreadTTLConfig`), in minutes: a thread idle for
    `default_ttl` is deleted with its runs and checkpoints (`strategy` "delete"; None: never),
    checked every `sweep_interval_minutes` (LangGraph's default: 5), `sweep_limit` threads at
    most per check."""

    strategy: Literal["delete"] = "delete"
    default_ttl: _Minutes | None = None
    sweep_interval_minutes: _Minutes | None = None
    sweep_limit: Annotated[int, msgspec.Meta(ge=1)] | None = None


class _StoreFile(msgspec.Struct, forbid_unknown_fields=True):
    index: StoreIndexSpec | None = None
    ttl: StoreTTLSpec | None = None


class _CheckpointerFile(msgspec.Struct, forbid_unknown_fields=True):
    ttl: ThreadTTLSpec | None = None


class _ProjectFile(msgspec.Struct):
    """The keys runstream reads; the others are looked at by name only."""

    graphs: dict[str, Any] = {}  # each entry converted on its own, to name it in an error
    env: dict[str, str] | str | None = None
    dependencies: list[str] = []
    auth: dict[str, Any] | None = None
    store: _StoreFile | None = None
    checkpointer: _CheckpointerFile | None = None
    webhooks: WebhooksSpec | None = None


class CorsSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`http.cors`: LangGraph's `CorsConfig`, with Starlette's `CORSMiddleware` defaults (what
    LangGraph's server builds from it). `allow_origins` None: `RUNSTREAM_CORS_ORIGINS`."""

    allow_origins: list[str] | None = None
    allow_methods: list[str] = msgspec.field(default_factory=lambda: ["GET"])
    allow_headers: list[str] = msgspec.field(default_factory=list)
    allow_credentials: bool = False
    allow_origin_regex: str | None = None
    expose_headers: list[str] = msgspec.field(default_factory=list)
    max_age: int = 600


@dataclass(frozen=True)
class HttpSettings:
    """What runstream serves of `http`: the custom app, CORS, auth on the custom routes."""

    app: GraphSource | None = None  # a Starlette app's source, read like a graph's
    cors: CorsSettings | None = None
    enable_custom_route_auth: bool = False
    disable_mcp: bool = False  # no `/mcp` (LangGraph's `http.disable_mcp`)
    disable_a2a: bool = False  # no `/a2a` nor agent cards (LangGraph's `http.disable_a2a`)
    disable_webhooks: bool = False  # runs keep their webhook; nothing is POSTed


@dataclass(frozen=True)
class GraphSource:
    """Where one graph is: a Python file or an importable module, and the attribute in it
    (a file's `module` is the name it is imported under).

    `key` and `origin` are for messages: the setting that named it (`graphs.agent` in a
    langgraph.json, `RUNSTREAM_GRAPHS`) and the file that setting is in.
    """

    key: str
    origin: str
    attr: str
    module: str | None = None
    path: Path | None = None
    description: str | None = None

    @classmethod
    def parse(cls, spec: str, *, key: str, origin: str, base: Path | None) -> GraphSource:
        """`module.path:attr`, or `./file.py:attr` (a `/` makes it a file, relative to `base`),
        as `langgraph_api/graph.py` `collect_graphs_from_env` tells them apart."""
        where, colon, attr = spec.rpartition(":")
        if not colon or not where or not attr:
            expected = "expected './file.py:name' or 'package.module:name'"
            raise ProjectError(origin, key, f"{spec!r} names no attribute: {expected}")
        if "/" not in where:
            return cls(key=key, origin=origin, attr=attr, module=where)
        # The name LangGraph's server imports the file under (`_graph_from_spec`), made of the
        # path as written: classes of the file in saved state keep their module on both.
        name = where.replace("/", "__").replace(".py", "").replace(" ", "_").lstrip(".")
        if where.endswith(_JS_SUFFIXES):
            raise ProjectError(origin, key, f"{where} is JavaScript: only Python graphs are served")
        path = Path(where) if base is None else base / where
        if not path.is_file():
            raise ProjectError(origin, key, f"{path} is not a file")
        return cls(key=key, origin=origin, attr=attr, module=name, path=path.resolve())

    @property
    def where(self) -> str:
        """The file or module, as a message shows it."""
        return str(self.path) if self.path is not None else str(self.module)


@dataclass(frozen=True)
class Project:
    """What runstream serves of a `langgraph.json`: its graphs, env and import paths, and how
    its store and threads are kept."""

    file: Path
    graphs: dict[str, GraphSource] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    import_paths: tuple[Path, ...] = ()
    http: HttpSettings = field(default_factory=HttpSettings)
    ignored: tuple[str, ...] = ()  # the image build's keys, named in one log line
    # `auth.path`: the project's `langgraph_sdk.Auth` (server/callers/project_auth.py loads it)
    auth: GraphSource | None = None
    store_index: StoreIndexSpec | None = None
    store_ttl: StoreTTLSpec | None = None
    thread_ttl: ThreadTTLSpec | None = None
    # `webhooks` (project/webhooks.py): its policy, and its headers with their templates
    # resolved from the environment and the project's env
    webhooks: WebhooksSpec | None = None
    webhook_headers: dict[str, str] = field(default_factory=dict)

    def prepare(self, environ: MutableMapping[str, str] = os.environ) -> None:
        """Put the project's env and import paths in place, before its graphs are imported.

        The env is the user's code's environment, not runstream's settings (those were read
        from runstream's own environment before, and a `RUNSTREAM_*` key here changes none of
        them: it is left out, and said). As `langgraph dev` does (`langgraph_api/cli.py`
        `run_server`, `patch_environment`), the project's values replace those already set.
        The paths go at the end of `sys.path`, as `langgraph dev` appends them.
        """
        own = sorted(name for name in self.env if name.startswith("RUNSTREAM_"))
        if own:
            logger.warning(
                "the project's env sets runstream settings, which runstream reads from its own"
                " environment and ./.env only: left out",
                names=own,
                file=str(self.file),
            )
        for name, value in self.env.items():
            if not name.startswith("RUNSTREAM_"):
                environ[name] = value  # the user's environment (see above), not a setting
        for path in self.import_paths:
            if str(path) not in sys.path:
                sys.path.append(str(path))
        if self.ignored:
            logger.info(
                "langgraph.json keys of LangGraph's image build are ignored",
                keys=list(self.ignored),
                file=str(self.file),
            )


def load_project(file: str | Path, environ: Mapping[str, str] = os.environ) -> Project:
    """Read and check `file` (a langgraph.json); imports nothing and changes nothing.
    `environ` (with the project's env over it) resolves the webhook headers' templates.

    Raises:
        ProjectError: the file is missing or malformed, or asks for what is not served.
    """
    path = Path(file).resolve()
    try:
        raw = msgspec.json.decode(path.read_bytes())
    except OSError as exc:
        raise ProjectError(path, "(file)", f"cannot be read: {exc.strerror or exc}") from None
    except msgspec.DecodeError as exc:
        raise ProjectError(path, "(file)", f"is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ProjectError(path, "(file)", "is not a JSON object")
    _refuse_unserved(path, raw)
    try:
        shape = msgspec.convert(raw, _ProjectFile)
    except msgspec.ValidationError as exc:
        _, _, at = str(exc).rpartition(" - at `$.")
        raise ProjectError(path, at.rstrip("`") or "(file)", _cause(exc)) from None
    base = path.parent
    if not shape.graphs:
        raise ProjectError(path, "graphs", 'names no graph (e.g. {"agent": "./agent.py:graph"})')
    graphs = {name: _graph_source(path, name, value, base) for name, value in shape.graphs.items()}
    unknown = sorted(set(raw) - _SERVED - BUILD_ONLY_KEYS - set(NOT_SERVED_YET))
    if unknown:
        logger.warning("unknown langgraph.json keys are ignored", keys=unknown, file=str(path))
    env = _env(path, shape.env, base)
    return Project(
        file=path,
        graphs=graphs,
        env=env,
        import_paths=tuple(
            dict.fromkeys([base, *_local_dependencies(path, shape.dependencies, base)])
        ),
        ignored=tuple(sorted(k for k in raw if k in BUILD_ONLY_KEYS)),
        auth=_auth_source(path, shape.auth, base),
        http=_http(path, raw.get("http"), base),
        store_index=shape.store.index if shape.store else None,
        store_ttl=shape.store.ttl if shape.store else None,
        thread_ttl=shape.checkpointer.ttl if shape.checkpointer else None,
        webhooks=_webhooks(path, shape.webhooks),
        webhook_headers=_webhook_headers(path, shape.webhooks, {**environ, **env}),
    )


def _webhooks(path: Path, spec: WebhooksSpec | None) -> WebhooksSpec | None:
    """`webhooks`, its `allowed_fields` and domain wildcards checked as LangGraph does."""
    if spec is None:
        return None
    unknown = sorted(set(spec.allowed_fields or ()) - PAYLOAD_FIELDS)
    if unknown:
        valid = ", ".join(sorted(PAYLOAD_FIELDS))
        raise ProjectError(
            path, "webhooks.allowed_fields", f"{unknown[0]!r} is not one of: {valid}"
        )
    for domain in spec.url.allowed_domains if spec.url else ():
        if "*" in domain and not domain.startswith("*."):
            raise ProjectError(
                path,
                "webhooks.url.allowed_domains",
                f"a wildcard only starts a domain ('*.example.com'), got {domain!r}",
            )
    return spec


def _webhook_headers(
    path: Path, spec: WebhooksSpec | None, environ: Mapping[str, str]
) -> dict[str, str]:
    if spec is None:
        return {}
    try:
        return resolve_headers(spec, environ)
    except ValueError as exc:
        raise ProjectError(path, "webhooks.headers", str(exc)) from None


def _auth_source(path: Path, auth: dict[str, Any] | None, base: Path) -> GraphSource | None:
    """`auth.path`, located as a graph is; the other `auth` keys accepted (said in a log line)
    or refused. An `auth` without `path` is refused: it would leave the project's data open."""
    if not auth:
        return None
    if auth.get("allow_langsmith_api_keys"):
        raise ProjectError(
            path, "auth.allow_langsmith_api_keys", "LangSmith API keys are not served"
        )
    unknown = sorted(set(auth) - {"path", "allow_langsmith_api_keys"} - set(AUTH_IGNORED_KEYS))
    if unknown:
        raise ProjectError(path, f"auth.{unknown[0]}", "is not a key of LangGraph's auth config")
    spec = auth.get("path")
    if not isinstance(spec, str) or not spec:
        raise ProjectError(
            path, "auth.path", 'names no Auth object (e.g. "./auth.py:auth"): required'
        )
    ignored = {key: why for key, why in AUTH_IGNORED_KEYS.items() if key in auth}
    if ignored:
        logger.info("langgraph.json auth keys without effect here", **ignored, file=str(path))
    return GraphSource.parse(spec, key="auth.path", origin=str(path), base=base)


def _refuse_unserved(path: Path, raw: Mapping[str, Any]) -> None:
    """A key a later version serves, or LangGraph no longer takes, given a value: refused."""
    for key, why in {**NOT_SERVED_YET, **_NO_LONGER_SUPPORTED}.items():
        if raw.get(key) not in (None, {}, [], ""):
            raise ProjectError(path, key, f"{why}: not served by this version of runstream")
    for (key, part), why in _NOT_SERVED_PARTS.items():
        section = raw.get(key)
        if isinstance(section, dict) and section.get(part) not in (None, {}, [], ""):
            raise ProjectError(path, f"{key}.{part}", why)
    ttl = raw.get("checkpointer")
    ttl = ttl.get("ttl") if isinstance(ttl, dict) else None
    if isinstance(ttl, dict) and ttl.get("strategy") == "keep_latest":
        raise ProjectError(
            path,
            "checkpointer.ttl.strategy",
            '"keep_latest" (pruning a thread\'s older checkpoints) is not served; "delete" is',
        )


def _graph_source(path: Path, name: str, raw: Any, base: Path) -> GraphSource:
    if not name:
        raise ProjectError(path, "graphs", "a graph's name is empty")
    try:
        value = msgspec.convert(raw, str | _GraphDef)
    except msgspec.ValidationError as exc:
        raise ProjectError(path, f"graphs.{name}", _cause(exc)) from None
    spec = value if isinstance(value, str) else value.path
    source = GraphSource.parse(spec, key=f"graphs.{name}", origin=str(path), base=base)
    if isinstance(value, _GraphDef) and value.description is not None:
        source = GraphSource(**{**source.__dict__, "description": value.description})
    return source


def _http(path: Path, raw: Any, base: Path) -> HttpSettings:
    """`http`, checked: the keys served read, the others refused unless left at their default
    (false, null or empty)."""
    if raw is None:
        return HttpSettings()
    if not isinstance(raw, dict):
        raise ProjectError(path, "http", "must be an object")
    for key, value in raw.items():
        if key in _HTTP_SERVED:
            continue
        if key not in HTTP_NOT_SERVED:
            raise ProjectError(path, f"http.{key}", "is not a key of LangGraph's http settings")
        if value not in (None, False, {}, [], ""):
            why = f"{HTTP_NOT_SERVED[key]}: not served by this version of runstream"
            raise ProjectError(path, f"http.{key}", why)
    app = raw.get("app")
    source = None
    if app is not None:
        if not isinstance(app, str):
            raise ProjectError(path, "http.app", "must be a string like './src/app.py:app'")
        source = GraphSource.parse(app, key="http.app", origin=str(path), base=base)
    cors = raw.get("cors")
    cors_settings = None
    if cors is not None:
        try:
            cors_settings = msgspec.convert(cors, CorsSettings)
        except msgspec.ValidationError as exc:
            _, _, at = str(exc).rpartition(" - at `$.")
            key = f"http.cors.{at.rstrip('`')}" if at else "http.cors"
            raise ProjectError(path, key, _cause(exc)) from None
    auth = raw.get("enable_custom_route_auth", False)
    if not isinstance(auth, bool):
        raise ProjectError(path, "http.enable_custom_route_auth", "must be true or false")
    disable_mcp = raw.get("disable_mcp", False)
    if not isinstance(disable_mcp, bool):
        raise ProjectError(path, "http.disable_mcp", "must be true or false")
    disable_a2a = raw.get("disable_a2a", False)
    if not isinstance(disable_a2a, bool):
        raise ProjectError(path, "http.disable_a2a", "must be true or false")
    disable_webhooks = raw.get("disable_webhooks", False)
    if not isinstance(disable_webhooks, bool):
        raise ProjectError(path, "http.disable_webhooks", "must be true or false")
    return HttpSettings(
        app=source,
        cors=cors_settings,
        enable_custom_route_auth=auth,
        disable_mcp=disable_mcp,
        disable_a2a=disable_a2a,
        disable_webhooks=disable_webhooks,
    )


def _cause(error: msgspec.ValidationError) -> str:
    """msgspec's message without its ` - at `$.key`` (the key is named apart)."""
    return str(error).partition(" - at `$")[0]


def _env(path: Path, env: dict[str, str] | str | None, base: Path) -> dict[str, str]:
    """`env` as a mapping: given as one, or read from the dotenv file it names. A missing file
    is no error, as with `langgraph dev` (templates name a `.env` the user makes)."""
    if env is None:
        return {}
    if isinstance(env, dict):
        return env
    env_file = base / env
    if not env_file.is_file():
        logger.warning("the project's env file is missing", env=str(env_file), file=str(path))
        return {}
    try:
        values = dotenv_values(env_file)
    except (OSError, UnicodeDecodeError) as exc:
        raise ProjectError(path, "env", f"{env_file} cannot be read: {exc}") from None
    return {k: v for k, v in values.items() if v is not None}


def _local_dependencies(path: Path, dependencies: list[str], base: Path) -> list[Path]:
    """The local paths among `dependencies` (those starting with `.`, as LangGraph tells them
    apart), each a directory; package names are the user's to install."""
    paths: list[Path] = []
    for index, dependency in enumerate(dependencies):
        if not dependency.startswith("."):
            continue
        folder = (base / dependency).resolve()
        if not folder.is_dir():
            raise ProjectError(
                path, f"dependencies[{index}]", f"{dependency!r} is not a directory ({folder})"
            )
        paths.append(folder)
    return paths
