"""Delta Lake tables in tests: where the jars are, a bridge's `[spark]` that lands into Delta with its
own driver, the rows of a table as delta-rs (an independent reader, not Spark) sees them, and the
checks that Spark itself must make, as functions of a session for the session's one Delta-enabled
driver (`DeltaSpark.run`, the `delta_spark` fixture)."""

from __future__ import annotations

import collections
import concurrent.futures
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import ROOT

#: The project's jar folder (`scripts/jars.sh delta`, `mqbridge jars`).
JARS = ROOT / "jars"
#: `[spark]` of a bridge landing into Delta tables with its own driver.
DELTA_SPARK = f'master = "local[2]"\ntable_format = "delta"\njars_dir = "{JARS}"\nwriter = "spark"'
#: Spark settings for the tests' tables of a few hundred rows: 2 tasks per shuffle (200 by default),
#: and 2 to list a table's files: Delta's VACUUM lists them with `parallelPartitionDiscovery.parallelism`
#: tasks, 10,000 by default, 75 s of every `mqbridge purge` and `compact` on the 2-core machine (5 s with 2).
SMALL_TABLE_CONF = {"spark.sql.shuffle.partitions": "2",
                    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2"}


@pytest.fixture(scope="module", autouse=True)
def delta_jars_fetched() -> None:
    """Each Delta test module's precondition (an autouse fixture the module imports): the Delta Lake jars
    fetched, else every test fails naming the command that fetches them (never a silent skip)."""
    if not (JARS / "delta").is_dir():
        pytest.fail(f"the Delta Lake jars are missing from {JARS / 'delta'}: run scripts/jars.sh delta")


def delta_rows(table: Path, column: str = "body") -> collections.Counter[bytes]:
    """How often each value of `column` (bytes) is in the Delta table at `table`, read by delta-rs."""
    import deltalake

    if not (table / "_delta_log").is_dir():
        return collections.Counter()
    values = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=[column]).column(column).to_pylist()
    return collections.Counter(bytes(v) for v in values)



def bulk_counts_now(table: Path) -> dict[str, int] | None:
    """The rows of each bulk_id in the Delta table at `table` as delta-rs reads it now (a concurrent
    reader's view); None while the table has no log, or its first commit is being written."""
    import deltalake

    if not (table / "_delta_log").is_dir():
        return None
    try:
        frame = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["bulk_id"])
    except Exception:  # the log's first commit being written
        return None
    return dict(collections.Counter(frame.column("bulk_id").to_pylist()))

# --- checks that Spark itself makes, run in the session's Delta-enabled driver -------------------
# (`DeltaSpark.run(fn, *args)` calls `fn(session, *args)` in the `delta_spark` fixture's child process)


def delta_facts(spark: Any, path: str) -> dict[str, bool]:
    """What the landing protocol asks of Delta, tried with Spark (no bridge) on a new table at `path`:
    a repeated `txnVersion` of an app id is skipped, a newer one written, an empty commit fences a
    version; delta-rs and the bridge's `committed_version` read each app id's version from the log."""
    from deltalake import DeltaTable

    from mqbridge.landing.delta import committed_version

    rows = spark.createDataFrame([(i, "2026-11-28") for i in range(5)], "id long, put_date string")

    def write(frame: Any, app: str, version: int, meta: str = "w") -> None:
        (frame.write.format("delta").mode("append").partitionBy("put_date").option("txnAppId", app)
         .option("txnVersion", str(version)).option("userMetadata", meta).save(path))

    def count() -> int:
        return int(spark.read.format("delta").load(path).count())

    facts = {}
    write(rows, "a", 1)
    write(rows, "a", 1)
    facts["repeated version skipped"] = count() == 5
    write(rows, "a", 2)
    facts["newer version written"] = count() == 10
    write(spark.createDataFrame([], rows.schema), "zombie", 7, "fence")
    write(rows, "zombie", 7)
    facts["fenced version skipped"] = count() == 10
    facts["delta-rs reads the versions"] = (DeltaTable(path).transaction_version("a") == 2
                                            and DeltaTable(path).transaction_version("zombie") == 7)
    facts["the bridge reads the versions"] = (committed_version(spark, path, "a")[1] == 2
                                              and committed_version(spark, path, "zombie")[1] == 7
                                              and committed_version(spark, path, "b")[1] is None)
    return facts


