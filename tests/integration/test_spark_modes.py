"""The same exactly-once run in each way Spark can be reached: a Spark Connect server and a
standalone cluster, each started from pyspark's own scripts (local mode is the default of every
other integration test). `mqbridge run` is killed with SIGKILL after publishing its first bulk,
then started again: every message lands exactly once, byte-identical, nothing is left behind.
Both again landing into a Delta table (the Connect server started with Delta Lake, the cluster getting
its jars from the bridge's driver), the bulk killed before and after its commit. And the Connect
server stopped and started again under load: the breaker opens, the bridge
takes a new session, every message lands once, none is moved, and the run ends by itself. With the
warehouse on the object store (S3Proxy): the cluster lands into a Delta table there with what the
bridge's driver hands its executors (the S3A jars, the fs.s3a settings), and a Connect server started
without the S3A jars is an outage of the sink that names them and loses nothing."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqbridge.landing.delta import session_conf
from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import delta_rows
from tests.support.exactly_once import account, bodies
from tests.support.http import get
from tests.support.monitored import finish, listener_phases, outage_config, sink, start
from tests.support.object_stores import S3Server
from tests.support.processes import (
    ROOT,
    landed,
    leftovers,
    run_until_idle,
    run_until_killed,
    run_until_said,
    stomp_bridge,
    stomp_config,
)
from tests.support.spark_servers import SparkConnectServer, SparkStandalone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkConnectServer]:
    # Started with Delta Lake as its operator would (docs/spark-and-tables.md): its jars and extension.
    server = SparkConnectServer(tmp_path_factory.mktemp("spark-connect"), conf=session_conf(ROOT / "jars", {}))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    cluster = SparkStandalone(tmp_path_factory.mktemp("spark-standalone"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _kill_then_finish(tmp_path: Path, spark: Any, amq: AmqClient, spark_setting: str, tag: str,
                      env_extra: dict[str, str] | None = None) -> str:
    q = unique_queue(f"modes-{tag}")
    sent = bodies(600, tag)  # more than the first bulk (killed after its publish): the second run lands the rest
    amq.put_many(q, sent)
    config = stomp_config(tmp_path, q, spark=spark_setting)
    run_until_killed(config, "after_publish", env_extra=env_extra)
    out = run_until_idle(config, env_extra=env_extra)
    table = tmp_path / "landing" / "orders"
    result = account(sent, landed(spark, table))
    assert result.clean, f"{result}\n{out[-3000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert leftovers(table) == []
    return out


def test_spark_connect_lands_exactly_once_across_a_kill(tmp_path: Path, spark: Any, amq: AmqClient,
                                                         connect_server: SparkConnectServer) -> None:
    # JAVA_HOME pointing nowhere: the bridge itself must not need a JVM with Spark Connect
    out = _kill_then_finish(tmp_path, spark, amq, f'remote = "{connect_server.url}"', "connect",
                            env_extra={"JAVA_HOME": str(tmp_path / "no-java-here")})
    assert "ledger recovery: 1 bulks rolled forward" in out, out[-3000:]


def test_standalone_cluster_lands_exactly_once_across_a_kill(tmp_path: Path, spark: Any, amq: AmqClient,
                                                             standalone: SparkStandalone) -> None:
    # writer "spark": the cluster's executors write the staged files, the bridge publishes them
    out = _kill_then_finish(tmp_path, spark, amq, f'master = "{standalone.master_url}"\nwriter = "spark"', "cluster")
    assert "ledger recovery: 1 bulks rolled forward" in out, out[-3000:]
    # both runs were applications of the cluster, their tasks run by its worker
    assert len(list((standalone.base / "work").glob("app-*"))) == 2



@pytest.mark.parametrize("failpoint", ["after_prepare", "after_publish"])
def test_spark_connect_lands_into_a_delta_table_exactly_once_across_a_kill(
        tmp_path: Path, amq: AmqClient, connect_server: SparkConnectServer, failpoint: str) -> None:
    # Given a bridge without a JVM of its own landing into a Delta table through the Connect server
    q = unique_queue(f"modes-delta-{failpoint}")
    sent = bodies(600, f"cd-{failpoint}")
    amq.put_many(q, sent)
    config = stomp_config(tmp_path, q, spark=f'remote = "{connect_server.url}"\ntable_format = "delta"')
    env = {"JAVA_HOME": str(tmp_path / "no-java-here")}
    # When it is killed at the failpoint and started again
    run_until_killed(config, failpoint, env_extra=env)
    out = run_until_idle(config, env_extra=env)
    # Then every message is in the Delta table once (read by delta-rs), the table asked about the dead bulk
    result = account(sent, delta_rows(tmp_path / "landing" / "orders"))
    assert result.clean, f"{result}\n{out[-3000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    decided = "fenced and rolled back" if failpoint == "after_prepare" else "recorded published"
    assert decided in out, out[-3000:]


def test_a_standalone_cluster_lands_into_a_delta_table_exactly_once_across_a_kill(
        tmp_path: Path, amq: AmqClient, standalone: SparkStandalone) -> None:
    # Given a bridge whose driver runs its jobs on the cluster's executors, landing into a Delta table
    # (the driver hands the Delta jars to the executors)
    q = unique_queue("modes-delta-cluster")
    sent = bodies(600, "dc")
    amq.put_many(q, sent)
    config = stomp_config(tmp_path, q, spark=f'master = "{standalone.master_url}"\nwriter = "spark"\n'
                                             f'table_format = "delta"\njars_dir = "{ROOT / "jars"}"')
    run_until_killed(config, "after_publish")
    out = run_until_idle(config)
    result = account(sent, delta_rows(tmp_path / "landing" / "orders"))
    assert result.clean, f"{result}\n{out[-3000:]}"
    assert "recorded published" in out, out[-3000:]


def test_a_spark_connect_server_restarted_under_load_loses_nothing(tmp_path: Path, spark: Any, amq: AmqClient,
                                                                   connect_server: SparkConnectServer) -> None:
    # Given 6,000 messages, the default backout threshold, and a bridge on the Connect server
    q = unique_queue("modes-restart")
    sent = bodies(6000, "cr")
    amq.put_many(q, sent)
    config, url = outage_config(tmp_path, q, batch=100, spark=f'remote = "{connect_server.url}"')
    run = start(config)
    try:
        # When the server is stopped (spark-daemon.sh stop) once the first bulks are committed
        wait_until(lambda: committed(url) >= 500, 180, "the first 500 commits")
        connect_server.stop()
        # ... the sink's breaker opens, and every listener settles the unit it held and pauses (from
        # then on, until the breaker closes, nothing is received, so nothing can be moved)
        wait_until(lambda: sink(url).get("available") is False, 120, "the breaker of sink orders to open")
        wait_until(lambda: sink(url).get("available") is False and set(listener_phases(url)) == {"paused"}, 180,
                   "every listener to settle its unit and pause while the server is down")
        assert amq.depth(q + ".backout") == 0
        # ... and started again (a new server: it knows none of the bridge's sessions)
        connect_server.start()
        out = finish(run, timeout=300)
    finally:
        if run.wait(0) is None:
            run.terminate()
        print(run.text()[-8000:])  # shown if the test fails
        if not connect_server_running(connect_server):
            connect_server.start()  # for the module's other tests
    # Then the bridge ended by itself, every message landed exactly once, none was moved
    assert "probe write succeeded; available again" in out
    accounting = account(sent, landed(spark, tmp_path / "landing" / "orders"))
    assert accounting.clean, f"{accounting}\n{out[-3000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert leftovers(tmp_path / "landing" / "orders") == []


def s3_delta_config(tmp_path: Path, queue: str, s3: S3Server, bucket: str, spark: str) -> Path:
    """A bridge landing `queue` with Spark (`spark`: where it runs) into the Delta table `orders` under
    s3a://<bucket>/wh, with the server's S3A settings."""
    return (stomp_bridge(queue, spark=f'{spark}\nwriter = "spark"\ntable_format = "delta"')
            .set("spark", warehouse=f"s3a://{bucket}/wh").set("spark.conf", **s3.spark_conf())
            .write(tmp_path / "bridge.toml"))


