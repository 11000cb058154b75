"""Apache Iceberg tables (`[spark] table_format = "iceberg"`) on the real parts: `mqbridge run` with its own
Spark driver and the Iceberg jars of `scripts/jars.sh iceberg`, on a real ActiveMQ. One bridge on one queue
is killed with SIGKILL at each step of the landing protocol in turn (after_stage, after_prepare, while its
append runs inside Spark (its driver JVM then ends by itself, and the restart waits for it to be gone
before it asks the table), after_publish, before_source_commit), each kill checked against what the
table and the ledger show at that point; then its state_dir is wiped (a replaced disk: the embedded
SQLite catalog lives beside the tables, under the warehouse, and survives it), every message is
delivered again, and the ledger is rebuilt from the table: every message must be in the Iceberg table
exactly once, as pyiceberg (an independent reader, through the same catalog) sees it, with the queue
empty. And once a typed (JSON) type into a JDBC catalog on a real PostgreSQL, its password in none of the
output, after which a narrowed column is refused by `check-config` against the table's schema (each typed
column's declared field, kept in its comment)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import JARS
from tests.support.exactly_once import account, bodies
from tests.support.iceberg_tables import (
    ICEBERG_SPARK,
    iceberg_rows,
    prepared_bulks,
    sqlite_catalog,
    wiped_and_delivered_again_lands_once,
)
from tests.support.processes import mqbridge, run_until_idle, run_until_killed, stomp_bridge

pytestmark = pytest.mark.integration

pyiceberg = pytest.importorskip("pyiceberg")

#: What recovery logs of a dead process's bulk no snapshot carries (nothing is fenced in an Iceberg table).
ROLLED_BACK = "never committed into table orders: not in the table; rolled back"


@pytest.fixture(scope="module", autouse=True)
def _iceberg_jars() -> None:
    if not any((JARS / "iceberg").glob("iceberg-spark-runtime-*.jar")):
        pytest.fail(f"the Iceberg jars are missing from {JARS / 'iceberg'}: run scripts/jars.sh iceberg")


def run_until_append_hangs_then_kill(config: Path, log: Path, after: str) -> str:
    """Run with the first bulk's append hanging inside Spark (`spark_write_hang`) until its output says
    `after` and exactly one bulk is prepared in the ledger (the one whose append hangs: the failpoint is
    reached as its rows are read, before it is prepared), then SIGKILL the Python process alone (its
    driver JVM is left to end by itself); its output."""
    state_dir = config.parent / "state"
    with log.open("w") as out:
        proc = mqbridge("run", "--config", str(config), failpoint="spark_write_hang", stdout=out)
    try:
        deadline = time.monotonic() + 180
        while not ("failpoint spark_write_hang reached" in (text := log.read_text()) and after in text
                   and prepared_bulks(state_dir) == 1):
            assert proc.poll() is None, f"the bridge ended (exit {proc.returncode}):\n{text[-4000:]}"
            assert time.monotonic() < deadline, (f"waited 180 s for {after!r} and one prepared bulk whose append "
                                                 f"hangs ({prepared_bulks(state_dir)} prepared); output:\n"
                                                 f"{text[-4000:]}")
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return log.read_text()


@pytest.mark.timeout(600)
def test_a_bridge_killed_at_each_step_then_its_state_dir_wiped_lands_every_message_once(
        tmp_path: Path, amq: AmqClient) -> None:
    # Given 150 messages (units of 25 on one thread; identity: the body's hash, so that a message sent
    # again is the same one) and a bridge landing them into an Iceberg table of its embedded catalog
    q = unique_queue("iceberg-kills")
    sent = bodies(150, "ik")
    amq.put_many(q, sent)
    config = stomp_bridge(q, spark=ICEBERG_SPARK, threads=1, batch=25,
                          extra_listener='identity = "body-sha256"').write(tmp_path / "bridge.toml")
    state, catalog = tmp_path / "state", sqlite_catalog(tmp_path)

    def table_holds(at_least: int, out: str, at_most: int | None = None) -> int:
        """The table's rows, distinct and all sent, between at_least and at_most (default: at_least)."""
        rows = iceberg_rows(catalog)
        count, most = sum(rows.values()), at_least if at_most is None else at_most
        assert at_least <= count <= most and set(rows) <= set(sent) and max(rows.values(), default=1) == 1, (
            f"the table holds {count} rows (expected {at_least}..{most}, distinct, all sent)\n{out[-4000:]}")
        return count

    # When it is killed after staging its first bulk: nothing prepared, nothing in the table
    out = run_until_killed(config, "after_stage")
    assert prepared_bulks(state) == 0
    table_holds(0, out)
    # ... then after preparing it: prepared in the ledger, not in the table
    out = run_until_killed(config, "after_prepare")
    assert prepared_bulks(state) == 1
    table_holds(0, out)
    # ... then while its append runs in Spark: the dead process's bulk was decided by the table (no
    # snapshot carries it) once its driver JVM was gone; the new one prepared, not in the table
    out = run_until_append_hangs_then_kill(config, tmp_path / "hang.log", ROLLED_BACK)
    assert prepared_bulks(state) == 1
    table_holds(0, out)
    # ... then after its append committed: the hung append never committed (decided so once its JVM
    # was gone), and the new bulk is in the table, still prepared in the ledger
    out = run_until_killed(config, "after_publish")
    assert ROLLED_BACK in out, out[-4000:]
    assert prepared_bulks(state) == 1
    landed = table_holds(1, out, len(sent) - 1)
    # ... then before its source commit: a snapshot carries the dead process's bulk (recorded published,
    # its messages back from the broker committed without landing again: killed at that commit)
    out = run_until_killed(config, "before_source_commit")
    assert "had committed into table orders: recorded published" in out, out[-4000:]
    assert prepared_bulks(state) == 0
    table_holds(landed, out, len(sent) - 1)
    # ... and then its state_dir (the ledger) is wiped and every message is sent again: the new ledger
    # learns the landed messages from the table (whose catalog survived), and every message is in the
    # table exactly once
    wiped_and_delivered_again_lands_once(config, amq, q, sent, catalog)


