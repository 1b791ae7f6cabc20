"""The memory-aware assistant (runner/assistant, served as a project through its langgraph.json)
driven with LangGraph's Python SDK against a real server and worker, the `fake` model: facts
remembered across threads and kept apart between users, conflicts confirmed or refused, the
summary bounding the prompt. Its pure parts (extraction rules, the yes/no fast path, graders)
are tested in tests/test_assistant_parts.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import msgspec
import pytest
from langgraph_sdk.client import LangGraphClient

from runner.assistant.facts import Fact
from runner.assistant.graph import MEMORY_FULL, NAMESPACE, remember_once
from runner.run_scope import RunScope, running
from stream_store.services import open_services
from stream_store.settings import Settings
from stream_store.store import OwnerStore, StoreCaps
from tests.conftest import StartServer, StartWorker
from tests.openai_compat import RunningServer
from tests.processes import ROOT
from tests.test_langgraph_api import API_KEYS, client_for, first_seen, human
from tests.test_langgraph_store import store_rows

CONFIG = str(ROOT / "runner" / "assistant" / "langgraph.json")
FACTS = ["memory", "facts"]


# The message of issue 31 (99,689 characters, 3,150 notes): with the store's item cap at 100,
# the assistant wrote every one of them.
THOUSANDS_OF_FACTS = " ".join(f"Remember that item{n} is mine." for n in range(1, 3151))[:99_689]


async def serve_assistant(
    start_server: StartServer, start_worker: StartWorker, **changes: Any
) -> tuple[LangGraphClient, LangGraphClient]:
    """Alice's and bob's SDK clients on a server and worker serving the assistant's project,
    both with `changes` to their settings."""
    server = await start_server(api_keys=API_KEYS, config_path=CONFIG, **changes)
    await start_worker(api_keys=API_KEYS, config_path=CONFIG, **changes)
    return client_for(server.url, "key-a"), client_for(server.url, "key-b")


@pytest.fixture
async def users(
    start_server: StartServer, start_worker: StartWorker
) -> tuple[LangGraphClient, LangGraphClient]:
    """Alice's and bob's SDK clients on a server and worker serving the assistant's project."""
    return await serve_assistant(start_server, start_worker)


class Turn:
    """What one streamed run showed: the answer's tokens, the custom events, the last state."""

    def __init__(self, parts: list[Any]) -> None:
        self.tokens = [
            p.data[0]["content"]
            for p in parts
            if p.event == "messages" and p.data[0]["type"] == "AIMessageChunk"
        ]
        self.custom = [p.data for p in parts if p.event == "custom"]
        self.memory = [c["memory"] for c in self.custom if "memory" in c]
        values = [p.data for p in parts if p.event == "values"]
        self.values = values[-1] if values else {}

    @property
    def answer(self) -> str:
        return "".join(self.tokens)

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.memory if m["event"] == kind]


async def turn(
    sdk: LangGraphClient,
    thread_id: str,
    text: str | None = None,
    modes: tuple[str, ...] = ("messages-tuple", "custom", "values"),
    **kwargs: Any,
) -> Turn:
    """One streamed run; `modes` without `messages-tuple` leaves the answer's tokens out (a
    long message's echo is thousands)."""
    run_input = human(text) if text is not None else None
    parts = [
        part
        async for part in sdk.runs.stream(
            thread_id,
            "assistant",
            input=run_input,
            stream_mode=list(modes),  # type: ignore[arg-type]
            **kwargs,
        )
    ]
    errors = [p for p in parts if p.event == "error"]
    assert not errors, errors
    return Turn(parts)


async def facts_of(sdk: LangGraphClient) -> dict[str, dict[str, Any]]:
    found = await sdk.store.search_items(FACTS, limit=100)
    return {item["key"]: item["value"] for item in found["items"]}


async def new_thread(sdk: LangGraphClient) -> str:
    return str((await sdk.threads.create())["thread_id"])