def test_a_standalone_cluster_lands_into_a_delta_table_on_s3_with_the_drivers_jars_and_settings(
        tmp_path: Path, amq: AmqClient, standalone: SparkStandalone, s3_server: S3Server) -> None:
    # Given a bridge whose driver runs its jobs on the cluster's executors (started without any jar of
    # the bridge's), landing into a Delta table on the object store: the driver hands the executors the
    # Delta and S3A jars (spark.jars) and its fs.s3a settings (spark.hadoop.*)
    q = unique_queue("modes-cluster-s3")
    sent = bodies(200, "cls3")
    amq.put_many(q, sent)
    bucket = s3_server.new_bucket("cluster")
    config = s3_delta_config(tmp_path, q, s3_server, bucket,
                             f'master = "{standalone.master_url}"\njars_dir = "{ROOT / "jars"}"')
    # When it runs until its queue is idle
    out = run_until_idle(config)
    # Then every message is in the table once (read by delta-rs over the S3 API), none moved
    result = account(sent, s3_server.delta_bodies(bucket))
    assert result.clean, f"{result}\n{out[-3000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert s3_server.secret_key not in out


def test_spark_connect_without_the_s3a_jars_is_an_outage_naming_them_that_loses_nothing(
        tmp_path: Path, amq: AmqClient, connect_server: SparkConnectServer, s3_server: S3Server) -> None:
    # Given a Connect server started with Delta Lake but not Hadoop's S3A connector (the bridge cannot
    # give a server jars or Hadoop settings), and a bridge on it whose warehouse is on the object store
    q = unique_queue("modes-connect-s3")
    sent = bodies(30, "cs3")
    amq.put_many(q, sent)
    bucket = s3_server.new_bucket("connect")
    config = s3_delta_config(tmp_path, q, s3_server, bucket, f'remote = "{connect_server.url}"')
    # When it runs: it says what the server lacks and how to start it, within a bounded time
    out = run_until_said(config, "S3A connector is not on its class path", tmp_path / "bridge.log", 180,
                         env_extra={"JAVA_HOME": str(tmp_path / "no-java-here")})
    # Then the reason names the jars' command and where the server's settings are documented; every
    # message is still on its queue (an outage, never poison: nothing on the backout queue); no secret
    assert "`mqbridge jars --config <your configuration file> s3`" in out, out[-4000:]
    assert "a Spark Connect server, or a cluster's driver and executors, must be started with those jars" in out
    with AmqClient() as fresh:  # (a new connection: the shared broker may have restarted meanwhile)
        assert fresh.depth(q) == len(sent) and fresh.depth(q + ".backout") == 0
    assert s3_server.secret_key not in out


def committed(url: str) -> float:
    _, text = get(url + "/metrics")
    return sum(float(v) for v in re.findall(r"^mqbridge_messages_committed_total\{[^}]*\} (\S+)", text, re.M))


def connect_server_running(server: SparkConnectServer) -> bool:
    try:
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        return True
    except OSError:
        return False
