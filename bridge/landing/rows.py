"""The landed row: its columns (`LANDED_COLUMNS`, documented in docs/spark-and-tables.md "Landed
rows"), the Arrow table a bulk becomes (`arrow_table`, in `ARROW_SCHEMA`), and a JSON type's schema and the
checks of its bodies.

JSON types are checked twice, because neither check alone is strict enough:
- in Python, cheaply (`json_precheck`): UTF-8, strict JSON (Spark's parser accepts single quotes,
  trailing garbage and an empty body), a top-level object;
- in Spark (`parse_bodies`): `from_json` in PERMISSIVE mode with a corrupt-record column. Spark 4.3
  flags a value that does not convert to its column's type (`"amount": "abc"` for DECIMAL(12,2),
  `"qty": 1.5` for INT, a string for BOOLEAN, a bad date...) as a corrupt record instead of
  yielding null. It is lenient where the JSON spec allows a reading: any value lands in a STRING
  column as its JSON text, numeric strings convert to DECIMAL, extra decimal places are rounded, a
  missing or differently cased key is null.
The bulk is parsed once: the write job itself reports the corrupt rows through an Observation.
"""

from __future__ import annotations

import json

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import DataType, StringType, StructField, StructType

from mqbridge.errors import ConfigError
from mqbridge.landing.session import one_line
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
    pa.field("_row", pa.int32(), nullable=False),  # position in the bulk; never written
])
#: ARROW_SCHEMA as Spark reads it from a Parquet file pyarrow wrote (every column nullable).
SPARK_SCHEMA: StructType = from_arrow_schema(ARROW_SCHEMA)
_CORRUPT = "_mqbridge_corrupt_record"
_INVALID = "body is not valid JSON for schema"


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
    taken = {c.lower() for c in LANDED_COLUMNS} | {"_row", _CORRUPT}
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


def json_precheck(body: bytes) -> str | None:
    """Why `body` cannot be a JSON object, or None if it is one."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{_INVALID}: not UTF-8 ({exc.reason} at byte {exc.start})"
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"{_INVALID}: {exc}"
    except RecursionError:
        return f"{_INVALID}: nested too deeply"
    if not isinstance(value, dict):
        return f"{_INVALID}: top level is a JSON {type(value).__name__}, not an object"
    return None


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
        "_row": rows,
    }
    return pa.table(data, schema=ARROW_SCHEMA)


def _from_json(schema: StructType) -> Column:
    with_corrupt = StructType([*schema.fields, StructField(_CORRUPT, StringType())])
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    return F.from_json(F.col("body").cast("string"), with_corrupt, options)


def parse_bodies(df: DataFrame, schema: StructType) -> tuple[DataFrame, Observation]:
    """`df` with the parsed body in `_parsed`, without the rows Spark could not convert.

    The corrupt rows are reported through an Observation filled by the write job itself, so
    the bulk is parsed once (a separate collect first cost ~0.5 s more on 50,000 rows). For
    corrupt rows only (CASE WHEN is lazy), each field is re-parsed alone to name the culprits.
    """
    df = df.withColumn("_parsed", _from_json(schema))
    corrupt = F.col("_parsed").getField(_CORRUPT).isNotNull()
    suspects = F.array(*[
        F.when(_from_json(StructType([f])).getField(_CORRUPT).isNotNull(),
               F.lit(f"{f.name!r} ({f.dataType.simpleString()})"))
        for f in schema.fields
    ])
    bad = F.when(corrupt, F.struct(F.col("_row").alias("row"),
                                   F.filter(suspects, lambda c: c.isNotNull()).alias("fields")))
    observation = Observation()
    df = df.observe(observation, F.collect_list(bad).alias("corrupt"))
    return df.where(~corrupt), observation


def corrupt_rows(observation: Observation) -> dict[int, str]:
    """Bulk positions of the rows Spark could not convert, with a reason naming the fields."""
    found: dict[int, str] = {}
    for bad in observation.get["corrupt"]:
        detail = (f"value of {', '.join(bad['fields'])} does not convert to the column type"
                  if bad["fields"] else "Spark's from_json rejected the record")
        found[bad["row"]] = f"{_INVALID}: {detail}"
    return found