@pytest.fixture(scope="module")
def postgres() -> Iterator[object]:
    from tests.support.postgres import postgres_server

    with postgres_server() as server:
        yield server


def test_a_typed_type_lands_once_through_a_jdbc_catalog_on_postgresql_and_a_narrowed_column_is_refused(
        tmp_path: Path, amq: AmqClient, postgres: object) -> None:
    # Given a bridge whose Iceberg catalog is a JDBC catalog on PostgreSQL (password from the environment),
    # landing a JSON type (order_id STRING, qty BIGINT)
    from tests.support.postgres import PASSWORD, USER

    port = postgres.port  # type: ignore[attr-defined]
    q = unique_queue("iceberg-pg")
    sent = [b'{"order_id": "pg-%d", "qty": %d}' % (i, i) for i in range(50)]
    amq.put_many(q, sent)
    spark = (ICEBERG_SPARK + '\n[spark.iceberg]\ncatalog = "jdbc"\n'
             f'uri = "jdbc:postgresql://127.0.0.1:{port}/postgres"\nuser = "{USER}"\n'
             'password = "${ENV:ICEBERG_CATALOG_PASSWORD}"\n')
    env = {"ICEBERG_CATALOG_PASSWORD": PASSWORD}

    def config(schema: str, name: str) -> Path:
        return stomp_bridge(q, spark=spark).set("types.orders", format="json", schema=schema).write(
            tmp_path / f"{name}.toml")

    # When it runs until idle
    out = run_until_idle(config("order_id STRING, qty BIGINT", "bridge"), env_extra=env)
    # Then every message is in the table once, as pyiceberg reads it through the same catalog, and the
    # password is in none of the bridge's output
    properties = {"type": "sql", "init_catalog_tables": "false",
                  "uri": f"postgresql+psycopg://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres"}
    result = account(sent, iceberg_rows(properties))
    assert result.clean, f"{result}\n{out[-4000:]}"
    assert amq.depth(q) == 0
    assert PASSWORD not in out
    # And when the type's schema narrows qty to INT, check-config refuses it against the table's schema
    # (read by pyiceberg through the catalog), naming the table, the column and its old and new types
    checked = mqbridge("check-config", "--config", str(config("order_id STRING, qty INT", "narrowed")),
                       env_extra=env)
    check_out, _ = checked.communicate(timeout=120)
    assert checked.returncode == 1 and "column 'qty': bigint -> int" in check_out, check_out[-3000:]
    assert ".metadata.json" in check_out and PASSWORD not in check_out, check_out[-3000:]
