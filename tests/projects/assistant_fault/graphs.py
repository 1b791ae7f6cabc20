"""The memory-aware assistant with an extraction that lingers after its writes, before the
node returns (and so before its checkpoint): a worker killed then hands the extraction to an
attempt that must not write the facts again (tests/test_assistant_faults.py)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from langgraph.runtime import Runtime

from runner.assistant.graph import AssistantContext, AssistantState, assistant_builder, extract


async def extract_then_linger(
    state: AssistantState, runtime: Runtime[AssistantContext]
) -> dict[str, Any]:
    update = await extract(state, runtime)
    await asyncio.sleep(float(os.environ.get("RUNSTREAM_TEST_LINGER_S", "3")))
    return update


graph = assistant_builder(extract_then_linger).compile()
