"""The typed body formats (xml, csv, fixed; json's keep_body) through a SparkExecutor on a real local
Spark: good bodies land typed, each bad one fails alone with the parser's reason (docs/formats.md); and
one bridge run on ActiveMQ with an XML and a CSV type: the good bodies land once, the bad ones are on
the backout queue with the reason."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import build_app
from mqbridge.config import TypeConfig
from mqbridge.errors import ConfigError
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.rows import LANDED_COLUMNS
from mqbridge.message import Bulk, Message, Outcome
from tests.support.amq import AmqClient, unique_queue
from tests.support.bridge import listener_toml, make_config, read_table, run_until_idle

pytestmark = pytest.mark.integration


def land(spark: Any, tmp_path: Path, config: TypeConfig, bodies: dict[str, bytes]) -> tuple[dict[str, Any], Any]:
    """Execute one bulk of `bodies` (msg_id -> body): the results by msg_id, and the landed frame."""
    bulk = Bulk("orders")
    for msg_id, body in bodies.items():
        bulk.add(Message(msg_id=msg_id, body=body, source="amq", destination="/queue/orders", message_type="orders"))
    executor = SparkExecutor(spark, tmp_path, "orders", config)
    results = {r.msg_id: r for r in executor.execute(bulk)}
    assert list(results) == list(bodies)
    return results, spark.read.parquet(str(executor.path))


def assert_failed(results: dict[str, Any], prefix: str, expected: dict[str, str]) -> None:
    """Each message of `expected` failed PERMANENT, its reason `prefix: ...` holding the given text."""
    for msg_id, text in expected.items():
        result = results[msg_id]
        assert result.outcome is Outcome.PERMANENT, msg_id
        assert result.reason.startswith(f"{prefix}: ") and text in result.reason, (msg_id, result.reason)
        assert "\n" not in result.reason


def test_xml_rows_with_attributes_and_nested_elements(spark: Any, tmp_path: Path) -> None:
    # Given an XML type whose attributes are prefixed "at_", with a nested column, keeping the body
    config = TypeConfig(format="xml", attribute_prefix="at_", keep_body=True,
                        schema="at_id INT, sku STRING, qty INT, amount DECIMAL(12,2), "
                               "lines STRUCT<line: ARRAY<STRUCT<n: INT>>>")
    ok1 = (b'<order id="7"><sku>A1</sku><qty>3</qty><amount>1.50</amount>'
           b"<lines><line><n>1</n></line><line><n>2</n></line></lines></order>")
    bodies = {
        "ok1": ok1,
        "ok2": b'<?xml version="1.0" encoding="UTF-8"?>\n<order id="8"><sku>Gr\xc3\xbc\xc3\x9fe</sku></order>',
        "bad-int": b'<order id="9"><sku>B</sku><qty>x</qty></order>',
        "unclosed": b"<order><sku>C</sku>",
        "two-roots": b"<order/><order/>",
        "not-utf8": b"<order><sku>\xff</sku></order>",
    }

    # When the bulk is landed
    results, df = land(spark, tmp_path, config, bodies)

    # Then the good ones land typed, the bad ones fail alone with the parser's reason
    assert {k for k, r in results.items() if r.ok} == {"ok1", "ok2"}
    assert_failed(results, "body is not valid XML for schema", {
        "bad-int": "'qty' (int)", "unclosed": "line 1", "two-roots": "junk after document element",
        "not-utf8": "not UTF-8"})
    assert df.columns == [*LANDED_COLUMNS[:-1], "at_id", "sku", "qty", "amount", "lines", "body_text", "put_date"]
    rows = {r.msg_id: r for r in df.collect()}
    assert (rows["ok1"].at_id, rows["ok1"].sku, rows["ok1"].qty, rows["ok1"].amount) == (7, "A1", 3, Decimal("1.50"))
    assert [line.n for line in rows["ok1"].lines.line] == [1, 2]
    assert (rows["ok2"].at_id, rows["ok2"].sku, rows["ok2"].qty, rows["ok2"].lines) == (8, "Grüße", None, None)
    assert rows["ok1"].body_text == ok1.decode() and bytes(rows["ok1"].body) == ok1


def test_csv_records_with_a_header_delimiter_and_quote(spark: Any, tmp_path: Path) -> None:
    # Given a CSV type: ';' between fields, "'" around them, a header line of the schema's names
    config = TypeConfig(format="csv", delimiter=";", quote="'", header=True,
                        schema="sku STRING, qty INT, amount DECIMAL(12,2)")
    bodies = {
        "ok1": b"sku;qty;amount\nA1;3;1.50\n",
        "ok2": b"SKU ; Qty ; AMOUNT\r\n'B;''x''';2;",  # a quoted delimiter, a doubled quote, no amount
        "bad-int": b"sku;qty;amount\nC;x;1",
        "bad-decimal": b"sku;qty;amount\nC2;1;lots",
        "wrong-header": b"id;qty;amount\nD;1;1",
        "two-records": b"sku;qty;amount\nE;1;1\nF;2;2",
        "short": b"sku;qty;amount\nG;1",
        "no-header": b"H;1;1",
    }

    results, df = land(spark, tmp_path, config, bodies)

    assert {k for k, r in results.items() if r.ok} == {"ok1", "ok2"}
    assert_failed(results, "body is not a valid CSV record for schema", {
        "bad-int": "'qty' (int)", "bad-decimal": "'amount' (decimal(12,2))", "wrong-header": "header line 'id;qty",
        "two-records": "2 records", "short": "2 fields, the schema has 3 columns", "no-header": "header line"})
    assert df.columns == [*LANDED_COLUMNS[:-1], "sku", "qty", "amount", "put_date"]  # no keep_body
    rows = {r.msg_id: (r.sku, r.qty, r.amount) for r in df.collect()}
    assert rows == {"ok1": ("A1", 3, Decimal("1.50")), "ok2": ("B;'x'", 2, None)}


def test_fixed_width_records_trimmed_and_cast(spark: Any, tmp_path: Path) -> None:
    # Given fixed-width records: 5 characters of sku, 3 of qty, 10 of a date
    config = TypeConfig(format="fixed", widths=[5, 3, 10], keep_body=True,
                        schema="sku STRING, qty INT, shipped DATE")

    def record(sku: str, qty: str, shipped: str, end: str = "") -> bytes:
        return f"{sku:<5}{qty:>3}{shipped:<10}{end}".encode()

    bodies = {
        "ok1": record("A1", "3", "2024-05-01"),
        "ok2": record("Bä", "", "2024-06-30", "\r\n"),  # an empty field is null; a final line break is allowed
        "bad-int": record("C", "x", "2024-05-01"),
        "bad-date": record("D", "1", "2024-13-01"),
        "short": b"E    1",
        "long": record("F", "1", "2024-05-01") + b"zz",
        "two-lines": record("G", "1", "2024-05-01", "\n") + record("H", "1", "2024-05-01"),
    }

    results, df = land(spark, tmp_path, config, bodies)

    assert {k for k, r in results.items() if r.ok} == {"ok1", "ok2"}
    assert_failed(results, "body is not a valid fixed-width record for schema", {
        "bad-int": "'qty' (int)", "bad-date": "'shipped' (date)", "short": "6 characters, the widths add up to 18",
        "long": "20 characters", "two-lines": "line break"})
    rows = {r.msg_id: r for r in df.collect()}
    assert (rows["ok1"].sku, rows["ok1"].qty, rows["ok1"].shipped) == ("A1", 3, date(2024, 5, 1))
    assert (rows["ok2"].sku, rows["ok2"].qty, rows["ok2"].shipped) == ("Bä", None, date(2024, 6, 30))
    assert rows["ok2"].body_text == bodies["ok2"].decode()


def test_json_keeps_its_body_as_text_and_spark_checks_the_format_rules(spark: Any, tmp_path: Path) -> None:
    # keep_body applies to JSON too
    results, df = land(spark, tmp_path / "json", TypeConfig(format="json", schema="id INT", keep_body=True),
                       {"ok": b'{"id": 1}', "bad": b'{"id": "one"}'})
    assert results["ok"].ok and results["bad"].outcome is Outcome.PERMANENT
    assert [(r.id, r.body_text) for r in df.collect()] == [(1, '{"id": 1}')]

    # What only Spark's DDL parser sees is refused by name when the schema is first used
    refused = {
        "types.orders.schema: format = \"csv\" holds flat values": TypeConfig(format="csv", schema="a STRUCT<b: INT>"),
        "types.orders.schema: column 'body_text'": TypeConfig(format="xml", schema="body_text STRING", keep_body=True),
    }
    for expected, config in refused.items():
        with pytest.raises(ConfigError) as info:
            _ = SparkExecutor(spark, tmp_path, "orders", config).body_format
        assert expected in str(info.value)


def test_a_bridge_lands_good_xml_and_csv_bodies_once_and_moves_the_bad_ones_with_the_reason(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given an XML queue and a CSV queue, each with good bodies and a few bad ones among them
    q_xml, q_csv = unique_queue("xml"), unique_queue("csv")
    good_xml = [f'<order id="{i}"><sku>S{i}</sku><qty>{i % 7}</qty></order>'.encode() for i in range(60)]
    bad_xml = [b'<order id="x1"><sku>S</sku></order>', b"<order><sku>S</sku>", b"<qty>1</qty><qty>2</qty>"]
    good_csv = [f"C{i},{i},{i}.25".encode() for i in range(60)]
    bad_csv = [b"C,many,1.00", b"C,1", b"C,1,1\nD,2,2"]
    amq.put_many(q_xml, good_xml[:20] + bad_xml[:2] + good_xml[20:40] + bad_xml[2:] + good_xml[40:])
    amq.put_many(q_csv, bad_csv[:1] + good_csv[:30] + bad_csv[1:] + good_csv[30:])
    cfg = make_config(tmp_path, """
