"""SparkExecutor against a real local Spark: landed schema and values, JSON types, failures."""

from __future__ import annotations

import os
import threading
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import TypeConfig
from mqbridge.errors import ConfigError
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.rows import LANDED_COLUMNS
from mqbridge.landing.tables import marker_types
from mqbridge.message import Bulk, Message, Outcome

pytestmark = pytest.mark.integration

LANDED_TYPES = {
    "msg_id": "string", "correlation_id": "string", "message_type": "string", "source": "string",
    "destination": "string", "put_timestamp": "timestamp", "received_timestamp": "timestamp",
    "redelivered": "boolean", "delivery_count": "int", "bulk_id": "string",
    "headers": "map<string,string>", "body": "binary", "put_date": "date",
}
ORDER_SCHEMA = "order_id STRING, amount DECIMAL(12,2), qty INT"
RECEIVED = datetime(2024, 5, 5, 23, 59, 59, 123456, tzinfo=timezone.utc)


def message(msg_id: str, body: bytes = b"x", **fields: Any) -> Message:
    fields.setdefault("received_timestamp", RECEIVED)
    return Message(msg_id=msg_id, body=body, source="amq", destination="/queue/orders",
                   message_type="orders", **fields)


def bulk(*messages: Message) -> Bulk:
    b = Bulk("orders")
    for m in messages:
        b.add(m)
    return b


def naive_utc(ts: datetime) -> datetime:
    """How Spark (session time zone UTC) returns a timestamp."""
    return ts.astimezone(timezone.utc).replace(tzinfo=None)


@pytest.fixture(params=["spark", "arrow"])
def writer(request: pytest.FixtureRequest) -> str:
    """Who writes a raw type's bulks: a Spark job, or pyarrow in the bridge (`[spark] writer`)."""
    return str(request.param)


def raw_executor(spark: Any, warehouse: Path, table: str, writer: str) -> SparkExecutor:
    return SparkExecutor(spark, warehouse, "orders", TypeConfig(table=table),
                         arrow="snappy" if writer == "arrow" else None)


def read(spark: Any, path: Path) -> dict[str, Any]:
    return {row.msg_id: row for row in spark.read.parquet(str(path)).collect()}


def test_rows_land_with_the_exact_schema_and_values(spark: Any, tmp_path: Path, writer: str) -> None:
    # Given messages with binary, large and text bodies, headers, and put times in other zones
    cest = timezone(timedelta(hours=2))
    big = os.urandom(1024 * 1024)
    messages = [
        message("m1", b"\x00\xff\xfe", correlation_id="c-1", headers={"type": "Order", "x-app": "shop"},
                put_timestamp=datetime(2024, 3, 1, 1, 30, 0, 250000, tzinfo=cest), redelivered=True,
                delivery_count=3),
        message("m2", big, put_timestamp=datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)),
        message("m3", "grüße".encode(), headers={"priority": 4}),  # type: ignore[dict-item]
    ]
    executor = raw_executor(spark, tmp_path / "landing", "orders_table", writer)
    b = bulk(*messages)

    # When the bulk is executed
    results = executor.execute(b)

    # Then every message succeeded, in order, and each row holds exactly what the message held
    assert [(r.msg_id, r.outcome, r.bulk_id) for r in results] == [(m, Outcome.SUCCESS, b.bulk_id)
                                                                      for m in ("m1", "m2", "m3")]
    df = spark.read.parquet(str(executor.path))
    assert {f.name: f.dataType.simpleString() for f in df.schema.fields} == LANDED_TYPES
    assert tuple(df.columns) == LANDED_COLUMNS
    rows = read(spark, executor.path)
    assert set(rows) == {"m1", "m2", "m3"}
    m1, m2, m3 = rows["m1"], rows["m2"], rows["m3"]
    assert bytes(m1.body) == b"\x00\xff\xfe" and bytes(m2.body) == big and bytes(m3.body) == "grüße".encode()
    assert m1.correlation_id == "c-1" and m2.correlation_id is None
    assert m1.headers == {"type": "Order", "x-app": "shop"} and m2.headers == {}
    assert m3.headers == {"priority": "4"}  # an adapter's non-string value lands as text
    assert m1.put_timestamp == datetime(2024, 2, 29, 23, 30, 0, 250000)  # UTC, microseconds kept
    assert m1.put_date == date(2024, 2, 29)  # the UTC date, not the sender's
    assert m2.put_timestamp == datetime(2024, 3, 1, 12, 0) and m2.put_date == date(2024, 3, 1)
    assert all(r.received_timestamp == naive_utc(RECEIVED) for r in rows.values())
    assert (m1.redelivered, m1.delivery_count, m2.redelivered, m2.delivery_count) == (True, 3, False, 1)
    for row in rows.values():
        assert (row.message_type, row.source, row.destination, row.bulk_id) == (
            "orders", "amq", "/queue/orders", b.bulk_id)
    assert {p.name for p in executor.path.iterdir() if p.is_dir()} == {
        "put_date=2024-02-29", "put_date=2024-03-01", "put_date=2024-05-05"}
    assert (executor.path / "_SUCCESS").exists() == (writer == "spark")  # pyarrow's files are moved in
    assert not list(executor.path.glob("_staging/*/*"))
    assert executor.rows_written == 3 and executor.writes == 1
    assert executor.bytes_written == 3 + len(big) + len("grüße".encode())
    assert executor.last_write_seconds > 0


