"""What the tests of Iceberg tables share: a bridge's `[spark]` for Iceberg, and the table and ledger as an
independent reader sees them (pyiceberg through the bridge's catalog; the ledger read-only)."""

from __future__ import annotations

import collections
import glob
import os
import re
import shutil
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.delta_tables import JARS
from tests.support.exactly_once import account
from tests.support.processes import ROOT, mqbridge, run_until_idle, run_until_killed

#: What recovery logs of a dead process's bulk the table's lineage does not hold (fenced, then forgotten).
ROLLED_BACK = "never committed into table orders: not in the table: fenced"
#: `[spark]` of a bridge landing into Iceberg tables with its own driver.
ICEBERG_SPARK = f'master = "local[2]"\ntable_format = "iceberg"\njars_dir = "{JARS}"\nwriter = "spark"'


def iceberg_rows(catalog_properties: dict[str, str], table: str = "orders",
                 namespace: str = "mqbridge") -> collections.Counter[bytes]:
    """How often each body is in the table's current snapshot (in `namespace`), read by pyiceberg under the
    catalog name `mqbridge` (Java's JdbcCatalog keeps the Spark catalog's name); empty when there is no table
    yet."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("mqbridge", **catalog_properties)
    if not catalog.table_exists((namespace, table)):
        return collections.Counter()
    scanned = catalog.load_table((namespace, table)).scan(selected_fields=("body",)).to_arrow()
    return collections.Counter(bytes(b) for b in scanned.column("body").to_pylist())


def sqlite_catalog(tmp_path: Path) -> dict[str, str]:
    """pyiceberg's properties of a bridge's embedded catalog (`<warehouse>/_iceberg/catalog.db`)."""
    return {"type": "sql", "uri": f"sqlite:///{tmp_path / 'landing' / '_iceberg' / 'catalog.db'}",
            "init_catalog_tables": "false"}


def prepared_bulks(state_dir: Path) -> int:
    """How many bulks the bridge's ledger holds prepared (read-only)."""
    path = state_dir / "ledger.sqlite3"
    if not path.exists():
        return 0
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as ledger:
        return int(ledger.execute("SELECT count(*) FROM bulks WHERE state = 'prepared'").fetchone()[0])


def wiped_and_delivered_again_lands_once(config: Path, amq: Any, queue: str, sent: list[bytes],
                                         catalog: dict[str, str]) -> str:
    """Wipe the bridge's state_dir (its ledger: a replaced disk), send every message again, run until
    idle, and assert that the new ledger learnt the landed messages from the table through its catalog
    and that every message is in the table exactly once (0 lost, 0 duplicated, 0 unexpected), with the
    queue and its backout queue empty; the bridge's output."""
    shutil.rmtree(config.parent / "state")
    amq.put_many(queue, sent)
    out = run_until_idle(config)
    assert re.search(r"ledger rebuilt from the tables: [1-9]\d* identities", out), out[-4000:]
    assert "already landed; committed without landing them again" in out, out[-4000:]
    result = account(sent, iceberg_rows(catalog))
    assert result.clean, f"{result}\n{out[-4000:]}"
    assert amq.depth(queue) == 0 and amq.depth(queue + ".backout") == 0
    return out


def run_until_append_hangs_then_kill(config: Path, log: Path, after: str) -> str:
    """Run with the first bulk's append hanging inside Spark (`spark_write_hang`) until its output says
    `after` and no bulk is prepared in the ledger (the append hangs as it is staged, before its bulk is
    prepared: `mqbridge.landing.writes.iceberg`), then SIGKILL the Python process alone (its driver JVM is
    left to end by itself); its output."""
    state_dir = config.parent / "state"
    with log.open("w") as out:
        proc = mqbridge("run", "--config", str(config), failpoint="spark_write_hang", stdout=out)
    try:
        deadline = time.monotonic() + 180
        while not ("failpoint spark_write_hang reached" in (text := log.read_text()) and after in text
                   and prepared_bulks(state_dir) == 0):
            assert proc.poll() is None, f"the bridge ended (exit {proc.returncode}):\n{text[-4000:]}"
            assert time.monotonic() < deadline, (f"waited 180 s for {after!r} and no prepared bulk while an "
                                                 f"append hangs ({prepared_bulks(state_dir)} prepared); "
                                                 f"output:\n"
                                                 f"{text[-4000:]}")
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return log.read_text()


