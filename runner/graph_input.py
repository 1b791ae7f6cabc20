"""What an attempt invokes its graph with: the input, a resume, a LangGraph command, or nothing
more, decided from what the thread's checkpoint says earlier attempts did."""

from __future__ import annotations

from typing import Any

import structlog
from langgraph.pregel import Pregel
from langgraph.types import Command, Send

from stream_store.messages import input_messages
from stream_store.run_records import RunRecord

__all__ = ["graph_input"]

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


async def graph_input(graph: Pregel, run: RunRecord, config: dict[str, Any]) -> Any:
    """What to invoke the graph with, given what the checkpoint says this run already did.

    Returns `...` when the graph already ran to its end in an earlier attempt.
    """
    steering = _steering_command(run)
    if run.attempt == 1 and run.resume is None and steering is None:
        # The first attempt (claimed once: any later one is attempt 2+) has nothing saved yet;
        # skipping the read saves a checkpoint query on the way to the first token.
        return {"messages": input_messages(run)}
    state = await graph.aget_state(config)  # type: ignore[arg-type]
    started = (state.metadata or {}).get("run_id") == run.run_id
    if run.attempt > 1 or run.resume is not None:
        logger.info(
            "continuing run",
            attempt=run.attempt,
            checkpoint_of_this_run=started,
            next=list(state.next),
            interrupts=len(state.interrupts),
            checkpoint_metadata=state.metadata,
        )
    if steering is not None and not started:
        return steering
    if run.resume is not None and (state.interrupts or not started):
        # Not started and no interrupt waiting: `update_state` wrote the latest checkpoint
        # since the interrupt. LangGraph resumes from it all the same (the value answers the
        # next step's first `interrupt()`, or nothing); re-sending the input would restart.
        return Command(resume=run.resume.get("value"))
    if started and state.next:
        return None  # continue from the last checkpoint (a retried attempt)
    if started and run.attempt > 1 and (state.metadata or {}).get("source") == "loop":
        return ...  # an earlier attempt ran the graph to its end
    if steering is not None:
        return ...  # an earlier attempt ran the command to the graph's end
    # Not started, or only the input was saved: (re)send the input. Its messages keep the ids
    # given at submit, so the checkpointer's reducer replaces rather than repeats them.
    return {"messages": input_messages(run)}
