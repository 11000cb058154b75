"""Who writes a type's bulks (`[spark] writer`): pyarrow in the bridge's own process, or Spark; and so
whether a running bridge needs a Spark session at all. Decided from the configuration, before any
Spark is started: a bridge whose every bulk pyarrow writes never starts a driver JVM.
"""

from __future__ import annotations

from collections.abc import Mapping

from mqbridge.config import TypeConfig
from mqbridge.errors import ConfigError
from mqbridge.landing import arrow_writer
from mqbridge.landing.session import DEFAULT_CONF, SparkSessions, is_connect


def arrow_codec(writer: str, sessions: SparkSessions, conf: Mapping[str, str]) -> str | None:
    """The pyarrow codec raw bulks are written with (`mqbridge.landing.arrow_writer`), or None when Spark
    writes them: `writer` "spark"; "auto" with Spark Connect (the warehouse is the server's) or a
    codec pyarrow does not write. ConfigError for "arrow" with such a codec."""
    if writer == "spark":
        return None
    codec = arrow_writer.codec_of(conf)
    if writer == "arrow":
        if codec is None:
            raise ConfigError(f"spark.writer = \"arrow\": pyarrow does not write the Parquet codec "
                              f"{conf.get(arrow_writer.CODEC_KEY)!r} ({arrow_writer.CODEC_KEY}); "
                              f"use one of {', '.join(arrow_writer.CODECS)} or writer = \"spark\"")
        return codec
    if writer != "auto":
        raise ConfigError(f"spark.writer: expected auto, arrow or spark, got {writer!r}")
    section = sessions.section
    remote = section.remote if section is not None else is_connect(sessions.current)
    return None if remote else codec


def spark_written(sessions: SparkSessions, types: Mapping[str, TypeConfig], writer: str,
                  conf: Mapping[str, str], table_format: str = "parquet") -> list[str]:
    """The types whose bulks Spark writes: typed types (json, xml, csv, fixed), every type landing in a
    Delta or Iceberg table (its own or `table_format`, `[spark]`'s: pyarrow writes no Delta commit and no
    Iceberg snapshot), and every type with Spark Connect, `writer = "spark"` or a codec pyarrow lacks;
    pyarrow writes the others (raw bulks into Parquet tables) in this process."""
    codec = arrow_codec(writer, sessions, {**DEFAULT_CONF, **dict(conf)})
    return [name for name, type_cfg in types.items()
            if codec is None or type_cfg.format != "raw" or (type_cfg.table_format or table_format) != "parquet"]


def spark_writes_bulks(sessions: SparkSessions, types: Mapping[str, TypeConfig], writer: str,
                       conf: Mapping[str, str], table_format: str = "parquet") -> bool:
    """Whether Spark writes any type's bulks (`spark_written`); else pyarrow writes every bulk in this
    process, which sees each file it writes."""
    return bool(spark_written(sessions, types, writer, conf, table_format))
