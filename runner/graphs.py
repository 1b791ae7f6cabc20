"""The built-in graphs (`chat`, `approval`) and the registry that `RUNSTREAM_GRAPHS` extends.

Graph nodes get their chat model from the run context (`RunContext.chat_model`), made by the
model factory for each run, so a graph never knows whether it talks to OpenAI or the fake.
A registered graph is a `StateGraph` builder, a compiled graph or a graph factory (from
`RUNSTREAM_GRAPHS` or a project's langgraph.json, `runner.project`); runstream compiles or
copies it with its own checkpointer.

The `config.configurable` keys a graph takes are the model factory's (`fake_token_delay_ms`)
plus those its module lists in `CONFIGURABLE_KEYS`, by attribute name; a graph not listed takes
any key LangGraph and runstream do not reserve (`runner.configurable`).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.pregel import Pregel
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import interrupt
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from pydantic import AfterValidator

from stream_store.approvals import (
    ActionRequest,
    Decision,
    DecisionType,
    EditDecision,
    HITLRequest,
    RejectDecision,
    ReviewConfig,
    read_answer,
    request_value,
)
from stream_store.settings import Settings

from .configurable import is_reserved, select
from .graph_loading import LoadedGraph, execution_runtime, load_graph, read_runtime
from .models import MODEL_CONFIGURABLE
from .project import GraphSource, Project, ProjectError, load_project
from .tools import Effect, Execution, ToolLedger

__all__ = ["BUILTIN_GRAPHS", "CONFIGURABLE_KEYS", "GraphRegistry", "RunContext", "UnknownGraph"]


@dataclass
class RunContext:
    """What runstream hands every node of a run (LangGraph's `context`)."""

    run_id: str
    thread_id: str
    attempt: int
    chat_model: BaseChatModel
    ledger: ToolLedger

    async def write(self, tool: str, tool_call_id: str, effect: Effect) -> Execution:
        """Run a write tool's effect at most once for this tool call (see `runner.tools`)."""
        return await self.ledger.execute(
            run_id=self.run_id,
            tool_call_id=tool_call_id,
            tool=tool,
            attempt=self.attempt,
            effect=effect,
        )


class UnknownGraph(LookupError):
    """No graph is registered under that name."""


# -- chat ---------------------------------------------------------------------------------


async def respond(state: MessagesState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """One model turn over the whole conversation."""
    reply = await runtime.context.chat_model.ainvoke(state["messages"])
    return {"messages": [reply]}


chat = (
    StateGraph(MessagesState, context_schema=RunContext)
    .add_node("respond", respond)
    .add_edge(START, "respond")
    .add_edge("respond", END)
)


# -- approval -------------------------------------------------------------------------------


@tool
def save_note(content: str) -> str:
    """Save a note for the user (a write: it runs only after a person approved it)."""
    raise NotImplementedError("executed through RunContext.write; this is the schema")


async def run_save_note(context: RunContext, call: ToolCall) -> Execution:
    """The `save_note` effect: one row in `runstream_notes`, at most once per tool call."""
    content = str(call["args"].get("content", ""))
    call_id = call["id"] or ""

    async def insert(conn: AsyncConnection[DictRow]) -> str:
        await conn.execute(
            "INSERT INTO runstream_notes (thread_id, run_id, tool_call_id, content)"
            " VALUES (%s, %s, %s, %s)",
            (context.thread_id, context.run_id, call_id, content),
        )
        return f"saved note ({len(content)} characters)"

    return await context.write("save_note", call_id, insert)


async def propose(state: MessagesState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """The model answers, or proposes a `save_note` call."""
    model = runtime.context.chat_model.bind_tools([save_note])
    reply = await model.ainvoke(state["messages"])
    return {"messages": [reply]}


# What a reviewer may do with a proposed note. No "respond": a note is not a question a person
# could answer in the tool's place.
APPROVAL_DECISIONS: list[DecisionType] = ["approve", "edit", "reject"]


def review_request(calls: list[ToolCall]) -> HITLRequest:
    """The interrupt's value for one model turn: every proposed call, as agent-chat-ui reads it."""
    return HITLRequest(
        action_requests=[
            ActionRequest(name=call["name"], args=call["args"], description=f"Run {call['name']}?")
            for call in calls
        ],
        review_configs=[
            ReviewConfig(action_name=name, allowed_decisions=APPROVAL_DECISIONS)
            for name in dict.fromkeys(call["name"] for call in calls)
        ],
    )


def _rejected(call: ToolCall, decision: RejectDecision) -> ToolMessage:
    """What the model reads for a rejected call (worded as LangChain's middleware words it)."""
    if decision.message:
        content = (
            f"User rejected the tool call for `{call['name']}` with reason: {decision.message}"
        )
    else:
        content = (
            f"User rejected the tool call for `{call['name']}` with id {call['id']}. The tool"
            " was not executed. Do not retry this tool call unless the user explicitly requests it."
        )
    return ToolMessage(
        content=content, name=call["name"], tool_call_id=call["id"] or "", status="error"
    )


def _answer_schema(request: HITLRequest) -> Any:
    """The answer to `request` as `interrupt()` validates it: the decisions it makes."""

    def review_answer(value: Any) -> list[Decision]:
        return read_answer(request, value)

    return Annotated[Any, AfterValidator(review_answer)]


async def confirm_and_run(state: MessagesState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Ask a person about the proposed calls at once; run the approved or edited ones.

    `interrupt()` pauses the run here; code above it re-runs on resume, so nothing with a side
    effect may come before it. An edited call runs with the reviewer's arguments under the
    model's tool-call id, so the ledger still runs it at most once.
    """
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    request = review_request(last.tool_calls)
    # The answer is read as `interrupt()` takes it (`response_schema`): one it cannot read fails
    # the run and is not kept, so the question still waits for a good one.
    value = request_value(request)
    decisions: list[Decision] = interrupt(value, response_schema=_answer_schema(request))
    results: list[ToolMessage] = []
    writer = get_stream_writer()
    for call, decision in zip(last.tool_calls, decisions, strict=True):
        if isinstance(decision, RejectDecision):
            results.append(_rejected(call, decision))
            writer({"tool": call["name"], "tool_call_id": call["id"], "executed": False})
            continue
        ran = call
        if isinstance(decision, EditDecision):
            ran = {**call, "args": decision.edited_action.args}
        execution = await run_save_note(runtime.context, ran)
        output = str(execution.result)
        if isinstance(decision, EditDecision):
            edited = json.dumps(decision.edited_action.args, ensure_ascii=False)
            output = f"{output}; a reviewer edited the call, it ran with {edited}"
        writer(
            {
                "tool": call["name"],
                "tool_call_id": call["id"],
                "executed": True,
                "replayed": execution.replayed,
            }
        )
        results.append(
            ToolMessage(content=output, name=call["name"], tool_call_id=call["id"] or "")
        )
    return {"messages": results}


def _after_propose(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "confirm_and_run" if isinstance(last, AIMessage) and last.tool_calls else END


approval = (
    StateGraph(MessagesState, context_schema=RunContext)
    .add_node("propose", propose)
    .add_node("confirm_and_run", confirm_and_run)
    .add_edge(START, "propose")
    .add_conditional_edges("propose", _after_propose, ["confirm_and_run", END])
    .add_edge("confirm_and_run", "propose")
)

BUILTIN_GRAPHS: dict[str, str] = {
    "chat": "runner.graphs:chat",
    "approval": "runner.graphs:approval",
}

# Neither built-in graph reads `configurable` itself: each takes the model factory's keys only.
CONFIGURABLE_KEYS: dict[str, frozenset[str]] = {"chat": frozenset(), "approval": frozenset()}


class GraphRegistry:
    """Graph names to their sources, loaded at start-up; each graph bound to the process's
    checkpointer when used.

    The built-in graphs, and over them those of `RUNSTREAM_GRAPHS` and the project's (which
    may not name the same graph). A graph or `StateGraph` is compiled once; a factory
    (`runner.graph_loading`) is called once per run, and once with a neutral config for its
    structure (drawing, schemas, state reads), as LangGraph builds it for those.
    """

    def __init__(
        self, specs: Mapping[str, str | GraphSource], auth: GraphSource | None = None
    ) -> None:
        # The project's `auth.path`, which the server loads (server/project_auth.py): it is
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
        """The process's graphs: the built-ins, `RUNSTREAM_GRAPHS` and the project's
        (`RUNSTREAM_CONFIG`), every one imported and checked.

        Raises:
            SettingsError: a graph cannot be served (a `ProjectError` names file, key, cause).
        """
        specs: dict[str, str | GraphSource] = dict(settings.graphs)
        auth: GraphSource | None = None
        project = None
        if settings.config_path is not None:
            project = load_project(settings.config_path)
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
        if name not in self._compiled:
            loaded = self._load(name)
            if loaded.factory is None:
                return self._static(name, checkpointer)
            store = InMemoryStore()
            async with loaded.factory.build(ensure_config(), read_runtime(store)) as made:
                self._compiled[name] = _bound(made, loaded.source, checkpointer, None)
        return self._compiled[name]

    def _static(self, name: str, checkpointer: BaseCheckpointSaver) -> Pregel:
        if name not in self._compiled:
            loaded = self._load(name)
            assert loaded.graph is not None
            self._compiled[name] = _bound(loaded.graph, loaded.source, checkpointer, None)
        return self._compiled[name]


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
