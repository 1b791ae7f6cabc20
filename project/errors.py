"""The root of the project contract's errors, and their tree.

Each error is defined beside the code that raises it; all of them are `ProjectContractError`s,
so a caller can catch the contract's refusals as one. Each also keeps the builtin base its
callers caught before there was a root (the one in brackets), so `except ValueError` still
holds:

ProjectContractError
├── ProjectError         the project cannot be served: file, key, cause      [SettingsError]
│                            project/langgraph_json.py; `runstream` prints it, exits 2
├── UnknownGraph         no graph is registered under that name               [LookupError]
│                            project/graph_catalog.py
├── ConfigurableRefused  a `configurable` key or value the graph refuses      [ValueError]
│                            project/configurable.py
├── ContextRefused       a run's context the graph's `context_schema` refuses [ValueError]
│                            project/graph_context.py
└── WebhookRefused       a webhook URL the project's `webhooks.url` policy    [ValueError]
    │                    (or the operator's) refuses: project/webhooks.py
    └── WebhookUnresolved    its host's name did not resolve (at delivery: retried)

The worker's own errors have theirs (`runner.errors.RunnerError`), storage's too
(`stream_store.errors.StoreError`): the packages are layered (`project` below `runner`), and a
root below both would name neither.
"""

from __future__ import annotations

__all__ = ["ProjectContractError"]


class ProjectContractError(Exception):
    """Base of the errors of a user's project and the contract read from it (the tree: the
    module)."""