[types.orders_xml]
bulk_timeout = "1s"
format = "xml"
schema = "_id INT, sku STRING, qty INT"
[types.orders_csv]
bulk_timeout = "1s"
format = "csv"
schema = "sku STRING, qty INT, amount DECIMAL(12,2)"
keep_body = true
""" + listener_toml(q_xml, "orders_xml") + listener_toml(q_csv, "orders_csv"))

    # When one bridge run drains both queues
    assert run_until_idle(build_app(cfg, spark=spark).bridge) == 0

    # Then every good body landed once, typed; every bad one is on its backout queue, at its first
    # delivery, with the parser's reason; nothing is left on the queues
    for queue, table, good, bad, prefix in (
            (q_xml, "orders_xml", good_xml, bad_xml, "body is not valid XML for schema: "),
            (q_csv, "orders_csv", good_csv, bad_csv, "body is not a valid CSV record for schema: ")):
        rows = read_table(spark, tmp_path / "landing" / table)
        landed = [bytes(r.body) for r in rows]
        assert len({r.msg_id for r in rows}) == len(rows), f"{table}: a message landed twice"
        assert sorted(landed) == sorted(good), f"{table}: lost or unexpected rows"
        moved = amq.drain(queue + ".backout")
        assert sorted(f.body for f in moved) == sorted(bad), f"{table}: backout queue"
        for frame in moved:
            assert frame.headers["mqbridge-reason"].startswith(prefix), frame.headers["mqbridge-reason"]
            assert frame.headers["mqbridge-delivery-count"] == "1"  # a parse failure is permanent: no retries
        assert amq.depth(queue) == 0
    xml_rows = {r._id: (r.sku, r.qty) for r in read_table(spark, tmp_path / "landing" / "orders_xml")}
    assert xml_rows == {i: (f"S{i}", i % 7) for i in range(60)}
    csv_rows = read_table(spark, tmp_path / "landing" / "orders_csv")
    assert {(r.sku, r.qty, r.amount, r.body_text) for r in csv_rows} == {
        (f"C{i}", i, Decimal(f"{i}.25"), f"C{i},{i},{i}.25") for i in range(60)}
