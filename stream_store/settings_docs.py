"""docs/operations.md's settings tables, made from the declarations in `stream_store.settings`.

`python -m stream_store.settings_docs` rewrites the part of docs/operations.md between its two
markers (`--check`: exits 1 if it differs instead); tests/test_settings.py fails when the file
differs from what this makes, so the docs cannot drift from the fields.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .settings import GROUPS, Group, Settings, declarations

__all__ = ["BEGIN", "END", "OPERATIONS_MD", "tables", "with_tables"]

OPERATIONS_MD = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
BEGIN = "<!-- settings tables: made by `python -m stream_store.settings_docs`, do not edit -->"
END = "<!-- end of settings tables -->"

_TITLES: dict[Group, str] = {
    "server": "Server: listening, signing callers in, what a request and a caller may do",
    "worker": "Worker: the graphs and how runs are executed",
    "storage": "Storage: Redis and Postgres, and what they keep",
    "model": "Model: the chat model the graphs use",
    "client": "Client: the command-line clients",
}


def tables() -> str:
    """One table per concern, in declaration order: variable, meaning, default, what it
    accepts."""
    defaults = Settings()
    parts: list[str] = []
    for group in GROUPS:
        parts += [
            f"### {_TITLES[group]}",
            "",
            "| variable | meaning | default | accepts |",
            "|---|---|---|---|",
        ]
        for name, declared in declarations():
            if declared.group != group:
                continue
            default = declared.shown_default or declared.parse.show(getattr(defaults, name))
            parts.append(
                f"| `{declared.env}` | {declared.doc} | {default} | {declared.parse.accepts} |"
            )
        parts.append("")
    return "\n".join(parts)


def with_tables(document: str) -> str:
    """`document` with what lies between the markers replaced by `tables()`."""
    head, found, rest = document.partition(BEGIN)
    _, found_end, tail = rest.partition(END)
    if not (found and found_end):
        raise ValueError(f"the settings markers are missing: {BEGIN!r} ... {END!r}")
    return f"{head}{BEGIN}\n\n{tables()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not current")
    args = parser.parse_args(argv)
    document = OPERATIONS_MD.read_text()
    made = with_tables(document)
    if args.check:
        if made != document:
            print(f"{OPERATIONS_MD} is not current: run python -m stream_store.settings_docs")
            return 1
        return 0
    OPERATIONS_MD.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main())
