"""Faults of what bridges on several hosts share (issue 51): two `mqbridge run` processes on one queue
with one PostgreSQL ledger, while the ledger's server restarts, while the warehouse's S3-compatible
server restarts, and with one bridge's clock 10 minutes ahead. Each counted like a total-queue
checker: every message in the table once (lost, duplicated, unexpected: all 0), nothing moved to the
backout queue, the queue empty. A restarted server is an outage, never poison; a clock is never what a
lease is judged by (the ledger judges heartbeats by the database server's clock)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest

from mqbridge.landing.ledger.postgres import PostgresLedger
from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import DELTA_SPARK, JARS
from tests.support.exactly_once import RABBIT_SOURCE, OutputReader, Rabbit, account, bodies, published_files
from tests.support.object_stores import S3Server, private_s3_server
from tests.support.postgres import PostgresServer, postgres_server
from tests.support.processes import ROOT, landed, leftovers, mqbridge, stomp_bridge, stomp_config
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

#: How a bridge of these tests says that a sink is down (`mqbridge.bulks.breaker`): an outage.
OUTAGE = "unavailable"
#: A bridge's periodic counters once it has committed messages at the source (`mqbridge.supervisor`).
_COMMITTED = re.compile(r"committed=[1-9]")
#: What a bridge says once its Spark driver is up (`mqbridge.landing.session`).
_STARTED = "Spark: SparkSession started"


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


def _ledger(pg: PostgresServer, schema: str) -> str:
    """The `[ledger]` table (added after `[bridge]`) of a ledger in `schema` of the test's PostgreSQL, the
    lease left at its default."""
    return f'\n[ledger]\nurl = "{pg.url}"\ndatabase_schema = "{schema}"\n'


def _finish(runs: list[OutputReader], timeout: float, what: str) -> None:
    """Wait for every run (each `--until-idle`) to end with 0; AssertionError naming `what` and the
    end of the output of one that did not."""
    for run in runs:
        code = run.wait(timeout)
        assert code == 0, f"{what}: a bridge ended with {code} (None: still running after {timeout:.0f}s):\n" \
                          f"{run.text()[-5000:]}"


def _stop(runs: list[OutputReader]) -> None:
    """Stop each run still going: SIGTERM, SIGKILL after 60 s."""
    for run in runs:
        if run.wait(0) is None:
            run.terminate()


def test_the_ledgers_postgresql_restarted_under_load_is_an_outage_and_every_message_lands_once(
        tmp_path: Path, spark: Any, amq: AmqClient, pg: PostgresServer) -> None:
    # Given 2,000 messages on one ActiveMQ queue and two bridges landing them through one ledger
    q = unique_queue("shared-pg")
    sent = bodies(2000, "spg")
    amq.put_many(q, sent)
    configs = [stomp_config(tmp_path, q, name=f"b{i}.toml", state_dir=f"state{i}", batch=50,
                            extra_bridge=_ledger(pg, "restart")) for i in range(2)]
    table = tmp_path / "landing" / "orders"
    runs: list[OutputReader] = []
    try:
        for config in configs:
            runs.append(OutputReader(mqbridge("run", "--config", str(config), "--until-idle", "3s")))
            runs[-1].wait_subscribed(threads=2)
        wait_until(lambda: published_files(table) >= 2, 120, "the first bulks of the two bridges to land")
        # When the PostgreSQL server restarts (fast shutdown: every session ended) while both land
        pg.restart()
        before = published_files(table)
        wait_until(lambda: all(OUTAGE in run.text() or run.proc.poll() is not None for run in runs), 60,
                   "both bridges to meet the restarted ledger (or to end)")
        _finish(runs, 240, "after the ledger's restart")
    finally:
        _stop(runs)
    # Then it was an outage to them: each one said so, reconnected and landed on
    outputs = [run.text() for run in runs]
    assert published_files(table) > before, "nothing landed after the restart: it was not under load"
    assert all("ledger postgresql://" in out and OUTAGE in out for out in outputs), outputs[0][-5000:]
    # and every message is in the table once; nothing was moved, nothing is left
    result = account(sent, landed(spark, table))
    assert result.clean, f"{result}\n{outputs[0][-3000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0 and leftovers(table) == []


@pytest.mark.timeout(600)
def test_the_warehouses_s3_server_restarted_under_load_is_an_outage_and_every_message_lands_once(
        tmp_path: Path, rabbitmq: tuple[str, int], pg: PostgresServer) -> None:
    """On RabbitMQ the identity is a header the producer sets (its `message-id` is per delivery:
    docs/guarantees.md), with the defaults otherwise. The S3 server is one of this test's own:
    the shared one on port 9000 is never stopped."""
    for name in ("delta", "s3"):
        if not (JARS / name).is_dir():
            pytest.fail(f"the {name} jars are missing from {JARS / name}: run scripts/jars.sh {name}")
    rabbit = Rabbit(rabbitmq)
    name = f"test.shared-s3.{uuid.uuid4().hex[:8]}"
    q, header = f"/queue/{name}", "x-eo-id"
    sent = bodies(400, "ss3")
    messages = [(body, {header: f"id-{i}"}) for i, body in enumerate(sent)]
    rabbit.put(q, messages[:200])
    with private_s3_server(tmp_path / "s3") as s3proxy:
        # Given two bridges landing one RabbitMQ queue into a Delta table on a private S3-compatible server
        s3 = s3proxy.server
        bucket = s3.new_bucket("restart")
        secret = tmp_path / "s3-secret"
        secret.write_text(s3.secret_key)
        secret.chmod(0o600)
        conf = {**s3.spark_conf(), "spark.hadoop.fs.s3a.secret.key": f"${{FILE:{secret}}}"}
        configs = [stomp_bridge(q, port=rabbitmq[1], broker="rabbitmq", extra_source=RABBIT_SOURCE, batch=50,
                                extra_listener=f'identity = "header:{header}"', spark=DELTA_SPARK,
                                state_dir=f"state{i}", extra_bridge=_ledger(pg, "s3restart"))
                   .set("spark", warehouse=f"s3a://{bucket}/wh").set("spark.conf", **conf)
                   .write(tmp_path / f"b{i}.toml") for i in range(2)]
        runs: list[OutputReader] = []
        try:
            # (run without --until-idle: a bridge that the broker gave nothing while its Spark started
            # would end idle before the fault; they are stopped once every message is in the table)
            for config in configs:
                runs.append(OutputReader(mqbridge("run", "--config", str(config))))
            wait_until(lambda: all(_STARTED in run.text() for run in runs) and any(
                _COMMITTED.search(run.text()) for run in runs) or any(run.proc.poll() is not None for run in runs),
                300, "both bridges' Spark sessions to start and the first messages to land on the S3 server")
            assert all(run.proc.poll() is None for run in runs), runs[0].text()[-5000:] + runs[1].text()[-5000:]
            # When that server stops while they land (the other 200 messages come meanwhile), and starts
            # again (same port, same buckets)
            s3proxy.stop()
            rabbit.put(q, messages[200:])
            wait_until(lambda: all(f"sink orders {OUTAGE}" in run.text() or run.proc.poll() is not None
                                   for run in runs), 120, "both bridges to find the S3 server gone (sink unavailable)")
            s3proxy.start()
            wait_until(lambda: _rows(s3, bucket) >= len(sent) or any(
                run.proc.poll() is not None for run in runs), 300, "the 400 messages to be in the table on S3",
                every=1.0)
            codes = [run.terminate() for run in runs]
        finally:
            _stop(runs)
        assert codes == [0, 0], runs[0].text()[-5000:] + runs[1].text()[-5000:]
        # Then it was an outage to both, never poison: each said so, and every message is in the table
        # once (as delta-rs sees it)
        outputs = [run.text() for run in runs]
        assert all(f"sink orders {OUTAGE}" in out and "available again" in out for out in outputs), \
            outputs[0][-3000:] + outputs[1][-3000:]
        result = account(sent, s3.delta_bodies(bucket))
        assert result.clean, f"{result}\n{outputs[0][-3000:]}\n{outputs[1][-3000:]}"
        # and nothing was moved to the backout queue; the queue is empty
        assert rabbit.depth(q) == 0 and rabbit.depth(f"{q}.backout") == 0


def _value(db: psycopg.Connection[Any], query: LiteralString) -> Any:
    """The one value `query` selects."""
    row = db.execute(query).fetchone()
    assert row is not None, query
    return row[0]


def _rows(s3: S3Server, bucket: str) -> int:
    """The rows of the table on `s3` (delta-rs); 0 while it cannot be read."""
    try:
        return sum(s3.delta_bodies(bucket).values())
    except Exception:  # (delta-rs raises its own errors, and OSError, for a server still starting)
        return 0


def _skewed_on_another_host(host: str, config: Path, offset: str, *args: str) -> subprocess.Popen[str]:
    """`mqbridge run` in a UTS namespace of its own named `host` (to the ledger, a bridge on another
    machine: judged by its heartbeat, never by its pid) whose clock is `offset` ahead (libfaketime,
    `faketime -f`: every process it starts inherits the preload and the offset). The monotonic clock
    is left alone: it means nothing outside the process, and libfaketime's timed waits on it are
    where it is known to hang."""
    env = {k: v for k, v in os.environ.items() if k != "MQBRIDGE_FAILPOINT"}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_HOSTNAME="localhost", FAKETIME_DONT_FAKE_MONOTONIC="1")
    command = ["unshare", "--uts", "sh", "-c", f'hostname {host} && exec "$@"', "sh", "faketime", "-f", offset,
               sys.executable, "-m", "mqbridge", "run", "--config", str(config), *args]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_a_bridge_whose_clock_is_ten_minutes_ahead_judges_no_lease_by_it_and_lands_nothing_twice(
        tmp_path: Path, spark: Any, amq: AmqClient, pg: PostgresServer) -> None:
    """A lease judged by the clock of the bridge that asks would make the bridge 10 minutes ahead take
    every other bridge for dead (their heartbeats 10 minutes old to it) and decide their bulks while
    they publish them; one judged by the bridge that writes the heartbeat would keep a dead bridge
    alive for 10 minutes. The ledger writes and judges heartbeats by the database server's clock."""
    if shutil.which("faketime") is None:
        pytest.fail("faketime is missing: run scripts/test-tools.sh (Debian's faketime package)")
    # Given 40 messages that bridge B (this host, its clock right) reads through a connection the test
    # can cut and holds prepared in the ledger (its claim), and bridge A on another host, 10 min ahead
    q = unique_queue("shared-clock")
    first, more = bodies(40, "sc0"), bodies(200, "sc")
    amq.put_many(q, first)
    ledger = _ledger(pg, "clock")
    proxy = TcpProxy(("127.0.0.1", 61613))
    config_b = stomp_config(tmp_path, q, name="b.toml", state_dir="state-b", threads=1, batch=40, port=proxy.port,
                            extra_bridge=ledger)
    config_a = stomp_config(tmp_path, q, name="a.toml", state_dir="state-a", threads=1, batch=40,
                            extra_bridge=ledger)
    gate = tmp_path / "gate-b"
    table = tmp_path / "landing" / "orders"
    run_b = OutputReader(mqbridge("run", "--config", str(config_b), "--until-idle", "3s",
                                  failpoint=f"holding_prepared:{gate}"))
    runs = [run_b]
    try:
        wait_until(lambda: Path(f"{gate}.reached").exists(), 180, "bridge B to prepare its bulk of the 40 messages")
        runs.append(run_a := OutputReader(_skewed_on_another_host("host-a", config_a, "+10m", "--until-idle", "3s")))
        run_a.wait_subscribed(threads=1)
        # When B's connection is cut, so that the broker gives the 40 to A while B's claim stands
        assert proxy.cut() >= 1
        wait_until(lambda: "which is alive or within its lease" in run_a.text() or "of a process that is gone"
                   in run_a.text() or run_a.proc.poll() is not None, 120,
                   "bridge A to meet B's claim on the 40 (and wait for it, or decide it)")
        # and B publishes its bulk; then 400 more messages come, which both land
        gate.touch()
        amq.put_many(q, more)
        _finish(runs, 240, "with bridge A's clock 10 minutes ahead")
        with psycopg.connect(pg.url, autocommit=True) as db:
            db.execute('SET search_path TO "clock"')
            skew = _value(db, "SELECT MAX(b.prepared_at) - EXTRACT(EPOCH FROM now()) FROM bulks b "
                              "WHERE b.owner LIKE 'host-a%'")
            ahead = _value(db, "SELECT COUNT(*) FROM owners WHERE last_seen > now()")
    finally:
        proxy.close()
        _stop(runs)
    out_a = run_a.text()
    # Then A's clock was ahead (its own records of its bulks say so), yet A judged B alive by the
    # server's clock: its start-up left B's bulk alone, it waited for B's claim and never decided B's bulk
    assert "0 bulks rolled forward, 0 rolled back" in out_a and "1 bulks of live processes left alone" in out_a, \
        out_a[-5000:]
    assert "which is alive or within its lease" in out_a and "of a process that is gone" not in out_a, out_a[-5000:]
    assert skew is not None and skew > 500, f"bridge A's bulks were not prepared 10 minutes ahead ({skew})"
    # and no heartbeat is in the future by the server's clock (A's is not 10 minutes ahead)
    assert ahead == 0
    # and every message is in the table once, nothing moved, nothing left
    result = account(first + more, landed(spark, table))
    assert result.clean, f"{result}\n{out_a[-3000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0 and leftovers(table) == []


