"""What the tests of Delta commits share (run in the session's Delta-enabled driver, `DeltaSpark.run`):
the app id of their transactions, a frame of rows and a raw bulk of landed rows, and a table's row count."""

from __future__ import annotations

from typing import Any

APP = "mqbridge:test-host:1:1"


def raw_bulk(first: int, count: int) -> Any:
    """A raw bulk of `count` landed rows (`mqbridge.landing.rows`) with ids from `first`."""
    from datetime import UTC, datetime

    from mqbridge.message import Bulk, Message

    bulk = Bulk("orders")
    put = datetime(2026, 11, 28, 12, tzinfo=UTC)
    for i in range(first, first + count):
        bulk.add(Message(msg_id=f"ID:m-{i}", body=f"body {i}".encode(), source="test", destination="/queue/q",
                         put_timestamp=put, identity=f"ID:m-{i}"))
    return bulk


def count_rows(spark: Any, path: str) -> int:
    return int(spark.read.format("delta").load(path).count())


def frame_rows(spark: Any, bulk_id: str, ids: range) -> Any:
    """Rows `ids` of bulk `bulk_id` (id, bulk_id, body, put_date 2026-11-28) as a Spark frame of `spark`."""
    return spark.createDataFrame([(i, bulk_id, f"body {i}", "2026-11-28") for i in ids],
                                 "id LONG, bulk_id STRING, body STRING, put_date STRING") \
        .selectExpr("id", "bulk_id", "body", "CAST(put_date AS DATE) AS put_date")
