"""The memory-aware assistant (`assistant` in runner/assistant/langgraph.json): an ordinary
LangGraph graph on runstream's "own project" mechanism.

A turn that asks nothing is one step, `answer`, so it writes the checkpoints `chat` writes
(its input, the start, the step: 3), and agent-chat-ui, which reads a thread's 10 latest, finds
an edited or regenerated message's fork among them and shows both branches. In it:

- `respond` (the answer) assembles the context from one store search (the user's facts, framed
  stated / likely / uncertain by confidence; not those this run writes) and the thread's state
  (the summary and the recent messages), with no model call before the answer's, and streams
  the answer.
- `extract`, beside it (a task of the same step), reads facts from the user's message (rules
  offline, structured output with a model), writes each new one once (`runner.run_scope.once`),
  and stages one that contradicts a stored value as a pending conflict, the old value kept. A
  user keeps at most `RUNSTREAM_MAX_FACTS` facts: past them (or when the store refuses a
  write, `store_full`) no new one is written, and a short message after the answer says so.
- Then, nothing being pending, `summarize` folds the older messages into the summary past
  `summary_after` messages, and `grade` grades the turn (runner/assistant/grading.py) and
  records it, once per run and key.

A turn that stages a conflict goes on to the `confirm` node, which asks about each pending
conflict through `interrupt()` (the human-in-the-loop shape the UIs draw buttons for): yes
applies the new value, no keeps the old, an unclear answer asks again; a conflict older than
`conflict_ttl_s` is dropped, the old value kept (a late answer is told so: `expired_message`).
After the last answer `wrap_up` summarises and grades the turn.

What a client sends is `messages` (`AssistantInput`, the graph's input schema): `summary`,
`pending` and `turn` are the graph's bookkeeping, which LangGraph drops from a run's input
(runstream refuses them at submit, as any key the input schema lacks). They are still state,
which LangGraph lets a thread's owner write (`update_state`, a command's `update`): a pending
conflict is therefore checked before it is asked, and a fact before it is written
(`facts.fact_problems`).

The facts live in LangGraph's store under `("memory", "facts")`, in the store of the run's
owner (runstream keeps each owner's namespaces apart): `/store/items/search` with that prefix
lists them to their user, `DELETE /store/items` forgets one (docs/memory.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Annotated, Any, NotRequired, Protocol, TypeVar

import structlog
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config, get_stream_writer
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, PutOp
from langgraph.types import interrupt

from runner.models import EchoChatModel
from runner.run_scope import chat_model, current_run, once, record_evaluation
from stream_store.errors import QuotaExceeded

from .confirmation import (
    CLASSIFY_PROMPT,
    JUDGE_PROMPT,
    Classification,
    Judgement,
    Verdict,
    answer_text,
    confirmation_request,
    fast_verdict,
    rule_verdict,
    safe_verdict,
)
from .facts import (
    EXTRACTION_PROMPT,
    MULTI_KINDS,
    Extraction,
    Fact,
    conflict_with,
    fact_problems,
    framing,
    model_facts,
    rule_facts,
)
from .grading import Grade, grade_confirmation, grade_extraction, grade_reply
from .summary import MAX_SUMMARY_CHARS, SUMMARY_PROMPT, rule_summary, transcript

__all__ = [
    "CONFIGURABLE_KEYS",
    "MEMORY_FULL",
    "NAMESPACE",
    "AssistantContext",
    "AssistantInput",
    "AssistantState",
    "assistant_builder",
    "conflict_problems",
    "graph",
]

logger = structlog.get_logger()

NAMESPACE = ("memory", "facts")
# What the assistant says after its answer when it could not remember all it was told
MEMORY_FULL = (
    "My memory is full, so I did not remember everything you just told me: delete some of the"
    " facts I remember about you to make room."
)
T = TypeVar("T")
MAX_TTL_S = 365 * 86400  # a year: the longest a pending conflict may wait


# The bounds of each threshold (docs/memory.md, "Settings"): (least, most)
CONTEXT_BOUNDS: dict[str, tuple[int, int]] = {
    "summary_after": (3, 1000),
    "keep_recent": (2, 999),
    "recalled_facts": (1, 1000),
}


def _whole(name: str, value: Any) -> int:
    """`value` as the integer it must be (a JSON `4.0` is 4; `2.5`, `"4"`, `true` are not)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {str(value)[:40]!r}")
    least, most = CONTEXT_BOUNDS[name]
    if not least <= value <= most:
        raise ValueError(f"{name} must be from {least} to {most}, got {value}")
    return value


