"""Figures, their statistics, the printed table and the JSON file.

A `Figure` is one measured value with its unit, an optional baseline measured in the same
invocation (`ratio` = value / baseline), and targets. `met` is computed from the measured
value, never set by hand; a figure without targets shows `-`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["Figure", "Report", "Target", "histogram_summary", "percentile", "summary"]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    """n, median (= p50), p99, min, max and mean of measurements."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median": percentile(values, 50),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "min": min(values),
        "max": max(values),
        "mean": sum(values) / len(values),
    }


def histogram_summary(histogram: Counter[int]) -> dict[str, float]:
    """The same statistics from an integer histogram (value -> count), nearest rank."""
    total = sum(histogram.values())
    if not total:
        return {"n": 0}
    keys = sorted(histogram)

    def rank(q: float) -> float:
        wanted = max(1, math.ceil(total * q / 100))
        seen = 0
        for key in keys:
            seen += histogram[key]
            if seen >= wanted:
                return float(key)
        return float(keys[-1])

    return {
        "n": total,
        "median": rank(50),
        "p50": rank(50),
        "p99": rank(99),
        "min": float(keys[0]),
        "max": float(keys[-1]),
        "mean": sum(k * c for k, c in histogram.items()) / total,
    }


@dataclass(frozen=True)
class Target:
    """`value <= limit` or `value >= limit`, on the figure's value or on its ratio."""

    op: str  # "<=" or ">="
    limit: float
    on: str = "value"  # or "ratio"

    def met(self, value: float | None, ratio: float | None) -> bool | None:
        subject = ratio if self.on == "ratio" else value
        if subject is None or math.isnan(subject):
            return None
        return subject <= self.limit if self.op == "<=" else subject >= self.limit

    def label(self, unit: str) -> str:
        op = "≤" if self.op == "<=" else "≥"
        if self.on == "ratio":
            return f"{op}{_number(self.limit)}x"
        return f"{op}{_number(self.limit)}{_unit_suffix(unit)}"


def _unit_suffix(unit: str) -> str:
    return "" if not unit else (unit if unit.startswith("/") or unit in ("%", "x") else f" {unit}")


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    magnitude = abs(value)
    if float(value).is_integer() and magnitude < 1e15:
        return f"{int(value):,}"
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


@dataclass
class Figure:
    scenario: str
    name: str
    value: float | None
    unit: str = ""
    baseline: float | None = None
    baseline_label: str = ""
    targets: list[Target] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    notes: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline

    @property
    def met(self) -> bool | None:
        if not self.targets:
            return None
        results = [t.met(self.value, self.ratio) for t in self.targets]
        if any(r is None for r in results):
            return False  # a target that could not be measured is not met
        return all(results)

    def row(self) -> list[str]:
        met = self.met
        return [
            self.scenario,
            self.name,
            f"{_number(self.value)}{_unit_suffix(self.unit)}",
            (f"{_number(self.baseline)} {self.baseline_label}".strip() if self.baseline else "-"),
            f"{self.ratio:.3g}x" if self.ratio is not None else "-",
            "; ".join(t.label(self.unit) for t in self.targets) or "-",
            "-" if met is None else ("yes" if met else "NO"),
        ]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["targets"] = [t.label(self.unit) for t in self.targets]
        data["ratio"] = self.ratio
        data["met"] = self.met
        return data


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def environment() -> dict[str, Any]:
    status = _git("status", "--porcelain")
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git_commit": _git("rev-parse", "HEAD") or None,
        "git_dirty": bool(status),
        "git_dirty_files": status.splitlines(),
        "loadavg_at_start": list(os.getloadavg()),
    }


class Report:
    """Figures as the scenarios add them; the table and the JSON at the end."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.meta = environment()
        self.meta["settings"] = settings
        self.figures: list[Figure] = []
        self.scenarios: dict[str, dict[str, Any]] = {}

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        met = figure.met
        flag = "" if met is None else ("  [met]" if met else "  [NOT met]")
        print(f"  {figure.name}: {figure.row()[2]}{flag}", flush=True)
        return figure

    def scenario_done(self, name: str, **details: Any) -> None:
        self.scenarios.setdefault(name, {}).update(details)

    def table(self) -> str:
        header = ["scenario", "figure", "value", "baseline", "ratio", "target", "met?"]
        rows = [header] + [f.row() for f in self.figures]
        failures = []
        for name, details in self.scenarios.items():
            if details.get("status") == "error":
                rows.append([name, "FAILED (see below)", *["-"] * 4, "NO"])
                failures.append(f"{name} failed: {details.get('error', '')}")
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = []
        for index, row in enumerate(rows):
            cells = [
                cell.ljust(widths[i]) if i < 2 else cell.rjust(widths[i])
                for i, cell in enumerate(row)
            ]
            lines.append("  ".join(cells).rstrip())
            if index == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines + failures)

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.meta["loadavg_at_end"] = list(os.getloadavg())
        data = {
            "meta": self.meta,
            "scenarios": self.scenarios,
            "figures": [f.to_json() for f in self.figures],
        }
        path.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")

    def failed(self) -> Iterable[str]:
        return (n for n, d in self.scenarios.items() if d.get("status") == "error")


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, Counter):
        return {str(k): v for k, v in sorted(value.items())}
    if isinstance(value, set | tuple):
        return list(value)
    return str(value)
