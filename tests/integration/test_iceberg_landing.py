"""Apache Iceberg tables (`[spark] table_format = "iceberg"`) on the real parts: `mqbridge run` with its own
Spark driver and the Iceberg jars of `scripts/jars.sh iceberg`, on a real ActiveMQ. One bridge on one
queue is killed with SIGKILL at each step of the landing protocol in turn (after_stage, after_prepare
(its append staged: the restart fences the bulk, so that its append can never be published after, and
asks the table), while its append is staged inside Spark (its driver JVM then ends by itself), after_publish,
before_source_commit), each kill checked against what the table and the ledger show at that point; then
its state_dir is wiped (a replaced disk: the embedded SQLite catalog lives beside the tables, under the
warehouse, and survives it), every message is delivered again, and the ledger is rebuilt from the table:
every message must be in the Iceberg table exactly once, as pyiceberg (an independent reader, through the
same catalog) sees it, with the queue empty. And once a typed (JSON) type into a JDBC catalog on a real
PostgreSQL, its password in none of the output, after which a narrowed column is refused by `check-config`
against the table's schema (each typed column's declared field, kept in its comment). And two bridges
(each its own state_dir and ledger) appending to one table at once, their commits interleaving: both commit,
every message lands once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import JARS
from tests.support.exactly_once import account, bodies
from tests.support.iceberg_tables import (
    ICEBERG_SPARK,
    iceberg_rows,
    killed_at_each_step_then_wiped,
    sqlite_catalog,
)
from tests.support.processes import mqbridge, output_within, run_until_idle, stomp_bridge

pytestmark = pytest.mark.integration

pyiceberg = pytest.importorskip("pyiceberg")

@pytest.fixture(scope="module", autouse=True)
def _iceberg_jars() -> None:
    if not any((JARS / "iceberg").glob("iceberg-spark-runtime-*.jar")):
        pytest.fail(f"the Iceberg jars are missing from {JARS / 'iceberg'}: run scripts/jars.sh iceberg")


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
    catalog = sqlite_catalog(tmp_path)

    # When it is killed at each step of the landing protocol in turn, and then its state_dir is wiped
    # and every message sent again: every message is in the table once (see the helper)
    killed_at_each_step_then_wiped(config, amq, q, sent, catalog)


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


@pytest.mark.timeout(600)
def test_two_bridges_appending_to_one_table_at_once_both_commit_and_land_every_message_once(
        tmp_path: Path, amq: AmqClient) -> None:
    # Given 3,000 messages on one queue, and two bridges (each its own state_dir and ledger) reading it at
    # once into the same Iceberg table of the embedded catalog, in bulks of about a hundred
    from pyiceberg.catalog import load_catalog

    from mqbridge.landing import iceberg_read

    q = unique_queue("iceberg-two")
    sent = bodies(3000, "two")
    amq.put_many(q, sent)
    configs = [stomp_bridge(q, spark=ICEBERG_SPARK, state_dir=f"state-{name}").write(tmp_path / f"{name}.toml")
               for name in ("a", "b")]
    # When both run until idle
    runs = [mqbridge("run", "--config", str(config), "--until-idle", "2s") for config in configs]
    outs = [output_within(run, 420, f"the end of bridge {name}'s `mqbridge run --until-idle 2s`")
            for run, name in zip(runs, "ab", strict=True)]
    # Then both succeeded, each committed its own bulks into the table, and every message is in it once
    assert [run.returncode for run in runs] == [0, 0], "\n".join(out[-3000:] for out in outs)
    catalog = sqlite_catalog(tmp_path)
    result = account(sent, iceberg_rows(catalog))
    assert result.clean, f"{result}\n" + "\n".join(out[-3000:] for out in outs)
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    table = load_catalog("mqbridge", **catalog).load_table(("mqbridge", "orders"))
    writers = {s.app_id for s in iceberg_read.snapshots(table) if s.current and s.bulk_id is not None}
    assert len(writers) == 2, writers
    # ... their commits interleaved: some publishes were applied on top of the other bridge's newer
    # snapshot (a cherry-pick's own snapshot) instead of a fast-forward of the staged one
    on_top = [s for s in table.metadata.snapshots
              if s.summary and "published-wap-id" in s.summary.additional_properties]
    assert on_top, "every publish was a fast-forward: the two bridges never committed in between each other"
