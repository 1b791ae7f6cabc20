"""The packages are layers: every import runs downwards (docs/architecture.md, "Code map")."""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter

from tests.import_arrows import arrows

# what each package may import of runstream's; anything else is an arrow running back up
ALLOWED = {
    "wire": set(),
    "clients": {"wire"},
    "stream_store": {"wire"},
    "project": {"stream_store", "wire"},
    "runner": {"project", "stream_store", "wire"},
    "server": {"runner", "project", "stream_store", "wire", "clients"},
}


def test_every_import_between_packages_runs_downwards() -> None:
    upward = {
        (source, target): count
        for (source, target), count in arrows().items()
        if target not in ALLOWED[source]
    }
    assert upward == {}


def test_the_units_inside_server_import_each_other_in_no_circle() -> None:
    graph: dict[str, set[str]] = {}
    for source, target in arrows(inside_server=True):
        if target.startswith("server"):
            graph.setdefault(source, set()).add(target)
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"a circle inside server/: {exc.args[1]}") from None
    # the resource layer, sign-in and streaming sit below both APIs; only `processes` starts
    # the app, and nothing imports `processes`
    below = ["server.callers", "server.access", "server.streaming"]
    for api in ("server.v1", "server.langgraph"):
        assert all(order.index(low) < order.index(api) for low in below)
    assert not any(target == "server.processes" for targets in graph.values() for target in targets)
    assert {source for source, targets in graph.items() if "server.app" in targets} == {
        "server.processes"
    }
