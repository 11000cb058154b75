"""Container listing from Parquet footers, for files with and without put_timestamp statistics."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mqbridge.landing.containers import containers

STAMPS = [datetime(2024, 6, 1, h, tzinfo=timezone.utc) for h in (5, 1, 9)]


@pytest.mark.parametrize("int96", [False, True])
def test_rows_bytes_and_key_range_of_each_container(tmp_path: Path, int96: bool) -> None:
    # Given a container with one file, written with statistics (TIMESTAMP_MICROS) or without (Spark's INT96)
    directory = tmp_path / "orders" / "put_date=2024-06-01"
    directory.mkdir(parents=True)
    table = pa.table({"msg_id": ["a", "b", "c"], "put_timestamp": pa.array(STAMPS, pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, directory / "part-1.parquet", use_deprecated_int96_timestamps=int96)
    (directory / "_mqbridge_purge_x").touch()  # hidden names are not data
    # When the table's containers are listed
    [c] = containers(tmp_path / "orders")
    # Then rows, size and the oldest and newest key are right either way
    assert (c.put_date, c.rows, len(c.files)) == ("2024-06-01", 3, 1)
    assert c.bytes == (directory / "part-1.parquet").stat().st_size
    assert (c.oldest, c.newest) == (min(STAMPS), max(STAMPS))
