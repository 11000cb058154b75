"""The shipped Grafana dashboard (contrib/grafana/mqbridge.json) against the names the bridge
really exports: every query names a series `/metrics` renders (a counter with `_total`, a histogram
with `_bucket`...), every panel has one unit and no bytes next to counts, the summary row comes
first, and no two panels overlap. A real Prometheus scraping a running bridge and finding every
one of these series is tests/integration/test_prometheus.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import mqbridge
from mqbridge.bulks.collector import CollectorStats
from mqbridge.counters import Counters
from mqbridge.monitoring.backlog_metrics import BacklogMetrics
from mqbridge.monitoring.metrics import BridgeMetrics

DASHBOARD = Path(__file__).resolve().parents[3] / "contrib" / "grafana" / "mqbridge.json"
#: How the code writes a counter, gauge or histogram: `counters.inc("name"`, `.set(`, `.observe(`.
USE = re.compile(r"(?:counters|\bc)\.(inc|set|observe|observe_many)\(\s*\"([a-z_]+)\"")


def exported_series() -> set[str]:
    """Every series name `/metrics` can render: each name the package's code writes, with the
    kind it writes it as, plus the collector's, the health view's and the process's families."""
    counters = Counters()
    root = Path(mqbridge.__file__).parent
    for path in root.rglob("*.py"):
        for method, name in USE.findall(path.read_text()):
            if method == "inc":
                counters.inc(name)
            elif method == "set":
                counters.set(name, 1)
            else:
                counters.observe(name, 1.0)
    registry = CollectorRegistry()
    registry.register(BridgeMetrics(counters, CollectorStats, lambda: {"healthy": True, "spark_reachable": True}))
    registry.register(BacklogMetrics(lambda: {"amq:/queue/q": {"messages": 1, "oldest_age_seconds": 1.0}}))
    text = generate_latest(registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def panels() -> list[dict[str, Any]]:
    return list(json.loads(DASHBOARD.read_text())["panels"])


def graphs() -> list[dict[str, Any]]:
    return [panel for panel in panels() if panel["type"] != "row"]


def queried(panel: dict[str, Any]) -> set[str]:
    return {name for target in panel["targets"] for name in re.findall(r"\bmqbridge_[a-z_]+", target["expr"])}


def test_every_query_names_a_series_the_bridge_exports() -> None:
    exported = exported_series()
    assert {"mqbridge_messages_committed_total", "mqbridge_collector_messages",
            "mqbridge_put_to_commit_seconds_bucket", "mqbridge_process_resident_memory_bytes"} <= exported
    unknown = {panel["title"]: sorted(queried(panel) - exported) for panel in graphs() if queried(panel) - exported}
    assert unknown == {}, f"queries of series /metrics never renders: {unknown}"
    assert all(panel["targets"] and queried(panel) for panel in graphs())


@pytest.mark.parametrize("panel", graphs(), ids=lambda panel: panel["title"])
def test_a_panel_has_one_unit_and_never_bytes_next_to_counts(panel: dict[str, Any]) -> None:
    unit = panel["fieldConfig"]["defaults"].get("unit")
    assert isinstance(unit, str) and unit, "no unit"
    overridden = [prop for override in panel["fieldConfig"].get("overrides", [])
                  for prop in override.get("properties", []) if prop.get("id") == "unit"]
    assert overridden == [], "a second unit in an override"
    assert all(name.endswith("_bytes") for name in queried(panel)) == (unit == "bytes"), \
        f"unit {unit} for {sorted(queried(panel))}"


def test_the_summary_row_comes_first() -> None:
    first, *rest = sorted(panels(), key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    assert (first["type"], first["title"]) == ("row", "Summary")
    summary = [p["title"] for p in rest if p["gridPos"]["y"] == first["gridPos"]["y"] + 1]
    assert summary == ["Committed / s", "Backlog: waiting in the collector", "Listeners up", "Sinks available",
                       "Errors / s"]
    assert all(p["type"] == "stat" for p in rest if p["title"] in summary)


def test_no_two_panels_overlap_and_each_has_an_id_of_its_own() -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in panels():
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for cell in ((x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                     for y in range(grid["y"], grid["y"] + grid["h"])):
            assert cell not in taken, f"{panel['title']} overlaps {taken[cell]}"
            taken[cell] = panel["title"]
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids))
