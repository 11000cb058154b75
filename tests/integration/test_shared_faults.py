"""Faults of what bridges on several hosts share (issue 51): `mqbridge run` processes with one PostgreSQL
ledger while the ledger's server restarts, while the warehouse's S3-compatible server restarts, and with
one bridge's clock 10 minutes ahead, each on ActiveMQ and RabbitMQ in one run of the fault: a pair of
bridges on an ActiveMQ queue and a pair on a RabbitMQ queue (`identity = "header:x-eo-id"`) share the
restart or the skewed clock; under the S3 server's restart the pair is two bridges that each read both
queues (two Spark drivers, not four), both writing one Delta table for each broker (two writers of a
table on S3, whose commits of one version meet at the store's conditional PUT: docs/guarantees.md).
Each broker counted like a total-queue checker: every message of its queue in its table once (lost,
duplicated, unexpected: all 0), nothing moved to its backout queue, the queue empty. A restarted server
is an outage, never poison; a clock is never what a lease is judged by (the
ledger judges heartbeats by the database server's clock)."""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest
from deltalake.exceptions import TableNotFoundError
from psycopg import sql

from mqbridge.landing.ledger.postgres import PostgresLedger
from tests.support.amq import AmqClient
from tests.support.both_brokers import on_both_brokers
from tests.support.delta_tables import DELTA_SPARK, JARS
from tests.support.exactly_once import OutputReader, account, bodies, published_files
from tests.support.object_stores import S3Server, private_s3_server
from tests.support.postgres import PostgresServer, postgres_server
from tests.support.processes import ROOT, landed, leftovers, mqbridge, process_bridge
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

#: How a bridge of these tests says that a sink is down (`mqbridge.bulks.breaker`): an outage.
OUTAGE = "unavailable"
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


def _all(runs: dict[str, list[OutputReader]]) -> list[OutputReader]:
    """Every run of both brokers' pairs."""
    return [run for pair in runs.values() for run in pair]


def _tails(runs: list[OutputReader]) -> str:
    """The end of each run's output."""
    return "\n".join(f"-- bridge {i}:\n{run.text()[-3000:]}" for i, run in enumerate(runs))


def _stop(runs: list[OutputReader]) -> None:
    """Stop each run still going: SIGTERM, SIGKILL after 60 s. The end of each one's output is printed
    (pytest shows it when the test fails, a wait's timeout too)."""
    for run in runs:
        if run.wait(0) is None:
            run.terminate()
    print(_tails(runs))


def test_the_ledgers_postgresql_restarted_under_load_is_an_outage_and_every_message_lands_once(
        tmp_path: Path, spark: Any, amq: AmqClient, activemq: tuple[str, int], rabbitmq: tuple[str, int],
        pg: PostgresServer) -> None:
    """One restart under two pairs of bridges at once: a pair on an ActiveMQ queue and a pair on a
    RabbitMQ queue (each pair its own ledger schema and table)."""
    # Given 2,000 messages on an ActiveMQ queue and 2,000 on a RabbitMQ queue, and on each queue two
    # bridges landing them through one ledger (1,500 of each put before the restart, 500 while the server
    # restarts: a pair once landed all it had before the restart ended, and nothing after it)
    queues = on_both_brokers("shared-pg", amq, activemq, rabbitmq)
    sent = {q.broker: bodies(2000, f"spg-{q.broker}") for q in queues}
    runs: dict[str, list[OutputReader]] = {}
    tables = {q.broker: tmp_path / q.broker / "landing" / "orders" for q in queues}
    try:
        for q in queues:
            q.put(sent[q.broker][:1500])
            (tmp_path / q.broker).mkdir()
            configs = [q.bridge(state_dir=f"state{i}", batch=50, extra_bridge=_ledger(pg, f"restart_{q.broker}"))
                       .write(tmp_path / q.broker / f"b{i}.toml") for i in range(2)]
            runs[q.broker] = [OutputReader(mqbridge("run", "--config", str(config), "--until-idle", "3s"))
                              for config in configs]
        for run in _all(runs):
            run.wait_subscribed(threads=2)
        wait_until(lambda: all(published_files(table) >= 2 for table in tables.values()), 120,
                   "the first bulks of both pairs of bridges to land")
        # When the PostgreSQL server restarts (fast shutdown: every session ended) while all four land
        before = {broker: published_files(table) for broker, table in tables.items()}
        with ThreadPoolExecutor(1) as pool:
            restarted = pool.submit(pg.restart)
            for q in queues:
                q.put(sent[q.broker][1500:])
            restarted.result(timeout=120)
        wait_until(lambda: all(OUTAGE in run.text() or run.proc.poll() is not None for run in _all(runs)), 60,
                   "the four bridges to meet the restarted ledger (or to end)")
        _finish(_all(runs), 240, "after the ledger's restart")
    finally:
        _stop(_all(runs))
    for q in queues:
        # Then on each broker it was an outage to both bridges: each one said so, reconnected and landed on
        table, outputs = tables[q.broker], [run.text() for run in runs[q.broker]]
        assert published_files(table) > before[q.broker], f"{q.broker}: nothing landed after the restart began"
        assert all("ledger postgresql://" in out and OUTAGE in out for out in outputs), \
            f"{q.broker}:\n{outputs[0][-5000:]}"
        # and every message is in its table once; nothing was moved, nothing is left
        result = account(sent[q.broker], landed(spark, table))
        assert result.clean, f"{q.broker}: {result}\n{outputs[0][-3000:]}"
        assert q.depths() == (0, 0) and leftovers(table) == [], q.broker


