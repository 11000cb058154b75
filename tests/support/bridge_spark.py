"""The Spark session a bridge of a given configuration starts, in a child process of its own: the
settings of `mqbridge.app._spark_section` (Delta, the S3A jars and the object-store client settings
under `[spark] conf`), started by `create_spark_session` with the configuration's `DriverSecrets`, as
`mqbridge run` starts it (`SparkSessions`). Its appends return what the bridge would say of a
failure (`object_store_outage` of the live exception) rather than raise.

A child because the extensions and jars of a session are fixed when its JVM starts, and this
process's one JVM is the plain `spark` fixture's (see `tests.support.object_stores.DeltaSpark`).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

_SESSION: Any = None
_CONF: dict[str, str] = {}


def _start(config_path: str, scratch: str) -> None:
    global _SESSION, _CONF
    from mqbridge.app import _spark_section
    from mqbridge.config import load_config
    from mqbridge.landing.driver_secrets import DriverSecrets
    from mqbridge.landing.session import create_spark_session

    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"  # never the EC2 metadata service (outside this machine)
    config = load_config(config_path)
    section = _spark_section(config)
    _CONF = dict(config.spark.conf)
    _SESSION = create_spark_session(master="local[2]", app_name="mqbridge-object-store-errors", conf={
        **section.conf, "spark.sql.warehouse.dir": f"{scratch}/warehouse", "spark.local.dir": f"{scratch}/local",
        "spark.sql.shuffle.partitions": "2"}, secrets=DriverSecrets.of(config))


def _append(table: str, options: Mapping[str, str]) -> dict[str, Any]:
    """One row appended to the Delta table at `table` with `options` set on the session first
    (Hadoop's `fs.*` keys reach the file systems created after); on failure the bridge's reason."""
    from mqbridge.config.warehouse import parse_warehouse
    from mqbridge.landing.object_stores import error_chain, object_store_outage

    started = time.monotonic()
    try:
        for key, value in options.items():
            _SESSION.conf.set(key, value)
        frame = _SESSION.createDataFrame([(1, "row 1")], "id LONG, body STRING")
        frame.write.format("delta").mode("append").save(table)
    except Exception as exc:
        conf = {**_CONF, **{f"spark.hadoop.{k}": v for k, v in options.items()}}
        return {"ok": False, "seconds": time.monotonic() - started, "chain": error_chain(exc),
                "reason": object_store_outage(exc, parse_warehouse(table.rpartition("/")[0]), conf)}
    return {"ok": True, "seconds": time.monotonic() - started}


def _setting(key: str) -> str | None:
    value = _SESSION.sparkContext.getConf().get(key)
    return None if value is None else str(value)


def _driver_pid() -> int:
    return int(_SESSION.sparkContext._gateway.proc.pid)


def _stop() -> None:
    _SESSION.stop()


class BridgeSpark:
    """The session a bridge of the configuration file `config_path` starts, in a child process."""

    def __init__(self, config_path: Path, scratch: Path) -> None:
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_start, initargs=(str(config_path), str(scratch)))

    def _call(self, fn: Any, *args: Any, timeout: float = 300) -> Any:
        return self._pool.submit(fn, *args).result(timeout=timeout)

    def append(self, table: str, options: Mapping[str, str] | None = None, timeout: float = 300) -> dict[str, Any]:
        """{"ok", "seconds"} and, failed, "chain" (`error_chain`) and "reason" (`object_store_outage`)."""
        outcome: dict[str, Any] = self._call(_append, table, dict(options or {}), timeout=timeout)
        return outcome

    def setting(self, key: str) -> str | None:
        """A setting the driver started with (not a secret one: it would cross the process boundary)."""
        value: str | None = self._call(_setting, key)
        return value

    def driver_pid(self) -> int:
        """The pid of the child's driver JVM."""
        pid: int = self._call(_driver_pid)
        return pid

    def close(self) -> None:
        """Stop the child's Spark (its JVM exits with it) and the child."""
        try:
            self._call(_stop, timeout=120)
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
