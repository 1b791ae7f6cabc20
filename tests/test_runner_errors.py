"""Every error the worker (runner/) and the project contract (project/) define is under its
package's one root, keeps the builtin base its callers catch, and is drawn in the tree of its
root's module."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import project
import runner
from project import errors as project_errors
from runner import errors as runner_errors
from stream_store.settings import SettingsError

# Each package's root, and the builtin base each of its errors kept: callers that caught it
# that way still do.
ROOTS: dict[str, tuple[ModuleType, ModuleType, type[Exception], dict[str, type[Exception]]]] = {
    "runner": (
        runner,
        runner_errors,
        runner_errors.RunnerError,
        {
            "EvaluationRefused": ValueError,
            "EvalSetError": ValueError,
            "EffectNotRecorded": TypeError,
            "NotInARun": RuntimeError,  # `runner.models.NoModelHere` is its deprecated name
        },
    ),
    "project": (
        project,
        project_errors,
        project_errors.ProjectContractError,
        {
            "ProjectError": SettingsError,
            "UnknownGraph": LookupError,
            "ConfigurableRefused": ValueError,
            "ContextRefused": ValueError,
            "WebhookRefused": ValueError,
            "WebhookUnresolved": ValueError,
        },
    ),
}


def defined_errors(package: ModuleType) -> dict[str, type[BaseException]]:
    """The exception classes defined in `package`'s modules, by name."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
            ):
                found[name] = value
    return found


@pytest.mark.parametrize("package", sorted(ROOTS))
class TestErrorRoots:
    def test_every_error_is_under_the_root_with_its_builtin_base(self, package: str) -> None:
        modules, _, root, kept = ROOTS[package]
        errors = defined_errors(modules)
        assert set(errors) == {root.__name__, *kept}
        for name, base in kept.items():
            assert issubclass(errors[name], root), name
            assert issubclass(errors[name], base), name

    def test_the_tree_in_the_docstring_names_every_one(self, package: str) -> None:
        modules, root_module, _, _ = ROOTS[package]
        for name in defined_errors(modules):
            assert name in (root_module.__doc__ or ""), name
