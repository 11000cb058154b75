"""Landing: bulks into Spark tables, exactly once.

The modules, one concept each: `session` (the process's Spark session, started again when its
JVM dies, and the warehouse probe), `warmup` (Spark started beside the listeners, only if something
needs it), `executor` (the `SparkExecutor`: which rows of a bulk land where, and what a failed
write means), `writes/` (how a bulk is written into a table of each format: Parquet, Delta),
`writer_choice` (pyarrow or Spark writes a type's bulks), `deadlines` (`write_timeout` for either
writer), `rows` (the landed row: columns, Arrow schema, JSON checks), `arrow_writer` (raw bulks
written by pyarrow instead), `jvm` (the in-process driver JVM and its log), `landing` (the landing
protocol of one process: stage, prepare, publish), `publication` (staging directories, the renames
that publish them, recovery at start), `ledger/` (the landing ledger: `sqlite`, `postgres`),
`containers` (a type's tables, their `put_date` partitions and the table locks), `tables` (the
marker naming the types a table holds) and `catalog` (landed tables registered in the session's
catalog).

The surface below is imported lazily, on first use: importing the ledger or the table markers does
not load pyarrow or pyspark. (A name is never both a function here and a module of the package:
`containers()` is imported from `mqbridge.landing.containers`.)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqbridge.landing.containers import Container
    from mqbridge.landing.driver_secrets import DriverSecrets
    from mqbridge.landing.executor import SparkExecutor, executors_for
    from mqbridge.landing.landing import Landing
    from mqbridge.landing.publication import RecoveryReport, recover
    from mqbridge.landing.session import SparkSessions, check_warehouse, create_spark_session
    from mqbridge.landing.tables import holders, shared_tables, type_tables
    from mqbridge.landing.warmup import SparkWarmup, schema_checks, spark_needed
    from mqbridge.landing.writer_choice import spark_writes_bulks, spark_written

_SURFACE = {
    "Container": "mqbridge.landing.containers",
    "DriverSecrets": "mqbridge.landing.driver_secrets",
    "type_tables": "mqbridge.landing.tables",
    "Landing": "mqbridge.landing.landing",
    "RecoveryReport": "mqbridge.landing.publication",
    "recover": "mqbridge.landing.publication",
    "SparkExecutor": "mqbridge.landing.executor",
    "SparkSessions": "mqbridge.landing.session",
    "check_warehouse": "mqbridge.landing.session",
    "create_spark_session": "mqbridge.landing.session",
    "executors_for": "mqbridge.landing.executor",
    "spark_writes_bulks": "mqbridge.landing.writer_choice",
    "spark_written": "mqbridge.landing.writer_choice",
    "SparkWarmup": "mqbridge.landing.warmup",
    "schema_checks": "mqbridge.landing.warmup",
    "spark_needed": "mqbridge.landing.warmup",
    "holders": "mqbridge.landing.tables",
    "shared_tables": "mqbridge.landing.tables",
}

__all__ = ["Container", "DriverSecrets", "Landing", "RecoveryReport", "SparkExecutor", "SparkSessions", "SparkWarmup",
           "check_warehouse", "create_spark_session", "executors_for", "holders", "recover", "schema_checks",
           "shared_tables", "spark_needed", "spark_writes_bulks", "spark_written", "type_tables"]


def __getattr__(name: str) -> Any:
    module = _SURFACE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