@pytest.mark.timeout(600)
def test_the_warehouses_s3_server_restarted_under_load_is_an_outage_and_every_message_lands_once(
        tmp_path: Path, amq: AmqClient, activemq: tuple[str, int], rabbitmq: tuple[str, int],
        pg: PostgresServer) -> None:
    """One restart under two bridges, each reading an ActiveMQ queue and a RabbitMQ queue at once (a
    source and a listener for each broker, one ledger schema, the defaults otherwise): four listeners of
    each queue's pair, two Spark drivers. Each listener feeds a message type of its own, one Delta table
    for each broker on the S3 server, which both bridges commit to: two writers of each table. Their
    commits of one version meet at the store, which refuses the later log file (the bridge's log store
    makes it by a conditional PUT, `mqbridge.landing.log_store`), and Delta commits it as the next
    version. With Delta's default store on S3 the later file replaced the earlier: 50 of 400 messages
    were lost here that way, both bulks recorded published and one of them in no version. The S3 server
    is one of this test's own: the shared one on port 9000 is never stopped."""
    for name in ("delta", "s3"):
        if not (JARS / name).is_dir():
            pytest.fail(f"the {name} jars are missing from {JARS / name}: run scripts/jars.sh {name}")
    queues = on_both_brokers("shared-s3", amq, activemq, rabbitmq)
    sent = {q.broker: bodies(400, f"ss3-{q.broker}") for q in queues}
    for q in queues:
        q.put(sent[q.broker][:200])
    with private_s3_server(tmp_path / "s3") as s3proxy:
        # Given two bridges, each landing both queues into Delta tables on a private S3-compatible server
        # (a table for each broker, written by both bridges)
        s3 = s3proxy.server
        bucket = s3.new_bucket("restart")
        secret = tmp_path / "s3-secret"
        secret.write_text(s3.secret_key)
        secret.chmod(0o600)
        conf = {**s3.spark_conf(), "spark.hadoop.fs.s3a.secret.key": f"${{FILE:{secret}}}"}
        runs: list[OutputReader] = []
        try:
            # (run without --until-idle: a bridge that the brokers gave nothing while its Spark started
            # would end idle before the fault; they are stopped once every message is in the tables)
            for i in range(2):
                bridge = (process_bridge("eo", state_dir=f"state{i}").without("types.orders")
                          .add("bridge", _ledger(pg, "s3restart")).add("spark", DELTA_SPARK)
                          .set("spark", warehouse=f"s3a://{bucket}/wh").set("spark.conf", **conf))
                for q in queues:
                    bridge = q.read_by(bridge.set(f"types.{_type(q.broker)}", bulk_size="128KB",
                                                  bulk_timeout="500ms"), _type(q.broker), batch=50)
                config = bridge.write(tmp_path / f"bridge{i}.toml")
                runs.append(OutputReader(mqbridge("run", "--config", str(config))))
            wait_until(lambda: all(_STARTED in run.text() for run in runs) and all(
                _shared_table_bodies(s3, bucket, q.broker) for q in queues) or any(
                run.proc.poll() is not None for run in runs),
                300, "the two bridges' Spark sessions to start and the first messages of each queue to land "
                     "on the S3 server", every=1.0)
            assert all(run.proc.poll() is None for run in runs), _tails(runs)
            # When that server stops while they land (the other 200 messages of each queue come
            # meanwhile), and starts again (same port, same buckets)
            s3proxy.stop()
            for q in queues:
                q.put(sent[q.broker][200:])
            wait_until(lambda: all(all(f"sink {_type(q.broker)} {OUTAGE}" in run.text() for q in queues)
                                   or run.proc.poll() is not None for run in runs), 120,
                       "both bridges to find the S3 server gone for both brokers' tables (sink unavailable)")
            s3proxy.start()
            wait_until(lambda: all(sum(_shared_table_bodies(s3, bucket, q.broker).values()) >= len(sent[q.broker])
                                   for q in queues) or any(run.proc.poll() is not None for run in runs), 300,
                       "the 400 messages of each queue to be in its table on S3", every=1.0)
            codes = [run.terminate() for run in runs]
        finally:
            _stop(runs)
        assert codes == [0, 0], _tails(runs)
        for q in queues:
            # Then on each broker it was an outage to both bridges, never poison: each said so of that
            # broker's table, and every message of the broker is in its table once (as delta-rs sees it)
            sink = f"sink {_type(q.broker)}"
            assert all(f"{sink} {OUTAGE}" in run.text() and f"{sink}: probe write succeeded; available again"
                       in run.text() for run in runs), f"{q.broker}:\n{_tails(runs)}"
            result = account(sent[q.broker], _shared_table_bodies(s3, bucket, q.broker, strict=True))
            assert result.clean, f"{q.broker}: {result}\n{_tails(runs)}"
            # and nothing was moved to the backout queue; the queue is empty
            assert q.depths() == (0, 0), q.broker


