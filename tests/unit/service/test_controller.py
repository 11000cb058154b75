"""The Windows service controller's logic, which runs on any platform: stop-pending progress
with wait hints during the drain, the drain deadline, exit statuses, the Event Log handler."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from mqbridge.config import parse_config
from mqbridge.service.controller import (
    EXIT_CONFIG,
    EXIT_NOT_DRAINED,
    RUNNING,
    STOP_PENDING,
    STOPPED,
    EventLogHandler,
    ServiceController,
    configure_service_logging,
    describe_exit,
)
from tests.support.configs import orders_config

CONFIG = orders_config('[bridge]\nshutdown_timeout = "{timeout}"')


def loader(timeout: str = "30s") -> Any:
    return lambda path: parse_config(CONFIG.format(timeout=timeout), path)


class Recorder:
    def __init__(self) -> None:
        self.reports: list[tuple[float, str, int]] = []

    def __call__(self, state: str, hint: int) -> None:
        self.reports.append((time.monotonic(), state, hint))

    @property
    def states(self) -> list[str]:
        return [state for _t, state, _h in self.reports]


def draining_run(drain: float) -> Any:
    """A runner shaped like run_bridge: runs until its stop event, then drains for `drain` s."""
    calls: dict[str, Any] = {}

    def run(config: Any, *, stop_event: threading.Event, reload_event: threading.Event) -> int:
        calls["config"], calls["reload_event"] = config, reload_event
        stop_event.wait()
        time.sleep(drain)  # the drain being simulated: the controller must keep reporting meanwhile
        return 0

    run.calls = calls  # type: ignore[attr-defined]
    return run


def start(controller: ServiceController) -> tuple[threading.Thread, list[int]]:
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(controller.run()), daemon=True)
    thread.start()
    return thread, result


def test_stop_reports_progress_until_the_drain_ends() -> None:
    report = Recorder()
    controller = ServiceController("/etc/b.toml", report, run=draining_run(1.0), load=loader(),
                                   progress_every=0.2)
    thread, result = start(controller)
    deadline = time.monotonic() + 10
    while RUNNING not in report.states and time.monotonic() < deadline:
        time.sleep(0.01)
    assert report.states == [RUNNING]

    controller.request_stop()
    thread.join(10)

    assert result == [0]
    assert report.states[0] == RUNNING and report.states[-1] == STOPPED
    pending = [(t, h) for t, s, h in report.reports if s == STOP_PENDING]
    assert len(pending) >= 4, report.states  # 1 s of drain, reported every 0.2 s
    assert all(h >= 400 for _t, h in pending)  # a wait hint longer than the reporting period
    assert all(b[0] - a[0] < a[1] / 1000 for a, b in zip(pending, pending[1:], strict=False))


def test_drain_past_its_deadline_stops_anyway_with_not_drained() -> None:
    report = Recorder()
    controller = ServiceController("/etc/b.toml", report, run=draining_run(60), load=loader("1s"),
                                   progress_every=0.2)
    controller.request_stop()
    # shutdown_timeout 1 s plus the margin: patch the margin down for the test's sake
    import mqbridge.service.controller as module

    margin, module.STOP_MARGIN = module.STOP_MARGIN, 0.5
    try:
        start_time = time.monotonic()
        assert controller.run() == EXIT_NOT_DRAINED
        assert time.monotonic() - start_time < 5
    finally:
        module.STOP_MARGIN = margin
    assert report.states[-1] == STOPPED


def test_exit_statuses() -> None:
    def config_error(path: str) -> Any:
        from mqbridge.errors import ConfigError

        raise ConfigError(f"{path}: collector.memroy: unknown key")

    report = Recorder()
    assert ServiceController("/etc/b.toml", report, load=config_error).run() == EXIT_CONFIG
    assert report.states == []  # never reported RUNNING: the service manager sees a failed start

    def failing(config: Any, **_kwargs: Any) -> int:
        raise RuntimeError("spark is gone")

    controller = ServiceController("/etc/b.toml", Recorder(), run=failing, load=loader(), progress_every=0.1)
    assert controller.run() == EXIT_NOT_DRAINED
    assert isinstance(controller.error, RuntimeError)
    assert "committed" in describe_exit(0) and "configuration" in describe_exit(2)


def test_reload_request_reaches_the_runner() -> None:
    run = draining_run(0)
    controller = ServiceController("/etc/b.toml", Recorder(), run=run, load=loader(), progress_every=0.1)
    thread, _result = start(controller)
    deadline = time.monotonic() + 10
    while "reload_event" not in run.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    controller.request_reload()
    assert run.calls["reload_event"].is_set()
    controller.request_stop()
    thread.join(10)
    assert Path(str(run.calls["config"].path)) == Path("/etc/b.toml")


def test_event_log_handler_routes_by_level() -> None:
    warnings: list[str] = []
    errors: list[str] = []
    logger = logging.getLogger("test.service.eventlog")
    logger.propagate = False
    handler = EventLogHandler(warnings.append, errors.append)
    logger.addHandler(handler)
    try:
        logger.info("not this one")
        logger.warning("slow %s", "broker")
        logger.error("lost")
    finally:
        logger.removeHandler(handler)
    assert [w.endswith("slow broker") for w in warnings] == [True]
    assert [e.endswith("lost") for e in errors] == [True]


def test_service_logging_writes_the_configured_file_and_redacts_the_event_log_too(tmp_path: Path) -> None:
    """What the Windows service does once its configuration is read: a handler the service host
    added before (the Event Log) no longer keeps the configured file from being used, and it
    redacts the configuration's secrets like the file does."""
    log_file = tmp_path / "logs" / "bridge.log"
    config = parse_config(orders_config(f"""[logging]
file = "{log_file}"
[spark]
remote = "sc://spark.example:15002/;token=tok-very-secret"
"""))
    warnings: list[str] = []
    event_log = EventLogHandler(warnings.append, warnings.append)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    root.addHandler(event_log)  # as SvcDoRun does before the configuration is read
    try:
        configure_service_logging(config, event_log)
        logging.getLogger("test.service.redaction").warning("connecting with tok-very-secret")
        configure_service_logging(config, event_log)  # a reload: one filter, one handler each
        assert root.handlers.count(event_log) == 1 and len(event_log.filters) == 1
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            if handler is not event_log:
                handler.close()
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
    assert [w.endswith("connecting with ***") for w in warnings] == [True]
    written = log_file.read_text()
    assert "connecting with ***" in written and "tok-very-secret" not in written
