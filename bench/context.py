"""What every scenario gets: options, services, the report, the baselines, and clusters."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .launcher import ROOT, Cluster
from .processes import Namespace, Services
from .report import Figure, Report, Target

__all__ = ["BenchContext"]


@dataclass
class BenchContext:
    services: Services
    report: Report
    invocation: str  # a short id; namespaces are named after it
    quick: bool = False
    soak_minutes: float = 0.0
    client_procs: int = 2
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)
    keep_logs: bool = False
    against: str | None = None  # `--against REV`: a git revision to measure beside this tree

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def figure(
        self,
        scenario: str,
        name: str,
        value: float | None,
        unit: str = "",
        *,
        baseline: float | None = None,
        baseline_label: str = "",
        targets: list[Target] | None = None,
        stats: dict[str, float] | None = None,
        notes: str = "",
    ) -> Figure:
        return self.report.add(
            Figure(
                scenario,
                name,
                value,
                unit,
                baseline=baseline,
                baseline_label=baseline_label,
                targets=targets or [],
                stats=stats or {},
                notes=notes,
            )
        )

    def baseline(self, scenario: str, name: str) -> float | None:
        return self.baselines.get(scenario, {}).get(name)

    @contextlib.asynccontextmanager
    async def cluster(
        self, scenario: str, services: Services | None = None, *, root: Path = ROOT
    ) -> AsyncIterator[tuple[Namespace, Cluster]]:
        """A fresh namespace and an empty cluster on it; both are torn down afterwards.
        `services`: others than the invocation's (the `cluster` scenario's Redis Cluster);
        `root`: the source tree the children run (another revision's checkout)."""
        namespace = Namespace.new(services or self.services, self.invocation, scenario)
        cluster = Cluster(namespace.config, log_prefix="rs-bench-", ready_timeout_s=90, root=root)
        try:
            yield namespace, cluster
        except BaseException:
            if self.keep_logs:
                print(cluster.tails())
            raise
        finally:
            cluster.close()
            await namespace.drop()

    def note(self, scenario: str, **details: Any) -> None:
        """Extra measurements that go to the JSON (not the table)."""
        self.report.scenarios.setdefault(scenario, {}).setdefault("details", {}).update(details)


def default_client_procs() -> int:
    return max(2, min(4, os.cpu_count() or 2))
