"""The import arrows between runstream's packages, counted from the code: `python -m
tests.import_arrows` prints them (`--server` for the units inside `server/`).

A unit is a top-level package; inside `server/`, a subpackage or a module beside `app.py`.
Every import statement counts, those under `TYPE_CHECKING` and inside functions included.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

PACKAGES = ("server", "runner", "project", "stream_store", "wire", "clients")
ROOT = Path(__file__).resolve().parent.parent


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(path: Path) -> list[str]:
    """The modules `path` imports (relative imports resolved), runstream's only."""
    module = _module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # `from server import inputs` names a module: count it as that module
            found += [
                f"{target}.{alias.name}"
                if (ROOT / Path(*target.split("."), f"{alias.name}.py")).exists()
                else target
                for alias in node.names
            ]
    return [name for name in found if name.split(".")[0] in PACKAGES]


def unit(module: str, inside_server: bool) -> str:
    parts = module.split(".")
    if inside_server and parts[0] == "server" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def arrows(inside_server: bool = False) -> Counter[tuple[str, str]]:
    """(importing unit, imported unit): how many imports."""
    counted: Counter[tuple[str, str]] = Counter()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = unit(_module_of(path), inside_server)
            for name in _imported(path):
                target = unit(name, inside_server)
                if target != source and (not inside_server or source.startswith("server")):
                    counted[source, target] += 1
    return counted


if __name__ == "__main__":
    for (source, target), count in sorted(arrows("--server" in sys.argv).items()):
        print(f"{source} -> {target}: {count}")
