"""What a retried attempt invokes its graph with (runner/graph_input.py), read from checkpoints
an attempt that died left behind.

Runs save checkpoints with async durability (runner/execute.py): a worker killed just after a
step's tasks finished may have saved their writes but not that step's checkpoint. The retry
must go on from those writes, not take the graph for finished (it did so on the Redis Cluster
fault run, where `TestWriteToolOnce`'s replay was then never streamed).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from runner.graph_input import graph_input
from stream_store.checkpoints import FencedPostgresSaver
from stream_store.run_records import RunRecord
from stream_store.services import open_services
from stream_store.settings import Settings
from wire.events import RunStatus


class LosesLaterCheckpoints(FencedPostgresSaver):
    """A saver whose checkpoints after step 0 never land, as if the worker died first; task
    writes still do."""

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if metadata.get("step", -1) >= 1:
            return config
        return await super().aput(config, checkpoint, metadata, new_versions)


def two_steps(ran: list[str]) -> Any:
    """propose -> write, like tests/custom_graphs.py `slow_writer`; `ran` logs the nodes run."""

    async def propose(state: MessagesState) -> dict[str, Any]:
        ran.append("propose")
        return {"messages": [AIMessage(content="proposed", id="proposed")]}

    async def write(state: MessagesState) -> dict[str, Any]:
        ran.append("write")
        return {"messages": [AIMessage(content="written", id="written")]}

    return (
        StateGraph(MessagesState)
        .add_node("propose", propose)
        .add_node("write", write)
        .add_edge(START, "propose")
        .add_edge("propose", "write")
        .add_edge("write", END)
    )


def attempt(run_id: str, thread_id: str, number: int) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        thread_id=thread_id,
        owner="o",
        graph="two_steps",
        status=RunStatus.RUNNING,
        attempt=number,
        dispatch=number,
        input={"messages": [{"role": "user", "content": "hi", "id": "hi"}]},
        config={},
        metadata={},
        multitask="reject",
        created_at=datetime.now(UTC),
    )


async def test_a_retry_goes_on_from_a_step_whose_tasks_finished_but_whose_checkpoint_was_lost(
    settings: Settings,
) -> None:
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    config: dict[str, Any] = {
        "configurable": {"thread_id": thread_id},
        "metadata": {"run_id": run_id},
    }
    ran: list[str] = []
    async with open_services(settings) as services:
        dying = two_steps(ran).compile(checkpointer=LosesLaterCheckpoints(services.pool))  # type: ignore[arg-type]
        await dying.ainvoke(
            {"messages": [HumanMessage("hi", id="hi")]},
            config,  # type: ignore[arg-type]
            durability="async",
        )
        graph = two_steps(ran).compile(checkpointer=FencedPostgresSaver(services.pool))  # type: ignore[arg-type]
        left = await graph.aget_state(config)  # type: ignore[arg-type]
        # What the retry finds: step 0 with its one task done (its writes saved), so LangGraph's
        # `next` is empty although `write` never reached a checkpoint.
        assert (left.metadata or {}).get("step") == 0 and left.next == ()
        assert [task.name for task in left.tasks] == ["propose"]

        call = await graph_input(graph, attempt(run_id, thread_id, 2), config)
        assert call.input is None  # continue, not "ran to its end"
        ran.clear()
        await graph.ainvoke(call.input, call.config, durability="async")  # type: ignore[arg-type]
        done = await graph.aget_state(config)  # type: ignore[arg-type]
    assert ran == ["write"]  # propose's saved writes are applied, not run again
    assert [m.id for m in done.values["messages"]] == ["hi", "proposed", "written"]
    assert done.next == () and done.tasks == ()


async def test_a_retry_after_the_graph_ended_runs_nothing(settings: Settings) -> None:
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    config: dict[str, Any] = {
        "configurable": {"thread_id": thread_id},
        "metadata": {"run_id": run_id},
    }
    ran: list[str] = []
    async with open_services(settings) as services:
        graph = two_steps(ran).compile(checkpointer=FencedPostgresSaver(services.pool))  # type: ignore[arg-type]
        await graph.ainvoke(
            {"messages": [HumanMessage("hi", id="hi")]},
            config,  # type: ignore[arg-type]
            durability="async",
        )
        call = await graph_input(graph, attempt(run_id, thread_id, 2), config)
    assert call.input is ...


def asks_twice(answers: list[Any]) -> Any:
    """ask -> ask_again, each stopping at an `interrupt()`; `answers` logs what each got."""

    async def ask(state: MessagesState) -> dict[str, Any]:
        answers.append(("first", interrupt("first question")))
        return {}

    async def ask_again(state: MessagesState) -> dict[str, Any]:
        answers.append(("second", interrupt("second question")))
        return {}

    return (
        StateGraph(MessagesState)
        .add_node("ask", ask)
        .add_node("ask_again", ask_again)
        .add_edge(START, "ask")
        .add_edge("ask", "ask_again")
        .add_edge("ask_again", END)
    )


async def test_a_retried_resume_never_gives_its_answer_to_the_next_question(
    settings: Settings,
) -> None:
    """A run resumed with an answer, whose worker died after the graph asked its next question
    (before the run was marked interrupted), retries without the answer: the next question is
    asked again, not answered with the first one's answer."""
    answers: list[Any] = []
    async with open_services(settings) as services:
        graph = asks_twice(answers).compile(checkpointer=FencedPostgresSaver(services.pool))  # type: ignore[arg-type]
        run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        run = attempt(run_id, thread_id, 1)
        await graph.ainvoke({"messages": []}, {**config, "metadata": {"run_id": run_id}})
        resumed = msgspec.structs.replace(run, resume={"value": "yes", "id": "answer-1"})
        marked = {**config, "metadata": {"run_id": run_id, "resume_id": "answer-1"}}
        call = await graph_input(graph, resumed, config)
        assert isinstance(call.input, Command) and call.input.resume == "yes"
        await graph.ainvoke(call.input, marked)  # takes the answer, asks again; then "dies"
        assert answers == [("first", "yes")]
        retry = msgspec.structs.replace(resumed, attempt=2)
        call = await graph_input(graph, retry, config)
        assert call.input is ...  # the answer was taken: not given again; the run waits
        assert answers == [("first", "yes")]  # the second question got no answer
        state = await graph.aget_state(config)  # type: ignore[arg-type]
        assert [i.value for i in state.interrupts] == ["second question"]
        # a retry that comes before the graph took the answer still gives it
        first_try = msgspec.structs.replace(resumed, resume={"value": "no", "id": "answer-2"})
        call = await graph_input(graph, msgspec.structs.replace(first_try, attempt=3), config)
        assert isinstance(call.input, Command) and call.input.resume == "no"


