"""Every error the runner defines is a `RunnerError`, keeps the builtin base its callers catch,
and is drawn in the tree of runner/errors.py."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import runner
from runner import errors
from runner.errors import RunnerError
from stream_store.settings import SettingsError

# The builtin base each one kept: callers that caught it that way still do.
KEPT_BASES: dict[str, type[Exception]] = {
    "ProjectError": SettingsError,
    "UnknownGraph": LookupError,
    "ConfigurableRefused": ValueError,
    "ContextRefused": ValueError,
    "EvaluationRefused": ValueError,
    "EvalSetError": ValueError,
    "EffectNotRecorded": TypeError,
    "NotInARun": RuntimeError,
    "NoModelHere": RuntimeError,
}


def runner_errors() -> dict[str, type[BaseException]]:
    """The exception classes defined in the runner's modules, by name."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(runner.__path__, "runner."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
            ):
                found[name] = value
    return found


class TestRunnerErrors:
    def test_every_runner_error_is_under_the_root_with_its_builtin_base(self) -> None:
        errors = runner_errors()
        assert set(errors) == {"RunnerError", *KEPT_BASES}
        for name, base in KEPT_BASES.items():
            assert issubclass(errors[name], RunnerError), name
            assert issubclass(errors[name], base), name

    def test_the_tree_in_the_docstring_names_every_one(self) -> None:
        doc = errors.__doc__ or ""
        for name in runner_errors():
            assert name in doc, name
