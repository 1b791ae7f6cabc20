"""Private names of other packages: none of arq, Litestar or uvicorn unless docs/architecture.md
says why (issue 24), and those of LangGraph's checkpointer that we override still there, as we
use them (issue 10).

A private name can change in any release without notice. The scan reads the product's code
(`server/`, `runner/`, `stream_store/`, `clients/`) for private names of arq, Litestar and
uvicorn: imported, read as an attribute, or overridden in a subclass. Each check of a private
name we keep names the package, the name and the file of ours that depends on it, so an upgrade
that breaks one fails here, loudly, rather than as a checkpoint write that is no longer fenced.
No service is needed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import langgraph_sdk.runtime
import pytest
from langgraph.checkpoint.postgres import _ainternal
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver


def _broken(package: str, name: str, ours: str, what: str) -> str:
    return f"{package}: {name} {what}; fix {ours}, which relies on it"


def _kind(function: Any) -> str:
    if inspect.isasyncgenfunction(inspect.unwrap(function)):
        return "an async context manager"
    return "a coroutine function" if inspect.iscoroutinefunction(function) else "a plain function"


def _check_signature(
    package: str, name: str, ours: str, obj: Any, expected: str, kind: str
) -> None:
    """`obj` is a function of `kind` whose parameters are `expected` (annotations left out)."""
    assert callable(obj), _broken(package, name, ours, "is gone")
    signature = inspect.signature(obj)
    bare = signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=signature.empty,
    )
    assert str(bare) == expected, _broken(
        package, name, ours, f"now has the signature {signature}, not {expected}"
    )
    assert _kind(obj) == kind, _broken(package, name, ours, f"is now {_kind(obj)}, not {kind}")


def _check_called(package: str, name: str, ours: str, caller: Any, call: str) -> None:
    """`caller`'s source still contains `call`: what we override is still used as we assume."""
    source = inspect.getsource(caller)
    assert call in source, _broken(
        package, name, ours, f"no longer appears as `{call}` in {caller.__qualname__}"
    )


ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("server", "runner", "stream_store", "clients", "project", "wire")
LIBRARIES = ("arq", "litestar", "uvicorn")
SECTION = "docs/architecture.md, Libraries' private parts"

