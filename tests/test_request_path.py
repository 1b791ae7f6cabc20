"""What the server imports to check and serve a request: no LangChain beyond what LangGraph's
own reads need, and no graph's code, which the graph registry imports once, at start-up.

Each check imports in a fresh interpreter, so nothing another test imported counts.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from project.graph_catalog import GraphCatalog, UnknownGraph
from runner.graph_registry import GraphRegistry
from tests.processes import ROOT

# What the server itself takes from LangGraph and LangChain: the LangGraph API's thread states,
# schemas, commands and messages, the checkpointer and the store (grep `^from lang` in server/
# and stream_store/). Importing these pulls in part of langchain_core, which LangGraph needs.
LANGGRAPH_READS = [
    "langchain_core.embeddings",
    "langchain_core.messages",
    "langchain_core.runnables.utils",
    "langgraph.checkpoint.postgres.aio",
    "langgraph.errors",
    "langgraph.graph",
    "langgraph.graph.message",
    "langgraph.pregel",
    "langgraph.store.postgres.aio",
    "langgraph.types",
    "langgraph_sdk",
]

# The model factory (chat models, tools, output parsers) and the built-in graphs' code.
GRAPH_CODE = ["runner.graphs", "runner.models", "langchain_openai", "openai"]


def imported_after(before: list[str], module: str) -> list[str]:
    """The modules a fresh interpreter gains by importing `module` after `before`."""
    script = (
        "import importlib, json, sys\n"
        f"for name in {before!r}: importlib.import_module(name)\n"
        "before = set(sys.modules)\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return list(json.loads(done.stdout))


def test_checking_a_submit_imports_neither_langgraph_nor_langchain() -> None:
    """The graph exists, its `configurable` keys, a context on runstream's `RunContext`."""
    for module in ("server.inputs", "project.graph_catalog", "project.graph_context"):
        gained = imported_after([], module)
        assert [m for m in gained if m.startswith(("lang", "openai"))] == [], module
        assert [m for m in gained if m in GRAPH_CODE] == [], module


def test_the_server_imports_no_langchain_beyond_what_langgraph_reads_need() -> None:
    gained = imported_after(LANGGRAPH_READS, "server.app")
    assert [m for m in gained if m.startswith(("langchain", "openai"))] == []
    assert [m for m in gained if m in GRAPH_CODE] == []


def test_the_catalog_holds_what_the_registry_decided() -> None:
    """Names and `configurable` keys, a graph that declares its keys and one that does not."""
    registry = GraphRegistry(
        {"persona": "tests.custom_graphs:persona", "words": "tests.custom_graphs:builder"}
    )
    catalog = registry.catalog()
    assert catalog.names() == registry.names() == ["approval", "chat", "persona", "words"]
    assert catalog.configurable_keys("persona") == {"fake_token_delay_ms", "persona"}
    assert catalog.configurable_keys("words") is None  # any key that is not reserved
    for name in registry.names():
        assert catalog.configurable_keys(name) == registry.configurable_keys(name)
    assert "no-such-graph" not in catalog


def test_an_unknown_graph_is_refused_by_name() -> None:
    catalog = GraphCatalog({"chat": frozenset()})
    with pytest.raises(UnknownGraph, match="no-such-graph"):
        catalog.check_configurable("no-such-graph", {})
