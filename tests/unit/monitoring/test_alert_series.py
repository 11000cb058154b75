"""The series the alert rules (contrib/prometheus/alerts.yml) watch with `increase()` exist at 0
from the start: `increase()` over a series that appears with its first event sees no increase,
so the first plugin fallback or failed purge round of a process would never alert."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mqbridge.app import build_app
from mqbridge.config import parse_config
from tests.support.configs import orders


def samples(tmp_path: Path, purge: str | None) -> dict[str, float]:
    toml = orders().set("monitoring", listen="127.0.0.1:0")
    if purge is not None:
        toml = toml.set("purge", interval=purge)
    server = build_app(parse_config(toml.text(), str(tmp_path / "b.toml")), executors={}).monitor
    assert server is not None
    text = generate_latest(server.registry).decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if not s.labels}


@pytest.mark.parametrize("purge", [None, "1h"])
def test_the_watched_counters_exist_at_zero_before_their_first_event(tmp_path: Path, purge: str | None) -> None:
    found = samples(tmp_path, purge)
    assert found["mqbridge_plugin_fallbacks_total"] == 0
    assert found["mqbridge_ledger_publish_retries_total"] == 0
    if purge is None:  # no scheduled purge: no purge series to watch
        assert "mqbridge_purge_failures_total" not in found
    else:
        assert found["mqbridge_purge_failures_total"] == 0 and found["mqbridge_purge_runs_total"] == 0
