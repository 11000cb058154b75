"""The body formats of a message type (`[types.X] format`) and the rules between their options.

`raw` lands the body as it came; the typed formats parse it in Spark with the type's `schema`
(Spark DDL) into columns of the landed row (`mqbridge.landing.formats`): `json`, `xml` (one
document per body, the root element is the row), `csv` (one record per body) and `fixed`
(fixed-width fields, `widths` characters each). Each option belongs to one format; setting it for
another is an error, so a typo in `format` cannot leave an option silently unused.
"""

from __future__ import annotations

from typing import Literal, Protocol

from mqbridge.config.ddl import DdlError, ddl_columns
from mqbridge.errors import Loc

Format = Literal["raw", "json", "xml", "csv", "fixed"]
TYPED_FORMATS: tuple[Format, ...] = ("json", "xml", "csv", "fixed")
#: Each format's own options (keys of `[types.X]`), with the value used when the key is not set.
OPTIONS: dict[str, dict[str, object]] = {
    "xml": {"attribute_prefix": "_", "value_tag": "_VALUE"},
    "csv": {"delimiter": ",", "quote": '"', "header": False},
    "fixed": {"widths": None},
}
#: The column that `keep_body = true` adds to a typed row: the body as text.
BODY_TEXT = "body_text"
_EXAMPLE_SCHEMA = '"order_id STRING, amount DECIMAL(12,2)"'


class FormatOptions(Protocol):
    """The keys of `[types.X]` these rules read (`mqbridge.config.types.TypeConfig`)."""

    format: Format
    schema_ddl: str | None
    keep_body: bool
    attribute_prefix: str | None
    value_tag: str | None
    delimiter: str | None
    quote: str | None
    header: bool | None
    widths: list[int] | None


def format_problems(cfg: FormatOptions) -> list[tuple[Loc, str]]:
    """Every way `cfg`'s format, schema and format options disagree, by key."""
    problems: list[tuple[Loc, str]] = []
    typed = cfg.format in TYPED_FORMATS
    if typed and cfg.schema_ddl is None:
        problems.append((("schema",), f'format = "{cfg.format}" needs a schema (Spark DDL, e.g. {_EXAMPLE_SCHEMA})'))
    if not typed and cfg.schema_ddl is not None:
        problems.append((("schema",), f"a schema is only used with format = {_typed_list()}"))
    if not typed and cfg.keep_body:
        problems.append((("keep_body",), f'only for a typed format ({_typed_list()}): a raw row is its body'))
    for fmt, options in OPTIONS.items():
        for key in options:
            if getattr(cfg, key) is not None and cfg.format != fmt:
                problems.append(((key,), f'only used with format = "{fmt}" (this type\'s format is "{cfg.format}")'))
    if cfg.format == "xml" and option(cfg, "value_tag") == option(cfg, "attribute_prefix"):
        # Spark refuses it too, but only when the first body is parsed: here it is named at load
        problems.append((("value_tag",), f"must differ from attribute_prefix {option(cfg, 'attribute_prefix')!r}: "
                                         "the text of an element with attributes could not be told from an attribute"))
    if cfg.format == "csv":
        problems.extend(_csv_problems(cfg))
    if cfg.format == "fixed":
        problems.extend(_fixed_problems(cfg))
    return problems


def option(cfg: FormatOptions, key: str) -> object:
    """The value of format option `key` for `cfg`: as set, else its format's default."""
    value = getattr(cfg, key)
    return value if value is not None else next(o[key] for o in OPTIONS.values() if key in o)


def _typed_list() -> str:
    return " | ".join(f'"{f}"' for f in TYPED_FORMATS)


def _csv_problems(cfg: FormatOptions) -> list[tuple[Loc, str]]:
    problems: list[tuple[Loc, str]] = []
    for key in ("delimiter", "quote"):
        value = getattr(cfg, key)
        if value is not None and (len(value) != 1 or value in "\r\n"):
            problems.append(((key,), f"one character other than a line break, not {value!r}"))
    if option(cfg, "delimiter") == option(cfg, "quote"):
        problems.append((("quote",), f"must differ from the delimiter {option(cfg, 'delimiter')!r}"))
    return problems


def _fixed_problems(cfg: FormatOptions) -> list[tuple[Loc, str]]:
    if not cfg.widths:
        return [(("widths",), 'format = "fixed" needs widths: one width in characters per schema column, '
                              "in the schema's order (e.g. widths = [10, 8, 12])")]
    bad = [w for w in cfg.widths if w < 1]
    if bad:
        return [(("widths",), f"a width is a number of characters, at least 1 (not {bad[0]})")]
    if cfg.schema_ddl is None:
        return []
    try:
        columns = ddl_columns(cfg.schema_ddl)
    except DdlError:
        return []  # Spark's parser judges it when the bridge starts (`mqbridge.landing.formats`)
    if len(columns) != len(cfg.widths):
        return [(("widths",), f"{len(cfg.widths)} widths for the {len(columns)} columns of the schema "
                              f"({', '.join(columns)}): one width per column, in order")]
    return []
