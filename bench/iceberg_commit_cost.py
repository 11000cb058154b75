"""Benchmark: what an Iceberg catalog's commit costs a bulk's append (issue 49), for each catalog the bridge
supports: the JDBC catalog on SQLite (the embedded default) and on PostgreSQL, Apache Iceberg's REST
catalog server, and a Hive metastore (the servers the tests start: tests.support).

    .venv/bin/python bench/iceberg_commit_cost.py [--appends 20] [--warm 3] [--rows 2000]

One bare `local[2]` driver with the Iceberg jars of `jars/iceberg` (`iceberg.session_conf`) holds the four
catalogs at once, each configured as the bridge configures its catalog (`iceberg.catalog_conf`, under its
own name here). Each round appends one bulk of `--rows` rows of 1 KB (the landed columns, read from a
handoff file as the bridge's write reads them, with the bulk's snapshot properties) to each catalog's table
in turn, so that a change of the machine's load falls on every catalog alike.

Per catalog: the append's wall time (Spark's job: the data files, then the commit) and the commit alone,
as Iceberg's own commit report measures it (`CommitReport.commitMetrics.totalDuration`, logged by its
LoggingMetricsReporter: the manifest list, the new metadata file and the catalog's swap of the table's
pointer, with retries), median [q1, q3] in milliseconds, and the commit's share of the append.

With `--wap`, each append is the bridge's: staged under a WAP id on a table with `write.wap.enabled` and
found among the table's snapshots (`iceberg.stage`, timed whole and the look-up apart), then published by
`cherrypick_snapshot` (timed: Iceberg's second catalog commit per bulk). The commit column is then the
stage's commit: a publish that fast-forwards the table (every one here: one writer) sends no commit report.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.delta_fence_scan import spread  # noqa: E402
from bench.delta_txn_commit import make_bulk  # noqa: E402
from mqbridge.config.iceberg import ICEBERG_CATALOG, IcebergCatalog, IcebergSection  # noqa: E402
from mqbridge.landing import iceberg  # noqa: E402
from mqbridge.landing.rows import arrow_table  # noqa: E402
from mqbridge.landing.session import create_spark_session  # noqa: E402
from mqbridge.landing.writes.frames import landed_frame  # noqa: E402
from tests.support.hive_metastore import hive_metastore  # noqa: E402
from tests.support.iceberg_rest import missing_jars, rest_catalog_server  # noqa: E402
from tests.support.postgres import PASSWORD, USER, postgres_server  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: The driver's log configuration: Iceberg's commit reports at INFO into a file, errors on standard error
#: (a root logger without an appender is taken by Spark for no configuration, and replaced by its own).
LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %m%n
logger.reports.name = org.apache.iceberg.metrics.LoggingMetricsReporter
logger.reports.level = info
logger.reports.appenderRef.file.ref = file
logger.reports.additivity = false
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
rootLogger.level = error
rootLogger.appenderRef.console.ref = console
"""
#: One commit report: the table's name, then the commit's total duration (an ISO-8601 duration, PT0.123S).
REPORT = re.compile(r"CommitReport\{tableName=([\w.]+),.*?totalDuration=TimerResult\{timeUnit=NANOSECONDS, "
                    r"totalDuration=PT(?:(\d+)M)?([\d.]+)S")
#: `[spark.conf]` of the Hive 2.3 metastore (as in tests/integration/test_iceberg_catalogs.py): Iceberg's
#: commit swaps the metadata by the metastore's atomic alter_table, Hive 2.3 refusing Iceberg's lock.
HIVE_CONF = {"spark.hadoop.iceberg.engine.hive.lock-enabled": "false"}


def renamed(conf: dict[str, str], name: str) -> dict[str, str]:
    """The bridge's catalog settings (`spark.sql.catalog.mqbridge*`) under the catalog name `name`."""
    prefix = f"spark.sql.catalog.{ICEBERG_CATALOG}"
    return {f"spark.sql.catalog.{name}{key[len(prefix):]}": value for key, value in conf.items()}


@contextlib.contextmanager
def catalogs(work: Path) -> Iterator[dict[str, IcebergCatalog]]:
    """The four catalogs, their servers started (and stopped after)."""
    problem = missing_jars()
    if problem:
        sys.exit(problem)
    warehouse = work / "warehouse"
    state = work / "state"
    with postgres_server() as pg, rest_catalog_server() as rest, hive_metastore() as hive:
        sections = {
            "sqlite": IcebergSection(),
            "postgresql": IcebergSection(uri=f"jdbc:postgresql://127.0.0.1:{pg.port}/postgres", user=USER,
                                         password=PASSWORD),
            "rest": IcebergSection(catalog="rest", uri=rest.uri),
            "hive": IcebergSection(catalog="hive", uri=hive.uri),
        }
        yield {name: IcebergCatalog(section, state, warehouse / name) for name, section in sections.items()}


