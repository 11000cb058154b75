"""Logging setup from `[logging]`: level, text or JSON lines, standard error or a rotating file.

Secrets never reach a log line: every handler carries a `RedactSecrets` filter that replaces
the configured source passwords with `***` wherever they appear (message, arguments,
traceback), as a second line of defence behind `SecretStr` in the configuration models.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mqbridge.config import BridgeConfig

TEXT_FORMAT = "%(asctime)s %(levelname)-8s %(threadName)s %(name)s: %(message)s"
# Chatty libraries: their INFO/DEBUG lines are not what operators read (py4j logs every call).
QUIET_LOGGERS = ("py4j", "stomp.py")
REDACTED = "***"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, thread, message (and exc_info)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False, default=str)


class RedactSecrets(logging.Filter):
    """Replaces each secret with `***` in the record's final message and traceback."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        for secret in self.secrets:
            message = message.replace(secret, REDACTED)
            if record.exc_text:
                record.exc_text = record.exc_text.replace(secret, REDACTED)
        record.msg, record.args = message, None
        if record.exc_text:
            record.exc_info = None  # formatters use the redacted exc_text instead
        return True


def setup_logging(level: str = "INFO", *, format: str = "text", file: Path | str | None = None,
                  max_bytes: int = 50 * 2**20, backup_count: int = 5,
                  secrets: Iterable[str] = (), force: bool = False) -> logging.Handler | None:
    """Configure the root logger and return the new handler.

    Like `logging.basicConfig`, this leaves logging alone (and returns None) when the embedding
    program, or pytest, has already given the root logger handlers of its own, unless `force`.
    A previous handler of ours is replaced (a second call, a reload).
    """
    root = logging.getLogger()
    ours = [h for h in root.handlers if any(isinstance(f, RedactSecrets) for f in h.filters)]
    if not force and len(root.handlers) > len(ours):
        return None
    handler: logging.Handler
    if file is not None:
        Path(file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(file, maxBytes=max_bytes, backupCount=backup_count,
                                                       encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if format == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(RedactSecrets(secrets))
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return handler


def setup_from_config(config: BridgeConfig, level: str | None = None, *, force: bool = False) -> logging.Handler | None:
    """`setup_logging` from a configuration's `[logging]` section; `level` overrides its level.
    A relative `file` is relative to the configuration file."""
    section = config.logging
    file = config.resolve_path(section.file) if section.file is not None else None
    return setup_logging(level or section.level, format=section.format, file=file,
                         max_bytes=section.max_bytes, backup_count=section.backup_count,
                         secrets=config.secrets().values(), force=force)
