"""The maintenance modules log under the names they had before they moved into `mqbridge.maintenance`
(`mqbridge.purge.*`, `mqbridge.compaction.*`): operators' logging configurations name them."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(("module", "logger"), [
    ("mqbridge.maintenance.engine.swap", "mqbridge.purge.swap"),
    ("mqbridge.maintenance.engine.costs", "mqbridge.purge.costs"),
    ("mqbridge.maintenance.engine.scheduler", "mqbridge.purge.schedule"),
    ("mqbridge.maintenance.purge.purger", "mqbridge.purge.purger"),
    ("mqbridge.maintenance.purge.scheduler", "mqbridge.purge.schedule"),
    ("mqbridge.maintenance.compaction.compactor", "mqbridge.compaction.compactor"),
    ("mqbridge.maintenance.rounds", "mqbridge.compaction.rounds"),
    ("mqbridge.maintenance.compaction_scheduler", "mqbridge.compaction.schedule"),
])
def test_a_moved_module_keeps_its_logger_name(module: str, logger: str) -> None:
    assert importlib.import_module(module).log.name == logger
