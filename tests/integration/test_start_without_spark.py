"""The start of `mqbridge run` on the real parts (the shared ActiveMQ, local Spark): the listeners do not
wait for the Spark driver JVM, and a bridge that needs none starts none (`mqbridge.landing.warmup`)."""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import read_table
from tests.support.processes import mqbridge, stomp_config

pytestmark = pytest.mark.integration


def run_watching_for_a_jvm(config: Path) -> tuple[int, str, bool]:
    """`mqbridge run --until-idle 2s`: its exit status, its output, and whether a `java` child ever ran."""
    proc = mqbridge("run", "--config", str(config), "--until-idle", "2s")
    seen = threading.Event()

    def watch() -> None:
        parent = psutil.Process(proc.pid)
        while proc.poll() is None and not seen.is_set():
            try:
                if any("java" in child.name() for child in parent.children(recursive=True)):
                    seen.set()
            except psutil.Error:
                pass
            seen.wait(0.1)

    watcher = threading.Thread(target=watch, name="jvm-watch", daemon=True)
    watcher.start()
    out, _ = proc.communicate(timeout=300)
    watcher.join(5)
    return proc.returncode, out, seen.is_set()


def landed_once(spark: Any, table: Path, bodies: list[bytes]) -> bool:
    landed = collections.Counter(bytes(r.body) for r in read_table(spark, table))
    return set(landed) == set(bodies) and all(n == 1 for n in landed.values())


def test_a_bridge_whose_bulks_pyarrow_writes_lands_everything_without_a_jvm(tmp_path: Path, spark: Any,
                                                                             amq: AmqClient) -> None:
    # Given 300 messages and a bridge with writer "auto" on a raw type (the test preset)
    q = unique_queue("nojvm")
    bodies = [f"nj-{i:04d}".encode() * 10 for i in range(300)]
    amq.put_many(q, bodies)
    # When it runs until idle
    code, out, jvm = run_watching_for_a_jvm(stomp_config(tmp_path, q))
    # Then everything landed once and was committed, and no Spark driver JVM ever ran
    assert code == 0, out[-4000:]
    assert not jvm and "SparkSession started" not in out, out[-4000:]
    assert landed_once(spark, tmp_path / "landing" / "orders", bodies)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0


def test_with_spark_writing_the_listeners_subscribe_before_the_session_is_up(tmp_path: Path, spark: Any,
                                                                               amq: AmqClient) -> None:
    # Given 300 messages and a bridge whose bulks Spark writes
    q = unique_queue("warmup")
    bodies = [f"wu-{i:04d}".encode() * 10 for i in range(300)]
    amq.put_many(q, bodies)
    config = stomp_config(tmp_path, q, spark='master = "local[2]"\nwriter = "spark"')
    # When it runs until idle
    code, out, jvm = run_watching_for_a_jvm(config)
    # Then its listeners subscribed before its Spark session was up, and everything landed once
    assert code == 0, out[-4000:]
    assert jvm and "SparkSession started" in out, out[-4000:]
    assert out.index("consuming ") < out.index("SparkSession started"), out[-4000:]
    assert landed_once(spark, tmp_path / "landing" / "orders", bodies)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