def test_missing_put_timestamp_falls_back_to_received_time(spark: Any, tmp_path: Path, writer: str) -> None:
    executor = raw_executor(spark, tmp_path, "orders", writer)
    assert executor.execute(bulk(message("m1", put_timestamp=None)))[0].ok
    row = read(spark, executor.path)["m1"]
    assert row.put_timestamp == naive_utc(RECEIVED) == row.received_timestamp
    assert row.put_date == date(2024, 5, 5)


def test_appends_accumulate_across_bulks(spark: Any, tmp_path: Path, writer: str) -> None:
    executor = raw_executor(spark, tmp_path, "orders", writer)
    first = bulk(*(message(f"a{i}") for i in range(10)))
    second = bulk(*(message(f"b{i}") for i in range(5)))
    assert all(r.ok for r in executor.execute(first) + executor.execute(second))
    rows = read(spark, executor.path)
    assert len(rows) == 15
    assert {r.bulk_id for r in rows.values()} == {first.bulk_id, second.bulk_id}
    assert executor.rows_written == 15 and executor.writes == 2
    # and the table records the type that landed in it, for the purge (either writer, no ledger)
    assert marker_types(executor.path) == {"orders"}


def test_a_bulk_lands_as_one_file_per_date_until_it_exceeds_file_bytes(spark: Any, tmp_path: Path, writer: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def files(executor: SparkExecutor) -> list[Path]:
        return sorted(executor.path.glob("put_date=*/*.parquet"))

    small = raw_executor(spark, tmp_path, "small", writer)
    assert all(r.ok for r in small.execute(bulk(*(message(f"s{i}", b"x" * 100) for i in range(300)))))
    assert len(files(small)) == 1  # one date, one file (not one per core)

    # Given files of at most 10 KB of bodies: 30 KB of bodies are spread over 3 files
    monkeypatch.setattr("mqbridge.landing.writes.frames.FILE_BYTES", 10_000)
    big = raw_executor(spark, tmp_path, "big", writer)
    assert all(r.ok for r in big.execute(bulk(*(message(f"b{i}", b"x" * 100) for i in range(300)))))
    assert len(read(spark, big.path)) == 300
    assert 2 <= len(files(big)) <= 3  # coalesce never adds partitions: at most the default parallelism
    for path in files(big):  # each file sorted by put_timestamp (time-range reads skip files)
        times = [r.put_timestamp for r in spark.read.parquet(str(path)).collect()]
        assert times == sorted(times)


def test_empty_bulk_writes_nothing(spark: Any, tmp_path: Path, writer: str) -> None:
    executor = raw_executor(spark, tmp_path, "orders", writer)
    assert executor.execute(bulk()) == []
    assert not executor.path.exists()


def test_json_type_lands_parsed_columns_and_rejects_only_the_bad_bodies(spark: Any, tmp_path: Path) -> None:
    # Given a JSON type and a bulk mixing valid and invalid bodies
    bodies = {
        "ok1": b'{"order_id": "A-1", "amount": "12.5", "qty": 3, "extra": [1, 2]}',
        "not-json": b'{"order_id": "A-2", ',
        "array": b"[1, 2, 3]",
        "not-utf8": b'{"order_id": "\xff\xfe"}',
        "bad-decimal": b'{"order_id": "A-3", "amount": "abc", "qty": 1}',
        "ok2": b'{"order_id": "A-4", "amount": 7}',
        "bad-int": b'{"order_id": "A-5", "qty": 1.5}',
        "single-quotes": b"{'order_id': 'A-6'}",  # Spark's own parser would accept it
    }
    executor = SparkExecutor(spark, tmp_path, "orders", TypeConfig(format="json", schema=ORDER_SCHEMA))
    b = bulk(*(message(k, v) for k, v in bodies.items()))

    # When it is executed
    results = executor.execute(b)

    # Then the valid ones land with parsed columns, each invalid one is PERMANENT with a reason
    assert [r.msg_id for r in results] == list(bodies)
    outcomes = {r.msg_id: r for r in results}
    assert {k for k, r in outcomes.items() if r.ok} == {"ok1", "ok2"}
    for key in bodies.keys() - {"ok1", "ok2"}:
        assert outcomes[key].outcome is Outcome.PERMANENT, key
        assert outcomes[key].reason.startswith("body is not valid JSON for schema: "), key
        assert "\n" not in outcomes[key].reason
    assert "not UTF-8" in outcomes["not-utf8"].reason
    assert "not an object" in outcomes["array"].reason
    assert "'amount' (decimal(12,2))" in outcomes["bad-decimal"].reason
    assert "'qty' (int)" in outcomes["bad-int"].reason

    df = spark.read.parquet(str(executor.path))
    assert df.columns == [*LANDED_COLUMNS[:-1], "order_id", "amount", "qty", "put_date"]
    assert df.schema["amount"].dataType.simpleString() == "decimal(12,2)"
    rows = read(spark, executor.path)
    assert set(rows) == {"ok1", "ok2"}
    assert (rows["ok1"].order_id, rows["ok1"].amount, rows["ok1"].qty) == ("A-1", Decimal("12.50"), 3)
    assert (rows["ok2"].order_id, rows["ok2"].amount, rows["ok2"].qty) == ("A-4", Decimal("7.00"), None)
    assert bytes(rows["ok1"].body) == bodies["ok1"]
    assert executor.rows_written == 2


def test_bulk_of_only_permanent_failures_writes_nothing(spark: Any, tmp_path: Path) -> None:
    executor = SparkExecutor(spark, tmp_path, "orders", TypeConfig(format="json", schema=ORDER_SCHEMA))
    results = executor.execute(bulk(message("m1", b"nope"), message("m2", b'{"qty": "many"}')))
    assert [r.outcome for r in results] == [Outcome.PERMANENT, Outcome.PERMANENT]
    assert not executor.path.exists() and executor.writes == 0


def test_unwritable_target_makes_every_message_retryable_until_it_is_fixed(spark: Any, tmp_path: Path) -> None:
    # Given the table's directory is a regular file
    blocker = tmp_path / "orders"
    blocker.write_text("not a directory")
    executor = SparkExecutor(spark, tmp_path, "orders", TypeConfig(format="json", schema=ORDER_SCHEMA))
    b = bulk(message("m1", b'{"order_id": "1"}'), message("m2", b'{"order_id": "2"}'), message("bad", b"{"))

    # When a bulk is executed, every writable message is RETRYABLE with a one-line reason
    results = executor.execute(b)
    assert [r.outcome for r in results] == [Outcome.RETRYABLE, Outcome.RETRYABLE, Outcome.PERMANENT]
    assert all(r.reason and "\n" not in r.reason and r.bulk_id == b.bulk_id for r in results)
    assert "not a directory" in results[0].reason.lower()  # the root cause, not py4j's "error calling o63"
    assert executor.writes == 0

    # ... and once the file is gone the same bulk lands
    blocker.unlink()
    results = executor.execute(b)
    assert [r.outcome for r in results] == [Outcome.SUCCESS, Outcome.SUCCESS, Outcome.PERMANENT]
    assert set(read(spark, executor.path)) == {"m1", "m2"}


def test_concurrent_executors_of_one_table_do_not_collide(spark: Any, tmp_path: Path, writer: str) -> None:
    executors = [raw_executor(spark, tmp_path, "orders", writer) for _ in range(2)]
    bulks = [bulk(*(message(f"{n}-{i}") for i in range(50))) for n in range(4)]
    results: list[bool] = []
    threads = [threading.Thread(target=lambda e=e, b=b: results.extend(r.ok for r in e.execute(b)))
               for e, b in zip(executors * 2, bulks, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 200 and all(results)
    assert len(read(spark, tmp_path / "orders")) == 200


@pytest.mark.parametrize(("ddl", "expected"), [
    ("order_id STRANG, amount", "types.orders.schema"),
    ("DECIMAL(12,2)", "list of columns"),
    ("msg_id STRING", "clashes"),
])
def test_a_bad_schema_is_a_config_error_and_its_bulks_an_outage(spark: Any, tmp_path: Path, ddl: str,
                                                                 expected: str) -> None:
    # The format/schema combinations are checked at load (tests/unit/config/test_config.py); only the
    # DDL needs Spark's own parser, on first use (the bridge's Spark warm-up stops the bridge for it)
    executor = SparkExecutor(spark, tmp_path, "orders", TypeConfig(format="json", schema=ddl))
    with pytest.raises(ConfigError, match="orders") as info:
        _ = executor.body_format
    assert expected in str(info.value)
    # A bulk meanwhile is not the messages' fault: given back uncounted, nothing written
    results = executor.execute(bulk(message("m1", b'{"order_id": "1"}')))
    assert [(r.outcome, r.outage) for r in results] == [(Outcome.RETRYABLE, True)]
    assert expected in results[0].reason
    assert not (tmp_path / "orders").exists()


def test_an_unwritable_table_makes_a_raw_bulk_retryable_with_either_writer(spark: Any, tmp_path: Path,
                                                                           writer: str) -> None:
    # Given the raw table's directory is a regular file
    blocker = tmp_path / "orders"
    blocker.write_text("not a directory")
    executor = raw_executor(spark, tmp_path, "orders", writer)
    b = bulk(message("m1"), message("m2"))

    # Then the bulk is RETRYABLE with a one-line reason, and lands once the file is gone
    results = executor.execute(b)
    assert [r.outcome for r in results] == [Outcome.RETRYABLE, Outcome.RETRYABLE]
    assert all(r.reason and "\n" not in r.reason for r in results)
    blocker.unlink()
    assert all(r.ok for r in executor.execute(b))
    assert set(read(spark, executor.path)) == {"m1", "m2"}


def test_files_of_both_writers_read_as_one_table_and_pyarrow_honours_the_codec(spark: Any, tmp_path: Path) -> None:
    # Given one table written in turn by Spark and by pyarrow (zstd)
    by_spark = raw_executor(spark, tmp_path, "orders", "spark")
    by_arrow = SparkExecutor(spark, tmp_path, "orders", TypeConfig(table="orders"), arrow="zstd")
    put = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
    assert all(r.ok for r in by_spark.execute(bulk(*(message(f"s{i}", put_timestamp=put) for i in range(5)))))
    assert all(r.ok for r in by_arrow.execute(bulk(*(message(f"a{i}", put_timestamp=put,
                                                                headers={"k": str(i)}) for i in range(5)))))

    # Then Spark reads every row with the landed schema, from files in the same partitions
    df = spark.read.parquet(str(by_spark.path))
    assert {f.name: f.dataType.simpleString() for f in df.schema.fields} == LANDED_TYPES
    rows = read(spark, by_spark.path)
    assert len(rows) == 10 and rows["a3"].headers == {"k": "3"} and rows["a3"].put_timestamp == naive_utc(put)
    import pyarrow.parquet as pq

    arrow_files = [p for p in by_arrow.path.glob("put_date=2024-03-01/*.parquet")
                   if pq.ParquetFile(p).metadata.row_group(0).column(0).compression == "ZSTD"]
    assert len(arrow_files) == 1
    assert all(pq.ParquetFile(p).schema_arrow.field("msg_id").nullable for p in arrow_files)  # as Spark writes
