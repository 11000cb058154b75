"""What a replay reads (`mqbridge.resend.replay.read_rows`) through the real local Spark session: the rows
a selection designates, oldest `put_timestamp` first across files and days, byte-exact, each with a
key of its own (two rows of one bulk with one message id too)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from mqbridge.landing.arrow_writer import write_bulk
from mqbridge.landing.rows import arrow_table
from mqbridge.message import Bulk, Message
from mqbridge.resend.replay import Selection, read_rows

pytestmark = pytest.mark.integration

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=timezone.utc)


def _land(table: Path, stamps: list[tuple[str, int]], bulk_id: str) -> None:
    """Write one bulk: (msg_id, hours before NOW) per message, each body naming it."""
    bulk = Bulk("orders", bulk_id=bulk_id)
    for msg_id, hours in stamps:
        bulk.add(Message(msg_id=msg_id, body=f"{msg_id}:{hours}".encode() + b"\x00\xff", source="amq",
                         destination="/queue/o", put_timestamp=NOW - timedelta(hours=hours),
                         correlation_id=f"c-{msg_id}", headers={"x-app": "shop" if hours < 30 else "old"}))
    write_bulk(arrow_table(bulk, list(range(len(bulk.messages)))), table, codec="snappy", file_bytes=1 << 20)


def test_rows_come_oldest_first_across_files_and_as_selected(tmp_path: Path, spark: Any) -> None:
    # Given two bulks over three days, one holding two messages with one id
    table = tmp_path / "orders"
    _land(table, [("a", 1), ("b", 50), ("c", 26)], "bulk-1")
    _land(table, [("d", 2), ("e", 27), ("e", 3)], "bulk-2")

    # When every row is read, and then a selection
    rows = list(read_rows(spark, table, Selection()))
    selected = list(read_rows(spark, table, Selection.of("headers['x-app'] = 'shop'", 2 * 3600.0, 30 * 3600.0, NOW)))

    # Then oldest first, byte-exact, with headers and correlation id, each with its own key
    assert [r.body for r in rows] == [b"b:50\x00\xff", b"e:27\x00\xff", b"c:26\x00\xff", b"e:3\x00\xff",
                                      b"d:2\x00\xff", b"a:1\x00\xff"]
    assert len({r.key for r in rows}) == 6
    assert rows[0].correlation_id == "c-b" and rows[0].headers == {"x-app": "old"} and rows[0].msg_id == "b"
    # ... put 2 h to 30 h ago, with the header: c (26 h, shop), e (27 h, shop), e (3 h), d (2 h, at the cut)
    assert [r.body for r in selected] == [b"e:27\x00\xff", b"c:26\x00\xff", b"e:3\x00\xff"]
    # ... and the same keys on every read (a resumed replay recognises them)
    assert [r.key for r in read_rows(spark, table, Selection())] == [r.key for r in rows]
