"""The scenarios, in the order a full run executes them.

Each module has `NAME`, `NEEDS` (the baseline scenarios whose figures it compares with; they
run first, once per invocation) and `async def run(ctx: BenchContext) -> None`. Modules are
imported only when run, so spawned client processes do not pay for LangGraph imports.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["BASELINES", "ORDER", "load"]

MODULES = {
    "floor": "floor",
    "redis": "redis_raw",
    "first_token": "first_token",
    "one_run_throughput": "one_run_throughput",
    "fanout": "fanout",
    "idle_sse": "idle_sse",
    "concurrent_runs": "concurrent_runs",
    "attach_finished": "attach_finished",
    "langgraph_api": "langgraph_api",
    "soak": "soak",
    "scale_out": "scale_out",
    "worker_kill": "worker_kill",
    "capacity": "capacity",
    "sse_floor": "sse_floor",
    "cluster": "cluster",
    "user_graph": "user_graph",
    "burst": "burst",
    "fixed_path": "fixed_path",
    "memory": "memory",
    "side_by_side": "side_by_side",
}
ORDER = list(MODULES)
BASELINES = ("floor", "redis")


def load(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{MODULES[name]}")
