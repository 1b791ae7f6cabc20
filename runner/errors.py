"""The root of the worker's and the project contract's errors, and their tree.

Each error is defined beside the code that raises it; all of them are `RunnerError`s, so a
caller can catch the runner's refusals as one. Each also keeps the builtin base its callers
caught before there was a root (the one in brackets), so `except ValueError` still holds:

RunnerError
├── ProjectError         the project cannot be served: file, key, cause      [SettingsError]
│                            runner/project.py; `runstream` prints it, exits 2
├── UnknownGraph         no graph is registered under that name               [LookupError]
│                            runner/graph_catalog.py
├── ConfigurableRefused  a `configurable` key or value the graph refuses      [ValueError]
│                            runner/configurable.py
├── ContextRefused       a run's context the graph's `context_schema` refuses [ValueError]
│                            runner/graph_context.py
├── EvaluationRefused    `record_evaluation` given what it does not record    [ValueError]
│                            runner/evaluations.py
├── EvalSetError         an evaluation set that does not have its shape       [ValueError]
│                            runner/assistant/evalset.py
├── EffectNotRecorded    a `once` effect's result is not JSON                 [TypeError]
│                            runner/tools.py
├── NotInARun            `once` or `record_evaluation` outside a worker's run [RuntimeError]
│                            runner/effects.py
└── NoModelHere          `chat_model()` outside a worker's run                [RuntimeError]
                             runner/models.py

Storage's errors have their own root (`stream_store.errors.StoreError`): a store that failed
is not the runner's refusal.
"""

from __future__ import annotations

__all__ = ["RunnerError"]


class RunnerError(Exception):
    """Base of the errors the worker and the project contract raise (the tree: the module)."""
