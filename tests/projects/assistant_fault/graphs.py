"""The memory-aware assistant with steps that linger, so that a worker killed then hands the
step to an attempt that must not write again (tests/test_assistant_faults.py).

`RUNSTREAM_TEST_LINGER_S` (3 s) is the extraction's linger after its writes, before the turn's
step returns (and so before its checkpoint); `RUNSTREAM_TEST_FACT_LINGER_S` (none) the linger
before each fact's write, so that a kill lands between two facts' writes;
`RUNSTREAM_TEST_CONFIRM_LINGER_S` (none) the confirmation's, after an answer to a conflict
question was applied; `RUNSTREAM_TEST_GRADE_LINGER_S` (none) the grading's, after the turn's
grades were recorded.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from runner.assistant.facts import Fact
from runner.assistant.graph import (
    AssistantContext,
    AssistantState,
    assistant_builder,
    confirm,
    extract,
    grade,
    remember_once,
)


def _linger(name: str, default: str) -> float:
    return float(os.environ.get(name, default))


async def linger_then_remember(
    store: BaseStore, key: str, fact: Fact, *, replaces: Fact | None = None
) -> dict[str, Any] | None:
    await asyncio.sleep(_linger("RUNSTREAM_TEST_FACT_LINGER_S", "0"))
    return await remember_once(store, key, fact, replaces=replaces)


async def extract_then_linger(
    state: AssistantState, runtime: Runtime[AssistantContext]
) -> dict[str, Any]:
    update = await extract(state, runtime, remember=linger_then_remember)
    await asyncio.sleep(_linger("RUNSTREAM_TEST_LINGER_S", "3"))
    return update


async def confirm_then_linger(
    state: AssistantState, runtime: Runtime[AssistantContext]
) -> dict[str, Any]:
    update = await confirm(state, runtime)  # raises the interrupt until the question is answered
    if update.get("messages"):  # an answer was applied (or the old value kept)
        await asyncio.sleep(_linger("RUNSTREAM_TEST_CONFIRM_LINGER_S", "0"))
    return update


async def grade_then_linger(turn: dict[str, Any]) -> None:
    await grade(turn)
    await asyncio.sleep(_linger("RUNSTREAM_TEST_GRADE_LINGER_S", "0"))


graph = assistant_builder(extract_then_linger, confirm_then_linger, grade_then_linger).compile()