@dataclass
class AssistantContext:
    """The assistant's thresholds (an assistant's or a run's `context`), checked as it is built:
    a run's at submit, an assistant's at create and update (`project.graph_context`), so a
    context that would fail a run is a 422 naming its field, never a failed run."""

    summary_after: int = 24  # messages in the thread past which older ones are summarised
    keep_recent: int = 8  # messages kept verbatim when summarising
    conflict_ttl_s: float = 86400.0  # a pending conflict unanswered this long is dropped
    recalled_facts: int = 50  # facts of the user put in the prompt, at most

    def __post_init__(self) -> None:
        for name in CONTEXT_BOUNDS:
            setattr(self, name, _whole(name, getattr(self, name)))
        ttl = self.conflict_ttl_s
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_TTL_S:
            raise ValueError(
                f"conflict_ttl_s must be a number of seconds above 0, at most {MAX_TTL_S},"
                f" got {str(ttl)[:40]!r}"
            )
        self.conflict_ttl_s = float(ttl)
        if self.keep_recent >= self.summary_after:
            raise ValueError(
                f"keep_recent ({self.keep_recent}) must be less than summary_after"
                f" ({self.summary_after})"
            )


# The `configurable` keys the graph takes (`project.configurable`): its context's, which a run's
# configurable sets as its context does (LangGraph keeps the two as one); any other is refused.
CONFIGURABLE_KEYS = {"graph": frozenset(field.name for field in fields(AssistantContext))}


