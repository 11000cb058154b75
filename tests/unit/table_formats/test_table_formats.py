"""The table-format seam (`mqbridge.table_formats`): every format implements every operation of
`TableFormat` (and of its compaction), a table on disk is recognised as its format (a Delta table
delta-rs wrote, a Parquet directory, nothing yet), a bulk whose Delta table is gone is still Delta's,
the configuration's format of a table (a type's own `table_format` wins) and its refusals (types of
one table with different formats, an unknown name), and what a Spark driver needs per format."""

from __future__ import annotations

import inspect
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mqbridge.config import BridgeConfig, parse_config
from mqbridge.errors import ConfigError
from mqbridge.table_formats import (
    DEFAULT,
    FORMATS,
    TableCompaction,
    TableFormat,
    command_session_conf,
    format_for,
    format_named,
    format_of,
    format_of_bulk,
    session_conf_for,
)
from mqbridge.table_formats.delta import DeltaFormat
from mqbridge.table_formats.parquet import ParquetFormat

ROWS = pa.table({"msg_id": ["m0", "m1"], "bulk_id": ["b0", "b0"],
                 "put_timestamp": pa.array([datetime(2026, 5, 1, 10, tzinfo=timezone.utc),
                                            datetime(2026, 5, 1, 11, tzinfo=timezone.utc)],
                                           pa.timestamp("us", tz="UTC")),
                 "put_date": ["2026-05-01", "2026-05-01"]})


def _config(spark_format: str = "parquet", **types: str | None) -> BridgeConfig:
    """A configuration with `[spark] table_format` and each type given with its own table_format (or none)."""
    text = f'[spark]\ntable_format = "{spark_format}"\n'
    for name, own in types.items():
        text += f'[types.{name}]\ntable = "shared"\n' + (f'table_format = "{own}"\n' if own else "")
    text += ('[sources.amq]\nkind = "stomp"\n[[listeners]]\nsource = "amq"\nqueue = "/queue/orders"\n'
             f'message_type = "{next(iter(types))}"\nbackout_queue = "/queue/orders.backout"\n')
    return parse_config(text)


def _overrides(cls: type, base: type) -> list[str]:
    """The abstract operations of `base` that `cls` does not implement itself."""
    abstract: frozenset[str] = base.__abstractmethods__  # type: ignore[attr-defined]
    return sorted(name for name in abstract if getattr(cls, name) is getattr(base, name))


@pytest.mark.parametrize("table_format", list(FORMATS.values()), ids=list(FORMATS))
def test_every_format_implements_every_operation(table_format: TableFormat) -> None:
    # Then nothing of the interface is left abstract or inherited, and the format says who it is
    assert not inspect.isabstract(type(table_format)) and _overrides(type(table_format), TableFormat) == []
    assert format_named(table_format.name) is table_format and table_format.title
    assert isinstance(table_format.transactional, bool) and isinstance(table_format.catalog_partitions, bool)
    # ... and its compaction's part of a round too (made without Spark running: nothing is asked of it yet)
    compaction = table_format.compaction(None, None, small_file_size=1, target_file_size=2,  # type: ignore[arg-type]
                                         vacuum_retention=0.0, counters=None, stop=None)  # type: ignore[arg-type]
    assert isinstance(compaction, TableCompaction) and _overrides(type(compaction), TableCompaction) == []