# (file, private name) -> why it is used, citing SECTION. Empty: runstream reads the queue with
# its own loop (`runner/job_loop.py`), not by overriding arq's Worker, and the event stream
# writes its chunks with a method of its own (`server/streaming/event_stream.py`).
ALLOWED: dict[tuple[str, str], str] = {}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _on_self(node: ast.Attribute) -> bool:
    """`self._x` or `cls._x`: outside a library's subclass, our own name."""
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def _resolve(dotted: str) -> Any:
    """The object a dotted name of a library names (None if it has none)."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            found = getattr(found, part, None)
        return found
    return None


def _private_members(cls: type) -> set[str]:
    """The private names a library class and its library bases define, with the attributes
    their methods set on `self` (such as arq's `Worker._pool`)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] not in LIBRARIES:
            continue
        names |= {name for name in vars(klass) if _is_private(name)}
        try:
            source = ast.parse(inspect.getsource(klass).strip())
        except (OSError, TypeError, SyntaxError, IndentationError):
            continue
        names |= {
            node.attr
            for node in ast.walk(source)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and _is_private(node.attr)
        }
    return names


def private_uses(source: str) -> set[str]:
    """The private names of arq, Litestar and uvicorn that `source` uses, dotted from the
    library: in an import, as an attribute of a name imported from one, overridden or read on
    `self`/`super()` in a subclass of one of their classes, or read on any object when a class
    imported from them defines that private name (a heuristic for their instances)."""
    tree = ast.parse(source)
    imported: dict[str, str] = {}  # local name -> the library's dotted name
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    if any(_is_private(part) for part in alias.name.split(".")):
                        found.add(alias.name)
                    local = alias.asname or alias.name.split(".")[0]
                    imported[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in LIBRARIES:
                continue
            if any(_is_private(part) for part in node.module.split(".")):
                found.add(node.module)
            for alias in node.names:
                if _is_private(alias.name):
                    found.add(f"{node.module}.{alias.name}")
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def library_name(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return imported.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = library_name(expr.value)
            return f"{base}.{expr.attr}" if base else None
        return None

    owners: dict[str, str] = {}  # a private name of an imported class -> that class
    for dotted in imported.values():
        cls = _resolve(dotted)
        if isinstance(cls, type):
            for name in _private_members(cls):
                owners.setdefault(name, dotted)
    overridden: set[ast.AST] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            base_name = library_name(base)
            cls = _resolve(base_name) if base_name else None
            if not isinstance(cls, type):
                continue
            theirs = _private_members(cls)
            for inner in ast.walk(node):
                name = None
                if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = inner.name
                elif isinstance(inner, ast.Attribute) and (
                    _on_self(inner)
                    or (
                        isinstance(inner.value, ast.Call)
                        and isinstance(inner.value.func, ast.Name)
                        and inner.value.func.id == "super"
                    )
                ):
                    name = inner.attr
                    overridden.add(inner)
                if name is not None and name in theirs:
                    found.add(f"{base_name}.{name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
            continue
        base_name = library_name(node.value)
        if base_name is not None:
            found.add(f"{base_name}.{node.attr}")
        elif node not in overridden and node.attr in owners and not _on_self(node):
            found.add(f"{owners[node.attr]}.{node.attr}")
    return found


def _product_uses() -> Iterator[tuple[str, str]]:
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in private_uses(path.read_text()):
                yield path.relative_to(ROOT).as_posix(), name


class TestNoPrivateNamesOfArqLitestarUvicorn:
    """The product leans on arq's, Litestar's and uvicorn's public interfaces only, but where
    docs/architecture.md says why."""

    def test_product_code_uses_only_allowed_private_names(self) -> None:
        unexplained = sorted(set(_product_uses()) - ALLOWED.keys())
        assert not unexplained, (
            f"private names of {', '.join(LIBRARIES)} used without a reason: {unexplained};"
            f" use a public interface, or add each to ALLOWED with why ({SECTION})"
        )

    def test_every_allowed_private_name_is_still_used_and_explained(self) -> None:
        assert not sorted(ALLOWED.keys() - set(_product_uses())), "stale entries in ALLOWED"
        for use, why in ALLOWED.items():
            assert SECTION in why, f"{use}: the reason must cite {SECTION}"

    def test_the_scan_sees_imports_attributes_and_overrides(self) -> None:
        """What the previous worker did (arq's Worker overridden), and the other ways."""
        source = """
import uvicorn
from arq.worker import Worker
from litestar._kwargs import KwargsModel
from litestar.response.streaming import ASGIStreamingResponse

class RunWorker(Worker):
    async def _poll_iteration(self):
        await super()._poll_iteration()
        return self._pool

class Ours:
    def _own(self):
        return self._private  # our own names, not a library's

def serve(server, response: ASGIStreamingResponse):
    uvicorn.Server._private_thing
    return response._stream
"""
        assert private_uses(source) == {
            "arq.worker.Worker._poll_iteration",
            "arq.worker.Worker._pool",
            "litestar._kwargs",
            "uvicorn.Server._private_thing",
            "litestar.response.streaming.ASGIStreamingResponse._stream",
        }


class TestLanggraphCheckpointPostgres:
    """`stream_store/checkpoints.py` (`FencedPostgresSaver`) overrides `AsyncPostgresSaver._cursor`
    and calls `_ainternal.get_connection`."""

    PACKAGE = "langgraph-checkpoint-postgres"
    OURS = "stream_store/checkpoints.py (FencedPostgresSaver)"

    def test_cursor_takes_pipeline_and_is_an_async_context_manager(self) -> None:
        """`AsyncPostgresSaver._cursor(self, *, pipeline=False)` yields a cursor."""
        name = "AsyncPostgresSaver._cursor"
        method = getattr(AsyncPostgresSaver, "_cursor", None)
        expected = "(self, *, pipeline=False)"
        _check_signature(
            self.PACKAGE, name, self.OURS, method, expected, "an async context manager"
        )

    @pytest.mark.parametrize("writer", ["aput", "aput_writes"])
    def test_checkpoint_writes_ask_for_a_pipeline(self, writer: str) -> None:
        """The fence applies to `_cursor(pipeline=True)`: every checkpoint write asks for it."""
        _check_called(
            self.PACKAGE,
            "AsyncPostgresSaver._cursor",
            self.OURS,
            getattr(AsyncPostgresSaver, writer),
            "self._cursor(pipeline=True)",
        )

    @pytest.mark.parametrize("attribute", ["conn", "pipe"])
    def test_saver_keeps_conn_and_pipe(self, attribute: str) -> None:
        """Our `_cursor` reads `self.conn` and `self.pipe`, which `__init__` sets."""
        _check_called(
            self.PACKAGE,
            f"AsyncPostgresSaver.{attribute}",
            self.OURS,
            AsyncPostgresSaver.__init__,
            f"self.{attribute} = {attribute}",
        )

    def test_get_connection_takes_a_pool(self) -> None:
        """`_ainternal.get_connection(conn)`: an async context manager, a pool's connection."""
        name = "langgraph.checkpoint.postgres._ainternal.get_connection"
        function = getattr(_ainternal, "get_connection", None)
        _check_signature(
            self.PACKAGE, name, self.OURS, function, "(conn)", "an async context manager"
        )


class TestLanggraphSdkRuntime:
    """`project/graph_loading.py` builds a graph factory's runtime from `langgraph_sdk.runtime`'s
    `_ExecutionRuntime` and `_ReadRuntime`, as LangGraph's server does (`build_server_runtime`):
    the SDK has no public constructor for them."""

    PACKAGE = "langgraph-sdk"
    OURS = "project/graph_loading.py (execution_runtime, read_runtime)"

    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            ("_ExecutionRuntime", "(self, *, access_context, user=None, store, context=None)"),
            ("_ReadRuntime", "(self, *, access_context, user=None, store)"),
        ],
    )
    def test_runtimes_take_an_access_context_and_a_store(self, name: str, expected: str) -> None:
        runtime = getattr(langgraph_sdk.runtime, name, None)
        assert isinstance(runtime, type), _broken(self.PACKAGE, name, self.OURS, "is gone")
        init = runtime.__init__
        _check_signature(self.PACKAGE, name, self.OURS, init, expected, "a plain function")
