"""The `add` actions of Delta data files pyarrow wrote (`mqbridge.landing.delta_files`): their statistics
bound every row, and a table whose shape needs Spark's writer is named so. Delta itself reads such
files in tests/integration/test_delta_commit.py."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mqbridge.landing import arrow_writer, delta_files
from mqbridge.landing.delta import STATS_COLUMNS

UTC = dt.timezone.utc
#: A bridge table's schema as Delta keeps it (Spark's JSON of the landed columns and identity).
TABLE_FIELDS = {"msg_id": "string", "put_timestamp": "timestamp", "bulk_id": "string", "body": "binary",
                "headers": {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True}}
CONFIGURATION = {"delta.dataSkippingStatsColumns": ",".join(STATS_COLUMNS), "delta.checkpointInterval": "100"}


def schema_json(fields: dict[str, object], **extra: dict[str, object]) -> str:
    listed = [{"name": name, "type": kind, "nullable": True, "metadata": {}} for name, kind in fields.items()]
    listed.append({"name": "put_date", "type": "date", "nullable": True, "metadata": {}})
    for field in listed:
        field.update(extra.get(str(field["name"]), {}))
    return json.dumps({"type": "struct", "fields": listed})


def files_columns() -> dict[str, str]:
    return {name: delta_files._type_name(kind) for name, kind in TABLE_FIELDS.items()}


def test_the_timestamp_bounds_are_rounded_outwards_to_the_millisecond_and_strings_kept_whole() -> None:
    # Given rows whose put times fall between milliseconds, and a bulk id longer than Delta's 32-character prefix
    put = [dt.datetime(2026, 11, 30, 12, 0, 0, 123_456, tzinfo=UTC), dt.datetime(2026, 11, 30, 12, 0, 1, 999_001,
                                                                                   tzinfo=UTC)]
    long_id = "orders-" + "x" * 40
    rows = pa.table({"put_timestamp": pa.array(put, pa.timestamp("us", tz="UTC")),
                     "bulk_id": pa.array([long_id, long_id + "y"]), "source": pa.array([None, "amq"]),
                     "body": pa.array([b"a", b"b"])})
    # When their statistics are taken for the put time, the bulk id, the source and the body (no bounds: binary)
    stats = delta_files.statistics(rows, ["put_timestamp", "bulk_id", "source", "body", "not_there"])
    # Then the minimum is floored and the maximum ceiled, so both rows lie within them
    assert stats["minValues"]["put_timestamp"] == "2026-11-30T12:00:00.123Z"
    assert stats["maxValues"]["put_timestamp"] == "2026-11-30T12:00:02.000Z"
    assert stats["minValues"]["bulk_id"] == long_id and stats["maxValues"]["bulk_id"] == long_id + "y"
    assert stats["minValues"]["source"] == "amq" and stats["nullCount"] == {"put_timestamp": 0, "bulk_id": 0,
                                                                            "source": 1, "body": 0}
    assert "body" not in stats["minValues"] and stats["numRecords"] == 2 and "tightBounds" not in stats


def test_a_whole_millisecond_stays_itself_and_a_column_of_nulls_has_no_bounds() -> None:
    at = dt.datetime(2026, 1, 2, 3, 4, 5, 6_000, tzinfo=UTC)
    rows = pa.table({"put_timestamp": pa.array([at], pa.timestamp("us", tz="UTC")),
                     "destination": pa.array([None], pa.string())})
    stats = delta_files.statistics(rows, ["put_timestamp", "destination"], deletion_vectors=True)
    assert stats["minValues"] == {"put_timestamp": "2026-01-02T03:04:05.006Z"} == stats["maxValues"]
    assert stats["nullCount"]["destination"] == 1 and stats["tightBounds"] is True


def test_an_add_action_names_the_file_under_the_table_with_its_partition_size_and_rows(tmp_path: Path) -> None:
    # Given a bulk written by pyarrow under a table's directory, as the Parquet path writes one
    put = dt.datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC)
    rows = pa.table({"msg_id": ["b", "a"], "put_timestamp": pa.array([put, put], pa.timestamp("us", tz="UTC")),
                     "bulk_id": ["bulk-1", "bulk-1"], "body": [b"1", b"2"],
                     "put_date": pa.array([put.date(), put.date()], pa.date32())})
    written = arrow_writer.write_files(rows, tmp_path, codec="snappy", file_bytes=1 << 20)
    [(path, date, part)] = written
    # When its add action is made
    action = json.loads(delta_files.add_action(tmp_path, path, date, part, STATS_COLUMNS, False))["add"]
    # Then it names the file relative to the table, in its partition, with its size, and counts its rows
    assert action["path"] == path.relative_to(tmp_path).as_posix() and action["path"].startswith("put_date=2026-11-30/")
    assert action["partitionValues"] == {"put_date": "2026-11-30"} and action["dataChange"] is True
    assert action["size"] == path.stat().st_size and pq.read_metadata(path).num_rows == 2
    stats = json.loads(action["stats"])
    assert stats["numRecords"] == 2 and stats["minValues"]["bulk_id"] == "bulk-1"
    assert set(stats["nullCount"]) == {"put_timestamp", "bulk_id"}  # the stats columns the file has


def test_a_bridge_table_takes_the_files_and_other_shapes_are_named() -> None:
    columns = files_columns()
    assert delta_files.shape_problem(schema_json(TABLE_FIELDS), ["put_date"], CONFIGURATION, columns) == ""
    assert delta_files.shape_problem(schema_json(TABLE_FIELDS), ["put_date"],
                                     {**CONFIGURATION, "delta.columnMapping.mode": "none"}, columns) == ""
    problems = {
        "partitioned by": (schema_json(TABLE_FIELDS), [], CONFIGURATION),
        "table property delta.columnMapping.mode": (schema_json(TABLE_FIELDS), ["put_date"],
                                                    {**CONFIGURATION, "delta.columnMapping.mode": "name"}),
        "table property delta.constraints.positive": (schema_json(TABLE_FIELDS), ["put_date"],
                                                      {**CONFIGURATION, "delta.constraints.positive": "x > 0"}),
        "no delta.dataSkippingStatsColumns": (schema_json(TABLE_FIELDS), ["put_date"], {}),
        "columns": (schema_json({**TABLE_FIELDS, "added": "string"}), ["put_date"], CONFIGURATION),
        "column msg_id is integer": (schema_json({**TABLE_FIELDS, "msg_id": "integer"}), ["put_date"], CONFIGURATION),
        "column bulk_id is filled or checked": (
            schema_json(TABLE_FIELDS, bulk_id={"metadata": {"delta.generationExpression": "'x'"}}), ["put_date"],
            CONFIGURATION),
        "column body is NOT NULL": (schema_json(TABLE_FIELDS, body={"nullable": False}), ["put_date"], CONFIGURATION),
    }
    for expected, (schema, partitions, configuration) in problems.items():
        assert delta_files.shape_problem(schema, partitions, configuration, columns).startswith(expected), expected
