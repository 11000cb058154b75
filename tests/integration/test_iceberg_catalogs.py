"""Iceberg tables through the two catalogs a user runs as a server, each a real one started here: a REST
catalog (`[spark.iceberg] catalog = "rest"`: Apache Iceberg's own REST catalog server,
tests.support.iceberg_rest) and a Hive metastore (`catalog = "hive"`: Hive's Thrift metastore,
tests.support.hive_metastore), with the bridge's Spark driver and the Iceberg runtime, a real ActiveMQ.
A bridge is killed (SIGKILL) after its first append committed and before the ledger recorded it, and
again before its source commit; each restart decides the dead process's bulk by asking the table's
snapshots through the catalog; then its state_dir is wiped and every message sent again, and the
ledger is rebuilt from the table through the catalog. Every message must be in the table exactly once,
as pyiceberg (an independent reader, through the same catalog) sees it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import bodies
from tests.support.hive_metastore import hive_metastore
from tests.support.iceberg_rest import missing_jars, rest_catalog_server
from tests.support.iceberg_tables import (
    ICEBERG_SPARK,
    iceberg_rows,
    prepared_bulks,
    wiped_and_delivered_again_lands_once,
)
from tests.support.processes import run_until_killed, stomp_bridge

pytestmark = pytest.mark.integration

pytest.importorskip("pyiceberg")


#: `[spark.conf]` of a bridge on the Hive 2.3 metastore: Iceberg's commit then swaps the table's metadata
#: location by the metastore's atomic `alter_table` (HIVE-26882) instead of taking a metastore lock, which
#: Hive 2.3 refuses for Iceberg's lock requests ("operationType=UNSET"; the commit then waits out
#: `iceberg.hive.lock-timeout-ms`, 3 minutes). Measured here: docs/spark-and-tables.md, Iceberg catalogs.
HIVE_WITHOUT_LOCKS = '[spark.conf]\n"spark.hadoop.iceberg.engine.hive.lock-enabled" = "false"\n'


@pytest.fixture(params=["rest", "hive"])
def catalog_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str]]:
    """(`[spark.iceberg] catalog`, its uri, the bridge's extra configuration) of a catalog server started
    for the test."""
    if request.param == "rest":
        problem = missing_jars()
        if problem:
            pytest.fail(problem)
        with rest_catalog_server() as server:
            yield "rest", server.uri, ""
    else:
        with hive_metastore() as metastore:
            yield "hive", metastore.uri, HIVE_WITHOUT_LOCKS


@pytest.mark.timeout(600)
def test_a_bridge_killed_around_its_append_lands_every_message_once_through_a_catalog_server(
        tmp_path: Path, amq: AmqClient, catalog_server: tuple[str, str, str]) -> None:
    # Given 120 messages (units of 30 on one thread; identity: the body's hash) and a bridge landing them
    # into an Iceberg table of a catalog server
    kind, uri, extra = catalog_server
    q = unique_queue(f"iceberg-{kind}")
    sent = bodies(120, kind)
    amq.put_many(q, sent)
    spark = ICEBERG_SPARK + f'\n{extra}[spark.iceberg]\ncatalog = "{kind}"\nuri = "{uri}"\n'
    config = stomp_bridge(q, spark=spark, threads=1, batch=30,
                          extra_listener='identity = "body-sha256"').write(tmp_path / "bridge.toml")
    state, catalog = tmp_path / "state", {"type": kind, "uri": uri}

    # When it is killed after its first append committed (the ledger still says prepared)
    out = run_until_killed(config, "after_publish")
    assert prepared_bulks(state) == 1, out[-4000:]
    landed = sum(iceberg_rows(catalog).values())
    assert 1 <= landed < len(sent), f"{landed} rows after the first append\n{out[-4000:]}"
    # ... and then before its source commit: the restart found the dead process's bulk in a snapshot
    # (through the catalog) and recorded it published, without landing it again
    out = run_until_killed(config, "before_source_commit")
    assert "had committed into table orders: recorded published" in out, out[-4000:]
    # ... and then its state_dir (the ledger) is wiped and every message is sent again: the new ledger
    # learns the landed messages from the table through the catalog, and every message is in the table once
    wiped_and_delivered_again_lands_once(config, amq, q, sent, catalog)
