"""Landing: bulks into Spark tables, exactly once.

The modules, one concept each: `executor` (the Spark session and the `SparkExecutor` that writes a
bulk into its staging directory), `arrow_writer` (raw bulks written by pyarrow instead), `jvm` (the
in-process driver JVM and its log), `landing` (the landing protocol of one process: stage, prepare,
publish), `publication` (staging directories, the renames that publish them, recovery at start),
`ledger/` (the landing ledger: `sqlite`, `postgres`), `containers` (a type's tables, their
`put_date` partitions and the table locks), `tables` (the marker naming the types a table holds)
and `catalog` (landed tables registered in the session's catalog).

The surface below is imported lazily, on first use: importing the ledger or the table markers does
not load pyarrow or pyspark. (A name is never both a function here and a module of the package:
`containers()` is imported from `mqbridge.landing.containers`.)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqbridge.landing.containers import Container, type_tables
    from mqbridge.landing.executor import (
        SparkExecutor,
        SparkSessions,
        check_warehouse,
        create_spark_session,
        executors_for,
    )
    from mqbridge.landing.landing import Landing
    from mqbridge.landing.publication import RecoveryReport, recover
    from mqbridge.landing.tables import holders, shared_tables

_SURFACE = {
    "Container": "mqbridge.landing.containers",
    "type_tables": "mqbridge.landing.containers",
    "Landing": "mqbridge.landing.landing",
    "RecoveryReport": "mqbridge.landing.publication",
    "recover": "mqbridge.landing.publication",
    "SparkExecutor": "mqbridge.landing.executor",
    "SparkSessions": "mqbridge.landing.executor",
    "check_warehouse": "mqbridge.landing.executor",
    "create_spark_session": "mqbridge.landing.executor",
    "executors_for": "mqbridge.landing.executor",
    "holders": "mqbridge.landing.tables",
    "shared_tables": "mqbridge.landing.tables",
}

__all__ = ["Container", "Landing", "RecoveryReport", "SparkExecutor", "SparkSessions", "check_warehouse",
           "create_spark_session", "executors_for", "holders", "recover", "shared_tables",
           "type_tables"]


def __getattr__(name: str) -> Any:
    module = _SURFACE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
