"""Fixtures of the integration tests: a bridge with its monitoring server (the real local Spark,
`spark`, is tests/conftest.py's), the S3-compatible server and the HDFS of the tests of warehouses
on object stores (tests/support/object_stores.py), the one Spark driver with Delta Lake that
checks what Spark itself does with Delta tables, and the session's bridge hosts (network namespaces,
tests/support/hosts.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import build_app
from mqbridge.monitoring.server import MonitoringServer
from mqbridge.supervision.supervisor import Bridge
from tests.support import class_archive as shared_archive
from tests.support.bridge import RunningBridge
from tests.support.hosts import bridge_hosts  # noqa: F401 -- the session's bridge hosts (network namespaces)
from tests.support.object_stores import DeltaSpark, S3Server, delta_spark_conf, running_hdfs_cluster, running_s3_server
from tests.support.processes import ROOT


@pytest.fixture
def monitored(tmp_path: Path, spark: Any) -> Iterator[Any]:
    """Start a bridge (plugins attached, as `run_bridge` builds it) with its monitoring server
    on a free loopback port; stop both at the end."""
    started: list[tuple[RunningBridge, MonitoringServer]] = []

    def start(cfg: Any) -> tuple[Bridge, MonitoringServer]:
        bridge = build_app(cfg, spark=spark).bridge  # [monitoring] listen = "": no server of its own
        monitor = MonitoringServer(bridge, "127.0.0.1", 0, session=lambda: spark)
        bridge.observers.append(monitor)
        running = RunningBridge(bridge)
        monitor.start()
        started.append((running, monitor))
        return bridge, monitor

    yield start
    for running, monitor in started:
        monitor.stop()
        if running.thread.is_alive():
            running.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """S3Proxy on http://127.0.0.1:9000 (scripts/s3.sh), started if not running (and then stopped at
    the end): its endpoint, access key and secret; `s3_server.new_bucket()` gives a test a fresh bucket."""
    yield from running_s3_server()


@pytest.fixture(scope="session")
def hdfs_cluster() -> Iterator[str]:
    """`hdfs://127.0.0.1:9820` of Hadoop's mini cluster (scripts/hdfs.sh), started if not running
    (and then stopped at the end)."""
    yield from running_hdfs_cluster()


@pytest.fixture(scope="session")
def delta_spark(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeltaSpark]:
    """A Spark driver with Delta Lake and S3A (pointed at `s3_server`, its secret passed as a bridge
    passes it), in a child process (`DeltaSpark`), shared by every test that must ask Spark itself
    about a Delta table (local, s3a:// or hdfs://): the test process's own `spark` has no Delta, and
    each start of a JVM with the Delta jars costs tens of seconds here. It maps the tests'
    class-data archive once that is made; it starts at its first call."""
    shared_archive.start(ROOT)
    driver = DeltaSpark(delta_spark_conf(s3_server), tmp_path_factory.mktemp("delta-spark"),
                        secrets=frozenset({s3_server.secret_key}), java_options=shared_archive.java_options())
    yield driver
    driver.close()
