"""Typed bodies parsed by Spark: one `BodyFormat` per typed message type (`[types.X] format`
json, xml, csv or fixed, with its `schema`), one path for all four.

Each body is checked twice, because neither check alone is strict enough:
- in Python, cheaply (`mqbridge.landing.prechecks`), for what Spark's parsers accept or reject
  without a reason (JSON with single quotes, XML that is not well formed, a CSV body of two
  records, a fixed-width record of the wrong length);
- in Spark, by the format's parser in PERMISSIVE mode with a corrupt-record column: `from_json`,
  `from_xml` (the root element is the row, attributes are columns named with `attributePrefix`, the
  text of an element that also has attributes or child elements the column named `valueTag`),
  `from_csv` (delimiter, quote; a header line is checked in Python and cut off here), or for fixed
  width `substring`, `trim` and `try_cast` per field. Spark 4.1 flags a value that does not convert
  to its column's type as a corrupt record instead of yielding null; a missing value is null.
The bulk is parsed once: the write job itself reports the corrupt rows through an Observation; for
those rows only (CASE WHEN is lazy) each field is parsed alone to name the culprits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType

from mqbridge.config import TypeConfig
from mqbridge.config.formats import BODY_TEXT, option
from mqbridge.errors import ConfigError
from mqbridge.landing import prechecks
from mqbridge.landing.rows import CORRUPT_COLUMN, parse_schema
from mqbridge.landing.schema_check import declared_metadata

_PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}
#: What Spark's parser is called, for the reason of a record it rejected without naming a field.
_PARSER = {"json": "from_json", "xml": "from_xml", "csv": "from_csv", "fixed": "try_cast"}


@dataclass(frozen=True)
class BodyFormat:
    """How the bodies of one typed message type become columns. `only` (a field's position) in the
    struct builders: that field is parsed alone, the others as text, to name a culprit."""

    name: str  # json | xml | csv | fixed
    schema: StructType
    keep_body: bool = False
    attribute_prefix: str = "_"
    value_tag: str = "_VALUE"
    delimiter: str = ","
    quote: str = '"'
    header: bool = False
    widths: tuple[int, ...] = ()

    def precheck(self, body: bytes) -> str | None:
        """Why `body` cannot be parsed, found in Python (`mqbridge.landing.prechecks`), or None."""
        if self.name == "json":
            return prechecks.json_precheck(body)
        if self.name == "xml":
            return prechecks.xml_precheck(body)
        if self.name == "csv":
            return prechecks.csv_precheck(body, delimiter=self.delimiter, quote=self.quote,
                                          columns=self.schema.fieldNames(), header=self.header)
        return prechecks.fixed_precheck(body, self.widths)

    def parse(self, df: DataFrame) -> tuple[DataFrame, Observation]:
        """`df` with the parsed body in `_parsed`, without the rows Spark could not convert, and the
        Observation that the write job fills with those (`corrupt_rows`)."""
        text = self._text()
        parsed = self._builder()
        df = df.withColumn("_parsed", parsed(text, None))
        corrupt = F.col("_parsed").getField(CORRUPT_COLUMN).isNotNull()
        suspects = F.array(*[
            F.when(parsed(text, i).getField(CORRUPT_COLUMN).isNotNull(),
                   F.lit(f"{f.name!r} ({f.dataType.simpleString()})"))
            for i, f in enumerate(self.schema.fields)
        ])
        bad = F.when(corrupt, F.struct(F.col("_row").alias("row"),
                                       F.filter(suspects, lambda c: c.isNotNull()).alias("fields")))
        observation = Observation()
        df = df.observe(observation, F.collect_list(bad).alias("corrupt"))
        return df.where(~corrupt), observation

    def columns(self) -> list[Column]:
        """The typed columns of a parsed frame (`parse`), in the schema's order, then `body_text`
        with `keep_body`."""
        # Each typed column carries its declared field: the schema check compares NOT NULL by it.
        parsed = [F.col("_parsed").getField(f.name).alias(f.name, metadata=declared_metadata(f))
                  for f in self.schema.fields]
        return [*parsed, F.col("body").cast("string").alias(BODY_TEXT)] if self.keep_body else parsed

    def corrupt_rows(self, observation: Observation) -> dict[int, str]:
        """Bulk positions of the rows Spark could not convert, with a reason naming the fields."""
        found: dict[int, str] = {}
        for bad in observation.get["corrupt"]:
            detail = (f"value of {', '.join(bad['fields'])} does not convert to the column type"
                      if bad["fields"] else f"Spark's {_PARSER[self.name]} rejected the record")
            found[bad["row"]] = f"{prechecks.INVALID[self.name]}: {detail}"
        return found

    # -- internals -------------------------------------------------------------------------
    def _text(self) -> Column:
        """The body as the parser reads it: UTF-8 text; a CSV or fixed-width record without its final
        line break (and a CSV record without its header line, checked by `precheck`)."""
        text = F.col("body").cast("string")
        if self.name in ("csv", "fixed"):
            text = F.regexp_replace(text, r"\r?\n\z", "")
        if self.header:
            text = F.regexp_replace(text, r"\A[^\n]*\n", "")
        return text

    def _builder(self) -> Callable[[Column, int | None], Column]:
        return {"json": self._json, "xml": self._xml, "csv": self._csv, "fixed": self._fixed}[self.name]

    def _only(self, only: int | None) -> StructType:
        fields = self.schema.fields if only is None else [self.schema.fields[only]]
        return StructType([*fields, StructField(CORRUPT_COLUMN, StringType())])

    def _json(self, text: Column, only: int | None) -> Column:
        return F.from_json(text, self._only(only), _PERMISSIVE)

    def _xml(self, text: Column, only: int | None) -> Column:
        return F.from_xml(text, self._only(only), {**_PERMISSIVE, "attributePrefix": self.attribute_prefix,
                                                       "valueTag": self.value_tag})

    def _csv(self, text: Column, only: int | None) -> Column:
        # A record is positional: to try one field alone the others are read as text.
        ddl = ", ".join(f"`{f.name.replace('`', '``')}` "
                        f"{f.dataType.simpleString() if only is None or i == only else 'string'}"
                        for i, f in enumerate(self.schema.fields))
        # Doubled quotes escape a quote (RFC 4180, and Python's csv in `precheck`), not Spark's backslash.
        options = {**_PERMISSIVE, "sep": self.delimiter, "quote": self.quote, "escape": self.quote}
        return F.from_csv(text, f"{ddl}, `{CORRUPT_COLUMN}` string", options)

    def _fixed(self, text: Column, only: int | None) -> Column:
        values: list[Column] = []
        wrong: list[Column] = []
        start = 1
        for i, (f, width) in enumerate(zip(self.schema.fields, self.widths, strict=True)):
            raw = F.trim(F.substring(text, start, width))
            value = raw.try_cast(f.dataType)
            values.append(value.alias(f.name))
            if only is None or i == only:
                wrong.append((raw != F.lit("")) & value.isNull())
            start += width
        corrupt = F.when(_any(wrong), F.lit("does not convert"))
        return F.struct(*values, corrupt.alias(CORRUPT_COLUMN))


def _any(conditions: list[Column]) -> Column:
    out = conditions[0]
    for condition in conditions[1:]:
        out = out | condition
    return out


def body_format(message_type: str, config: TypeConfig) -> BodyFormat | None:
    """The BodyFormat of a typed type (None for a raw one), its `schema` parsed by Spark's own parser
    (a SparkSession must exist); ConfigError naming the key Spark or the format refuses."""
    if config.schema_ddl is None:
        return None
    schema = parse_schema(message_type, config.schema_ddl)
    where = f"types.{message_type}"
    if config.keep_body and BODY_TEXT in {f.name.lower() for f in schema.fields}:
        raise ConfigError(f"{where}.schema: column {BODY_TEXT!r} is where keep_body = true lands the body; rename it")
    if config.format in ("csv", "fixed"):
        nested = [f.name for f in schema.fields if isinstance(f.dataType, StructType | ArrayType | MapType)]
        if nested:
            raise ConfigError(f"{where}.schema: format = \"{config.format}\" holds flat values, not the nested "
                              f"column(s) {', '.join(nested)} (use json or xml for nested rows)")
    widths = tuple(config.widths or ())
    if config.format == "fixed" and len(widths) != len(schema.fields):
        raise ConfigError(f"{where}.widths: {len(widths)} widths for the {len(schema.fields)} columns of the schema")
    return BodyFormat(config.format, schema, keep_body=config.keep_body,
                      attribute_prefix=str(option(config, "attribute_prefix")),
                      value_tag=str(option(config, "value_tag")),
                      delimiter=str(option(config, "delimiter")), quote=str(option(config, "quote")),
                      header=bool(option(config, "header")), widths=widths)