def conditional_creates(spark: Any, path: str) -> dict[str, str]:
    """Two creates of the object at `path` through the driver's S3A with S3A's conditional-create option
    (If-None-Match: *), the S3 server's promise the Delta log store rests on (`mqbridge.landing.log_store`);
    `_written_twice`'s outcome."""
    from mqbridge.landing.log_store import CONDITIONAL_CREATE

    target = spark._jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(spark._jsc.hadoopConfiguration())

    def create(text: str) -> None:
        out = fs.createFile(target).overwrite(False).must(CONDITIONAL_CREATE, True).build()
        out.write(bytearray(text.encode()))
        out.close()

    return _written_twice(spark, path, create)


def log_store_writes(spark: Any, path: str, class_name: str = "") -> dict[str, str]:
    """Two writes of the log file `path` by mqbridge's Delta log store `class_name` (default: the one of
    `s3a://`), as two writers of one version make them (overwrite false); `_written_twice`'s outcome."""
    from mqbridge.landing.log_store import CLASS_NAME

    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    store = getattr(jvm, class_name or CLASS_NAME)(conf)

    def write(text: str) -> None:
        lines = jvm.java.util.ArrayList()
        lines.add(text)
        store.write(jvm.org.apache.hadoop.fs.Path(path), lines.iterator(), False, conf)

    return _written_twice(spark, path, write)


def _written_twice(spark: Any, path: str, write: Any) -> dict[str, str]:
    """`write` of "first", then of "second", to the one object at `path`: each one's outcome (the Java
    class of its error, or "written") and what the object holds after both."""
    def outcome(text: str) -> str:
        try:
            write(text)
        except Exception as exc:  # a Py4JJavaError: its Java class says what the store answered
            return str(exc.java_exception.getClass().getName())  # type: ignore[attr-defined]
        return "written"

    first, second = outcome("first"), outcome("second")
    return {"first": first, "second": second, "content": _read_text(spark, path)}


def delta_log_store(spark: Any, path: str) -> str:
    """The class of the log store Delta committed the table at `path` through in this session: Delta's
    `DelegatingLogStore` keeps one store per scheme (a private map, read by reflection, filled on first
    use), a Java store inside Delta's adaptor."""
    store = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).store()
    if store.getClass().getName().endswith("DelegatingLogStore"):
        field = store.getClass().getDeclaredField("schemeToLogStoreMap")
        field.setAccessible(True)
        store = field.get(store).get(path.split(":", 1)[0]).get()
    if store.getClass().getName().endswith("LogStoreAdaptor"):
        store = store.logStoreImpl()
    return str(store.getClass().getName())


def _read_text(spark: Any, path: str) -> str:
    return "".join(row.value for row in spark.read.text(path).collect())


def bulk_counts_until(spark: Any, path: str, stop: str, every: float = 0.2) -> list[dict[str, int]]:
    """Rows per bulk_id of the Delta table at `path` as Spark reads it, read again every `every`
    seconds until the file `stop` exists (reads before the table's first commit are left out)."""
    seen: list[dict[str, int]] = []
    while not os.path.exists(stop):
        try:
            frame = spark.read.format("delta").load(path).groupBy("bulk_id").count()
            seen.append({row["bulk_id"]: int(row["count"]) for row in frame.collect()})
        except Exception:  # no table yet
            pass
        time.sleep(every)
    return seen


def scheduled_rounds(spark: Any, config: str) -> dict[str, int]:
    """One round of a bridge's scheduled purge, then one of its scheduled compaction, with the
    configuration at `config` on `spark`: the containers each touched (and the purge skipped)."""
    from mqbridge.config import load_config
    from mqbridge.counters import Counters
    from mqbridge.maintenance.compaction_scheduler import CompactionScheduler
    from mqbridge.maintenance.purge import PurgeScheduler

    loaded = load_config(config, secrets=False)
    counters = Counters()
    PurgeScheduler(loaded, lambda: spark, counters).run_round()
    CompactionScheduler(loaded, lambda: spark, counters).run_round()
    return {name: int(counters.total(name))
            for name in ("purge_containers", "purge_containers_skipped", "compaction_containers")}


