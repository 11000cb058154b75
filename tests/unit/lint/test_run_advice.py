"""`run` gives at start the warnings `check-config` reports (`mqbridge.lint.start_warnings`): both
read one list, so they cannot drift apart; `run` logs each as `check-config` words it on its key's line."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from pathlib import Path

import pytest

from mqbridge.app import build_app
from mqbridge.cli import main
from mqbridge.config import load_config, parse_config
from mqbridge.drivers import open_source
from mqbridge.lint import start_warnings
from mqbridge.lint.findings import KeyLines
from mqbridge.source import Source, SourceContext
from tests.support.memory import RecordingExecutor, memory_app, memory_config

RABBIT = '[sources.rabbit]\nkind = "stomp"\nbroker = "rabbitmq"\n'
LISTENER = ('[[listeners]]\nsource = "rabbit"\nqueue = "/queue/orders"\nmessage_type = "orders"\n'
            'backout_queue = "/queue/orders.dlq"\n[types.orders]\n')


def test_the_rabbitmq_advice_is_logged_when_the_bridge_starts(caplog: pytest.LogCaptureFixture) -> None:
    # Given a bridge on the in-memory source, with a RabbitMQ source configured beside it
    cfg, _broker = memory_config()
    other = parse_config(RABBIT + LISTENER, "<string>")
    cfg.sources["rabbit"] = other.sources["rabbit"]
    # When it runs until idle
    app = memory_app(cfg, RecordingExecutor())
    with caplog.at_level(logging.WARNING, logger="mqbridge.app"):
        assert app.run(until_idle=0.2) == 0
    # Then the guest identity is named once, with what to write instead
    advice = [r.getMessage() for r in caplog.records if "guest" in r.getMessage()]
    assert advice == ["sources.rabbit.user: RabbitMQ's default guest identity — create a user for the bridge and "
                      'set user = "mqbridge", password = "${ENV:MQBRIDGE_PASSWORD}"']


def _every_warning(tmp_path: Path) -> tuple[Path, str]:
    """A configuration file that earns every start warning `run` gives, and the memory broker the
    bridge reads from (the RabbitMQ listener is opened on it too: nothing here needs a broker)."""
    name = f"warnings-{uuid.uuid4().hex[:8]}"
    text = f"""\
[bridge]
name = "unit"
state_dir = "{tmp_path / 'state'}"
exactly_once = false
control_interval = "200ms"
shutdown_timeout = "5s"

[monitoring]
listen = ""

[purge]
interval = "1h"

[compaction]
interval = "1h"

[sources.mem]
kind = "memory"
broker = "{name}"

[sources.rabbit]
kind = "stomp"
broker = "rabbitmq"
host = "127.0.0.1"
password = "not-a-secret"

[types.orders]
bulk_timeout = "100ms"

[types.audit]
table = "orders"
bulk_timeout = "100ms"

[[listeners]]
source = "mem"
queue = "orders"
message_type = "orders"
wait = "50ms"
backout_queue = "orders.backout"

[[listeners]]
source = "rabbit"
queue = "/queue/audit"
message_type = "audit"
wait = "50ms"
backout_queue = "/amq/queue/audit.dlq"
"""
    path = tmp_path / "bridge.toml"
    path.write_text(text, encoding="utf-8")
    return path, name


def test_run_and_check_config_give_the_same_start_warnings(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # Given a configuration that earns every start warning (one list: `mqbridge.lint.start_warnings`)
    path, broker = _every_warning(tmp_path)
    cfg = load_config(path)
    expected = [finding.text() for finding in start_warnings(cfg)]
    keys = {finding.loc[0] for finding in start_warnings(cfg)}
    assert keys == {"sources", "bridge", "purge", "compaction", "listeners", "types"}, "a start warning is missing"
    # When `check-config` checks it
    main(["check-config", "--config", str(path)])
    printed = capsys.readouterr().out.splitlines()
    # And `run` starts it (every listener on the in-memory broker)
    mem = cfg.sources["mem"]

    def on_memory(context: SourceContext) -> Source:
        return open_source(dataclasses.replace(context, source_name="mem", source=mem))

    app = build_app(cfg, executors={"orders": RecordingExecutor(), "audit": RecordingExecutor()},
                    source_factory=on_memory)
    with caplog.at_level(logging.WARNING, logger="mqbridge.app"):
        assert app.run(until_idle=0.2) == 0
    logged = [r.getMessage() for r in caplog.records if r.name == "mqbridge.app" and r.levelno == logging.WARNING]
    # Then `run` logged each start warning, in the same words `check-config` printed on its key's line
    assert logged == expected
    lines = KeyLines(path.read_text(encoding="utf-8"))
    for finding in start_warnings(cfg):
        assert f"{path}:{lines.find(finding.loc)}: warning: {finding.text()}" in printed, (finding, printed)
    assert len(expected) == len({*expected}) == 8  # passwords 1, delivery 3, RabbitMQ 3, tables 1
