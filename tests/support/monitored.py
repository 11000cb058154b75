"""`mqbridge run` processes watched while they run: the monitoring endpoint on a free port, a sink's
state read from /status, the process started in the background and finished with its output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.exactly_once import OutputReader, free_port
from tests.support.http import get
from tests.support.processes import mqbridge, stomp_bridge


def outage_config(tmp_path: Path, queue: str, *, spark: str = "", name: str = "bridge.toml",
                  **options: Any) -> tuple[Path, str]:
    """`stomp_bridge(queue, **options)` with the monitoring endpoint on a free port, Spark probed at
    least every 2 s and `spark` added to `[spark]`, written to `<tmp_path>/<name>`; its path and the
    endpoint's URL."""
    port = free_port()
    toml = (stomp_bridge(queue, **options).set("monitoring", listen=f"127.0.0.1:{port}")
            .set("spark", probe_interval_max="2s").add("spark", spark))
    return toml.write(tmp_path / name), f"http://127.0.0.1:{port}"


def sink(url: str, name: str = "orders") -> dict[str, Any]:
    """Sink `name`'s state in the bridge's /status at `url` ({} while nothing answers)."""
    code, text = get(url + "/status")
    return json.loads(text).get("sinks", {}).get(name, {}) if code == 200 else {}


def listener_phases(url: str) -> list[str]:
    """What each listener thread of the bridge at `url` is doing ("receiving", "paused"...), from
    /status ([] while nothing answers)."""
    code, text = get(url + "/status")
    return [entry["phase"] for entry in json.loads(text)["listeners"]] if code == 200 else []


def start(config: Path, *, failpoint: str | None = None, idle: str = "3s") -> OutputReader:
    """`mqbridge run --until-idle` in the background, its output collected."""
    return OutputReader(mqbridge("run", "--config", str(config), "--until-idle", idle, failpoint=failpoint))


@contextmanager
def running(config: Path, *, env_extra: dict[str, str] | None = None) -> Iterator[OutputReader]:
    """`mqbridge run` (no end of its own) in the background while the block runs; SIGTERM after."""
    run = OutputReader(mqbridge("run", "--config", str(config), env_extra=env_extra))
    try:
        yield run
    finally:
        run.terminate()


def finish(run: OutputReader, timeout: float = 300) -> str:
    """Its output, once it ended with exit status 0 within `timeout` seconds."""
    code = run.wait(timeout)
    if code is None:
        run.terminate()
        raise AssertionError(f"the bridge did not end within {timeout:.0f}s:\n{run.text()[-5000:]}")
    assert code == 0, run.text()[-5000:]
    return run.text()
