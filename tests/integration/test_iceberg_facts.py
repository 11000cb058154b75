"""A fact the Iceberg landing rests on (`mqbridge.landing.iceberg`), checked with a bare pyspark child (no
bridge, no jars: the driver's gateway, not Iceberg, is what is measured): a local driver JVM exits on its
own once its Python parent is killed with SIGKILL (PythonGatewayServer reads its stdin until EOF), so that
`mqbridge ledger --abandon`, which reads the table without Spark and cannot fence a dead bridge's bulk,
can wait for that bridge's driver before it decides; the time it takes is printed. And the wait
(`iceberg.await_driver_gone`) returns only once that JVM is gone. (Recovery with Spark fences the bulk
instead: tests/integration/test_iceberg_wap.py; that an append's `snapshot-property.*` options come back
in its snapshot's summary is checked on the tables of tests/integration/test_iceberg_read.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from mqbridge.config.iceberg import IcebergCatalog, IcebergSection
from mqbridge.landing import iceberg

pytestmark = pytest.mark.integration


def _child(tmp_path: Path, body: str) -> subprocess.Popen[str]:
    """A Python child that starts a bare local Spark driver, prints its JVM's pid and runs `body`."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "1").getOrCreate())
        print("jvm", spark._jvm.java.lang.ProcessHandle.current().pid(), flush=True)
    """) + textwrap.dedent(body))
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path)


def _line(proc: subprocess.Popen[str], prefix: str, timeout: float = 120) -> str:
    """The child's first output line starting with `prefix` (skipping others); fails after `timeout`."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line.strip()
        if not line and proc.poll() is not None:
            break
    pytest.fail(f"the child never printed a line starting with {prefix!r} within {timeout}s (exit {proc.poll()})")


def test_a_driver_jvm_exits_once_its_python_parent_is_killed_and_the_bridges_wait_sees_it_gone(
        tmp_path: Path) -> None:
    # Given a Python process whose Spark driver JVM runs (a job done, then idle), recorded as the driver of
    # a bridge process `owner` (`iceberg.record_process`, as a bridge records its own before its first append)
    proc = _child(tmp_path, """
        spark.range(10).count()
        print("ready", flush=True)
        time.sleep(3600)
    """)
    jvm = psutil.Process(int(_line(proc, "jvm").split()[1]))
    _line(proc, "ready")
    catalog = IcebergCatalog(IcebergSection(), tmp_path / "state", tmp_path / "warehouse")
    owner = f"host:{proc.pid}:1.00"
    iceberg.record_process(catalog, owner, jvm.pid)
    assert iceberg.driver_alive(catalog, owner)
    # When the Python parent is killed with SIGKILL (no clean-up of its own) and recovery waits for the
    # owner's driver (polling up to 60 s)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    killed = time.monotonic()
    try:
        iceberg.await_driver_gone(catalog, owner, timeout=60)
    finally:
        if jvm.is_running() and jvm.status() != psutil.STATUS_ZOMBIE:
            jvm.kill()
    # Then the JVM has exited by itself (its stdin's EOF), as psutil sees it, by the time the wait returns
    assert not jvm.is_running() or jvm.status() == psutil.STATUS_ZOMBIE
    assert not iceberg.driver_alive(catalog, owner)
    print(f"driver JVM gone {time.monotonic() - killed:.2f}s after its Python parent's SIGKILL")
