"""What an attempt invokes its graph with: the input, a resume, a LangGraph command, or nothing
more, decided from what the thread's checkpoint says earlier attempts did; and from where.

A run given a checkpoint (the LangGraph API's `checkpoint`, checked at submit by
server/langgraph/submit.py) starts from it, as LangGraph does with `checkpoint_id` in the
config: its input (or command) is applied there, or, with no input, the graph re-runs from
there. Its first checkpoint's parent is the one given, so the thread's history forks; the
thread's latest checkpoint is then the new branch's. Only until the run has saved a checkpoint
of its own: an attempt after that continues from the run's latest, never forking twice.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import structlog
from langgraph.pregel import Pregel
from langgraph.types import Command, Send, StateSnapshot

from stream_store.messages import input_messages
from stream_store.run_records import RunRecord

__all__ = ["GraphCall", "graph_input"]

logger = structlog.get_logger()


def _steering_command(run: RunRecord) -> Command[Any] | None:
    """The LangGraph API's `command` with `update` and/or `goto` (checked at submit by
    server/langgraph/command.py: known state keys and nodes, messages with ids); it is the
    graph's input, with the run's resume value if it has one."""
    command = (run.kwargs or {}).get("command") or {}
    if command.get("update") is None and not command.get("goto"):
        return None
    update = command.get("update")
    if isinstance(update, list):
        update = [(key, value) for key, value in update]
    goto = [
        Send(g["node"], g.get("input")) if isinstance(g, dict) else g
        for g in command.get("goto") or []
    ]
    resume = run.resume.get("value") if run.resume is not None else None
    return Command(update=update, goto=goto, resume=resume)


class GraphCall(NamedTuple):
    """What to invoke the graph with (`...`: nothing, it already ran to its end) and the config
    to invoke it with (the thread's latest checkpoint, or the run's fork point)."""

    input: Any
    config: dict[str, Any]


def _fork_config(run: RunRecord, config: dict[str, Any]) -> dict[str, Any] | None:
    """`config` at the run's checkpoint; None for a run without one."""
    checkpoint = (run.kwargs or {}).get("checkpoint")
    if not checkpoint:
        return None
    at = {
        "checkpoint_id": checkpoint["checkpoint_id"],
        "checkpoint_ns": checkpoint.get("checkpoint_ns", ""),
    }
    return {**config, "configurable": {**config["configurable"], **at}}


def _answer_taken(run: RunRecord, state: StateSnapshot, started: bool) -> bool:
    """Whether the graph already took the run's resume value, so the interrupt waiting now (if
    any) is a later question, which the value must not answer (a retry of a resumed run whose
    worker died after the graph asked again).

    The question the value answers has an id (`interrupt_id`, recorded when the run was
    interrupted): waiting at other questions and not at that one, the graph took it. That
    holds when one node asks twice, whose second question is saved on the checkpoint the
    first answer went to. Otherwise, the latest checkpoint was saved after the answer: a `/v1`
    resume continues the same run, and its checkpoints carry the answer's id
    (runner/execute.py); a LangGraph resume is a new run, and any checkpoint of its own comes
    after the answer.
    """
    resume = run.resume or {}
    asked = resume.get("interrupt_id")
    if asked and state.interrupts and all(i.id != asked for i in state.interrupts):
        return True
    if "id" in resume:
        return (state.metadata or {}).get("resume_id") == resume["id"]
    return started and bool((run.kwargs or {}).get("command"))  # a LangGraph run


def _input(run: RunRecord, forks: bool) -> dict[str, Any] | None:
    """The run's input (checked at submit against the graph's input schema: any of its keys,
    `messages` among them or not), its `messages` as LangChain messages with their fixed ids;
    None (go on from the checkpoint) for a fork without input, or a LangGraph run whose input
    was `null` (submit took it only on a thread with a checkpoint)."""
    given = {key: value for key, value in run.input.items() if key != "messages"}
    if messages := input_messages(run):
        given["messages"] = messages
    goes_on = forks or ("input" in (run.kwargs or {}) and run.kwargs["input"] is None)
    return None if goes_on and not given else given


async def graph_input(graph: Pregel, run: RunRecord, config: dict[str, Any]) -> GraphCall:
    """What to invoke the graph with, and from where, given what the thread's latest checkpoint
    (at `config`) says this run already did."""
    steering = _steering_command(run)
    fork = _fork_config(run, config)
    if run.attempt == 1 and run.resume is None and steering is None:
        # The first attempt (claimed once: any later one is attempt 2+) has nothing saved yet;
        # skipping the read saves a checkpoint query on the way to the first token.
        return GraphCall(_input(run, fork is not None), fork or config)
    state = await graph.aget_state(config)  # type: ignore[arg-type]
    started = (state.metadata or {}).get("run_id") == run.run_id
    # A run that saved nothing yet starts where the first attempt would; one that did goes on
    # from its own latest checkpoint, on the branch it forked.
    start = fork if fork is not None and not started else config
    if run.attempt > 1 or run.resume is not None:
        logger.info(
            "continuing run",
            attempt=run.attempt,
            checkpoint_of_this_run=started,
            next=list(state.next),
            tasks=[(task.name, task.result is not None) for task in state.tasks],
            interrupts=len(state.interrupts),
            checkpoint_metadata=state.metadata,
        )
    if steering is not None and not started:
        return GraphCall(steering, start)
    taken = run.resume is not None and _answer_taken(run, state, started)
    if (
        taken
        and state.interrupts
        and all(t.interrupts or t.result is not None for t in state.tasks)
    ):
        # The graph took the answer and waits at its next question, which the attempt that
        # died asked: ask it again without running anything. Running the node again would not
        # do: when one node asks twice, its checkpoint still holds the spent answer, and
        # LangGraph would give it to the second question.
        return GraphCall(..., config)
    if run.resume is not None and not taken and (state.interrupts or not started):
        # Not started and no interrupt waiting: `update_state` wrote the latest checkpoint
        # since the interrupt. LangGraph resumes from it all the same (the value answers the
        # next step's first `interrupt()`, or nothing); re-sending the input would restart.
        # (A resume has no fork point: submit takes only the latest checkpoint, and drops it.)
        return GraphCall(Command(resume=run.resume.get("value")), config)
    if started and state.tasks:
        # Continue from the last checkpoint (a retried attempt). `tasks`, not `next`: `next`
        # leaves out tasks whose writes were saved, and with async durability a worker can die
        # after a step's tasks finished and before that step's checkpoint landed; then every
        # task has writes, `next` is empty, and the graph has not ended. LangGraph applies the
        # saved writes without running those tasks again and goes on.
        return GraphCall(None, config)
    if started and run.attempt > 1 and (state.metadata or {}).get("source") == "loop":
        return GraphCall(..., config)  # an earlier attempt ran the graph to its end
    if steering is not None:
        return GraphCall(..., config)  # an earlier attempt ran the command to the graph's end
    # Not started, or only the input was saved: (re)send the input. Its messages keep the ids
    # given at submit, so the checkpointer's reducer replaces rather than repeats them.
    return GraphCall(_input(run, start is fork), start)