def vacuum_listing_tasks(spark: Any, path: str, parallelism: str | None) -> list[int]:
    """The task counts of the Spark stages of one `VACUUM … RETAIN 0 HOURS` of a new small Delta table at
    `path` (two partitions, one of them rewritten: files to remove), run with the session's
    `spark.sql.sources.parallelPartitionDiscovery.parallelism` set to `parallelism` (None: unset, Spark's
    default), which is put back after."""
    key = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    for day in ("2026-11-01", "2026-11-02"):
        spark.range(3).selectExpr("id", f"DATE'{day}' AS put_date").write.format("delta").mode("append") \
            .partitionBy("put_date").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 0")
    before = {name: spark.conf.get(name, None) for name in (key, check)}
    group = f"vacuum-listing-{time.monotonic_ns()}"
    tracker = spark.sparkContext.statusTracker()
    try:
        if parallelism is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, parallelism)
        spark.conf.set(check, "false")
        spark.sparkContext.setJobGroup(group, "VACUUM listing")
        spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS").collect()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        for name, value in before.items():
            if value is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, value)
    tasks = []
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            stage_info = tracker.getStageInfo(stage)
            if stage_info is not None:
                tasks.append(int(stage_info.numTasks))
    return tasks


#: The settings of a command's own session (`mqbridge.table_formats.command_session_conf`) that make it
#: a Delta session; `command_in_driver` checks that the shared driver has them as the command asked.
DELTA_SESSION_KEYS = ("spark.sql.extensions", "spark.sql.catalog.spark_catalog")


def command_in_driver(spark: Any, argv: list[str]) -> dict[str, Any]:
    """`mqbridge ARGV` (`mqbridge.cli.main`) run in this process on `spark`, the session's Delta-enabled
    driver, instead of on a driver of its own (a JVM started with the Delta jars: 6-10 s of each command
    on the 2-core machine): its exit code, its output (stdout, stderr and its log, as a process's would be
    collected), how many sessions it asked for, and what those asked for the DELTA_SESSION_KEYS beside
    what `spark` has. For a command whose subject is what it does to a table, not its own start."""
    import contextlib
    import io
    import logging
    from unittest import mock

    import mqbridge.landing
    from mqbridge import cli

    asked: list[dict[str, str]] = []

    def shared_session(**options: Any) -> Any:
        asked.append(dict(options.get("conf") or {}))
        return spark

    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for handler in handlers:  # so that the command's `setup_logging` logs to `out`, as in a process of its own
        root.removeHandler(handler)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), \
                mock.patch.object(mqbridge.landing, "create_spark_session", shared_session):
            code = cli.main(argv)
    finally:  # the command's log handler (on `out`) goes; the child's own come back
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
    return {"code": code, "out": out.getvalue(), "sessions": len(asked),
            "asked": [{k: c.get(k) for k in DELTA_SESSION_KEYS} for c in asked],
            "has": {k: spark.conf.get(k, None) for k in DELTA_SESSION_KEYS}}


def run_in_driver(driver: Any, *argv: str, timeout: float = 600) -> tuple[int, str]:
    """`mqbridge ARGV` run in the `delta_spark` fixture's driver (a `DeltaSpark`: `command_in_driver`):
    its exit code and output. AssertionError when it raised, did not end within `timeout` seconds, or
    did not ask for exactly one session, the shared driver's Delta one (what it asked for and what the
    driver has are named)."""
    try:
        outcome = driver.run(command_in_driver, list(argv), timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"`mqbridge {' '.join(argv)}` in the shared Delta driver did not end within "
                             f"{timeout:.0f}s") from None
    assert outcome["ok"], outcome.get("traceback")
    done = outcome["value"]
    assert done["sessions"] == 1 and all(asked == done["has"] for asked in done["asked"]), \
        (f"`mqbridge {' '.join(argv)}` did not ask for one session like the shared Delta driver's: asked "
         f"{done['asked']}, the driver has {done['has']}\n{done['out'][-3000:]}")
    return int(done["code"]), str(done["out"])
