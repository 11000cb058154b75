"""`[types.<name>]`: one message type, its flush rules, its table and the format of its bodies.

Moved out of `config.schema` (which re-exports `TypeConfig`) so the body formats have room.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from mqbridge.config.base import Duration, Model, Size, check_table, parse_duration, parse_size
from mqbridge.config.formats import BODY_TEXT, Format, format_problems
from mqbridge.config.tables import is_template, render, template_problem
from mqbridge.errors import KeyedError


class TypeConfig(Model):
    """`[types.<name>]`: one message type, its flush rules, its table and its body format
    (`mqbridge.config.formats`)."""

    bulk_size: Size = Field(default=parse_size("5MB"), gt=0, description="Flush a bulk at this many bytes")
    bulk_timeout: Duration = Field(default=parse_duration("60s"), gt=0, description="Flush a bulk this old")
    latency: Duration = Field(default=parse_duration("1s"), gt=0,
                              description="Latency target: the longest a message waits between its receipt and "
                                          "its bulk's write starting; bulks are sized from the measured write costs "
                                          "to keep up with the intake within it")
    table: str = Field(default="", description="Directory under the warehouse, or a template such as "
                                               "\"{source}_{destination}\" (config.tables); empty: the type's name")
    table_format: Literal["parquet", "delta", "iceberg"] | None = Field(
        default=None, description="This type's table format (parquet, delta or iceberg); None: `[spark] table_format`")
    partition_by: Literal["day", "hour"] = Field(
        default="day", description="The put-time partitions of the type's tables: day (one per put_date; an Iceberg "
        "table by days(put_timestamp), hidden partitioning) or hour (Iceberg tables only: hours(put_timestamp)); "
        "a change evolves an existing Iceberg table's partition spec (docs/spark-and-tables.md)")
    format: Format = Field(default="raw", description="raw: bodies as they came; json, xml, csv or fixed: parsed "
                           "in Spark with `schema` into columns (docs/formats.md); a body that does not parse fails "
                           "alone, with the parser's reason")
    schema_ddl: str | None = Field(default=None, alias="schema", description="Spark DDL of the parsed body (the typed "
                                   "formats): its columns are added to the landed row")
    keep_body: bool = Field(default=False, description="Typed formats: also land the body as text in the column "
                            f"`{BODY_TEXT}` (the byte-exact `body` column is always there)")
    attribute_prefix: str | None = Field(default=None, min_length=1, description="xml: prefix of the columns read "
                                         "from attributes (Spark's attributePrefix); None: _")
    value_tag: str | None = Field(default=None, min_length=1, description="xml: the column that gets the text of an "
                                  "element that also has attributes or child elements (Spark's valueTag); None: _VALUE")
    delimiter: str | None = Field(default=None, description="csv: the field delimiter, one character; None: ,")
    quote: str | None = Field(default=None, description="csv: the quote character; None: \"")
    header: bool | None = Field(default=None, description="csv: the body starts with a line of column names, checked "
                                "against the schema's and skipped; None: false")
    widths: list[int] | None = Field(default=None, description="fixed (required): the width in characters of each "
                                     "field, paired with the schema's columns in order")
    retention: Duration | None = Field(default=None, gt=0, description="Rows whose put_timestamp and "
                                       "received_timestamp are both older than this are designated by `mqbridge "
                                       "purge`; None: kept until purged by hand")
    max_rows: int | None = Field(default=None, ge=1, description="Rows of this type a table may hold (each of its "
                                 "tables, for a table template): the purge designates the oldest beyond it, none "
                                 "younger than [purge] keep_younger_than; None: no cap")
    results_to: str | None = Field(default=None, min_length=1, description="Also send each final result (landed, "
                                   "moved) here, in the unit of work: a STOMP destination or an IBM MQ queue")
    stored_result: bool = Field(default=False, description="Also send a result with result = \"stored\" (stored, "
                                "not yet landed) where the final results go (the reply-to with confirm = "
                                "\"reply-to\", results_to) when a message joins a bulk; STOMP sources only; at most "
                                "one per message with a stable identity (docs/how-it-works.md)")
    _name: str = PrivateAttr("")

    @field_validator("table")
    @classmethod
    def _check_table(cls, value: str) -> str:
        if value and is_template(value):
            problem = template_problem(value)
            if problem:
                raise ValueError(problem)
            check_table(render(value, source="s", destination="d", message_type="t"), written=value)
        elif value:
            check_table(value)
        return value

    @field_validator("schema_ddl")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value if value and value.strip() else None

    @model_validator(mode="after")
    def _format_and_options(self) -> TypeConfig:
        problems = format_problems(self)
        if problems:
            raise KeyedError(problems)
        return self

    @property
    def table_name(self) -> str:
        """The table directory: `table`, or the type's name when not set."""
        return self.table or self._name
