"""Reloading the configuration (SIGHUP): what changed, what is applied, what needs a restart."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from mqbridge.config import parse_config
from mqbridge.supervision.reload import ConfigReloader, changed_keys
from tests.support.configs import BridgeToml, orders


def reloadable(level: str = "INFO", workers: int = 2, password: str = "s3cret-one",
               max_rss: str = "") -> BridgeToml:
    """`orders` with a key of each kind: applied at once, needing a restart, a secret."""
    return (orders().set("bridge", control_interval="5s", max_rss=max_rss or None).set("logging", level=level)
            .set("collector", workers=workers)
            .set("sources.amq", password=password))


def config(level: str = "INFO", workers: int = 2, password: str = "s3cret-one", max_rss: str = "") -> Any:
    return reloadable(level, workers, password, max_rss).parse()


@pytest.fixture
def root_level() -> Iterator[None]:
    root = logging.getLogger()
    before = root.level
    yield
    root.setLevel(before)


def test_changed_keys_name_paths_including_secrets_without_values() -> None:
    assert changed_keys(config(), config()) == []
    assert changed_keys(config(), config(level="debug", workers=3, password="s3cret-two")) == [
        "collector.workers", "logging.level", "sources.amq.password"]


def test_apply_sets_the_level_and_reports_restart_keys(root_level: None, caplog: pytest.LogCaptureFixture) -> None:
    bridge = SimpleNamespace(config=config())
    logging.getLogger().setLevel(logging.INFO)
    with caplog.at_level(logging.INFO, logger="mqbridge.reload"):
        ConfigReloader().apply(bridge, config(level="DEBUG", workers=3, password="s3cret-two"))
    assert logging.getLogger().level == logging.DEBUG
    assert bridge.config.logging.level == "DEBUG"
    assert bridge.config.collector.workers == 2  # not applied: still running with the old value
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(w.endswith("applied logging.level") for w in warnings), warnings
    assert any(w.endswith("collector.workers, sources.amq.password") and "restart" in w for w in warnings), warnings
    assert "s3cret" not in caplog.text


def test_a_broken_file_changes_nothing(tmp_path: Any, root_level: None, caplog: pytest.LogCaptureFixture) -> None:
    path = reloadable(password="x").write(tmp_path / "bridge.toml")
    running = parse_config(path.read_text(), str(path))
    path.write_text(path.read_text() + "\n[collector]\nmemroy = 1\n")
    bridge = SimpleNamespace(config=running)
    with caplog.at_level(logging.INFO, logger="mqbridge.reload"):
        ConfigReloader().on_reload(bridge)
    assert "configuration not reloaded" in caplog.text and bridge.config is running


def test_apply_changes_the_memory_guard_limit(caplog: pytest.LogCaptureFixture) -> None:
    # Given a bridge whose memory guard has no limit
    from mqbridge.counters import Counters
    from mqbridge.supervision.guard import MemoryGuard

    counters = Counters()
    bridge = SimpleNamespace(config=config(), guard=MemoryGuard(None, counters))
    # When the reloaded file sets max_rss
    with caplog.at_level(logging.INFO, logger="mqbridge.reload"):
        ConfigReloader().apply(bridge, config(max_rss="1GB"))
    # Then the running guard uses it, and nothing asks for a restart
    assert bridge.guard.max_rss == 1024 ** 3
    assert counters.gauge("memory_guard_max_rss_bytes") == 1024 ** 3
    assert "restart" not in caplog.text and "applied bridge.max_rss" in caplog.text
