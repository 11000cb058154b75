"""The landing path checks what it assumes, on the real parts (`mqbridge run` subprocesses, the
shared ActiveMQ, Spark: a Connect server and local Spark):

- a Spark Connect server that writes to another file system than the bridge reads (the server runs in
  a mount namespace of its own, with a tmpfs over the warehouse, as a server on another host without
  the shared path would): `mqbridge run` refuses to start, naming the warehouse and the Spark mode, and
  nothing is read from the queue (before this check every message was committed with nothing landed);
- the ledger write-locked by another process past its busy timeout mid-run: an outage (the breaker
  opens, nothing is moved to the backout queue) and every message lands exactly once after (before,
  the probe succeeded through Spark, bisection blamed each message, the queue drained into backout);
- one identity twice in one bulk lands once, and both deliveries are told where.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import TypeConfig
from mqbridge.counters import Counters
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.message import Bulk, Message
from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import account, bodies, published_files
from tests.support.monitored import finish, outage_config, sink, start
from tests.support.processes import landed, leftovers, mqbridge, stomp_config
from tests.support.spark_servers import SparkConnectServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SparkConnectServer, Path]]:
    """A Spark Connect server that sees the directory it returns as an empty file system of its own."""
    hidden = tmp_path_factory.mktemp("invisible-to-spark")
    server = SparkConnectServer(tmp_path_factory.mktemp("spark-connect-elsewhere"), private_dir=hidden)
    server.start()
    yield server, hidden
    server.stop()


def test_a_spark_that_writes_where_the_bridge_cannot_see_is_refused_at_start(
        elsewhere: tuple[SparkConnectServer, Path], amq: AmqClient) -> None:
    # Given 50 messages and a bridge whose warehouse the Spark Connect server cannot see
    server, hidden = elsewhere
    q = unique_queue("invisible")
    sent = bodies(50, "iv")
    amq.put_many(q, sent)
    workdir = hidden / "bridge"
    workdir.mkdir()
    config = stomp_config(workdir, q, spark=f'remote = "{server.url}"')
    # When it is started
    proc = mqbridge("run", "--config", str(config), "--until-idle", "3s")
    out, _ = proc.communicate(timeout=300)
    # Then it stops with one clear error naming the warehouse, the Spark mode and the fix
    assert proc.returncode == 1, out
    assert f"warehouse {workdir / 'landing'}: a row written through Spark Connect server" in out, out
    assert "is not visible to the bridge" in out and "same warehouse directory at the same path" in out, out
    # And nothing was taken from the queue, nothing moved aside
    assert amq.depth(q) == 50 and amq.depth(q + ".backout") == 0


def test_a_ledger_locked_past_its_busy_timeout_is_an_outage_and_everything_lands_after(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given a bridge landing 500 messages (200 first) through its SQLite ledger
    q = unique_queue("ledger-locked")
    sent = bodies(500, "lk")
    amq.put_many(q, sent[:200])
    config, url = outage_config(tmp_path, q, batch=50, threads=1)
    config.write_text(config.read_text() + '\n[ledger]\nbusy_timeout = "3s"\n')  # 30 s by default
    table = tmp_path / "landing" / "orders"
    run = start(config, idle="4s")
    try:
        wait_until(lambda: published_files(table) >= 1, 180, "the first bulk to land")
        # When another process holds the ledger's write lock past the busy timeout (3 s) while
        # more messages arrive
        holder = sqlite3.connect(tmp_path / "state" / "ledger.sqlite3", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            amq.put_many(q, sent[200:])
            # Then the sink's breaker opens (an outage, not 300 poison messages), nothing is moved
            wait_until(lambda: sink(url).get("available") is False, 120, "the breaker of sink orders to open")
            assert "ledger" in sink(url).get("reason", "") and "unavailable" in sink(url).get("reason", "")
            assert amq.depth(q + ".backout") == 0
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        out = finish(run)
    finally:
        if run.wait(0) is None:
            run.proc.kill()
    # And once the lock is released every message lands exactly once, nothing moved or left behind
    assert "probe write succeeded; available again" in out, out[-5000:]
    accounting = account(sent, landed(spark, table))
    assert accounting.clean, str(accounting)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    assert leftovers(table) == []


def test_one_identity_twice_in_one_bulk_lands_once(spark: Any, tmp_path: Path) -> None:
    # Given a bulk in which two deliveries share an identity (a producer's retry), and a third message
    ledger = SqliteLedger.open(tmp_path / "state" / "ledger.sqlite3", owner=owner_id())
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600,
                      warehouse=tmp_path / "landing")
    executor = SparkExecutor(spark, tmp_path / "landing", "orders", TypeConfig(table="orders"), landing=landing)
    now = datetime.now(timezone.utc)
    messages = [Message(msg_id=f"m{n}", body=body, source="amq", destination="/queue/q", put_timestamp=now,
                        received_timestamp=now, identity=identity)
                for n, (body, identity) in enumerate([(b"first", "order-1"), (b"retry", "order-1"),
                                                      (b"other", "order-2")])]
    try:
        results = executor.execute(Bulk("orders", messages=messages))
        # Then one row per identity, and every delivery is told it landed, in that bulk and table
        assert [(r.msg_id, r.ok, r.table) for r in results] == [("m0", True, "orders"), ("m1", True, "orders"),
                                                                ("m2", True, "orders")]
        assert len({r.bulk_id for r in results}) == 1
        assert sorted(landed(spark, tmp_path / "landing" / "orders")) == [b"first", b"other"]
        assert ledger.published(["order-1", "order-2"]) == {"order-1", "order-2"}
    finally:
        landing.close()
