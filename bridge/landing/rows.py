"""The landed row: its columns (`LANDED_COLUMNS`, documented in docs/spark-and-tables.md "Landed
rows"), the Arrow table a bulk becomes (`arrow_table`, in `ARROW_SCHEMA`), and a typed type's schema
(`parse_schema`). The typed formats themselves are parsed in `mqbridge.landing.formats`.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import DataType, StructType

from mqbridge.errors import ConfigError, one_line
from mqbridge.message import Bulk, Message

LANDED_COLUMNS = ("msg_id", "correlation_id", "message_type", "source", "destination", "put_timestamp",
                  "received_timestamp", "redelivered", "delivery_count", "bulk_id", "headers", "body",
                  "put_date")
_UTC_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    pa.field("msg_id", pa.string(), nullable=False),
    pa.field("correlation_id", pa.string()),
    pa.field("message_type", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("destination", pa.string(), nullable=False),
    pa.field("put_timestamp", _UTC_TS, nullable=False),
    pa.field("received_timestamp", _UTC_TS, nullable=False),
    pa.field("redelivered", pa.bool_(), nullable=False),
    pa.field("delivery_count", pa.int32(), nullable=False),
    pa.field("bulk_id", pa.string(), nullable=False),
    pa.field("headers", pa.map_(pa.string(), pa.string())),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("put_date", pa.date32(), nullable=False),
    # What the ledger recognises the message by: landed as IDENTITY_COLUMN in a Delta table only.
    pa.field("_identity", pa.string(), nullable=False),
    pa.field("_row", pa.int32(), nullable=False),  # position in the bulk; never written
])
#: The column a Delta table lands each row's identity in (the one the ledger dedupes on), so that a
#: lost ledger is rebuilt from the tables (`mqbridge.landing.delta_ledger`).
IDENTITY_COLUMN = "identity"
#: ARROW_SCHEMA as Spark reads it from a Parquet file pyarrow wrote (every column nullable).
SPARK_SCHEMA: StructType = from_arrow_schema(ARROW_SCHEMA)
#: The corrupt-record column of Spark's parsers (`mqbridge.landing.formats`): no schema column may be called so.
CORRUPT_COLUMN = "_mqbridge_corrupt_record"


def parse_schema(message_type: str, schema_ddl: str) -> StructType:
    """The StructType of a type's `schema` (Spark DDL), or ConfigError naming the type.

    Uses Spark's own parser, so a SparkSession must exist.
    """
    where = f"types.{message_type}.schema"
    try:
        schema = DataType.fromDDL(schema_ddl)
    except Exception as exc:
        raise ConfigError(f"{where}: not a valid Spark DDL schema {schema_ddl!r}: {one_line(exc)}") from exc
    if not isinstance(schema, StructType) or not schema.fields:
        raise ConfigError(f"{where}: expected a list of columns such as 'id STRING, amount DECIMAL(12,2)', "
                          f"got the single type {schema.simpleString()!r}")
    taken = {c.lower() for c in LANDED_COLUMNS} | {"_row", CORRUPT_COLUMN}
    for field in schema.fields:
        if field.name.lower() in taken:
            raise ConfigError(f"{where}: column {field.name!r} clashes with a landed column or another "
                              "schema column (names are case-insensitive)")
        taken.add(field.name.lower())
    return schema


def _headers(messages: list[Message]) -> pa.Array:
    """The headers column, built from flat key and value arrays (pyarrow converts a list of
    lists of pairs about four times slower)."""
    offsets = [0]
    keys: list[object] = []
    values: list[object] = []
    for message in messages:
        keys.extend(message.headers)
        values.extend(message.headers.values())
        offsets.append(len(keys))
    try:
        key_array, value_array = pa.array(keys, pa.string()), pa.array(values, pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # an adapter left a non-string: land its text
        key_array, value_array = pa.array([str(k) for k in keys]), pa.array([str(v) for v in values])
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), key_array, value_array)


def arrow_table(bulk: Bulk, rows: list[int]) -> pa.Table:
    """The rows `rows` of `bulk` as an Arrow table in `ARROW_SCHEMA`."""
    picked: list[Message] = [bulk.messages[i] for i in rows]
    # pyarrow converts aware datetimes to UTC and takes naive ones as UTC; put_date is the
    # UTC date of put_timestamp.
    put = pa.array([m.put_timestamp or m.received_timestamp for m in picked], _UTC_TS)
    data = {
        "msg_id": [m.msg_id for m in picked],
        "correlation_id": [m.correlation_id for m in picked],
        "message_type": [m.message_type or bulk.message_type for m in picked],
        "source": [m.source for m in picked],
        "destination": [m.destination for m in picked],
        "put_timestamp": put,
        "received_timestamp": pa.array([m.received_timestamp for m in picked], _UTC_TS),
        "redelivered": [bool(m.redelivered) for m in picked],
        "delivery_count": [int(m.delivery_count) for m in picked],
        "bulk_id": [bulk.bulk_id] * len(picked),
        "headers": _headers(picked),
        "body": [bytes(m.body) for m in picked],
        "put_date": put.cast(pa.date32()),
        "_identity": [m.identity or m.msg_id for m in picked],
        "_row": rows,
    }
    return pa.table(data, schema=ARROW_SCHEMA)
