"""Reloading the configuration (SIGHUP): what changed, what is applied, what needs a restart."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from bridge.reload import ConfigReloader, changed_keys
from config import parse_config

BASE = """
[bridge]
control_interval = "5s"
[logging]
level = "{level}"
[collector]
workers = {workers}
[types.orders]
[sources.amq]
kind = "stomp"
password = "{password}"
[[listeners]]
source = "amq"
queue = "/queue/orders"
message_type = "orders"
backout_queue = "/queue/orders.backout"
"""


def config(level: str = "INFO", workers: int = 2, password: str = "s3cret-one") -> Any:
    return parse_config(BASE.format(level=level, workers=workers, password=password))


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
    with caplog.at_level(logging.INFO, logger="bridge.reload"):
        ConfigReloader(None).apply(bridge, config(level="DEBUG", workers=3, password="s3cret-two"))
    assert logging.getLogger().level == logging.DEBUG
    assert bridge.config.logging.level == "DEBUG"
    assert bridge.config.collector.workers == 2  # not applied: still running with the old value
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(w.endswith("applied logging.level") for w in warnings), warnings
    assert any(w.endswith("collector.workers, sources.amq.password") and "restart" in w for w in warnings), warnings
    assert "s3cret" not in caplog.text


def test_a_broken_file_changes_nothing(tmp_path: Any, root_level: None, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text(BASE.format(level="INFO", workers=2, password="x"))
    running = parse_config(path.read_text(), str(path))
    path.write_text(path.read_text() + "\n[collector]\nmemroy = 1\n")
    bridge = SimpleNamespace(config=running)
    with caplog.at_level(logging.INFO, logger="bridge.reload"):
        ConfigReloader(None).reload(bridge)
    assert "configuration not reloaded" in caplog.text and bridge.config is running
