"""Schema evolution of a typed table with a real local Spark (in-process, one session shared with the
other integration tests): a type lands with schema v1, then v2 adds a column and widens two types; the
catalog table follows, a reader by name sees one merged schema with NULL in the new column for the old
rows; a v3 that drops a column or narrows a type is refused by check-config and by the start check,
naming the table, the column, the old and the new type. The bridge across two real `mqbridge run`
processes is tests/integration/test_schema_evolution_run.py."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from mqbridge.config import TypeConfig, parse_config
from mqbridge.config.ddl import ddl_schema
from mqbridge.errors import ConfigError
from mqbridge.landing.catalog import CatalogRegistrar
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.schema_check import file_schema, table_schemas
from mqbridge.landing.schema_verdicts import check_schemas
from mqbridge.lint import lint_text
from mqbridge.lint.findings import KeyLines
from mqbridge.maintenance.compaction.compactor import Compactor
from mqbridge.maintenance.engine.costs import CostModel
from mqbridge.message import Bulk, Message
from tests.support.configs import typed_orders

pytestmark = pytest.mark.integration

V1 = "order_id STRING NOT NULL, amount DECIMAL(10,2), qty INT"
V2 = "order_id STRING NOT NULL, amount DECIMAL(12,2), qty BIGINT, channel STRING"
V3 = "order_id STRING NOT NULL, amount DECIMAL(12,2), qty INT"  # drops channel, narrows qty
DAY1 = datetime(2024, 5, 5, 10, 0, tzinfo=timezone.utc)
DAY2 = datetime(2024, 5, 6, 10, 0, tzinfo=timezone.utc)


def land(spark: Any, warehouse: Path, table: str, schema: str, bodies: dict[str, tuple[bytes, datetime]]) -> None:
    """Land `bodies` (msg_id -> body, put time) as type `orders` with `schema`, the table registered by a
    registrar of its own (a new bridge process)."""
    executor = SparkExecutor(spark, warehouse, "orders", TypeConfig(format="json", schema=schema, table=table),
                             catalog=CatalogRegistrar(lambda: spark))
    bulk = Bulk("orders")
    for msg_id, (body, put) in bodies.items():
        bulk.add(Message(msg_id=msg_id, body=body, source="amq", destination="/queue/orders", message_type="orders",
                         put_timestamp=put, received_timestamp=put))
    results = executor.execute(bulk)
    assert all(r.ok for r in results), [r.reason for r in results]
    assert executor.catalog is not None and executor.catalog.failures == 0



def test_pure_ddl_parser_agrees_with_spark(spark: Any) -> None:
    # The check runs before Spark starts, with the linter's parser: it must read a DDL as Spark does.
    from pyspark.sql.types import DataType

    for ddl in (V1, V2, "a TINYINT, b SMALLINT, c BIGINT, d FLOAT, e DOUBLE, f DATE, g TIMESTAMP, h TIMESTAMP_NTZ",
                "a DECIMAL, b DECIMAL(5), c NUMERIC(38, 10), d BINARY, e BOOLEAN COMMENT 'yes'",
                "a ARRAY<STRUCT<sku: STRING NOT NULL, qty: INT>>, b MAP<STRING, ARRAY<BIGINT>>, `c d` STRING",
                "a INTERVAL YEAR TO MONTH, b INTERVAL DAY TO SECOND, c INTERVAL HOUR"):
        ours, sparks = ddl_schema(ddl), DataType.fromDDL(ddl)
        assert [(f.name, f.dataType, f.nullable) for f in ours.fields] == \
            [(f.name, f.dataType, f.nullable) for f in sparks.fields], ddl


def test_a_widened_and_extended_schema_lands_beside_the_old_one(spark: Any, tmp_path: Path) -> None:
    warehouse, table = tmp_path / "landing", f"orders_{uuid.uuid4().hex[:8]}"
    path = warehouse / table
    try:
        # Given a table landed with v1 (and registered in the catalog)
        land(spark, warehouse, table, V1, {
            "m1": (b'{"order_id": "o1", "amount": 12345678.91, "qty": 2147483647}', DAY1),
            "m2": (b'{"order_id": "o2", "amount": 1.5, "qty": 2}', DAY1)})
        assert spark.table(table).schema["qty"].dataType.simpleString() == "int"
        # (its files record the declared schema, NOT NULL included, though Spark wrote the column nullable)
        written = list(table_schemas(path, "orders").values())
        assert len(written) == 1 and file_schema(written[0]) == ddl_schema(V1)
        # When v2 (a new column, two widened types) is checked and then lands, into the old put_date and a new one
        cfg = parse_config(typed_orders(warehouse, V2, table), str(tmp_path / "bridge.toml"))
        check_schemas(cfg)  # no refusal
        assert [f for f in lint_text(typed_orders(warehouse, V2, table)).errors] == []
        land(spark, warehouse, table, V2, {
            "m3": (b'{"order_id": "o3", "amount": 9999999999.99, "qty": 9000000000, "channel": "web"}', DAY1),
            "m4": (b'{"order_id": "o4", "amount": 3, "qty": 4, "channel": "shop"}', DAY2)})
        # Then a reader by name sees one merged schema: the new column, the wider types, NULL for old rows
        by_name = spark.table(table)
        types = {f.name: f.dataType.simpleString() for f in by_name.schema.fields}
        assert (types["amount"], types["qty"], types["channel"]) == ("decimal(12,2)", "bigint", "string"), types
        rows = {r.msg_id: (r.order_id, r.amount, r.qty, r.channel) for r in by_name.collect()}
        assert rows == {"m1": ("o1", Decimal("12345678.91"), 2147483647, None),
                        "m2": ("o2", Decimal("1.50"), 2, None),
                        "m3": ("o3", Decimal("9999999999.99"), 9000000000, "web"),
                        "m4": ("o4", Decimal("3.00"), 4, "shop")}
        # And a reader by path with the table's schema (docs/spark-and-tables.md) reads the same rows
        by_path = spark.read.schema(by_name.schema).parquet(str(path))
        assert sorted(map(tuple, by_path.select("msg_id", "qty", "channel").collect())) == \
            sorted((k, v[2], v[3]) for k, v in rows.items())
        # And the day holding v1 and v2 files (INT and BIGINT qty) compacts into one file, rows unchanged
        compactor = Compactor(spark, CostModel(tmp_path / "costs.json"), 1 << 20)
        [done] = compactor.run(path, [DAY1.date().isoformat()])
        assert (done.files_before, done.files_after, done.rows) == (2, 1, 3)
        again = {r.msg_id: (r.order_id, r.amount, r.qty, r.channel) for r in spark.table(table).collect()}
        assert again == rows
        # When a v3 drops the new column and narrows qty back
        text = typed_orders(warehouse, V3, table)
        errors = [f.line("bridge.toml", KeyLines(text)) for f in lint_text(text, "bridge.toml").errors]
        with pytest.raises(ConfigError) as refused:
            check_schemas(parse_config(text, str(tmp_path / "bridge.toml")))
        # Then check-config and the start check both refuse it, naming table, column, old and new type
        assert any("column 'channel': string -> (dropped)" in e and table in e for e in errors), errors
        assert any("column 'qty': bigint -> int: narrowed" in e for e in errors), errors
        assert all("set `table` to a new name" in e for e in errors), errors
        message = str(refused.value)
        assert "column 'channel': string -> (dropped)" in message and "column 'qty': bigint -> int" in message
        assert str(path) in message and "set `table` to a new name" in message
    finally:
        spark.sql(f"DROP TABLE IF EXISTS `{table}`")
