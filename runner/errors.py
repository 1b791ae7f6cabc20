"""The root of the worker's errors, and their tree.

Each error is defined beside the code that raises it; all of them are `RunnerError`s, so a
caller can catch the runner's refusals as one. Each also keeps the builtin base its callers
caught before there was a root (the one in brackets), so `except ValueError` still holds:

RunnerError
├── EvaluationRefused    `record_evaluation` given what it does not record    [ValueError]
│                            runner/evaluations.py
├── EvalSetError         an evaluation set that does not have its shape       [ValueError]
│                            runner/assistant/evalset.py
├── EffectNotRecorded    a `once` effect's result is not JSON                 [TypeError]
│                            runner/tools.py
└── NotInARun            `once`, `record_evaluation`, `chat_model` or         [RuntimeError]
                         `current_run` outside a worker's run
                             runner/run_scope.py (`runner.models.NoModelHere` is its
                             deprecated name)

The project contract the worker reads (project/) has its own root,
`project.errors.ProjectContractError` (`ProjectError`, `UnknownGraph`, `ConfigurableRefused`,
`ContextRefused`), as storage has `stream_store.errors.StoreError`: a store that failed, or a
project that cannot be served, is not the runner's refusal.
"""

from __future__ import annotations

__all__ = ["RunnerError"]


class RunnerError(Exception):
    """Base of the errors the worker raises (the tree: the module)."""
