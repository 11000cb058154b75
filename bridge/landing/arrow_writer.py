"""The Arrow writer: a bulk of a raw type (no `schema`) written as Parquet by pyarrow, in the bridge's
own process, into the bulk's staging directory; the landing protocol (ledger, publication) is the
same as for a Spark write.

Why: a raw bulk needs nothing from Spark but files. Through Spark it becomes an Arrow table, then a
DataFrame whose rows travel to the JVM inside the task (Spark warns "task of very large size"), are
sorted and encoded there: per bulk the JVM spent more CPU than the bridge itself (bench/throughput.py).
pyarrow writes the same rows from the Arrow table the bridge has already built.

The files are laid out as Spark's would be, so that Spark, the purge and any reader see no
difference: `put_date=YYYY-MM-DD/part-00000-<uuid>.c000.<codec>.parquet` under the staging
directory, one file per FILE_BYTES of bodies per put_date, rows sorted by SORT_COLUMNS, every
column nullable (Spark writes them so), timestamps as INT64 microseconds adjusted to UTC (Spark's
TIMESTAMP_MICROS), no dictionary for msg_id and body (WRITE_OPTIONS).
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mqbridge.landing.containers import SORT_COLUMNS

#: `spark.sql.parquet.compression.codec` values pyarrow writes the same way Spark does (Spark's
#: `lz4` is Hadoop's framing and `lzo` is not in pyarrow: those stay with the Spark writer).
CODECS: dict[str, str] = {"snappy": "snappy", "gzip": "gzip", "zstd": "zstd", "none": "none",
                          "uncompressed": "none"}
CODEC_KEY = "spark.sql.parquet.compression.codec"
#: Columns written without a dictionary (as WRITE_OPTIONS does for Spark): nearly all distinct.
NO_DICTIONARY = ("msg_id", "body")
PARTITION = "put_date"


def codec_of(conf: Mapping[str, str]) -> str | None:
    """The pyarrow codec for the session's configured Parquet codec, None if pyarrow has none like it."""
    return CODECS.get(conf.get(CODEC_KEY, "snappy").strip().lower())


def write_bulk(table: pa.Table, target: Path, *, codec: str, file_bytes: int) -> list[Path]:
    """Write `table` (the landed columns, `put_date` among them; any column starting with `_` is
    left out) under `target` partitioned by put_date; the files written."""
    return [path for path, _, _ in write_files(table, target, codec=codec, file_bytes=file_bytes)]


def write_files(table: pa.Table, target: Path, *, codec: str,
                file_bytes: int) -> list[tuple[Path, dt.date, pa.Table]]:
    """`write_bulk`, saying of each file written its put_date and the rows it holds (in the file's
    order, without put_date): what a table format's commit describes the file by (`mqbridge.landing.delta_files`)."""
    columns = [name for name in table.column_names if not name.startswith("_")]
    table = table.select(columns).sort_by([(name, "ascending") for name in SORT_COLUMNS])
    data_columns = [name for name in columns if name != PARTITION]
    schema = pa.schema([table.schema.field(name).with_nullable(True) for name in data_columns])
    dictionary = [name for name in data_columns if name not in NO_DICTIONARY]
    written: list[tuple[Path, dt.date, pa.Table]] = []
    dates = table.column(PARTITION)
    for date in pc.unique(dates).to_pylist():
        rows = table.filter(pc.equal(dates, pa.scalar(date, pa.date32())))
        part = pa.Table.from_arrays([rows.column(name) for name in data_columns], schema=schema)
        directory = target / f"{PARTITION}={date.isoformat()}"
        directory.mkdir(parents=True, exist_ok=True)
        body_bytes = pc.sum(pc.binary_length(part.column("body"))).as_py() or 0
        files = max(1, math.ceil(body_bytes / file_bytes))
        step = math.ceil(part.num_rows / files)
        for start in range(0, part.num_rows, step):
            suffix = "" if codec == "none" else f".{codec}"
            path = directory / f"part-{len(written):05d}-{uuid.uuid4()}.c000{suffix}.parquet"
            rows_of_file = part.slice(start, step)
            pq.write_table(rows_of_file, path, compression=codec, use_dictionary=dictionary,
                           coerce_timestamps="us", store_schema=False)
            written.append((path, date, rows_of_file))
    return written


def write_probe(target: Path) -> None:
    """One row written as Parquet under `target` (created), as a probe of a sink pyarrow writes: the
    same file system calls a bulk makes, with no Spark."""
    target.mkdir(parents=True, exist_ok=True)
    row = pa.table({"id": pa.array([0], pa.int64()),
                    "probed_at": pa.array([datetime.now(timezone.utc)], pa.timestamp("us", tz="UTC"))})
    pq.write_table(row, target / f"part-00000-{uuid.uuid4()}.c000.parquet", coerce_timestamps="us")
