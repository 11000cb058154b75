"""The write side of the table-format seam (`mqbridge.landing.writes`): every table format the
configuration allows has a writer implementing every operation of `BulkWrites`, an executor writes
through the writer of its type's format (pyarrow only where that format lets it), and an unknown
format is refused with a message naming the allowed ones. No Spark: choosing a writer starts none."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import SparkSection, TypeConfig
from mqbridge.config.schema import TableFormat
from mqbridge.errors import ConfigError, SparkUnavailableError
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.session import SparkSessions
from mqbridge.landing.writes import WRITERS, BulkWrites, bulk_writes_for
from mqbridge.landing.writes.delta import DeltaWrites
from mqbridge.landing.writes.iceberg import IcebergWrites
from mqbridge.landing.writes.parquet import ParquetWrites

#: The writer class each configured table format must get (typed: mypy checks each implements `BulkWrites`).
EXPECTED: dict[str, type[BulkWrites]] = {"parquet": ParquetWrites, "delta": DeltaWrites, "iceberg": IcebergWrites}


def refused_start(**_settings: Any) -> Any:
    raise SparkUnavailableError("cannot start Spark: refused by the test (choosing a writer needs none)")


def executor(tmp_path: Path, table_format: str, *, arrow: str | None = "snappy",
             config: TypeConfig | None = None) -> SparkExecutor:
    sessions = SparkSessions(SparkSection(master="local[1]", warehouse=tmp_path), create=refused_start)
    return SparkExecutor(sessions, tmp_path, "orders", config or TypeConfig(), arrow=arrow, table_format=table_format)


def test_every_configured_table_format_has_a_writer_and_no_other() -> None:
    assert set(WRITERS) == set(typing.get_args(TableFormat)) == set(EXPECTED)


@pytest.mark.parametrize("table_format", sorted(EXPECTED))
def test_the_writer_of_each_format_is_its_class_and_implements_every_operation(tmp_path: Path,
                                                                               table_format: str) -> None:
    # Given an executor of a raw type whose bulks pyarrow would write, in each format
    landed = executor(tmp_path, table_format)
    writes = landed.bulk_writes
    # Then it writes through its format's writer, which has every operation of the interface
    assert type(writes) is EXPECTED[table_format] and writes.name == table_format
    assert isinstance(writes, BulkWrites)
    for operation in ("write", "probe", "outage"):
        assert callable(getattr(writes, operation)), f"{type(writes).__name__} lacks {operation}"
    # and the same writer class comes from the lookup itself
    assert type(bulk_writes_for(table_format, landed)) is EXPECTED[table_format]


def test_pyarrow_writes_raw_bulks_of_parquet_tables_only(tmp_path: Path) -> None:
    assert executor(tmp_path, "parquet").arrow == "snappy"
    assert executor(tmp_path, "delta").arrow is None  # a Delta commit is Spark's
    assert executor(tmp_path, "parquet", arrow=None).arrow is None  # `[spark] writer = "spark"`
    typed = TypeConfig(format="json", schema="order_id STRING")
    assert executor(tmp_path, "parquet", config=typed).arrow is None  # Spark parses a typed type's bodies


def test_only_the_delta_writer_knows_delta_lake_missing_from_spark(tmp_path: Path) -> None:
    missing = RuntimeError("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: delta.")
    assert "Delta Lake is not on its class path" in executor(tmp_path, "delta").bulk_writes.outage(missing)
    assert executor(tmp_path, "parquet").bulk_writes.outage(missing) == ""


def test_an_unknown_table_format_is_refused_naming_the_allowed_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        executor(tmp_path, "orc")
    message = str(refused.value)
    assert "'orc'" in message and "orders" in message
    assert all(f'"{name}"' in message for name in EXPECTED), message