def commit_seconds(log: Path) -> dict[str, list[float]]:
    """Each table's commit durations, in the order the reports were logged."""
    found: dict[str, list[float]] = {}
    for table, minutes, seconds in REPORT.findall(log.read_text() if log.exists() else ""):
        found.setdefault(table, []).append(int(minutes or 0) * 60 + float(seconds))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=20, help="appends per catalog (after the warm-up)")
    parser.add_argument("--warm", type=int, default=3, help="warm-up appends per catalog, not counted")
    parser.add_argument("--rows", type=int, default=2000, help="rows of 1 KB per append")
    parser.add_argument("--wap", action="store_true",
                        help="each append staged and published by write-audit-publish, as the bridge's")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-commit-"))
    log = work / "commit-reports.log"
    (work / "log4j2.properties").write_text(LOG4J2.format(path=log))
    print("load before:", os.getloadavg(), flush=True)
    try:
        with catalogs(work) as found:
            conf: dict[str, str] = {**HIVE_CONF,
                                    "spark.driver.extraJavaOptions":
                                        f"-Dlog4j2.configurationFile=file:{work / 'log4j2.properties'}"}
            for name, catalog in found.items():
                conf |= renamed(iceberg.catalog_conf(catalog), name)
            session = iceberg.session_conf(ROOT / "jars", conf, next(iter(found.values())))
            session = {k: v for k, v in session.items() if not k.startswith(f"spark.sql.catalog.{ICEBERG_CATALOG}")}
            spark = create_spark_session(master="local[2]", app_name="bench-iceberg-commit", conf=session)
            run(spark, found, args, work, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(spark: Any, found: dict[str, IcebergCatalog], args: argparse.Namespace, work: Path, log: Path) -> None:
    """Append in rounds to each catalog's table and print the costs."""
    tables = {name: f"{name}.bench.orders" for name in found}
    appends: dict[str, list[float]] = {name: [] for name in found}
    steps: dict[tuple[str, str], list[float]] = {}  # --wap: (catalog, step) -> seconds
    first = 0
    for name, catalog in found.items():
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {name}.bench")
        properties = ", ".join(f"'{k}' = '{v}'" for k, v in iceberg.TABLE_PROPERTIES.items())
        one = arrow_table(make_bulk(1, 0, datetime.now(UTC)), [0])
        frame = landed_frame(spark, one, work / "_handoff" / "schema", 1, 1, None, identity=True)[0]
        columns = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in frame.schema.fields)
        spark.sql(f"CREATE TABLE IF NOT EXISTS {tables[name]} ({columns}) USING iceberg "
                  f"PARTITIONED BY ({iceberg.PARTITION_TRANSFORMS['day']}) "
                  f"LOCATION '{catalog.warehouse / 'orders'}' TBLPROPERTIES ({properties})")
    for round_no in range(1, args.warm + args.appends + 1):
        for name in found:
            bulk = make_bulk(args.rows, first, datetime.now(UTC))
            first += args.rows
            handoff = work / "_handoff" / f"{name}-{round_no}"
            frame = landed_frame(spark, arrow_table(bulk, list(range(args.rows))), handoff, 1, 2, None,
                                 identity=True)[0]
            started = time.perf_counter()
            if args.wap:
                timed = staged_and_published(spark, Named(name), frame, f"bench-{round_no}")
            else:
                frame.writeTo(tables[name]).options(**iceberg.snapshot_options(f"bench-{round_no}", None)).append()
            elapsed = time.perf_counter() - started
            if args.wap:  # the bridge's append: its stage and its publish, not the look-up timed again
                elapsed = timed["stage"] + timed["publish"]
            shutil.rmtree(handoff, ignore_errors=True)
            if round_no > args.warm:
                appends[name].append(elapsed)
                if args.wap:
                    for step, seconds in timed.items():
                        steps.setdefault((name, step), []).append(seconds)
        print(f"round {round_no}: " + ", ".join(f"{n} {appends[n][-1] * 1000:.0f} ms" for n in found
                                                if round_no > args.warm), flush=True)
    reports = commit_seconds(log)
    print(f"\n{args.rows} rows of 1 KB per append{', staged and published' if args.wap else ''}, {args.appends} "
          f"appends per catalog after {args.warm} of warm-up, alternated; load after: {os.getloadavg()}")
    print("catalog      append ms: median [q1, q3]   commit ms: median [q1, q3]   commit/append   reports")
    for name in found:
        commits = reports.get(tables[name], [])[args.warm:]
        share = statistics.median(commits) / statistics.median(appends[name]) if commits else float("nan")
        print(f"{name:11}  {spread(appends[name]):27}  {spread(commits):27}  {share:13.2f}   {len(commits)}")
    if args.wap:
        print("\ncatalog      stage ms (of it the look-up)              publish ms")
        for name in found:
            print(f"{name:11}  {spread(steps[(name, 'stage')]):27} ({spread(steps[(name, 'look-up')]).strip()})  "
                  f"{spread(steps[(name, 'publish')])}")


class Named:
    """The catalog `name` of this benchmark's driver as `iceberg.stage` asks it (`IcebergCatalog.identifier`):
    the bench holds four catalogs under their own names, where the bridge has one (`mqbridge`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def identifier(self, table: str) -> str:
        return f"{self.name}.bench.`{table}`"


def staged_and_published(spark: Any, catalog: Named, frame: Any, bulk_id: str) -> dict[str, float]:
    """The bridge's append of `frame` as bulk `bulk_id` (`iceberg.stage` on a session of its own, then
    `cherrypick_snapshot` in the table's catalog, as `iceberg.publish` calls it in `mqbridge`): the seconds of
    the stage, of its look-up of the staged snapshot (the same query again: the table does not change between),
    and of the publish."""
    session = frame.sparkSession
    started = time.perf_counter()
    snapshot = iceberg.stage(frame, catalog, "orders", bulk_id, None)  # type: ignore[arg-type]
    staged = time.perf_counter()
    session.sql(f"SELECT snapshot_id FROM {catalog.identifier('orders')}.snapshots WHERE summary['wap.id'] = "
                f"'{bulk_id}' ORDER BY committed_at DESC LIMIT 1").collect()
    looked = time.perf_counter()
    if snapshot is None:
        sys.exit(f"{catalog.name}: the append was not staged (write.wap.enabled is not true)")
    session.sql(f"CALL {catalog.name}.system.cherrypick_snapshot('{catalog.identifier('orders')}', "
                f"{snapshot})").collect()
    return {"stage": staged - started, "look-up": looked - staged, "publish": time.perf_counter() - looked}


if __name__ == "__main__":
    main()
