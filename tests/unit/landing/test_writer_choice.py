"""Who writes a raw type's Parquet files (`[spark] writer`), decided before any Spark is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.config import SparkSection, TypeConfig
from mqbridge.errors import ConfigError
from mqbridge.landing.arrow_writer import codec_of
from mqbridge.landing.session import DEFAULT_CONF, SparkSessions
from mqbridge.landing.writer_choice import arrow_codec, spark_writes_bulks, spark_written


def choice(writer: str, *, remote: str | None = None, codec: str | None = None) -> str | None:
    section = SparkSection(remote=remote, warehouse=Path("landing"))
    conf = {**DEFAULT_CONF, **({"spark.sql.parquet.compression.codec": codec} if codec else {})}
    return arrow_codec(writer, SparkSessions(section), conf)


@pytest.mark.parametrize(("writer", "remote", "codec", "expected"), [
    ("auto", None, None, "snappy"),  # Spark's default codec
    ("auto", None, "ZSTD", "zstd"),
    ("auto", None, "uncompressed", "none"),
    ("auto", "sc://spark:15002", None, None),  # the warehouse is the Connect server's
    ("auto", None, "lz4", None),  # Hadoop's LZ4 framing: Spark writes
    ("spark", None, None, None),
    ("arrow", None, "gzip", "gzip"),
    ("arrow", "sc://spark:15002", None, "snappy"),  # asked for: the operator shares the warehouse
])
def test_the_writer_is_pyarrow_unless_spark_is_needed(writer: str, remote: str | None, codec: str | None,
                                                      expected: str | None) -> None:
    assert choice(writer, remote=remote, codec=codec) == expected


def test_arrow_with_a_codec_pyarrow_does_not_write_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"spark.writer = \"arrow\".*'lzo'.*snappy") as info:
        choice("arrow", codec="lzo")
    assert "writer = \"spark\"" in str(info.value)


def test_an_unknown_writer_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match="writer"):
        SparkSection(writer="duckdb")  # type: ignore[arg-type]
    assert codec_of({}) == "snappy"


@pytest.mark.parametrize(("writer", "remote", "formats", "expected"), [
    ("auto", None, ["raw"], False),  # pyarrow writes every bulk in the bridge: no start-up probe needed
    ("auto", None, ["raw", "json"], True),  # JSON bodies are parsed and written by Spark
    ("spark", None, ["raw"], True),
    ("auto", "sc://spark:15002", ["raw"], True),  # the Connect server writes where it sees
])
def test_the_start_up_probe_is_for_warehouses_spark_writes_into(writer: str, remote: str | None,
                                                                formats: list[str], expected: bool) -> None:
    section = SparkSection(remote=remote, warehouse=Path("landing"))
    types = {f"t{i}": TypeConfig(format=f, schema="a STRING" if f == "json" else None)  # type: ignore[arg-type]
             for i, f in enumerate(formats)}
    assert spark_writes_bulks(SparkSessions(section), types, writer, {}) is expected


@pytest.mark.parametrize(("spark_format", "type_format"), [("delta", None), ("iceberg", None), ("parquet", "delta"),
                                                           ("parquet", "iceberg")])
def test_raw_types_landing_in_delta_or_iceberg_tables_are_written_by_spark(spark_format: str,
                                                                           type_format: str | None) -> None:
    """pyarrow writes no Delta commit and no Iceberg snapshot: `writer = "auto"` does not take them for its own."""
    section = SparkSection(warehouse=Path("landing"))
    types = {"raw": TypeConfig(table_format=type_format), "plain": TypeConfig()}  # type: ignore[arg-type]
    written = spark_written(SparkSessions(section), types, "auto", {}, spark_format)
    assert written == (["raw", "plain"] if spark_format != "parquet" else ["raw"])
    assert spark_writes_bulks(SparkSessions(section), {"plain": TypeConfig()}, "auto", {}, "parquet") is False