def asks_twice_in_one_node(answers: list[Any]) -> Any:
    """One node asking two questions, one `interrupt()` after the other."""

    async def ask_both(state: MessagesState) -> dict[str, Any]:
        answers.append(("first", interrupt("first question")))
        answers.append(("second", interrupt("second question")))
        return {}

    return (
        StateGraph(MessagesState)
        .add_node("ask_both", ask_both)
        .add_edge(START, "ask_both")
        .add_edge("ask_both", END)
    )


async def test_a_retried_resume_never_answers_the_next_question_of_the_same_node(
    settings: Settings,
) -> None:
    """The node's second question is saved on the checkpoint the first answer went to, so no
    later checkpoint says the answer was taken: the question's id does."""
    answers: list[Any] = []
    async with open_services(settings) as services:
        graph = asks_twice_in_one_node(answers).compile(
            checkpointer=FencedPostgresSaver(services.pool)  # type: ignore[arg-type]
        )
        run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        marked = {**config, "metadata": {"run_id": run_id}}
        await graph.ainvoke({"messages": []}, marked)
        asked = await graph.aget_state(config)  # type: ignore[arg-type]
        first_id = asked.interrupts[0].id
        # as `resume_run` records it: the answer, its id, and the question it answers
        answer = {"value": "yes", "id": "answer-1", "interrupt_id": first_id}
        resumed = msgspec.structs.replace(attempt(run_id, thread_id, 1), resume=answer)
        call = await graph_input(graph, resumed, config)
        assert isinstance(call.input, Command) and call.input.resume == "yes"
        with_answer = {**config, "metadata": {"run_id": run_id, "resume_id": "answer-1"}}
        await graph.ainvoke(call.input, with_answer)  # takes the answer, asks again; "dies"
        assert answers == [("first", "yes")]
        again = await graph.aget_state(config)  # type: ignore[arg-type]
        assert again.config == asked.config  # no checkpoint since the first question
        assert [i.value for i in again.interrupts] == ["second question"]
        assert again.interrupts[0].id != first_id
        call = await graph_input(graph, msgspec.structs.replace(resumed, attempt=2), config)
        # nothing runs: the run waits at the second question (the attempt reads it from the
        # checkpoint and says `pending`); running the node again would answer it with the
        # spent answer its checkpoint still holds
        assert call.input is ...
        # the next answer goes to the second question
        answer = {"value": "no", "id": "answer-2", "interrupt_id": again.interrupts[0].id}
        resumed = msgspec.structs.replace(resumed, attempt=3, resume=answer)
        call = await graph_input(graph, resumed, config)
        assert isinstance(call.input, Command) and call.input.resume == "no"
        answers.clear()
        await graph.ainvoke(call.input, with_answer)
        assert answers == [("first", "yes"), ("second", "no")]
        assert (await graph.aget_state(config)).next == ()  # type: ignore[arg-type]
