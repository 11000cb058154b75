"""The service-manager side of a bridge run, without the service manager: what the Windows
service (service/windows.py, a thin pywin32 layer) does, in plain Python so it runs and is tested
on any platform.

`ServiceController.run()` loads the configuration, runs `run_bridge` in a worker thread and
waits. A stop request (`request_stop()`, from the service control handler) only sets the stop
event; while the graceful drain runs, the controller reports STOP_PENDING every
`progress_every` seconds with a wait hint, so the service manager sees progress instead of a
hung service, until the drain ends or its deadline (`shutdown_timeout` plus a margin) passes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mqbridge.app import run_bridge
from mqbridge.config import BridgeConfig, load_config
from mqbridge.errors import ConfigError
from mqbridge.logsetup import RedactSecrets, setup_from_config

log = logging.getLogger(__name__)

START_PENDING = "START_PENDING"
RUNNING = "RUNNING"
STOP_PENDING = "STOP_PENDING"
STOPPED = "STOPPED"

#: Exit codes of `run()`: those of `run_bridge` (0 drained, 1 not drained, 2 fatal/configuration).
EXIT_OK, EXIT_NOT_DRAINED, EXIT_CONFIG = 0, 1, 2
#: Beyond `shutdown_timeout`: Spark's own shutdown after the drain.
STOP_MARGIN = 30.0
MAX_WAIT_HINT = 10.0

#: (state, wait hint in milliseconds); the service manager counts the checkpoints.
Reporter = Callable[[str, int], None]
Runner = Callable[..., int]


def describe_exit(code: int) -> str:
    """What an exit code means, for the Event Log."""
    return {
        EXIT_OK: "stopped: every message was committed or returned to its queue",
        EXIT_NOT_DRAINED: "stopped before the drain finished: uncommitted messages return to their queues",
        EXIT_CONFIG: "stopped by a configuration or fatal error (see the previous messages)",
    }.get(code, f"stopped with exit status {code}")


class ServiceController:
    """Runs one bridge for a service manager (see the module docstring)."""

    def __init__(self, config_path: str | Path, report: Reporter, *, run: Runner | None = None,
                 load: Callable[[str], BridgeConfig] = load_config,
                 configure_logging: Callable[[BridgeConfig], None] | None = None,
                 progress_every: float = 1.0) -> None:
        self.config_path = str(config_path)
        self.report = report
        self._run = run
        self._load = load
        self._configure_logging = configure_logging
        self.progress_every = progress_every
        self.stop_event = threading.Event()
        self.reload_event = threading.Event()
        self.exit_code: int | None = None
        self.error: BaseException | None = None

    def request_stop(self) -> None:
        """Service control STOP/SHUTDOWN: begin the graceful drain. Only sets an event."""
        self.stop_event.set()

    def request_reload(self) -> None:
        """Service control PARAMCHANGE: reload plugins and the configuration file."""
        self.reload_event.set()

    def _work(self, config: BridgeConfig) -> None:
        run = self._run or run_bridge
        try:
            self.exit_code = run(config, stop_event=self.stop_event, reload_event=self.reload_event)
        except ConfigError as exc:
            log.error("configuration error: %s", exc)
            self.exit_code = EXIT_CONFIG
        except BaseException as exc:  # reported here: this thread is the service's main work
            log.critical("the bridge failed", exc_info=exc)
            self.error = exc
            self.exit_code = EXIT_NOT_DRAINED
        finally:
            self.stop_event.set()

    def run(self) -> int:
        """Run the bridge until it ends or a stop request has been drained; return its exit code."""
        try:
            config = self._load(self.config_path)
        except ConfigError as exc:
            log.error("configuration error: %s", exc)
            return EXIT_CONFIG
        if self._configure_logging is not None:
            self._configure_logging(config)
        worker = threading.Thread(target=self._work, args=(config,), name="mqbridge-service", daemon=True)
        worker.start()
        self.report(RUNNING, 0)
        while not self.stop_event.wait(0.25):
            pass
        code = self._drain(worker, config.bridge.shutdown_timeout + STOP_MARGIN)
        self.report(STOPPED, 0)
        return code

    def _drain(self, worker: threading.Thread, limit: float) -> int:
        deadline = time.monotonic() + limit
        while True:
            worker.join(0)
            if not worker.is_alive():
                return self.exit_code if self.exit_code is not None else EXIT_NOT_DRAINED
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.error("the drain did not finish within %.0fs; stopping anyway (uncommitted messages "
                          "return to their queues)", limit)
                return EXIT_NOT_DRAINED
            hint = max(2 * self.progress_every, min(remaining, MAX_WAIT_HINT))
            self.report(STOP_PENDING, int(hint * 1000))
            worker.join(min(self.progress_every, remaining))


class EventLogHandler(logging.Handler):
    """Forwards warnings and errors to the Windows Event Log through the given callables
    (servicemanager.LogWarningMsg / LogErrorMsg)."""

    def __init__(self, warning: Callable[[str], Any], error: Callable[[str], Any]) -> None:
        super().__init__(logging.WARNING)
        self._warning = warning
        self._error = error
        self.setFormatter(logging.Formatter("%(threadName)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            (self._error if record.levelno >= logging.ERROR else self._warning)(text)
        except Exception:
            self.handleError(record)


def configure_service_logging(config: BridgeConfig, event_log: logging.Handler | None = None) -> None:
    """Logging of a service from its configuration: the configured file (or stderr), level and
    format, and `event_log` (the Windows Event Log) beside it, every handler redacting the
    configuration's secrets. Replaces whatever handlers the service host had set up before the
    configuration was read (those could not know its secrets)."""
    setup_from_config(config, force=True)
    if event_log is not None:
        for old in [f for f in event_log.filters if isinstance(f, RedactSecrets)]:
            event_log.removeFilter(old)
        event_log.addFilter(RedactSecrets(config.secrets().values()))
        logging.getLogger().addHandler(event_log)
