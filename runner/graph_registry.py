"""The registry of the graphs a process serves: the built-ins, those of `RUNSTREAM_GRAPHS` and
the project's, imported at start-up, each bound to the process's checkpointer when used.

A registered graph is a `StateGraph` builder, a compiled graph or a graph factory (from
`RUNSTREAM_GRAPHS` or a project's langgraph.json, `project.langgraph_json`); runstream compiles or
copies it with its own checkpointer. The worker runs graphs from here; the server reads them
from here (drawings, schemas, threads' states) and checks a submit against `catalog()`, which
holds no LangGraph.

The `config.configurable` keys a graph takes are the model factory's (`fake_token_delay_ms`)
plus those its module lists in `CONFIGURABLE_KEYS`, by attribute name; a graph not listed takes
any key LangGraph and runstream do not reserve (`project.configurable`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig, ensure_config
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from project.configurable import MODEL_CONFIGURABLE, is_reserved, select
from project.graph_catalog import GraphCatalog, UnknownGraph
from project.graph_loading import LoadedGraph, execution_runtime, load_graph, read_runtime
from project.langgraph_json import GraphSource, Project, ProjectError, load_project
from stream_store.settings import Settings

__all__ = ["BUILTIN_GRAPHS", "GraphRegistry"]

# The built-in graphs' sources (runner/graphs.py), loaded as any graph is: by name, at start-up.
BUILTIN_GRAPHS: dict[str, str] = {
    "chat": "runner.graphs:chat",
    "approval": "runner.graphs:approval",
}


class GraphRegistry:
    """Graph names to their sources, loaded at start-up; each graph bound to the process's
    checkpointer when used.

    The built-in graphs, and over them those of `RUNSTREAM_GRAPHS` and the project's (which
    may not name the same graph). A graph or `StateGraph` is compiled once; a factory
    (`project.graph_loading`) is called once per run, and once with a neutral config for its
    structure (drawing, schemas, state reads), as LangGraph builds it for those.
    """

    def __init__(
        self, specs: Mapping[str, str | GraphSource], auth: GraphSource | None = None
    ) -> None:
        # The project's `auth.path`, which the server loads (server/callers/project_auth.py): it is
        # imported where the graphs are, with the project's env and import paths in place.
        self.auth = auth
        merged: dict[str, str | GraphSource] = {**BUILTIN_GRAPHS, **specs}
        self.sources = {
            name: spec if isinstance(spec, GraphSource) else _env_source(name, spec)
            for name, spec in merged.items()
        }
        self.project: Project | None = None  # the langgraph.json the graphs came from, if any
        self._loaded: dict[str, LoadedGraph] = {}
        self._compiled: dict[str, Pregel] = {}
        self._configurable: dict[str, frozenset[str] | None] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> GraphRegistry:
        """The graphs of a process given only its settings (the tests' servers and workers):
        its project (`RUNSTREAM_CONFIG`) read here, then as `for_project`. `runstream serve`
        and `worker` read the project once at their start and call `for_project`.

        Raises:
            SettingsError: a graph cannot be served (a `ProjectError` names file, key, cause).
        """
        path = settings.config_path
        return cls.for_project(settings, None if path is None else load_project(path))

    @classmethod
    def for_project(cls, settings: Settings, project: Project | None) -> GraphRegistry:
        """The process's graphs: the built-ins, `RUNSTREAM_GRAPHS` and those of `project` (the
        process's langgraph.json, read once), every one imported and checked; the project's
        env and import paths put in place first (`Project.prepare`, once per process: this is
        where it is called).

        Raises:
            SettingsError: a graph cannot be served (a `ProjectError` names file, key, cause).
        """
        specs: dict[str, str | GraphSource] = dict(settings.graphs)
        auth: GraphSource | None = None
        if project is not None:
            clash = sorted(set(specs) & set(project.graphs))
            if clash:
                raise ProjectError(
                    project.file,
                    f"graphs.{clash[0]}",
                    "is also named in RUNSTREAM_GRAPHS: give each graph one source",
                )
            project.prepare()
            specs.update(project.graphs)
            auth = project.auth
        registry = cls(specs, auth)
        registry.project = project
        registry.validate()
        return registry

    def __contains__(self, name: object) -> bool:
        return name in self.sources

    def names(self) -> list[str]:
        return sorted(self.sources)

    def catalog(self) -> GraphCatalog:
        """What a submit is checked against: every graph's `configurable` keys (each graph
        imported, if it was not yet).

        Raises:
            ProjectError: a graph does not import, or declares a reserved key.
        """
        configurable = {name: self.configurable_keys(name) for name in self.sources}
        return GraphCatalog(configurable)

    def validate(self) -> None:
        """Import every graph once at start-up, so a bad graph fails early."""
        for name in self.sources:
            self._load(name)
            self.configurable_keys(name)

    def _load(self, name: str) -> LoadedGraph:
        if name not in self._loaded:
            try:
                source = self.sources[name]
            except KeyError:
                raise UnknownGraph(name) from None
            self._loaded[name] = load_graph(source)
        return self._loaded[name]

    def configurable_keys(self, name: str) -> frozenset[str] | None:
        """The `configurable` keys graph `name` takes: the model factory's and those its module
        declares in `CONFIGURABLE_KEYS`; None when it declares none (it takes any key that is
        not reserved, as on LangGraph's server).

        Raises:
            UnknownGraph: no graph is registered under `name`.
            ProjectError: its module declares a key LangGraph or runstream reserves.
        """
        if name not in self._configurable:
            loaded = self._load(name)
            source = loaded.source
            declared = getattr(loaded.module, "CONFIGURABLE_KEYS", {}).get(source.attr)
            where = f"{source.where}:{source.attr}"
            if declared is None:
                self._configurable[name] = None
                return None
            if isinstance(declared, str) or not all(isinstance(k, str) for k in declared):
                raise ProjectError(
                    source.origin, source.key, f"CONFIGURABLE_KEYS of {where} must list strings"
                )
            reserved = sorted(key for key in declared if is_reserved(key))
            if reserved:
                raise ProjectError(
                    source.origin,
                    source.key,
                    f"{where} declares configurable keys that are reserved for LangGraph and"
                    f" runstream: {', '.join(reserved)}",
                )
            self._configurable[name] = frozenset(MODEL_CONFIGURABLE) | frozenset(declared)
        return self._configurable[name]

    def caller_configurable(self, name: str, configurable: Any) -> dict[str, Any]:
        """What of a recorded run's `configurable` graph `name` may see: the keys it takes."""
        return select(configurable, self.configurable_keys(name))

    @contextlib.asynccontextmanager
    async def graph_for_run(
        self,
        name: str,
        config: RunnableConfig,
        checkpointer: BaseCheckpointSaver,
        store: BaseStore,
    ) -> AsyncIterator[Pregel]:
        """Graph `name` for one run, on `checkpointer` and `store`: a factory is called with a
        copy of the run's `config` (and a runtime on `store`), its context left at the end."""
        loaded = self._load(name)
        if loaded.factory is None:
            yield self._static(name, checkpointer).copy(update={"store": store})
            return
        made_with = ensure_config(copy.deepcopy(config))
        async with loaded.factory.build(made_with, execution_runtime(store)) as made:
            yield _bound(made, loaded.source, checkpointer, store)

    async def graph_for_reading(self, name: str, checkpointer: BaseCheckpointSaver) -> Pregel:
        """Graph `name`'s structure on `checkpointer`, for drawing it, its schemas and its
        threads' states (nothing of a run executes on it). A factory's is built once, with a
        neutral config and an empty store, its context left at once (LangGraph asks that a
        factory's graph have the same nodes and edges whatever the config).

        Raises:
            UnknownGraph: no graph is registered under `name`.
        """
        compiled = self._compiled_on(name, checkpointer)
        if compiled is not None:
            return compiled
        loaded = self._load(name)
        if loaded.factory is None:
            return self._static(name, checkpointer)
        store = InMemoryStore()
        async with loaded.factory.build(ensure_config(), read_runtime(store)) as made:
            self._compiled[name] = _bound(made, loaded.source, checkpointer, None)
        return self._compiled[name]

    def _static(self, name: str, checkpointer: BaseCheckpointSaver) -> Pregel:
        compiled = self._compiled_on(name, checkpointer)
        if compiled is None:
            loaded = self._load(name)
            assert loaded.graph is not None
            compiled = self._compiled[name] = _bound(
                loaded.graph, loaded.source, checkpointer, None
            )
        return compiled

    def _compiled_on(self, name: str, checkpointer: BaseCheckpointSaver) -> Pregel | None:
        """Graph `name` as compiled already, on `checkpointer`: a process has one, but an app
        started again (the tests') opens another, and the graph moves onto it."""
        compiled = self._compiled.get(name)
        if compiled is not None and compiled.checkpointer is not checkpointer:
            compiled = self._compiled[name] = compiled.copy(update={"checkpointer": checkpointer})
        return compiled


def _env_source(name: str, spec: str) -> GraphSource:
    """A graph of `RUNSTREAM_GRAPHS` (or a built-in): `module:attr`."""
    return GraphSource.parse(spec, key=f"graph {name!r}", origin="RUNSTREAM_GRAPHS", base=None)


def _bound(
    graph: Any, source: GraphSource, checkpointer: BaseCheckpointSaver, store: BaseStore | None
) -> Pregel:
    """`graph` compiled or copied onto runstream's checkpointer (and `store`, when given).

    Raises:
        TypeError: a factory made something that is not a graph.
    """
    update: dict[str, Any] = {"checkpointer": checkpointer}
    if store is not None:
        update["store"] = store
    if isinstance(graph, StateGraph):
        return graph.compile(checkpointer=checkpointer, store=store)
    if isinstance(graph, Pregel):
        return graph.copy(update=update)
    raise TypeError(
        f"graph factory {source.where}:{source.attr} made a {type(graph).__name__},"
        " not a compiled graph or a StateGraph"
    )