def killed_at_each_step_then_wiped(config: Path, amq: Any, queue: str, sent: list[bytes],
                                   catalog: dict[str, str], *, every_step: bool = True) -> str:
    """Kill (SIGKILL) the bridge of `config` (one thread landing `queue`, whose messages `sent` have an
    identity of their own) at each step of the landing protocol in turn: after_stage (its append staged,
    not prepared), after_prepare (staged and prepared: the restart fences the bulk, so that its staged
    append can never be published after, and asks the table), while its append is staged inside Spark
    (its driver JVM then ends by itself; nothing prepared), after_publish,
    before_source_commit, each kill checked against what the table (read by pyiceberg through `catalog`)
    and the ledger show at that point; then wipe its state_dir and deliver every message again
    (`wiped_and_delivered_again_lands_once`). The outputs of every run, joined.

    `every_step=False` (a warehouse on an object store, whose every other step the local test covers)
    keeps only the kills whose recovery reads the table there: after_prepare (the next start, killed
    after_publish, fences that bulk by the table's lineage), after_publish, before_source_commit and the
    wiped state_dir; two Spark starts fewer."""
    state, q = config.parent / "state", queue
    outs: list[str] = []

    def table_holds(at_least: int, out: str, at_most: int | None = None) -> int:
        """The table's rows, distinct and all sent, between at_least and at_most (default: at_least)."""
        rows = iceberg_rows(catalog)
        count, most = sum(rows.values()), at_least if at_most is None else at_most
        assert at_least <= count <= most and set(rows) <= set(sent) and max(rows.values(), default=1) == 1, (
            f"the table holds {count} rows (expected {at_least}..{most}, distinct, all sent)\n{out[-4000:]}")
        return count

    if every_step:
        # When it is killed after staging its first bulk: nothing prepared, nothing in the table
        out = run_until_killed(config, "after_stage")
        outs.append(out)
        assert prepared_bulks(state) == 0
        table_holds(0, out)
    # ... then after preparing it: prepared in the ledger, not in the table
    out = run_until_killed(config, "after_prepare")
    outs.append(out)
    assert prepared_bulks(state) == 1
    table_holds(0, out)
    if every_step:
        # ... then while its append is staged by Spark: the dead process's bulk, staged and prepared, was
        # decided by the table (not in its lineage: fenced, forgotten); the new one not prepared, not in
        # the table
        out = run_until_append_hangs_then_kill(config, config.parent / "hang.log", ROLLED_BACK)
        outs.append(out)
        assert prepared_bulks(state) == 0
        table_holds(0, out)
    # ... then after its append was published: the bulk prepared before it was decided by the table (not in
    # its lineage: fenced, forgotten) by this start, unless the start before did, and the new bulk is in the
    # table, still prepared in the ledger
    out = run_until_killed(config, "after_publish")
    outs.append(out)
    assert (ROLLED_BACK in out) is not every_step, out[-4000:]
    assert prepared_bulks(state) == 1
    landed = table_holds(1, out, len(sent) - 1)
    # ... then before its source commit: a snapshot carries the dead process's bulk (recorded published,
    # its messages back from the broker committed without landing again: killed at that commit)
    out = run_until_killed(config, "before_source_commit")
    outs.append(out)
    assert "had committed into table orders: recorded published" in out, out[-4000:]
    assert prepared_bulks(state) == 0
    table_holds(landed, out, len(sent) - 1)
    # ... and then its state_dir (the ledger) is wiped and every message is sent again: the new ledger
    # learns the landed messages from the table (whose catalog survived), and every message is in the
    # table exactly once
    outs.append(wiped_and_delivered_again_lands_once(config, amq, q, sent, catalog))
    return "".join(outs)


def iceberg_conf(base: Path) -> dict[str, str]:
    """The settings of a local[2] Spark (a test's bare driver, `DeltaSpark`) with Iceberg's runtime and
    its catalog `mqbridge` on SQLite under `base`."""
    jars = sorted(glob.glob(str(ROOT / "jars" / "iceberg" / "*.jar")))
    if not jars:
        pytest.fail(f"the Iceberg jars are missing from {ROOT / 'jars' / 'iceberg'}: run scripts/jars.sh iceberg")
    return {"spark.jars": ",".join(jars),
            "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            "spark.sql.catalog.mqbridge": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.mqbridge.type": "jdbc",
            "spark.sql.catalog.mqbridge.uri": f"jdbc:sqlite:{base}/catalog.db",
            "spark.sql.catalog.mqbridge.warehouse": f"{base}/warehouse",
            "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}


def landed_rows(spark: Any, rows: list[tuple[str, str, str, int]]) -> Any:
    """A frame on `spark` of landed-looking rows (identity, put_timestamp "YYYY-MM-DD HH:MM:SS", bulk id,
    amount)."""
    frame = spark.createDataFrame(rows, "identity STRING, ts STRING, bulk_id STRING, amount INT")
    return frame.selectExpr("concat('m-', identity) AS msg_id", "to_timestamp(ts) AS put_timestamp",
                            "bulk_id", "cast(identity AS BINARY) AS body", "identity",
                            "concat('o-', identity) AS order_id", "cast(amount AS DECIMAL(12,2)) AS amount",
                            "to_date(ts) AS put_date")


def bare_catalog(base: str | Path) -> Any:
    """The SQLite catalog of `iceberg_conf(base)` as a loaded configuration names it (`[spark.iceberg]
    uri`): an `IcebergCatalog`."""
    from mqbridge.config.iceberg import IcebergCatalog, IcebergSection

    return IcebergCatalog(IcebergSection(uri=f"jdbc:sqlite:{base}/catalog.db"), Path(base) / "state",
                          Path(base) / "warehouse")


def bare_properties(base: Path) -> Any:
    """pyiceberg's properties of the SQLite catalog of `iceberg_conf(base)`."""
    from mqbridge.landing.iceberg_catalog import pyiceberg_properties

    return pyiceberg_properties("jdbc", f"jdbc:sqlite:{base}/catalog.db", warehouse=base / "warehouse")
