"""Where the old schema of a typed table comes from (`mqbridge.landing.schema_check`), as the table's
format says (`TableFormat.written_schemas`): a Parquet table's footers read with pyarrow, a Delta table's
log read by delta-rs, no Spark. The files here are written by pyarrow with the footer metadata Spark
writes (`org.apache.spark.sql.parquet.row.metadata`), the Delta tables by delta-rs;
tests/integration/test_schema_evolution.py reads footers Spark wrote itself."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from mqbridge.config import parse_config
from mqbridge.config.ddl import ddl_schema
from mqbridge.errors import ConfigError
from mqbridge.landing.schema_check import (
    SPARK_ROW_METADATA,
    declared_metadata,
    file_schema,
    table_schemas,
)
from mqbridge.landing.schema_verdicts import check_schemas, schema_verdicts
from mqbridge.lint import lint_text
from tests.support.configs import typed_orders


def config(tmp_path: Path, schema: str, table: str = "orders") -> str:
    return typed_orders(tmp_path / "landing", schema, table)


def write(path: Path, message_type: str, ddl: str, *, declared: bool = True, mtime: float | None = None) -> Path:
    """One file of `message_type` rows whose footer says Spark wrote the typed columns of `ddl`
    (nullable, as Spark's from_json writes them), with their declared fields when `declared`."""
    declared_schema = ddl_schema(ddl)
    fields = [StructField("message_type", StringType(), True)]  # a landed column: never compared
    fields += [StructField(f.name, f.dataType, True, declared_metadata(f) if declared else None)
               for f in declared_schema.fields]
    written = StructType(fields)
    table = pa.table({"message_type": [message_type]})
    table = table.replace_schema_metadata({SPARK_ROW_METADATA: written.json().encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path



def test_the_declared_schema_is_read_back_not_nulls_included(tmp_path: Path) -> None:
    path = write(tmp_path / "f.parquet", "orders", "id STRING NOT NULL, qty INT")
    assert file_schema(path) == ddl_schema("id STRING NOT NULL, qty INT")


def test_a_file_without_declared_fields_counts_its_columns_nullable(tmp_path: Path) -> None:
    path = write(tmp_path / "f.parquet", "orders", "id STRING NOT NULL, qty INT", declared=False)
    assert file_schema(path) == ddl_schema("id STRING, qty INT")


def test_a_file_not_written_by_spark_has_no_typed_columns(tmp_path: Path) -> None:
    pq.write_table(pa.table({"msg_id": ["m"]}), tmp_path / "raw.parquet")
    assert file_schema(tmp_path / "raw.parquet") is None


def test_the_newest_file_of_the_type_in_each_container_is_read(tmp_path: Path) -> None:
    table = tmp_path / "orders"
    write(table / "put_date=2024-01-01" / "part-0.parquet", "orders", "id STRING", mtime=1000)
    newest = write(table / "put_date=2024-01-01" / "part-1.parquet", "orders", "id STRING, qty INT", mtime=2000)
    write(table / "put_date=2024-01-01" / "part-2.parquet", "invoices", "inv STRING", mtime=3000)  # another type
    other_day = write(table / "put_date=2024-01-02" / "part-0.parquet", "orders", "id STRING, qty BIGINT", mtime=500)
    write(table / "_staging" / "x" / "part-9.parquet", "orders", "zzz STRING")  # not a container
    found = table_schemas(table, "orders")
    assert sorted(found.values()) == sorted([newest, other_day])
    assert table_schemas(tmp_path / "missing", "orders") == {}


def test_start_refuses_a_dropped_column_naming_table_column_and_types(tmp_path: Path) -> None:
    write(tmp_path / "landing" / "orders" / "put_date=2024-01-01" / "part-0.parquet", "orders",
          "id STRING NOT NULL, qty BIGINT, note STRING")
    # Compatible: a column added, NOT NULL dropped, CHAR as STRING
    check_schemas(parse_config(config(tmp_path, "id CHAR(4), qty BIGINT, note STRING, extra DATE")))
    with pytest.raises(ConfigError) as refused:
        check_schemas(parse_config(config(tmp_path, "id STRING NOT NULL, qty INT, extra STRING NOT NULL")))
    message = str(refused.value)
    assert message.startswith("schema change refused: types.orders.schema: table ")
    assert "column 'note': string -> (dropped)" in message
    assert "column 'qty': bigint -> int: narrowed" in message
    assert "column 'extra': (none) -> string NOT NULL: added as NOT NULL" in message
    assert "written as struct<id:string,qty:bigint,note:string> in part-0.parquet" in message
    assert "set `table` to a new name" in message


def test_check_config_reports_each_refused_change_at_the_schema_key(tmp_path: Path) -> None:
    write(tmp_path / "landing" / "orders" / "put_date=2024-01-01" / "part-0.parquet", "orders", "id STRING")
    report = lint_text(config(tmp_path, "id STRING NOT NULL"), "bridge.toml")
    [finding] = [f for f in report.errors if "schema" in str(f.loc)]
    assert finding.loc == ("types", "orders", "schema")
    assert "column 'id': string -> string NOT NULL: made NOT NULL" in finding.problem
    assert "new name" in finding.fix
    # A new table is the documented way to drop a column: nothing to compare there
    assert not lint_text(config(tmp_path, "other STRING", table="orders_v2"), "bridge.toml").errors


def test_timestamp_follows_the_sessions_timestamp_type(tmp_path: Path) -> None:
    # With spark.sql.timestampType = TIMESTAMP_NTZ, Spark parsed (and wrote) TIMESTAMP as TIMESTAMP_NTZ
    write(tmp_path / "landing" / "orders" / "put_date=2024-01-01" / "part-0.parquet", "orders",
          "at TIMESTAMP_NTZ, l ARRAY<STRUCT<t: TIMESTAMP_NTZ>>")
    text = config(tmp_path, "at TIMESTAMP, l ARRAY<STRUCT<t: TIMESTAMP>>")
    with pytest.raises(ConfigError, match="timestamp_ntz -> timestamp: changed type"):
        check_schemas(parse_config(text))
    check_schemas(parse_config(text.replace("[types.orders]", '[spark.conf]\n"spark.sql.timestampType" = '
                                                              '"TIMESTAMP_NTZ"\n[types.orders]')))


def test_an_unparseable_schema_is_left_to_the_ddl_check(tmp_path: Path) -> None:
    write(tmp_path / "landing" / "orders" / "put_date=2024-01-01" / "part-0.parquet", "orders", "id STRING")
    check_schemas(parse_config(config(tmp_path, "id STRANGE")))  # Spark's own parser refuses it at start
    [finding] = lint_text(config(tmp_path, "id STRANGE"), "bridge.toml").errors
    assert "not a Spark DDL column list" in finding.problem


def test_a_local_delta_tables_schema_is_read_from_its_log(tmp_path: Path) -> None:
    # Given a local Delta table written with qty BIGINT by another engine (delta-rs: no Spark footer)
    deltalake = pytest.importorskip("deltalake")
    rows = pa.table({"msg_id": ["m1"], "order_id": ["a1"], "qty": pa.array([1], pa.int64())})
    deltalake.write_deltalake(str(tmp_path / "landing" / "orders"), rows)
    text = config(tmp_path, "order_id STRING, qty INT").replace("[types.orders]",
                                                                '[types.orders]\ntable_format = "delta"')
    # Then the schema its log keeps is the one compared: a narrowed column is refused, naming the log
    [found] = schema_verdicts(parse_config(text))
    assert found.file.name == "_delta_log" and found.old == ddl_schema("order_id STRING, qty BIGINT")
    with pytest.raises(ConfigError, match=r"column 'qty': bigint -> int: narrowed.* in _delta_log"):
        check_schemas(parse_config(text))
    # ... an added nullable column is accepted
    check_schemas(parse_config(text.replace("qty INT", "qty BIGINT, channel STRING")))
