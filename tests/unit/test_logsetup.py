"""Logging setup: JSON lines, rotation, and secrets that never reach the log."""

from __future__ import annotations

import json
import logging
import logging.handlers
from pathlib import Path

import pytest

from mqbridge.config import parse_config
from mqbridge.logsetup import JsonFormatter, RedactSecrets, setup_from_config, setup_logging
from tests.support.configs import orders_config

CONFIG = orders_config(
    '[logging]\nlevel = "debug"\nformat = "json"\nfile = "logs/bridge.log"\nmax_bytes = "1KB"\nbackup_count = 2',
    "backout_threshold = 0", 'password = "${ENV:AMQ_PASSWORD}"')


@pytest.fixture(autouse=True)
def _logging_restored(restore_root_logger: None) -> None:
    """Every test here configures logging (fixture in tests/conftest.py)."""


def _record(msg: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = logging.LogRecord("mqbridge.test", logging.ERROR, __file__, 1, msg, args, exc_info)
    record.threadName = "listener-amq:/queue/x#1"
    return record


def test_json_line_has_time_level_logger_thread_message_and_exc_info() -> None:
    try:
        raise ValueError("boom")
    except ValueError as exc:
        line = JsonFormatter().format(_record("unit %s failed", 7, exc=exc))
    entry = json.loads(line)
    assert "\n" not in line
    assert set(entry) == {"time", "level", "logger", "thread", "message", "exc_info"}
    assert entry["level"] == "ERROR" and entry["logger"] == "mqbridge.test"
    assert entry["thread"] == "listener-amq:/queue/x#1" and entry["message"] == "unit 7 failed"
    assert entry["time"].endswith("+00:00") and "ValueError: boom" in entry["exc_info"]
    assert "exc_info" not in json.loads(JsonFormatter().format(_record("fine")))


def test_secrets_are_redacted_in_message_arguments_and_tracebacks() -> None:
    redact = RedactSecrets(["s3cret-pw"])
    try:
        raise RuntimeError("login with s3cret-pw refused")
    except RuntimeError as exc:
        record = _record("connect %s", {"passcode": "s3cret-pw"}, exc=exc)
    assert redact.filter(record)
    text = logging.Formatter("%(message)s").format(record)
    assert "s3cret-pw" not in text and "***" in text and "RuntimeError" in text
    assert "s3cret-pw" not in JsonFormatter().format(record)


def test_config_sets_level_json_rotating_file_and_redaction(tmp_path: Path) -> None:
    path = tmp_path / "bridge.toml"
    cfg = parse_config(CONFIG, str(path), env={"AMQ_PASSWORD": "pw-from-env-42"})
    assert list(cfg.secrets().values()) == ["pw-from-env-42"]
    handler = setup_from_config(cfg, force=True)
    assert isinstance(handler, logging.handlers.RotatingFileHandler)
    assert logging.getLogger().level == logging.DEBUG
    log = logging.getLogger("mqbridge.test")
    for i in range(40):
        log.info("line %d with the password pw-from-env-42 in it", i)
    handler.flush()
    files = sorted((tmp_path / "logs").iterdir())
    assert [f.name for f in files] == ["bridge.log", "bridge.log.1", "bridge.log.2"]  # rotated, 2 kept
    text = "".join(f.read_text() for f in files)
    assert "pw-from-env-42" not in text
    for line in text.splitlines():
        assert json.loads(line)["message"].endswith("*** in it")


def test_level_override_and_text_format_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("warning", force=True)
    logging.getLogger("mqbridge.test").info("hidden")
    logging.getLogger("mqbridge.test").warning("shown")
    err = capsys.readouterr().err
    assert "hidden" not in err and "WARNING" in err and "mqbridge.test: shown" in err
    assert logging.getLogger("py4j").level == logging.WARNING


def test_logging_configured_by_the_embedding_program_is_left_alone() -> None:
    root = logging.getLogger()
    foreign = logging.NullHandler()
    root.addHandler(foreign)
    level = root.level
    assert setup_logging("CRITICAL") is None
    assert foreign in root.handlers and root.level == level
    ours = setup_logging("DEBUG", force=True)
    assert root.handlers == [ours]
    again = setup_logging("INFO")  # our own handler is replaced, not stacked
    assert root.handlers == [again] and root.level == logging.INFO
