"""The run a graph's node runs in, for any graph's code: `from runner.run_scope import ...`.

runstream's worker streams each attempt of a run inside `running(scope)`, the one place it sets
the one context variable of this module; LangGraph's node tasks, started inside it, inherit it.
A node of any graph (the built-ins, the memory assistant, a project's own) then calls:

- `current_run()`: the run and attempt it runs in (`RunScope`: ids, owner, graph, trace ids,
  the worker's `RUNSTREAM_MAX_FACTS`);
- `await once(key, effect)`: a side effect run once per run and key, whatever the retries;
- `await record_evaluation(kind, score, key=...)`: a grade of the graph's own work, recorded
  with the run once per key (`runner.evaluations` checks it);
- `chat_model(config=None)`: the worker's configured chat model for the run (the deterministic
  `fake` offline, `ChatOpenAI` with `OPENAI_API_KEY`/`OPENAI_BASE_URL`).

Each raises `NotInARun` outside a run runstream's worker executes (at import time, in a plain
unit test calling a node), so a graph never records against a run it is not in.

`once` in two phases (`runner.tools.ToolLedger.once`): the claim of (run, key) commits, the
effect runs with no pooled connection or transaction held (it may be slow, or use the pool or
the store), and its result, checked as JSON, is recorded after it. A later call reaching the key,
in this attempt or a later one, gets the recorded result back (as JSON decodes it, which is what
the first call answered too) and the effect does not run again. The guarantee: once the result
is recorded, the effect never runs again for that run and key. An effect whose worker died after
the claim and before the record runs again in the next attempt: make one outside runstream's
Postgres idempotent by the key (an idempotency key of the API it calls). A result that is not
JSON cannot be recorded: the call raises `EffectNotRecorded`, and so does every later call with
the key, without running the effect again. docs/langgraph.md ("Graph code and its run") is the
user reference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig

from project.configurable import MODEL_CONFIGURABLE
from stream_store.evaluations import Evaluations
from stream_store.run_records import RunRecord
from stream_store.tracing import trace_id_of

from . import evaluations
from .errors import RunnerError
from .evaluations import EvaluationRefused
from .models import make_chat_model
from .tools import EffectNotRecorded, ToolLedger

if TYPE_CHECKING:
    from stream_store.services import Services

__all__ = [
    "EffectNotRecorded",
    "EvaluationRefused",
    "NotInARun",
    "RunScope",
    "chat_model",
    "current_run",
    "once",
    "record_evaluation",
    "running",
]

# The model factory: the run's `configurable` (the factory's keys among them) -> its chat model
ChatModels = Callable[[dict[str, Any]], BaseChatModel]


class NotInARun(RunnerError, RuntimeError):
    """A function of `runner.run_scope` was called outside a run runstream's worker executes."""


@dataclass(frozen=True)
class RunScope:
    """One attempt of a run as its graph's code sees it: what it is, and what the calls of this
    module record through (the ledger, the evaluations, the model factory)."""

    run_id: str
    thread_id: str
    owner: str
    graph: str
    attempt: int
    trace_id: str | None  # the run's trace (its submit span's), which every attempt continues
    x_trace_id: str | None  # the `X-Trace-ID` of the request that submitted the run
    max_facts: int  # RUNSTREAM_MAX_FACTS: facts the memory assistant keeps per user (0: no limit)
    ledger: ToolLedger  # `once`'s write-once ledger
    evaluations: Evaluations  # where `record_evaluation` writes
    chat_models: ChatModels = field(repr=False)  # what `chat_model` makes the model with
    configurable: Mapping[str, Any] = field(default_factory=dict)  # the caller's, for the model

    @classmethod
    def of(
        cls, run: RunRecord, services: Services, configurable: Mapping[str, Any] | None = None
    ) -> RunScope:
        """The scope of `run`'s current attempt on the worker's `services`; `configurable` is
        the run's as the caller gave it (the model factory's keys among them)."""
        return cls(
            run_id=run.run_id,
            thread_id=run.thread_id,
            owner=run.owner,
            graph=run.graph,
            attempt=run.attempt,
            trace_id=trace_id_of(run.traceparent),
            x_trace_id=run.x_trace_id,
            max_facts=services.settings.max_facts,
            ledger=ToolLedger(services.pool),
            evaluations=services.evaluations,
            chat_models=partial(make_chat_model, services.settings),
            configurable=dict(configurable or {}),
        )


_scope: ContextVar[RunScope | None] = ContextVar("runstream_run_scope", default=None)


@contextlib.contextmanager
def running(scope: RunScope) -> Iterator[None]:
    """Within this block (the worker's stream of one attempt's graph) the functions of this
    module answer for `scope`."""
    token = _scope.set(scope)
    try:
        yield
    finally:
        _scope.reset(token)


def _in_run(caller: str, outside: str = "") -> RunScope:
    scope = _scope.get()
    if scope is None:
        raise NotInARun(
            f"runner.run_scope.{caller} is called from a node of a run runstream's worker"
            f" executes, not outside one (at import time, in a plain test){outside}"
        )
    return scope


def current_run() -> RunScope:
    """The run, and attempt, the calling node runs in.

    Raises:
        NotInARun: called outside a run of runstream's worker.
    """
    return _in_run("current_run")


async def once(key: str, effect: Callable[[], Awaitable[Any]], *, name: str = "effect") -> Any:
    """`await effect()` the first time this run reaches `key`, and its recorded result (JSON)
    every later time, in this attempt or a later one. `name` labels the ledger row and logs.

    Raises:
        NotInARun: called outside a run of runstream's worker.
        EffectNotRecorded: the effect's result (now or when it first ran) is not JSON.
    """
    run = _in_run("once")
    execution = await run.ledger.once(
        run_id=run.run_id, key=key, tool=name, attempt=run.attempt, effect=effect
    )
    return execution.result


async def record_evaluation(
    kind: str,
    score: float,
    *,
    key: str,
    passed: bool | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Record the current run's evaluation `key`: of `kind` (`reply`, `extraction`: a lowercase
    identifier, at most 32 characters), a `score` in [0, 1], whether it `passed` (None: not a
    pass/fail check) and a JSON object of `detail` (at most 16 KiB as compact JSON).

    The first call for `key` in a run writes it; any later one, in this attempt or a later
    one, changes nothing (whatever its values), as does a call from an attempt that no longer
    holds the run (its lease was lost, the run was deleted).

    Raises:
        NotInARun: called outside a run of runstream's worker.
        EvaluationRefused: an input is not as above, or the run holds 1000 evaluations already.
    """
    run = _in_run("record_evaluation")
    await evaluations.record(run, kind, score, key=key, passed=passed, detail=detail)


def chat_model(config: RunnableConfig | None = None) -> BaseChatModel:
    """The worker's configured chat model for the current run, exactly what the built-in graphs
    get. The model factory's keys (`fake_token_delay_ms`) are the run's `configurable`, or
    `config`'s (a node's own) when it names them.

    Raises:
        NotInARun: called outside a run of runstream's worker: there is no configured model to
        give (make one yourself there).
    """
    run = _in_run("chat_model", "; outside one, make a model yourself")
    merged = dict(run.configurable)
    given = (config or {}).get("configurable") or {}
    merged.update({key: given[key] for key in MODEL_CONFIGURABLE if key in given})
    return run.chat_models(merged)
