"""Helpers for end-to-end tests: build a bridge from TOML text, run it in a thread, read back
what landed."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mqbridge.config import BridgeConfig
from mqbridge.supervision.supervisor import Bridge
from tests.support.configs import TAIL, BridgeToml


def amq_bridge(tmp_path: Path, body: str = "", *, port: int = 61613) -> BridgeToml:
    """A bridge in this process on the STOMP broker at 127.0.0.1:`port` landing into local Spark
    under `<tmp_path>/landing`, with test-friendly defaults; `body` adds types, sources and
    listeners as TOML text, in which `{port}` and `{warehouse}` are filled in."""
    warehouse = tmp_path / "landing"
    return BridgeToml({
        "bridge": {"name": "test", "control_interval": "500ms", "shutdown_timeout": "60s", "plugin_dirs": []},
        "monitoring": {"listen": ""},
        "spark": {"master": "local[2]", "warehouse": warehouse, "writer": "auto"},  # as in process_bridge
        "collector": {"memory": "64MB", "max_bulks": 10, "workers": 2},
        # A 2 s STOMP heartbeat times out when the machine is busy (Spark, other benchmarks); the
        # lost connection redelivers a landed unit of work: a duplicate that is not the test's doing.
        "sources.amq": {"kind": "stomp", "host": "127.0.0.1", "port": port, "heartbeat": "10s",
                        "connect_timeout": "3s"},
    }).add(TAIL, body.replace("{port}", str(port)).replace("{warehouse}", str(warehouse)))


def make_config(tmp_path: Path, body: str, *, port: int = 61613, listen: str = "",
                bridge: Mapping[str, Any] | None = None, source: Mapping[str, Any] | None = None,
                tables: Mapping[str, Mapping[str, Any]] | None = None) -> BridgeConfig:
    """`amq_bridge(tmp_path, body, port=port)` written to `<tmp_path>/bridge.toml` and loaded, with
    the monitoring endpoint on `listen`, these keys set in `[bridge]` and `[sources.amq]`, and
    these `tables` (by dotted name, e.g. "sources.qm")."""
    toml = (amq_bridge(tmp_path, body, port=port).set("monitoring", listen=listen)
            .set("bridge", **(bridge or {})).set("sources.amq", **(source or {})))
    for name, keys in (tables or {}).items():
        toml = toml.set(name, **keys)
    return toml.parse(toml.write(tmp_path / "bridge.toml"))


class RunningBridge:
    """A bridge running `run()` in a background thread."""

    def __init__(self, bridge: Bridge, until_idle: float | None = None) -> None:
        self.bridge = bridge
        self.exit_code: int | None = None
        bridge.start()
        self.thread = threading.Thread(target=self._run, args=(until_idle,), name="test-bridge-run", daemon=True)
        self.thread.start()

    def _run(self, until_idle: float | None) -> None:
        self.exit_code = self.bridge.run(until_idle=until_idle)

    def wait(self, timeout: float = 180.0) -> int:
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.bridge.stop()
            self.thread.join(60)
            raise TimeoutError("bridge did not finish in time")
        assert self.exit_code is not None
        return self.exit_code

    def stop(self) -> int:
        self.bridge.stop()
        return self.wait()


def run_until_idle(bridge: Bridge, idle: float = 1.0, timeout: float = 180.0) -> int:
    return RunningBridge(bridge, until_idle=idle).wait(timeout)


def read_table(spark: Any, path: Path) -> list[Any]:
    if not path.exists():
        return []
    return list(spark.read.parquet(str(path)).collect())


def listener_toml(queue: str, type_: str, *, source: str = "amq", threads: int | None = 1, batch: int = 200,
                  wait: str = "200ms", threshold: int | None = 3, backout: str | None = "",
                  preprocessors: str | None = None, extra: str = "") -> str:
    """One `[[listeners]]` table. `backout=""` means `<queue>.backout`; None leaves it out (and
    `threshold=None` leaves the threshold out), so an MQ source uses the queue's BOTHRESH/BOQNAME;
    `threads=None` leaves the thread count out: the bridge chooses it (adaptive)."""
    lines = [f'source = "{source}"', f'queue = "{queue}"'] + ([f"threads = {threads}"] if threads else []) + [
             f"batch = {batch}", f'wait = "{wait}"', f'message_type = "{type_}"']
    if threshold is not None:
        lines.append(f"backout_threshold = {threshold}")
    if backout is not None:
        lines.append(f'backout_queue = "{backout or queue + ".backout"}"')
    if preprocessors is not None:
        lines.append(f"preprocessors = {preprocessors}")
    if extra:
        lines.append(extra)
    return "\n[[listeners]]\n" + "\n".join(lines) + "\n"
