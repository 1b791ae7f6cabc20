"""Importing a graph from its source, and building a graph factory's graph, as LangGraph does.

What a graph attribute may be follows `langgraph_api/graph.py` (`_graph_from_spec`,
`get_graph`) and `langgraph_api/_factory_utils.py`: a compiled graph, a `StateGraph`, or a
factory, called with nothing, a `RunnableConfig`, a `ServerRuntime` (by annotation), or both;
it returns a graph, a coroutine of one, or a context manager (sync or async) that yields one.
A factory is not called at start-up (LangGraph does not either): once per run with the run's
config, and for the graph's structure (drawing, schemas, state reads) with a neutral one.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import sys
import traceback
import typing
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, get_args, get_origin

from langchain_core.runnables import RunnableConfig
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel
from langgraph.store.base import BaseStore

# LangGraph's server builds its factories' runtime from these (langgraph_api/_factory_utils.py
# `build_server_runtime`); they are the SDK's, the concrete classes behind `ServerRuntime`.
from langgraph_sdk.runtime import ServerRuntime, _ExecutionRuntime, _ReadRuntime

from .langgraph_json import GraphSource, ProjectError

__all__ = ["GraphFactory", "LoadedGraph", "import_source", "load_graph"]

_ANNOTATION_NAMES = {"ServerRuntime": ServerRuntime, "RunnableConfig": RunnableConfig}


@dataclass(frozen=True)
class GraphFactory:
    """A function that makes the graph, and which of its parameters take what."""

    function: Callable[..., Any]
    config_param: str | None
    runtime_param: str | None

    @classmethod
    def of(cls, function: Callable[..., Any], source: GraphSource) -> GraphFactory:
        """Classify `function`'s parameters as `_classify_factory` does.

        Raises:
            ProjectError: it takes more than two parameters, or two of which none is a runtime.
        """
        try:
            params = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError) as exc:
            raise ProjectError(source.origin, source.key, f"{source.attr}: {exc}") from None
        try:
            hints = typing.get_type_hints(function, localns=_ANNOTATION_NAMES)
        except Exception:  # an annotation that does not resolve: treat it as none, as LangGraph
            hints = {}
        runtime = [p.name for p in params if _is_runtime(hints.get(p.name, p.annotation))]
        if len(params) == 0:
            return cls(function, None, None)
        if len(params) == 1:
            name = params[0].name
            return cls(function, None, name) if runtime else cls(function, name, None)
        if len(params) == 2 and len(runtime) == 1:
            (config,) = (p.name for p in params if p.name != runtime[0])
            return cls(function, config, runtime[0])
        raise ProjectError(
            source.origin,
            source.key,
            f"graph factory {source.attr} takes {[p.name for p in params]}: a factory takes"
            " nothing, a RunnableConfig, a ServerRuntime (annotated so), or both",
        )

    @contextlib.asynccontextmanager
    async def build(self, config: RunnableConfig, runtime: ServerRuntime) -> AsyncIterator[Any]:
        """Call the factory; yield what it made, inside its context manager if it returned one
        (`langgraph_api/asyncio.py` `as_asynccontextmanager`)."""
        kwargs: dict[str, Any] = {}
        if self.config_param is not None:
            kwargs[self.config_param] = config
        if self.runtime_param is not None:
            kwargs[self.runtime_param] = runtime
        made = self.function(**kwargs)
        if hasattr(made, "__aenter__") and hasattr(made, "__aexit__"):
            async with made as graph:
                yield graph
        elif hasattr(made, "__enter__") and hasattr(made, "__exit__"):
            with made as graph:
                yield graph
        elif inspect.isawaitable(made):
            yield await made
        else:
            yield made


@dataclass(frozen=True)
class LoadedGraph:
    """A graph's source, its module, and what the attribute is: a graph or a factory."""

    source: GraphSource
    module: ModuleType
    graph: Pregel | StateGraph[Any, Any, Any, Any] | None
    factory: GraphFactory | None


def load_graph(source: GraphSource) -> LoadedGraph:
    """Import `source`'s module and take its attribute.

    Raises:
        ProjectError: the module does not import, has no such attribute, or it is not a graph.
    """
    module = import_source(source)
    try:
        value = module.__dict__[source.attr]
    except KeyError:
        likely = [k for k, v in module.__dict__.items() if isinstance(v, StateGraph | Pregel)]
        hint = f" (its graphs: {', '.join(likely)})" if likely else ""
        raise ProjectError(
            source.origin, source.key, f"{source.where} has no {source.attr!r}{hint}"
        ) from None
    if isinstance(value, Pregel | StateGraph):
        return LoadedGraph(source, module, value, None)
    if callable(value) and not isinstance(value, type):
        return LoadedGraph(source, module, None, GraphFactory.of(value, source))
    raise ProjectError(
        source.origin,
        source.key,
        f"{source.where}:{source.attr} is a {type(value).__name__}, not a compiled graph,"
        " a StateGraph or a graph factory",
    )


def execution_runtime(store: BaseStore) -> ServerRuntime:
    """The runtime a factory gets for a run (no authenticated user, no context yet)."""
    return _ExecutionRuntime(access_context="threads.create_run", store=store)


def read_runtime(store: BaseStore) -> ServerRuntime:
    """The runtime a factory gets when only the graph's structure is wanted."""
    return _ReadRuntime(access_context="assistants.read", store=store)


def _is_runtime(annotation: Any) -> bool:
    """Whether a parameter's annotation is a `ServerRuntime` (`_is_runtime_annotation`)."""
    if annotation is ServerRuntime:
        return True
    if isinstance(annotation, type):
        return issubclass(annotation, _ExecutionRuntime | _ReadRuntime)
    origin = get_origin(annotation)
    if origin is ServerRuntime:
        return True
    args = get_args(annotation)
    return origin is not None and bool(args) and _is_runtime(args[0])


def import_source(source: GraphSource) -> ModuleType:
    """The module: imported by name, or executed from its file under the name LangGraph gives
    it, once per process (again if another file had that name). Graphs and the project's
    embeddings (`project.store_index`) are imported this way.

    Raises:
        ProjectError: the import failed, naming the source's key and the cause.
    """
    try:
        name = str(source.module)
        if source.path is None:
            return importlib.import_module(name)
        loaded = sys.modules.get(name)
        if loaded is not None and getattr(loaded, "__file__", None) == str(source.path):
            return loaded
        spec = importlib.util.spec_from_file_location(name, source.path)
        if spec is None or spec.loader is None:
            raise ImportError(f"not a Python file: {source.path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module
    except Exception as exc:
        cause = str(exc).splitlines()[0] if str(exc) else ""
        at = _failed_at(exc)
        # Chained: the user's traceback stays on the error, for a log that prints it.
        raise ProjectError(
            source.origin,
            source.key,
            f"importing {source.where} failed{at}: {type(exc).__name__}: {cause}",
        ) from exc


def _failed_at(exc: BaseException) -> str:
    """Where the user's code failed, as ` at file:line` (empty when not known): for a
    `SyntaxError` the line it found, else the innermost frame that is neither the import
    machinery's nor in the Python installation (a library the user's module imported), or
    failing that the innermost that is not the import machinery's."""
    if isinstance(exc, SyntaxError):
        return f" at {exc.filename}:{exc.lineno}" if exc.filename else ""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<frozen") and frame.filename != __file__
    ]
    installed = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
    users = [f for f in frames if not any(Path(f.filename).is_relative_to(p) for p in installed)]
    if not frames:
        return ""
    frame = (users or frames)[-1]
    return f" at {frame.filename}:{frame.lineno}"
