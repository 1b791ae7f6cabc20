"""The graphs a process serves as a submit is checked against them: their names and the
`config.configurable` keys each takes.

`GraphRegistry.catalog` (runner/graph_registry.py) makes it once at start-up, after it has
imported every graph. This module imports neither LangGraph, LangChain nor any graph's code, so
the server checks a submit (the graph exists, its `configurable`) with none of them in the path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .configurable import check
from .errors import ProjectContractError

__all__ = ["GraphCatalog", "UnknownGraph"]


class UnknownGraph(ProjectContractError, LookupError):
    """No graph is registered under that name."""


@dataclass(frozen=True)
class GraphCatalog:
    """Graph names to the `configurable` keys each takes (None: any key that is not reserved,
    `project.configurable`)."""

    configurable: Mapping[str, frozenset[str] | None]

    def __contains__(self, name: object) -> bool:
        return name in self.configurable

    def names(self) -> list[str]:
        return sorted(self.configurable)

    def configurable_keys(self, name: str) -> frozenset[str] | None:
        """The `configurable` keys graph `name` takes; None: any that is not reserved.

        Raises:
            UnknownGraph: no graph is registered under `name`.
        """
        try:
            return self.configurable[name]
        except KeyError:
            raise UnknownGraph(name) from None

    def check_configurable(self, name: str, configurable: Mapping[str, Any]) -> None:
        """Refuse a `configurable` key graph `name` does not take, or a value it cannot use.

        Raises:
            UnknownGraph: no graph is registered under `name`.
            ConfigurableRefused: naming the key and the keys the graph takes.
        """
        check(configurable, self.configurable_keys(name), name)