async def test_facts_are_remembered_in_a_new_thread_and_not_by_another_user(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    alice, bob = users
    thread_id = await new_thread(alice)
    first = await turn(alice, thread_id, "Hi, my name is Ann and I live in Paris.")
    assert (
        first.answer
        == "I don't know anything about you yet. You said: Hi, my name is Ann and I live in Paris."
    )
    assert len(first.tokens) > 5  # streamed token by token
    assert sorted(e["key"] for e in first.events("remembered")) == ["location", "name"]
    stored = await facts_of(alice)
    assert {k: (v["value"], v["confidence"]) for k, v in stored.items()} == {
        "name": ("Ann", 0.9),
        "location": ("Paris", 0.9),
    }
    runs = await alice.runs.list(thread_id)
    assert stored["name"]["source_run"] == runs[0]["run_id"]

    # an item the user put there themselves that is no fact is left out, not a failed run
    await alice.store.put_item(FACTS, "mine", {"text": "not a fact"})
    # a new thread of the same user: one store search puts the facts in the answer's context
    later = await turn(alice, await new_thread(alice), "What is my name?")
    assert later.answer.startswith("I remember that your name is Ann; you live in Paris.")
    prompt = later.events("prompt")[0]
    assert prompt["facts"] == 2

    # bob sees none of them, in his answer or through the store routes
    other = await turn(bob, await new_thread(bob), "What is my name?")
    assert other.answer.startswith("I don't know anything about you yet.")
    assert await facts_of(bob) == {}


async def _interrupt_of(sdk: LangGraphClient, thread_id: str) -> dict[str, Any]:
    state = await sdk.threads.get_state(thread_id)
    assert state["next"] == ["confirm"], state["next"]
    return dict(state["interrupts"][0]["value"])


async def _ann_then_bob(sdk: LangGraphClient) -> tuple[str, Turn]:
    """Alice says her name is Ann, then (another thread) that it is Bob: the conflict turn."""
    await turn(sdk, await new_thread(sdk), "My name is Ann.")
    thread_id = await new_thread(sdk)
    return thread_id, await turn(sdk, thread_id, "Actually my name is Bob.")


async def test_a_contradiction_is_asked_and_yes_applies_it(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    alice, _ = users
    thread_id, asked = await _ann_then_bob(alice)
    # the answer streamed first, from the stored value; then the question
    assert asked.answer.startswith("I remember that your name is Ann.")
    assert [e["key"] for e in asked.events("conflict_staged")] == ["name"]
    assert (await alice.threads.get(thread_id))["status"] == "interrupted"
    request = await _interrupt_of(alice, thread_id)
    assert request["action_requests"] == [
        {
            "name": "update_memory",
            "args": {"key": "name", "kind": "name", "old": "Ann", "new": "Bob"},
            "description": "Earlier I noted that your name is Ann. Update it: your name is Bob?",
        }
    ]
    assert request["review_configs"] == [
        {"action_name": "update_memory", "allowed_decisions": ["approve", "reject"]}
    ]
    assert (await facts_of(alice))["name"]["value"] == "Ann"  # the old value stays meanwhile

    done = await turn(alice, thread_id, command={"resume": "Yes!"})
    assert done.events("confirmation") == [
        {"event": "confirmation", "key": "name", "verdict": "yes", "decided_by": "fast_path"}
    ]
    assert done.values["messages"][-1]["content"] == "Updated: your name is Bob."
    assert (await facts_of(alice))["name"]["value"] == "Bob"
    assert (await alice.threads.get(thread_id))["status"] == "idle"
    assert done.values.get("pending") == []
    graded = (await alice.http.get(f"/v1/threads/{thread_id}/evaluations"))["evaluations"]
    confirmations = [e for e in graded if e["kind"] == "confirmation"]
    assert [(e["score"], e["passed"], e["detail"]["by"]) for e in confirmations] == [
        (1.0, True, "fast_path")
    ]


async def test_no_keeps_the_old_value_and_a_button_answers_too(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    alice, _ = users
    thread_id, _ = await _ann_then_bob(alice)
    done = await turn(alice, thread_id, command={"resume": "nope"})
    assert done.events("confirmation")[0]["verdict"] == "no"
    assert done.values["messages"][-1]["content"] == "Kept: your name is Ann."
    assert (await facts_of(alice))["name"]["value"] == "Ann"

    # the UIs' Approve button: a HITL decision
    await turn(alice, thread_id, "I live in Rome.")
    await turn(alice, thread_id, "I moved to Oslo.")
    approved = await turn(
        alice, thread_id, command={"resume": {"decisions": [{"type": "approve"}]}}
    )
    assert approved.events("confirmation")[0]["verdict"] == "yes"
    assert (await facts_of(alice))["location"]["value"] == "Oslo"


async def test_an_ambiguous_answer_goes_to_the_classifier_and_an_unclear_one_asks_again(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    alice, _ = users
    thread_id, _ = await _ann_then_bob(alice)
    unclear = await turn(alice, thread_id, command={"resume": "hmm, let me think"})
    assert unclear.events("confirmation") == [
        {"event": "confirmation", "key": "name", "verdict": "unclear", "decided_by": "classifier"}
    ]
    assert (await _interrupt_of(alice, thread_id))["action_requests"][0]["args"]["new"] == "Bob"
    changed = await turn(alice, thread_id, command={"resume": "I changed it last year"})
    assert changed.events("confirmation") == [
        {"event": "confirmation", "key": "name", "verdict": "yes", "decided_by": "classifier"}
    ]
    assert (await facts_of(alice))["name"]["value"] == "Bob"


async def test_a_refused_or_deferred_update_is_never_applied_and_a_wrong_yes_is_not_graded(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    """Issue 33's report: after "librarian" then "stonemason", "please don't update it",
    "Absolutely not." and "Not now" applied the update, and the grade passed it. Each now
    keeps the old value, a hedge asks again, and each answer's grade is the judge's."""
    alice, _ = users
    await turn(alice, await new_thread(alice), "For the record, I work as a librarian.")
    thread_id = await new_thread(alice)
    career = "Career change! I work as a stonemason, believe it or not."
    for answer in ("please don't update it", "Absolutely not.", "Not now"):
        await turn(alice, thread_id, career)
        request = await _interrupt_of(alice, thread_id)
        assert request["action_requests"][0]["args"]["new"] == "stonemason"
        done = await turn(alice, thread_id, command={"resume": answer})
        assert done.events("confirmation")[0]["verdict"] == "no", answer
        assert done.values["messages"][-1]["content"] == "Kept: you work as librarian."
        assert (await facts_of(alice))["occupation"]["value"] == "librarian"
    await turn(alice, thread_id, career)
    asked = await turn(alice, thread_id, command={"resume": "hmm, I wouldn't say no"})
    assert asked.events("confirmation")[0]["verdict"] == "unclear"
    assert (await alice.threads.get(thread_id))["status"] == "interrupted"
    await turn(alice, thread_id, command={"resume": "yes"})
    assert (await facts_of(alice))["occupation"]["value"] == "stonemason"
    graded = (await alice.http.get(f"/v1/threads/{thread_id}/evaluations"))["evaluations"]
    confirmations = [e for e in graded if e["kind"] == "confirmation"]
    assert [
        (e["detail"]["verdict"], e["detail"]["expected"], e["passed"]) for e in confirmations
    ] == [
        ("no", "no", True),
        ("no", "no", True),
        ("no", "no", True),
        ("unclear", "unclear", True),
        ("yes", "yes", True),
    ]
    assert {e["detail"]["judge"] for e in confirmations} == {"rules"}


async def test_liking_what_was_disliked_is_a_conflict_too(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    alice, _ = users
    thread_id = await new_thread(alice)
    await turn(alice, thread_id, "I don't like olives, but I like jazz.")
    assert set(await facts_of(alice)) == {"dislikes:olives", "likes:jazz"}
    await turn(alice, thread_id, "I love olives!")
    request = await _interrupt_of(alice, thread_id)
    assert request["action_requests"][0]["args"]["key"] == "likes:olives"
    await turn(alice, thread_id, command={"resume": "yes"})
    assert set(await facts_of(alice)) == {"likes:olives", "likes:jazz"}


async def test_a_conflict_left_past_its_time_is_dropped_and_the_old_value_kept(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    alice, _ = users
    short = {"conflict_ttl_s": 0.5}
    thread_id = await new_thread(alice)
    await turn(alice, thread_id, "My name is Ann.", context=short)
    await turn(alice, thread_id, "My name is Bob.", context=short)
    await asyncio.sleep(0.6)
    late = await turn(alice, thread_id, command={"resume": "yes"}, context=short)
    assert late.events("conflict_expired") == [{"event": "conflict_expired", "key": "name"}]
    assert late.events("confirmation") == []
    assert (await facts_of(alice))["name"]["value"] == "Ann"
    # the late answer is told so (issue 33: it was dropped in silence)
    assert late.values["messages"][-1]["content"] == (
        "That question expired before your answer, so nothing was changed. Kept: your name is Ann."
    )

    # unanswered, then a new message after the time: dropped at the start of that turn
    await turn(alice, thread_id, "My name is Bob.", context=short)
    await asyncio.sleep(0.6)
    later = await turn(alice, thread_id, "Hello again", context=short)
    assert later.events("conflict_expired") == [{"event": "conflict_expired", "key": "name"}]
    assert (await alice.threads.get(thread_id))["status"] == "idle"
    assert (await facts_of(alice))["name"]["value"] == "Ann"


async def test_a_context_the_assistant_refuses_is_a_422_naming_it(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    alice, _ = users
    thread_id = await new_thread(alice)
    response = await alice.http.client.post(
        f"/threads/{thread_id}/runs",
        json={
            "assistant_id": "assistant",
            "input": human("hi"),
            "context": {"summary_after": 4, "keep_recent": 8},
        },
    )
    assert response.status_code == 422, response.text
    assert "keep_recent" in response.text
    assert await alice.runs.list(thread_id) == []
    # the thresholds as the assistant's context schema shows them
    schemas = await alice.assistants.get_schemas("assistant")
    properties = schemas["context_schema"]["properties"]
    assert {name: spec.get("default") for name, spec in properties.items()} == {
        "summary_after": 24,
        "keep_recent": 8,
        "conflict_ttl_s": 86400.0,
        "recalled_facts": 50,
    }


async def test_past_the_threshold_old_messages_become_a_summary_and_the_prompt_stays_flat(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    alice, _ = users
    small = {"summary_after": 6, "keep_recent": 4}
    thread_id = await new_thread(alice)
    prompts = []
    for index in range(30):
        done = await turn(
            alice, thread_id, f"message number {index} about topic {index}", context=small
        )
        prompts.append(done.events("prompt")[0])
        assert len(done.values["messages"]) <= small["summary_after"]
    state = (await alice.threads.get_state(thread_id))["values"]
    # the last ones verbatim, the older ones folded into the summary
    assert [m["content"] for m in state["messages"] if m["type"] == "human"][-1] == (
        "message number 29 about topic 29"
    )
    assert "user: message number 26 about topic 26" in state["summary"]
    assert "message number 0 " not in state["summary"]  # only its latest lines are kept
    # the model's input: as many messages, and about as many characters, at turn 10 as at 30
    assert max(p["messages"] for p in prompts[5:]) <= small["summary_after"] + 2
    late = [p["characters"] for p in prompts[10:]]
    assert max(late) - min(late) < 200, late


async def test_a_retry_after_the_ledger_committed_completes_the_write_with_its_stamp_once(
    users: tuple[LangGraphClient, LangGraphClient], settings: Settings
) -> None:
    """The window a worker can die in between `once`'s commit and the store's put: the next
    attempt gets the recorded stamp back and writes the fact with it; a later one writes
    nothing (the store holds the stamp)."""
    alice, _ = users
    thread_id = await new_thread(alice)
    await turn(alice, thread_id, "My name is Ann.")
    run_id = (await alice.runs.list(thread_id))[0]["run_id"]
    written = await alice.store.get_item(FACTS, "name")
    await alice.store.delete_item(FACTS, "name")  # as if the first attempt died before its put

    fact = Fact("name", "Ann", 0.9, run_id)
    async with open_services(settings) as services:
        store = OwnerStore(services.store, "alice", StoreCaps.of(settings))
        run = await services.run_records.get_run(run_id)
        assert run is not None
        retry = msgspec.structs.replace(run, attempt=2)  # the ledger keys by run, not attempt
        with running(RunScope.of(retry, services)):
            again = await remember_once(store, "fact:name", fact)
            restored = await store.aget(NAMESPACE, "name")
            once_more = await remember_once(store, "fact:name", fact)
            unchanged = await store.aget(NAMESPACE, "name")
    assert again == once_more
    assert again["written_at"] == written["value"]["written_at"]
    assert restored is not None and restored.value == written["value"]
    assert unchanged is not None and unchanged.updated_at == restored.updated_at


def said_last(done: Turn) -> str:
    """The text of the thread's last message after the turn."""
    return str(done.values["messages"][-1]["content"])


async def test_a_user_keeps_at_most_max_facts_and_the_assistant_says_when_memory_is_full(
    start_server: StartServer, start_worker: StartWorker, settings: Settings
) -> None:
    """One long message states 3,150 facts: the first `RUNSTREAM_MAX_FACTS` are remembered, the
    run succeeds, and after its answer the assistant says its memory is full; deleting a fact
    makes room for a new one (issue 31)."""
    alice, _ = await serve_assistant(start_server, start_worker, max_facts=20)
    thread_id = await new_thread(alice)
    done = await turn(alice, thread_id, THOUSANDS_OF_FACTS, modes=("custom", "values"))
    assert len(await store_rows(settings)) == 20
    assert len(done.events("remembered")) == 20
    assert done.events("memory_full") == [{"event": "memory_full", "kept": 20, "max_facts": 20}]
    assert said_last(done) == MEMORY_FULL
    assert (await alice.runs.list(thread_id))[0]["status"] == "success"

    # full, in any thread: a new fact is not remembered, and the assistant says so again
    thread_id = await new_thread(alice)
    again = await turn(alice, thread_id, "My name is Ann.")
    assert again.events("remembered") == [] and said_last(again) == MEMORY_FULL
    # a turn stating nothing new says nothing of it
    quiet = await turn(alice, thread_id, "How are you?")
    assert quiet.events("memory_full") == [] and said_last(quiet) != MEMORY_FULL
    # the user deletes one: there is room for one more
    await alice.store.delete_item(FACTS, Fact("note", "item1 is mine", 0.9, "").key)
    room = await turn(alice, thread_id, "My name is Ann.")
    assert [e["key"] for e in room.events("remembered")] == ["name"]
    assert said_last(room) != MEMORY_FULL


async def test_a_full_store_stops_the_assistants_facts_and_not_its_run(
    start_server: StartServer, start_worker: StartWorker, settings: Settings
) -> None:
    """The store's own cap (`RUNSTREAM_MAX_STORE_ITEMS`, here below the facts cap) refuses
    the assistant's writes as it refuses the routes': the facts that fit are kept, the run
    succeeds and says its memory is full (issue 31: 3,150 facts were written past a cap of
    100)."""
    alice, _ = await serve_assistant(start_server, start_worker, max_store_items=20)
    thread_id = await new_thread(alice)
    done = await turn(alice, thread_id, THOUSANDS_OF_FACTS, modes=("custom", "values"))
    assert len(await store_rows(settings)) == 20
    assert len(done.events("remembered")) == 20
    assert said_last(done) == MEMORY_FULL
    assert (await alice.runs.list(thread_id))[0]["status"] == "success"


async def test_each_turn_is_graded_after_its_answer_and_the_grades_are_recorded(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    """The `grade` node records each grade (`runner.run_scope.record_evaluation`) after the
    answer streamed: the thread's evaluations show them to its owner, and to no one else."""
    alice, bob = users
    thread_id = await new_thread(alice)
    done = await turn(alice, thread_id, "I like jazz.")
    assert [c["evaluation"] for c in done.custom if "evaluation" in c] == [
        {"kind": "reply", "score": 1.0, "passed": True},
        {"kind": "extraction", "score": 1.0, "passed": True},
    ]
    listed = (await alice.http.get(f"/v1/threads/{thread_id}/evaluations"))["evaluations"]
    recorded = {e["kind"]: e for e in listed}
    assert set(recorded) == {"reply", "extraction"}
    assert recorded["reply"]["detail"] == {"reply_chars": len(done.answer), "problems": []}
    assert recorded["extraction"]["detail"] == {"facts": 1, "problems": {}}
    assert all(e["graph"] == "assistant" and e["attempt"] == 1 for e in listed)
    assert all(e["passed"] is True and e["score"] == 1.0 for e in listed)
    assert done.values["turn"] == {}  # the next turn is graded on its own
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await bob.http.get(f"/v1/threads/{thread_id}/evaluations")
    assert refused.value.response.status_code == 404


# agent-chat-ui (`useStream` with `fetchStateHistory: true`) reads the thread's 10 latest
# checkpoints, across branches, and draws a branch switcher where a checkpoint in them has two
# children in them (`getBranchSequence` of @langchain/langgraph-sdk 1.8)
AGENT_CHAT_UI_WINDOW = 10


def children_in(window: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries of `window` whose parent checkpoint is `parent`."""
    return [
        h
        for h in window
        if (h["parent_checkpoint"] or {}).get("checkpoint_id") == parent["checkpoint_id"]
    ]


def ancestors_in(window: list[dict[str, Any]], entry: dict[str, Any]) -> list[str]:
    """The checkpoint ids above `entry`, its parent first, as far as `window` links them (the
    last one may be outside it)."""
    parents = {h["checkpoint"]["checkpoint_id"]: h["parent_checkpoint"] for h in window}
    found = []
    parent = entry["parent_checkpoint"]
    while parent is not None:
        found.append(parent["checkpoint_id"])
        parent = parents.get(parent["checkpoint_id"])
    return found


async def test_a_turn_writes_three_checkpoints_so_edit_and_regenerate_branch_in_agent_chat_ui(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    """A turn that asks nothing writes 3 checkpoints (its input, the start, the answer with its
    memory work, as `chat`), so that agent-chat-ui's edit and regenerate, each a run from the
    parent of the state where the message first shows in the 10 latest, fork within those 10
    and both branches show in them."""
    alice, _ = users
    thread_id = await new_thread(alice)
    written = []
    for text in ("Hi, my name is Ann.", "I like tea.", "What is my name?"):
        before = len(await alice.threads.get_history(thread_id, limit=100))
        done = await turn(alice, thread_id, text)
        assert done.events("remembered") or text.endswith("?")
        written.append(len(await alice.threads.get_history(thread_id, limit=100)) - before)
    assert written == [3, 3, 3]
    graded = (await alice.http.get(f"/v1/threads/{thread_id}/evaluations"))["evaluations"]
    assert len(graded) == 6  # each turn's reply and extraction, graded within its 3

    # edit the last message, as agent-chat-ui does
    window = await alice.threads.get_history(thread_id, limit=AGENT_CHAT_UI_WINDOW)
    asked = window[first_seen(window, lambda m: m["content"] == "What is my name?")]
    fork = asked["parent_checkpoint"]
    parents = {h["checkpoint"]["checkpoint_id"]: h["parent_checkpoint"] for h in window}
    assert parents[fork["checkpoint_id"]] is not None  # the turn's input: in the window too
    edited = await turn(alice, thread_id, "Where do I live?", checkpoint=fork)
    assert edited.answer.endswith("You said: Where do I live?")
    window = await alice.threads.get_history(thread_id, limit=AGENT_CHAT_UI_WINDOW)
    assert len(children_in(window, fork)) == 2  # the old branch and the edit's: a switcher
    new = window[first_seen(window, lambda m: m["content"] == "Where do I live?")]
    assert fork["checkpoint_id"] in ancestors_in(window, new)  # it shows on the edited message

    # regenerate the edit's answer: no input, from the parent of its first state
    answer = edited.values["messages"][-1]
    given = window[first_seen(window, lambda m: m["id"] == answer["id"])]["parent_checkpoint"]
    again = await turn(alice, thread_id, checkpoint=given)
    assert again.values["messages"][-1]["id"] != answer["id"]
    assert again.values["messages"][-1]["content"] == answer["content"]
    window = await alice.threads.get_history(thread_id, limit=AGENT_CHAT_UI_WINDOW)
    assert len(children_in(window, given)) == 2  # the old answer's state and the fork
    regenerated = window[
        first_seen(window, lambda m: m["id"] == again.values["messages"][-1]["id"])
    ]
    assert given["checkpoint_id"] in ancestors_in(window, regenerated)
    assert len(children_in(window, fork)) == 2  # the edit's fork still in the window too


async def test_with_a_model_every_step_is_a_structured_output_call(
    start_server: StartServer, start_worker: StartWorker, openai_compat: RunningServer
) -> None:
    """`ChatOpenAI` on the local OpenAI-compatible server (tests/openai_compat.py), which calls
    a forced tool with the JSON written after its name in the message: the user's message
    scripts the extraction's and the classification's structured answers."""
    model = {
        "model": "gpt-4o-mini",
        "openai_api_key": "not-a-secret",
        "openai_base_url": openai_compat.base_url,
    }
    server = await start_server(config_path=CONFIG, **model)
    await start_worker(config_path=CONFIG, **model)
    sdk = client_for(server.url)
    small = {"summary_after": 4, "keep_recent": 2}

    def extraction(kind: str, value: str) -> str:
        fact = {"kind": kind, "value": value, "confidence": 0.7}
        return "Extraction " + json.dumps({"facts": [fact]})

    first = await turn(sdk, await new_thread(sdk), extraction("name", "Ann"), context=small)
    # the answer is the model's reply to the message, and only it: the extraction is `nostream`
    assert first.answer == f"You said: {extraction('name', 'Ann')}"
    assert (await facts_of(sdk))["name"]["confidence"] == 0.7

    thread_id = await new_thread(sdk)
    plain = await turn(sdk, thread_id, "hello there", context=small)  # a model answer, no facts
    assert plain.events("remembered") == [] and plain.events("model_failed") == []
    await turn(sdk, thread_id, extraction("name", "Bob"), context=small)
    request = await _interrupt_of(sdk, thread_id)
    assert request["action_requests"][0]["args"] == {
        "key": "name",
        "kind": "name",
        "old": "Ann",
        "new": "Bob",
    }
    # an answer the classification cannot read: unclear, asked again
    failed = await turn(sdk, thread_id, command={"resume": "well"}, context=small)
    assert failed.events("model_failed") == [
        {"event": "model_failed", "step": "classification", "error": "ValidationError"}
    ]
    classified = await turn(
        sdk, thread_id, command={"resume": 'Classification {"verdict": "yes"}'}, context=small
    )
    assert classified.events("confirmation") == [
        {"event": "confirmation", "key": "name", "verdict": "yes", "decided_by": "classifier"}
    ]
    assert (await facts_of(sdk))["name"]["value"] == "Bob"

    # the "Updated" message took the thread past its threshold: the model summarised, and none
    # of the summary's tokens were streamed (`nostream`)
    assert [e["folded"] for e in classified.events("summarized")] == [3]
    assert classified.tokens == ["Updated: your name is Bob."]  # and no summary text
    state = (await sdk.threads.get_state(thread_id))["values"]
    assert state["summary"].startswith("You said: Update the summary")
    assert [m["content"] for m in state["messages"]] == [
        f"You said: {extraction('name', 'Bob')}",
        "Updated: your name is Bob.",
    ]
    later = await turn(sdk, thread_id, "one more", context=small)
    assert later.answer == "You said: one more"