def _type(broker: str) -> str:
    """The message type (and so the table) that a bridge of the S3 restart lands `broker`'s queue into."""
    return f"orders_{broker}"


def _value(db: psycopg.Connection[Any], query: LiteralString) -> Any:
    """The one value `query` selects."""
    row = db.execute(query).fetchone()
    assert row is not None, query
    return row[0]


def _shared_table_bodies(s3: S3Server, bucket: str, broker: str, strict: bool = False) -> collections.Counter[bytes]:
    """The bodies in `broker`'s table (`_type`, in the warehouse `wh` of `bucket` on `s3`) that the two
    bridges write, read by delta-rs. A table not made yet holds none; one that cannot be read yet (a
    server starting) holds none unless `strict`."""
    try:
        return s3.delta_bodies(bucket, f"wh/{_type(broker)}")
    except TableNotFoundError:
        return collections.Counter()
    except Exception:  # (delta-rs raises its own errors, and OSError, for a server still starting)
        if strict:
            raise
        return collections.Counter()


def _last_logged(out: str) -> float:
    """The time of the last line a bridge logged (`%(asctime)s`: its own clock, local time), in epoch seconds."""
    stamps = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d{3} ", out, re.MULTILINE)
    assert stamps, out[-3000:]
    return datetime.strptime(stamps[-1], "%Y-%m-%d %H:%M:%S").timestamp()


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
        tmp_path: Path, spark: Any, amq: AmqClient, activemq: tuple[str, int], rabbitmq: tuple[str, int],
        pg: PostgresServer) -> None:
    """A lease judged by the clock of the bridge that asks would make the bridge 10 minutes ahead take
    every other bridge for dead (their heartbeats 10 minutes old to it) and decide their bulks while
    they publish them; one judged by the bridge that writes the heartbeat would keep a dead bridge
    alive for 10 minutes. The ledger writes and judges heartbeats by the database server's clock.
    Both brokers at once: a pair of bridges (A ahead, B right) on an ActiveMQ queue and a pair on a
    RabbitMQ queue, each pair its own ledger schema and table."""
    if shutil.which("faketime") is None:
        pytest.fail("faketime is missing: run scripts/test-tools.sh (Debian's faketime package)")
    # Given on each broker 40 messages that bridge B (this host, its clock right) reads through a
    # connection the test can cut and holds prepared in the ledger (its claim), and bridge A on another
    # host, 10 min ahead
    queues = on_both_brokers("shared-clock", amq, activemq, rabbitmq)
    first = {q.broker: bodies(40, f"sc0-{q.broker}") for q in queues}
    more = {q.broker: bodies(200, f"sc-{q.broker}") for q in queues}
    proxies = {q.broker: TcpProxy(("127.0.0.1", q.port)) for q in queues}
    gates = {q.broker: tmp_path / f"gate-b-{q.broker}" for q in queues}
    tables = {q.broker: tmp_path / q.broker / "landing" / "orders" for q in queues}
    runs: dict[str, list[OutputReader]] = {}
    skew: dict[str, float] = {}
    ahead: dict[str, Any] = {}
    try:
        configs: dict[str, Path] = {}
        for q in queues:
            q.put(first[q.broker])
            (tmp_path / q.broker).mkdir()
            ledger = _ledger(pg, f"clock_{q.broker}")
            config_b = q.bridge(state_dir="state-b", threads=1, batch=40, port=proxies[q.broker].port,
                                extra_bridge=ledger).write(tmp_path / q.broker / "b.toml")
            configs[q.broker] = q.bridge(state_dir="state-a", threads=1, batch=40,
                                         extra_bridge=ledger).write(tmp_path / q.broker / "a.toml")
            runs[q.broker] = [OutputReader(mqbridge("run", "--config", str(config_b), "--until-idle", "3s",
                                                    failpoint=f"holding_prepared:{gates[q.broker]}"))]
        for broker, gate in gates.items():
            wait_until(Path(f"{gate}.reached").exists, 180,
                       f"bridge B on {broker} to prepare its bulk of the 40 messages")
        for q in queues:
            runs[q.broker].append(OutputReader(_skewed_on_another_host(
                f"host-a-{q.broker}", configs[q.broker], "+10m", "--until-idle", "3s")))
        for pair in runs.values():
            pair[1].wait_subscribed(threads=1)
        # When B's connection is cut, so that the broker gives the 40 to A while B's claim stands
        for proxy in proxies.values():
            assert proxy.cut() >= 1
        wait_until(lambda: all("which is alive or within its lease" in a.text() or "of a process that is gone"
                               in a.text() or a.proc.poll() is not None for _, a in runs.values()), 120,
                   "each bridge A to meet its B's claim on the 40 (and wait for it, or decide it)")
        # and B publishes its bulk; then 200 more messages come, which both land
        for q in queues:
            gates[q.broker].touch()
            q.put(more[q.broker])
        _finish(_all(runs), 240, "with bridge A's clock 10 minutes ahead")
        skew = {broker: _last_logged(pair[1].text()) - time.time() for broker, pair in runs.items()}
        with psycopg.connect(pg.url, autocommit=True) as db:
            for q in queues:
                db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(f"clock_{q.broker}")))
                ahead[q.broker] = _value(db, "SELECT COUNT(*) FROM owners WHERE last_seen > now()")
    finally:
        for proxy in proxies.values():
            proxy.close()
        _stop(_all(runs))
    for q in queues:
        out_a = runs[q.broker][1].text()
        # Then on each broker A's clock was ahead (the times of its own log say so), yet A judged B
        # alive by the server's clock: its start-up left B's bulk alone, it waited for B's claim and
        # never decided B's bulk
        assert "0 bulks rolled forward, 0 rolled back" in out_a and "1 bulks of live processes left alone" in out_a, \
            f"{q.broker}:\n{out_a[-5000:]}"
        assert "which is alive or within its lease" in out_a and "of a process that is gone" not in out_a, \
            f"{q.broker}:\n{out_a[-5000:]}"
        assert skew[q.broker] > 500, f"{q.broker}: bridge A's clock was not 10 minutes ahead ({skew[q.broker]:.0f} s)"
        # and no heartbeat is in the future by the server's clock (A's is not 10 minutes ahead)
        assert ahead[q.broker] == 0, q.broker
        # and every message is in its table once, nothing moved, nothing left
        result = account(first[q.broker] + more[q.broker], landed(spark, tables[q.broker]))
        assert result.clean, f"{q.broker}: {result}\n{out_a[-3000:]}"
        assert q.depths() == (0, 0) and leftovers(tables[q.broker]) == [], q.broker


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