def test_a_heartbeat_in_the_future_keeps_its_owner_alive_until_the_server_clock_passes_it(pg: PostgresServer) -> None:
    """A heartbeat ahead of the server's clock (the server's clock stepped back, or a row written by
    hand: a bridge cannot write one, the server stamps it) errs on the safe side: its owner is alive
    until the server's clock has passed it by the lease; its claims wait, nothing is decided early. The
    owner's next heartbeat is the server's `now()` again."""
    mine = PostgresLedger.open_url(pg.url, owner="this-host:1:1.00", schema="future", lease=1.0)
    other = PostgresLedger.open_url(pg.url, owner="other-host:7:1.00", schema="future", lease=1.0)
    try:
        with psycopg.connect(pg.url, autocommit=True) as db:
            db.execute("UPDATE future.owners SET last_seen = now() + interval '10 minutes' "
                       "WHERE owner = 'other-host:7:1.00'")
        assert mine.owner_alive("other-host:7:1.00")
        other.heartbeat()
        with psycopg.connect(pg.url, autocommit=True) as db:
            late = _value(db, "SELECT EXTRACT(EPOCH FROM now() - last_seen) FROM future.owners "
                              "WHERE owner = 'other-host:7:1.00'")
        assert 0 <= late < 5, f"the heartbeat is {late}s from the server's now()"
    finally:
        mine.close()
        other.close()