def merge_turn(current: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """The turn's record, for its grades: `answer` writes its part when a question is asked,
    `confirm` each answer; an empty update (the turn graded) starts the next turn's."""
    return {**current, **update} if update else {}


class AssistantInput(MessagesState):
    """What a run's input may give: the user's messages, nothing of the graph's bookkeeping."""


class AssistantState(MessagesState):
    summary: NotRequired[str]  # the older messages, folded
    pending: NotRequired[list[dict[str, Any]]]  # conflicts waiting for the user's answer
    turn: NotRequired[Annotated[dict[str, Any], merge_turn]]  # this turn's, for `grade`


def _context(runtime: Runtime[AssistantContext]) -> AssistantContext:
    return runtime.context if isinstance(runtime.context, AssistantContext) else AssistantContext()


def _store(runtime: Runtime[AssistantContext]) -> BaseStore:
    assert runtime.store is not None, "runstream gives every run its owner's store"
    return runtime.store


def _run_id(config: RunnableConfig) -> str:
    return str((config.get("configurable") or {}).get("run_id", ""))


def _model() -> BaseChatModel:
    """The worker's model for this run (`runner.run_scope.chat_model`), with the node's config."""
    return chat_model(get_config())


def _last_user_text(messages: list[AnyMessage]) -> str:
    last = messages[-1] if messages else None
    return last.text if isinstance(last, HumanMessage) else ""


def _offline(model: BaseChatModel) -> bool:
    """The `fake` model: every step is then a deterministic rule instead of a model call."""
    return isinstance(model, EchoChatModel)


def _quiet(model: Any) -> Any:
    """A model call whose tokens are not the answer's (LangGraph's `nostream` tag)."""
    return model.with_config(tags=[TAG_NOSTREAM])


# -- the answer ------------------------------------------------------------------------------


def memory_prompt(facts: list[Fact], summary: str) -> str:
    """The system prompt: who the user is, framed by confidence, and the earlier conversation."""
    lines = ["You are a helpful assistant who remembers the user across conversations."]
    groups: dict[str, list[str]] = {"stated": [], "likely": [], "uncertain": []}
    for fact in facts:
        groups[framing(fact.confidence)].append(fact.sentence())
    if facts:
        lines.append("What you know about the user:")
        lines += [f"- the user stated that {s}" for s in groups["stated"]]
        lines += [f"- probably {s}" for s in groups["likely"]]
        lines += [
            f"- perhaps {s} (uncertain: ask before relying on it)" for s in groups["uncertain"]
        ]
    if summary:
        lines += ["Summary of the earlier conversation:", summary]
    return "\n".join(lines)


def offline_reply(facts: list[Fact], text: str) -> str:
    """The `fake` model's answer: what is remembered, then what the user said (deterministic)."""
    known = "; ".join(
        f"{f.sentence()}"
        + ("" if framing(f.confidence) == "stated" else f" ({framing(f.confidence)})")
        for f in facts
    )
    known = known.replace("their ", "your ").replace("they ", "you ")
    remembered = f"I remember that {known}." if facts else "I don't know anything about you yet."
    return f"{remembered} You said: {text}"


async def respond(state: AssistantState, runtime: Runtime[AssistantContext]) -> dict[str, Any]:
    """Context assembly (one store search, the state) and the answer, streamed."""
    context = _context(runtime)
    items = await _store(runtime).asearch(NAMESPACE, limit=context.recalled_facts)
    run_id = _run_id(get_config())
    # what was known before this message: not the facts this run writes beside the answer (an
    # attempt retried after a kill answers as the first did)
    facts = sorted(
        (
            fact
            for item in items
            if (fact := Fact.read(item.value)) is not None and fact.source_run != run_id
        ),
        key=Fact.order,
    )
    system = SystemMessage(memory_prompt(facts, state.get("summary", "")))
    prompt: list[BaseMessage] = [system, *state["messages"]]
    get_stream_writer()(
        {
            "memory": {
                "event": "prompt",
                "messages": len(prompt),
                "characters": sum(len(m.text) for m in prompt),
                "facts": len(facts),
            }
        }
    )
    model = _model()
    text = _last_user_text(state["messages"])
    if _offline(model):
        reply = await model.ainvoke([HumanMessage(offline_reply(facts, text))])
    else:
        reply = await model.ainvoke(prompt)
    return {"messages": [reply], "turn": {"prompt": text, "reply": reply.text}}


# -- extraction ------------------------------------------------------------------------------


async def _stored(store: BaseStore, facts: list[Fact]) -> dict[str, Fact]:
    """The stored facts under the keys `facts` may touch (their own and their opposites')."""
    keys = {fact.key for fact in facts}
    keys |= {
        Fact("dislikes" if f.kind == "likes" else "likes", f.value, 0, "").key
        for f in facts
        if f.kind in MULTI_KINDS
    }
    found = {}
    for key in sorted(keys):
        item = await store.aget(NAMESPACE, key)
        fact = Fact.read(item.value) if item is not None else None
        if fact is not None:
            found[key] = fact
    return found


async def _stored_and_kept(
    store: BaseStore, facts: list[Fact], max_facts: int
) -> tuple[dict[str, Fact], int]:
    """`_stored`, and how many items the user keeps under `NAMESPACE` (0 without a cap: not
    counted). Within the cap one search reads them all, which answers every key at once (a
    long message may state thousands); past it (the cap lowered since, items put through the
    store routes) each key is read."""
    if not max_facts or not facts:
        return await _stored(store, facts), 0
    items = await store.asearch(NAMESPACE, limit=max_facts + 1)
    if len(items) > max_facts:
        return await _stored(store, facts), len(items)
    every = {item.key: fact for item in items if (fact := Fact.read(item.value)) is not None}
    return every, len(items)


def _max_facts() -> int:
    """`RUNSTREAM_MAX_FACTS` of the worker running this run (0: no limit): a server setting, so
    that no run's input or context can raise it."""
    return current_run().max_facts


async def remember_once(
    store: BaseStore, key: str, fact: Fact, *, replaces: Fact | None = None
) -> dict[str, Any] | None:
    """Write `fact` (deleting the like or dislike it replaces) once for this run and `key`;
    None, and nothing written, for a fact `facts.fact_problems` refuses (a value past
    `MAX_VALUE` characters, ...), whatever asked for it.

    `once` records the write's stamp in runstream's ledger; the store is then written unless
    it already holds that stamp, which is the case when an earlier attempt of the run wrote
    it. A retry therefore writes nothing again, and one killed between the ledger and the
    store completes the write. The delete and the put are one batch, so a store that refuses
    the put (`QuotaExceeded`, past the owner's caps) keeps the replaced fact.
    """

    if problems := fact_problems(fact.as_value()):
        logger.warning("a fact not written", key=fact.key[:120], problems=problems)
        return None

    async def stamp() -> dict[str, Any]:
        return {"key": fact.key, "value": fact.value, "written_at": datetime.now(UTC).isoformat()}

    written: dict[str, Any] = await once(key, stamp, name="remember_fact")
    current = await store.aget(NAMESPACE, fact.key)
    if current is None or current.value.get("written_at") != written["written_at"]:
        value = {**fact.as_value(), "written_at": written["written_at"]}
        ttl = (store.ttl_config or {}).get("default_ttl")  # as `aput` without a `ttl`
        ops = [PutOp(NAMESPACE, fact.key, value, ttl=ttl)]
        if replaces is not None and replaces.key != fact.key:
            ops.insert(0, PutOp(NAMESPACE, replaces.key, None))
        await store.abatch(ops)
    return written


async def _aside(step: str, call: Awaitable[T], fallback: T) -> T:
    """A model call beside the answer (extraction, classification, summary): one that fails
    (the model's error, an answer that does not fit its schema) is logged and shown in the
    stream, and the turn goes on without it rather than failing the user's answer."""
    try:
        return await call
    except Exception as exc:
        logger.warning("a memory step's model call failed", step=step, error=str(exc)[:300])
        failed = {"event": "model_failed", "step": step, "error": type(exc).__name__}
        get_stream_writer()({"memory": failed})
        return fallback


async def extract_facts(model: BaseChatModel, text: str, run_id: str) -> list[Fact]:
    """The facts `text` states: by rule offline, by a structured-output call with a model
    (none when that call fails)."""
    if _offline(model):
        return rule_facts(text, run_id)
    extractor = _quiet(model.with_structured_output(Extraction, method="function_calling"))
    ask = extractor.ainvoke([SystemMessage(EXTRACTION_PROMPT), HumanMessage(text)])
    answer = await _aside("extraction", ask, None)
    return model_facts(answer, run_id) if isinstance(answer, Extraction) else []


def _pending(state: AssistantState) -> list[Any]:
    """The pending conflicts, each still to be checked (`conflict_problems`)."""
    pending = state.get("pending")
    return pending if isinstance(pending, list) else []


def _alive(conflict: dict[str, Any], context: AssistantContext, now: float) -> bool:
    return now - float(conflict["staged_at"]) < context.conflict_ttl_s


def conflict_problems(conflict: Any) -> list[str]:
    """Why `conflict` (an item of `pending`) is not one to ask about: not shaped as `extract`
    stages one, a new value the write would refuse, or no contradiction of its old value.
    Empty for a good one. `pending` is no input, but its thread's owner can write it as any
    state (`update_state`), so it is read as untrusted."""
    if not (
        isinstance(conflict, dict)
        and isinstance(conflict.get("id"), str)
        and isinstance(conflict.get("key"), str)
        and isinstance(conflict.get("staged_at"), int | float)
        and not isinstance(conflict.get("staged_at"), bool)
    ):
        return ["not a staged conflict"]
    old = Fact.read(conflict.get("old"))
    if old is None:
        return ["not a staged conflict"]
    if problems := fact_problems(conflict.get("new")):
        return problems
    new = Fact.from_value(conflict["new"])
    if new.key != conflict["key"] or conflict_with(new, {old.key: old}) is not old:
        return ["not a contradiction of the old value"]
    return []


def _dropped(conflict: Any, problems: list[str]) -> dict[str, Any]:
    key = conflict.get("key") if isinstance(conflict, dict) else None
    return {"memory": {"event": "conflict_dropped", "key": str(key)[:120], "problems": problems}}


# How a fact is written once (`remember_once`'s signature); the fault tests wrap it to be killed
# between two facts' writes
Remember = Callable[..., Awaitable[dict[str, Any] | None]]


async def extract(
    state: AssistantState, runtime: Runtime[AssistantContext], remember: Remember = remember_once
) -> dict[str, Any]:
    """Facts from the user's message: new ones written once, contradicting ones staged.

    A fact this run wrote already (an earlier attempt's, killed before the turn's checkpoint)
    goes through `once` again, which replays its recorded stamp: the store is left as it is,
    and the stream says `remembered` with the same stamp, as the first attempt did."""
    context = _context(runtime)
    store = _store(runtime)
    writer = get_stream_writer()
    run_id = _run_id(get_config())
    now = time.time()
    pending = []
    for conflict in _pending(state):
        if problems := conflict_problems(conflict):
            writer(_dropped(conflict, problems))
        elif _alive(conflict, context, now):
            pending.append(conflict)
        else:
            writer({"memory": {"event": "conflict_expired", "key": conflict["key"]}})
    text = _last_user_text(state["messages"])
    facts = await extract_facts(_model(), text, run_id) if text else []
    max_facts = _max_facts()
    stored, kept = await _stored_and_kept(store, facts, max_facts)
    full = refused = False  # no room for a new fact; the store refused a write
    for fact in facts:
        old = conflict_with(fact, stored)
        if old is not None:
            pending = [p for p in pending if p["key"] != fact.key]
            pending.append(
                {
                    "id": f"{run_id}:{fact.key}",
                    "key": fact.key,
                    "old": old.as_value(),
                    "new": fact.as_value(),
                    "staged_at": now,
                }
            )
            writer({"memory": {"event": "conflict_staged", "key": fact.key, "new": fact.value}})
            continue
        same = stored.get(fact.key)
        mine = same is not None and same.source_run == run_id  # written by an earlier attempt
        if same is not None and same.confidence >= fact.confidence and not mine:
            # nothing new: the same value, as sure or surer
            writer({"memory": {"event": "unchanged", "key": fact.key}})
            continue
        if refused or (same is None and max_facts and kept >= max_facts):
            full = True  # a fact replacing a stored one still fits; a new one does not
            continue
        try:
            written = await remember(store, f"fact:{fact.key}", fact)
        except QuotaExceeded:  # the owner's store caps (RUNSTREAM_MAX_STORE_ITEMS, _BYTES)
            full = refused = True
            continue
        if written is None:  # refused by `fact_problems` (extraction cuts values: never)
            continue
        if same is None:
            kept += 1
        writer({"memory": {"event": "remembered", **written}})
    turn: dict[str, Any] = {"extracted": [f.as_value() for f in facts]}
    if full:
        writer({"memory": {"event": "memory_full", "kept": kept, "max_facts": max_facts}})
        turn["memory_full"] = True
    return {"pending": pending, "turn": turn}


# -- confirmation ----------------------------------------------------------------------------


async def classify_answer(model: BaseChatModel, question: str, answer: str) -> Verdict:
    """An answer the fast path left unclear: by rule offline, by a structured-output call with
    a model (unclear when that call fails: the question is asked again). Either way a yes for
    an answer with a negation, refusal, deferral or hedge in it is unclear
    (`confirmation.safe_verdict`): memory is never updated on such an answer."""
    if _offline(model):
        return safe_verdict(answer, rule_verdict(answer))
    classifier = _quiet(model.with_structured_output(Classification, method="function_calling"))
    prompt = CLASSIFY_PROMPT.format(question=question, answer=answer)
    result = await _aside("classification", classifier.ainvoke([HumanMessage(prompt)]), None)
    return safe_verdict(answer, result.verdict) if isinstance(result, Classification) else "unclear"


async def confirm(state: AssistantState, runtime: Runtime[AssistantContext]) -> dict[str, Any]:
    """Ask about the first pending conflict; apply it on yes, drop it on no or when expired.

    Everything before `interrupt()` runs again on resume, so it only reads.
    """
    pending = _pending(state)
    if not pending:
        return {"pending": []} if state.get("pending") else {}
    conflict, rest = pending[0], pending[1:]
    writer = get_stream_writer()
    if problems := conflict_problems(conflict):
        writer(_dropped(conflict, problems))
        return {"pending": rest}
    context = _context(runtime)
    old, new = Fact.from_value(conflict["old"]), Fact.from_value(conflict["new"])
    now = time.time()
    if not _alive(conflict, context, now):
        # a late answer (the question was asked when it was staged): say it expired, and what
        # was kept, for it and for every other expired one, in one message
        expired = [
            conflict,
            *(c for c in rest if not conflict_problems(c) and not _alive(c, context, now)),
        ]
        for gone in expired:
            writer({"memory": {"event": "conflict_expired", "key": gone["key"]}})
        rest = [c for c in rest if c not in expired]
        return {"pending": rest, "messages": [AIMessage(content=expired_message(expired))]}
    request = confirmation_request(old, new)
    answer = answer_text(request, interrupt(request))
    verdict, decided_by = fast_verdict(answer), "fast_path"
    if verdict == "unclear":
        model = _model()
        verdict, decided_by = await classify_answer(model, _question(request), answer), "classifier"
    writer(
        {
            "memory": {
                "event": "confirmation",
                "key": conflict["key"],
                "verdict": verdict,
                "decided_by": decided_by,
            }
        }
    )
    confirmations = [
        *state.get("turn", {}).get("confirmations", []),
        {"key": conflict["key"], "answer": answer[:200], "verdict": verdict, "by": decided_by},
    ]
    turn = {"confirmations": confirmations}
    if verdict == "unclear":
        return {"pending": [conflict, *rest], "turn": turn}  # asked again
    store = _store(runtime)
    if verdict == "yes":
        try:
            written = await remember_once(store, f"confirm:{conflict['id']}", new, replaces=old)
            said = f"Updated: {new.sentence()}." if written else f"Kept: {old.sentence()}."
        except QuotaExceeded:  # the owner's store caps: the old value stays
            said = f"Kept: {old.sentence()}. {MEMORY_FULL}"
    else:
        said = f"Kept: {old.sentence()}."
    said = said.replace("their ", "your ").replace("they ", "you ")
    return {"pending": rest, "turn": turn, "messages": [AIMessage(content=said)]}


def expired_message(expired: list[dict[str, Any]]) -> str:
    """What a late answer gets: the question expired, and what was kept."""
    kept = "; ".join(Fact.from_value(c["old"]).sentence() for c in expired)
    said = f"That question expired before your answer, so nothing was changed. Kept: {kept}."
    return said.replace("their ", "your ").replace("they ", "you ")


def _question(request: dict[str, Any]) -> str:
    return str(request["action_requests"][0].get("description", ""))


# -- summary and grading ---------------------------------------------------------------------


async def summarize(
    messages: list[BaseMessage], previous: str, context: AssistantContext
) -> dict[str, Any]:
    """Past `summary_after` messages (`messages`: the thread's with this turn's), all but the
    last `keep_recent` folded into the summary: the update that folds them, or none."""
    if len(messages) <= context.summary_after:
        return {}
    folded = messages[: -context.keep_recent]
    model = _model()
    if _offline(model):
        summary = rule_summary(previous, folded)
    else:
        prompt = SUMMARY_PROMPT.format(summary=previous or "(none)", transcript=transcript(folded))
        made = await _aside("summary", _quiet(model).ainvoke([HumanMessage(prompt)]), None)
        if made is None or not made.text.strip():
            return {}  # folded on a later turn
        summary = made.text
    summary = summary[:MAX_SUMMARY_CHARS]
    get_stream_writer()({"memory": {"event": "summarized", "folded": len(folded)}})
    removed = [RemoveMessage(id=m.id) for m in folded if m.id]
    return {"summary": summary, "messages": removed}


def turn_grades(
    turn: dict[str, Any], judged: list[tuple[Verdict, str] | None] | None = None
) -> list[Grade]:
    """The grades of one turn: its reply, its extraction and each answer to a conflict
    question, when it had them (`judged`: a model judge's reading of each answer, in order;
    the rules judge `grading.judge_answer` for one it lacks)."""
    grades = []
    if "reply" in turn:
        grades.append(grade_reply(str(turn.get("prompt", "")), str(turn["reply"])))
    if "extracted" in turn:
        grades.append(grade_extraction(turn["extracted"]))
    for index, confirmation in enumerate(turn.get("confirmations", [])):
        judgement = judged[index] if judged and index < len(judged) else None
        grades.append(grade_confirmation(index, confirmation, judgement))
    return grades


async def judge_with_model(model: BaseChatModel, confirmation: dict[str, Any]) -> Verdict | None:
    """A model judge's reading of one answer (`Judgement`, a prompt of its own, not the
    classifier's); None when its call fails (the rules judge grades it then)."""
    judge = _quiet(model.with_structured_output(Judgement, method="function_calling"))
    prompt = JUDGE_PROMPT.format(
        key=str(confirmation.get("key", ""))[:120], answer=str(confirmation.get("answer", ""))
    )
    result = await _aside("judge", judge.ainvoke([HumanMessage(prompt)]), None)
    return result.verdict if isinstance(result, Judgement) else None


async def grade(turn: dict[str, Any]) -> None:
    """Grade the turn (its record, `AssistantState.turn`) after its answer streamed; recorded
    once per run and key. With a model, each answer to a conflict question is judged by the
    model (`judge_with_model`)."""
    writer = get_stream_writer()
    judged: list[tuple[Verdict, str] | None] = []
    confirmations = turn.get("confirmations", [])
    model = _model() if confirmations else None
    if model is not None and not _offline(model):
        for confirmation in confirmations:
            verdict = await judge_with_model(model, confirmation)
            judged.append((verdict, "model") if verdict is not None else None)
    for result in turn_grades(turn, judged):
        writer(
            {"evaluation": {"kind": result.kind, "score": result.score, "passed": result.passed}}
        )
        await record_evaluation(
            kind=result.kind,
            score=result.score,
            key=result.key,
            passed=result.passed,
            detail=result.detail,
        )


# -- the graph: a turn that asks nothing is one step ---------------------------------------

# A step of the turn the fault tests replace (`assistant_builder`)
ExtractStep = Callable[
    [AssistantState, Runtime[AssistantContext]], Coroutine[Any, Any, dict[str, Any]]
]
GradeStep = Callable[[dict[str, Any]], Awaitable[None]]


class Node(Protocol):
    """A node of the assistant, as LangGraph calls it (by the parameters' names)."""

    def __call__(
        self, state: AssistantState, runtime: Runtime[AssistantContext]
    ) -> Awaitable[dict[str, Any]]: ...


async def close_turn(
    state: AssistantState,
    runtime: Runtime[AssistantContext],
    turn: dict[str, Any],
    said: list[BaseMessage],
    grade_step: GradeStep,
) -> dict[str, Any]:
    """The end of a turn, nothing left to ask: the summary (the thread's messages with `said`,
    this step's), then the turn's grades; the update that adds `said` and starts the next
    turn's record."""
    messages: list[BaseMessage] = [*state["messages"], *said]
    folded = await summarize(messages, state.get("summary", ""), _context(runtime))
    await grade_step(turn)
    return {**folded, "messages": [*said, *folded.get("messages", [])], "turn": {}}


def answer_node(extract_step: ExtractStep, grade_step: GradeStep) -> Node:
    """The turn's step: `respond` and `extract` side by side (the extraction does not delay
    the answer's first token), then the memory-full notice; when nothing is to be asked, the
    summary and the grades too, so that a turn writes the checkpoints `chat`'s does (its input,
    the start, this step: agent-chat-ui finds an edit's or a regenerate's fork among the 10
    latest). A conflict to ask about leaves the summary and grades to `wrap_up`, after
    `confirm`."""

    async def answer(state: AssistantState, runtime: Runtime[AssistantContext]) -> dict[str, Any]:
        async with asyncio.TaskGroup() as steps:  # one failing cancels the other
            replying = steps.create_task(respond(state, runtime))
            extracting = steps.create_task(extract_step(state, runtime))
        replied, extracted = replying.result(), extracting.result()
        said: list[BaseMessage] = list(replied["messages"])
        if extracted["turn"].get("memory_full"):
            # after the answer, which streamed beside the extraction and so could not say it
            said.append(AIMessage(content=MEMORY_FULL))
        record = {**replied["turn"], **extracted["turn"]}
        if extracted["pending"]:
            return {"messages": said, "pending": extracted["pending"], "turn": record}
        turn = merge_turn(state.get("turn", {}), record)
        closed = await close_turn(state, runtime, turn, said, grade_step)
        return {**closed, "pending": []}

    return answer


def wrap_up_node(grade_step: GradeStep) -> Node:
    """After the last conflict question of a turn is answered: its summary and grades."""

    async def wrap_up(state: AssistantState, runtime: Runtime[AssistantContext]) -> dict[str, Any]:
        return await close_turn(state, runtime, state.get("turn", {}), [], grade_step)

    return wrap_up


def _after_answer(state: AssistantState) -> str:
    return "confirm" if _pending(state) else END


def _after_confirm(state: AssistantState) -> str:
    return "confirm" if _pending(state) else "wrap_up"


def assistant_builder(
    extract_step: ExtractStep = extract,
    confirm_node: Callable[..., Awaitable[dict[str, Any]]] = confirm,
    grade_step: GradeStep = grade,
) -> StateGraph[AssistantState, AssistantContext, AssistantInput, AssistantState]:
    """The assistant's graph, uncompiled: `answer`, then, when a conflict is to be asked,
    `confirm` (once per question) and `wrap_up`. `extract_step`, `confirm_node` and
    `grade_step` replace those steps (the fault tests wrap them to be killed mid-way)."""
    return (
        StateGraph(AssistantState, input_schema=AssistantInput, context_schema=AssistantContext)
        .add_node("answer", answer_node(extract_step, grade_step))
        .add_node("confirm", confirm_node)
        .add_node("wrap_up", wrap_up_node(grade_step))
        .add_edge(START, "answer")
        .add_conditional_edges("answer", _after_answer, ["confirm", END])
        .add_conditional_edges("confirm", _after_confirm, ["confirm", "wrap_up"])
        .add_edge("wrap_up", END)
    )


graph = assistant_builder().compile()
