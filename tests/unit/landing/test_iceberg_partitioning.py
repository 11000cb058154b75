"""`[types.X] partition_by` on Iceberg tables (`mqbridge.landing.iceberg`): the transform a new table is
made with, the evolution an existing table's spec gets (its put-time field replaced, other fields kept,
nothing done when it is already right), the refusal of a spec the bridge did not make, naming the key;
the day condition the purge and the compaction work by (`mqbridge.maintenance.iceberg.table`), and the day
of a file of any of those specs (`mqbridge.landing.iceberg_read`)."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from mqbridge.errors import ConfigError, PurgeError
from mqbridge.landing.iceberg import PARTITION_TRANSFORMS, describe_partitioning, partition_change
from mqbridge.landing.iceberg_read import _put_date
from mqbridge.maintenance.iceberg.table import day_condition


def test_a_day_is_days_of_put_timestamp_and_an_hour_hours_of_it() -> None:
    assert PARTITION_TRANSFORMS == {"day": "days(put_timestamp)", "hour": "hours(put_timestamp)"}


@pytest.mark.parametrize(("fields", "partition_by"), [(["days(put_timestamp)"], "day"),
                                                      (["hours(put_timestamp)"], "hour"),
                                                      (["days(put_timestamp)", "bucket(4, source)"], "day")])
def test_a_table_partitioned_as_configured_is_left_alone(fields: list[str], partition_by: str) -> None:
    assert partition_change(fields, partition_by) is None


@pytest.mark.parametrize(("fields", "partition_by", "clause"), [
    (["days(put_timestamp)"], "hour", "REPLACE PARTITION FIELD days(put_timestamp) WITH hours(put_timestamp)"),
    (["hours(put_timestamp)"], "day", "REPLACE PARTITION FIELD hours(put_timestamp) WITH days(put_timestamp)"),
    # a table made before partition_by (identity of the put_date column)
    (["put_date"], "day", "REPLACE PARTITION FIELD put_date WITH days(put_timestamp)"),
    (["bucket(4, source)", "put_date"], "hour", "REPLACE PARTITION FIELD put_date WITH hours(put_timestamp)"),
])
def test_a_changed_partition_by_evolves_the_put_time_field_only(fields: list[str], partition_by: str,
                                                                clause: str) -> None:
    assert partition_change(fields, partition_by) == clause


@pytest.mark.parametrize("fields", [[], ["bucket(4, msg_id)"], ["put_date", "hours(put_timestamp)"]])
def test_a_spec_the_bridge_cannot_tell_is_refused_naming_the_key(fields: list[str]) -> None:
    """No put-time field (unpartitioned, or by something else) or two: the bridge does not guess which to
    change; the table would otherwise be half partitioned without anyone knowing."""
    with pytest.raises(ConfigError) as info:
        partition_change(fields, "hour", "[types.orders] partition_by")
    assert str(info.value).startswith('[types.orders] partition_by = "hour" wants an Iceberg table partitioned by '
                                      "hours(put_timestamp)")


def test_the_day_condition_is_the_put_date_and_its_utc_put_timestamp_range() -> None:
    assert day_condition(Path("t"), "2024-12-31") == (
        "put_date = DATE'2024-12-31' AND put_timestamp >= TIMESTAMP'2024-12-31 00:00:00+00:00' "
        "AND put_timestamp < TIMESTAMP'2025-01-01 00:00:00+00:00'")
    with pytest.raises(PurgeError):
        day_condition(Path("t"), "2024-12-31' OR 1=1 --")


@pytest.mark.parametrize(("entry", "put_date"), [
    ({"partition": {"put_date": date(2024, 6, 1)}}, "2024-06-01"),
    ({"partition": {"put_timestamp_day": date(2024, 6, 1)}}, "2024-06-01"),
    ({"partition": {"put_timestamp_day": 19875}}, "2024-06-01"),  # days since the epoch
    ({"partition": {"put_timestamp_day": None, "put_timestamp_hour": 19875 * 24 + 23}}, "2024-06-01"),
    ({"partition": {}, "readable_metrics": {"put_date": {"lower_bound": date(2024, 6, 2)}}}, "2024-06-02"),
])
def test_a_files_put_date_comes_from_any_spec_the_bridge_makes(entry: dict[str, Any], put_date: str) -> None:
    """A position delete file has no put_date bounds: its partition tells its day, whichever spec wrote it
    (`mqbridge tables` and the row cap's oldest rows count a partition's rows by it)."""
    assert _put_date(entry) == put_date


#: Spark 4.1's DESCRIBE TABLE of Iceberg 1.12 tables (col_name, data_type), as printed by a bare check.
DESCRIBED_BY_TRANSFORM = [("id", "int"), ("put_timestamp", "timestamp"), ("put_date", "date"), ("", ""),
                          ("# Partitioning", ""), ("Part 0", "hours(put_timestamp)")]
DESCRIBED_BY_IDENTITY = [("put_timestamp", "timestamp"), ("put_date", "date"), ("# Partition Information", ""),
                         ("# col_name", "data_type"), ("put_date", "date")]


@pytest.mark.parametrize(("rows", "fields"), [(DESCRIBED_BY_TRANSFORM, ["hours(put_timestamp)"]),
                                              (DESCRIBED_BY_IDENTITY, ["put_date"]),
                                              (DESCRIBED_BY_TRANSFORM[:4], [])])
def test_the_spec_is_read_from_either_form_of_describe(rows: list[tuple[str, str]], fields: list[str]) -> None:
    """A spec of identity fields only is shown as Hive's partition columns, a spec with a transform as
    `Part N` rows; the table made before partition_by (by put_date) is the first kind."""
    assert describe_partitioning(rows) == fields