def test_a_table_on_disk_is_recognised_as_its_format(tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    # Given a Delta table delta-rs wrote, a directory of Parquet containers and a table not landed yet
    delta_table, parquet_table = tmp_path / "delta_orders", tmp_path / "orders"
    deltalake.write_deltalake(str(delta_table), ROWS, mode="append", partition_by=["put_date"])
    (parquet_table / "put_date=2026-05-01").mkdir(parents=True)
    pq.write_table(ROWS.drop(["put_date"]), parquet_table / "put_date=2026-05-01" / "part-0.parquet")
    # Then each is its format, and what the format reads of it without Spark is the same rows
    assert isinstance(format_of(delta_table), DeltaFormat)
    assert isinstance(format_of(parquet_table), ParquetFormat) and format_of(parquet_table) is DEFAULT
    assert format_of(tmp_path / "nothing_yet") is DEFAULT
    for table in (delta_table, parquet_table):
        [container] = format_of(table).containers(table)
        assert (container.put_date, container.rows) == ("2026-05-01", 2)
        assert container.oldest == datetime(2026, 5, 1, 10, tzinfo=timezone.utc)
    assert format_of(delta_table).describe(delta_table) == "Delta table, version 0"
    assert format_of(parquet_table).describe(parquet_table) == "Parquet"
    # ... and a bulk its table committed by transaction is the transactional format's, its table gone or not
    committed = SimpleNamespace(transaction=object())
    assert format_of_bulk(tmp_path / "dropped", committed) is FORMATS["delta"]
    assert format_of_bulk(parquet_table, SimpleNamespace(transaction=None)) is DEFAULT


def test_time_travel_is_refused_where_the_format_keeps_no_versions() -> None:
    with pytest.raises(ConfigError, match="orders is not a Delta table"):
        format_named("parquet").check_time_travel("orders")
    format_named("delta").check_time_travel("orders")  # every version its log still holds


def test_the_configuration_says_the_format_of_a_table() -> None:
    # A type's own table_format wins over [spark]; no types: [spark]'s
    config = _config("parquet", orders="delta", invoices="delta")
    assert format_for(config, ["orders", "invoices"]).name == "delta"
    assert format_for(_config("delta", orders=None), ["orders"]).name == "delta"
    assert format_for(_config("delta", orders="parquet"), ["orders"]).name == "parquet"
    assert format_for(config, []).name == "parquet"


def test_types_of_one_table_with_different_formats_are_refused() -> None:
    # (refused at load for a plain table, `mqbridge.config.tables.mixed_format_problems`; here as a
    # template's rendered table would reach it)
    config = _config("parquet", orders="delta", invoices="delta")
    config.types["invoices"] = config.types["invoices"].model_copy(update={"table_format": None})
    with pytest.raises(ConfigError) as refused:
        format_for(config, ["orders", "invoices"])
    assert "one table has one format" in str(refused.value)
    assert "delta: orders" in str(refused.value) and "parquet: invoices" in str(refused.value)
    with pytest.raises(ConfigError, match="not a table format .*known: delta, iceberg, parquet"):
        format_named("orc")


def test_a_spark_driver_gets_what_the_configured_formats_need(tmp_path: Path) -> None:
    conf = {"spark.sql.shuffle.partitions": "2"}
    # Parquet alone: nothing added, no jars asked for
    assert session_conf_for(_config("parquet", orders=None).types, "parquet", tmp_path, conf) == conf
    # a Delta type: Delta's jars, missing here, are named with the command that fetches them
    with pytest.raises(ConfigError, match="mqbridge jars"):
        session_conf_for(_config("parquet", orders="delta").types, "parquet", tmp_path, conf)
    (tmp_path / "delta").mkdir()
    for jar in ("delta-spark_4.1_2.13-4.4.0.jar", "delta-storage-4.4.0.jar"):
        (tmp_path / "delta" / jar).touch()
    with_delta = session_conf_for(_config("parquet", orders="delta").types, "parquet", tmp_path, conf)
    assert with_delta["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert with_delta["spark.sql.shuffle.partitions"] == "2" and with_delta["spark.jars"].count(".jar") == 2
    # a Spark Connect server is started with them by its operator: a command's own conf stays as given
    remote = parse_config('[spark]\nremote = "sc://localhost:15002"\ntable_format = "delta"\n[types.orders]\n'
                          '[sources.amq]\nkind = "stomp"\n[[listeners]]\nsource = "amq"\nqueue = "/queue/orders"\n'
                          'message_type = "orders"\nbackout_queue = "/queue/orders.backout"\n')
    assert command_session_conf(remote) == dict(remote.spark.conf)
