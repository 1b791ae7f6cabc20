"""The memory-aware assistant with steps that linger after their writes, before the node
returns (and so before its checkpoint): a worker killed then hands the step to an attempt that
must not write again (tests/test_assistant_faults.py).

`RUNSTREAM_TEST_LINGER_S` (3 s) is the extraction's linger; `RUNSTREAM_TEST_CONFIRM_LINGER_S`
(none) the confirmation's, after an answer to a conflict question was applied;
`RUNSTREAM_TEST_GRADE_LINGER_S` (none) the grading's, after the turn's grades were recorded.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from langgraph.runtime import Runtime

from runner.assistant.graph import (
    AssistantContext,
    AssistantState,
    assistant_builder,
    confirm,
    extract,
    grade,
)


async def extract_then_linger(
    state: AssistantState, runtime: Runtime[AssistantContext]
) -> dict[str, Any]:
    update = await extract(state, runtime)
    await asyncio.sleep(float(os.environ.get("RUNSTREAM_TEST_LINGER_S", "3")))
    return update


async def confirm_then_linger(
    state: AssistantState, runtime: Runtime[AssistantContext]
) -> dict[str, Any]:
    update = await confirm(state, runtime)  # raises the interrupt until the question is answered
    if update.get("messages"):  # an answer was applied (or the old value kept)
        await asyncio.sleep(float(os.environ.get("RUNSTREAM_TEST_CONFIRM_LINGER_S", "0")))
    return update


async def grade_then_linger(state: AssistantState) -> dict[str, Any]:
    update = await grade(state)
    await asyncio.sleep(float(os.environ.get("RUNSTREAM_TEST_GRADE_LINGER_S", "0")))
    return update


graph = assistant_builder(extract_then_linger, confirm_then_linger, grade_then_linger).compile()
