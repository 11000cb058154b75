"""`[types.X] format` xml, csv and fixed with their options, checked at load (`mqbridge.config.formats`)."""

from __future__ import annotations

import pytest

from tests.unit.config.texts import MINIMAL, error, parse


def typed(lines: str) -> str:
    """MINIMAL with `lines` added to [types.orders]."""
    return MINIMAL.replace('bulk_size = "5MB"', f'bulk_size = "5MB"\n{lines}')


def test_each_typed_format_loads_with_its_options_and_their_defaults() -> None:
    xml = parse(typed('format = "xml"\nschema = "_id INT, sku STRING"\nkeep_body = true')).types["orders"]
    assert (xml.format, xml.attribute_prefix, xml.keep_body) == ("xml", None, True)
    csv = parse(typed('format = "csv"\nschema = "a INT"\ndelimiter = ";"\nheader = true')).types["orders"]
    assert (csv.delimiter, csv.quote, csv.header) == (";", None, True)
    fixed = parse(typed('format = "fixed"\nschema = "a INT, b STRING, c DATE"\nwidths = [3, 10, 10]')).types["orders"]
    assert fixed.widths == [3, 10, 10]


@pytest.mark.parametrize(("lines", "expected"), [
    ('format = "xml"', 'types.orders.schema: format = "xml" needs a schema'),
    ('format = "csv"', 'types.orders.schema: format = "csv" needs a schema'),
    ('format = "json"\nschema = "a INT"\nwidths = [3]', 'types.orders.widths: only used with format = "fixed" '
                                                        '(this type\'s format is "json")'),
    ('format = "xml"\nschema = "a INT"\ndelimiter = ";"', 'types.orders.delimiter: only used with format = "csv"'),
    ('format = "csv"\nschema = "a INT"\nattribute_prefix = "@"', 'types.orders.attribute_prefix: only used with '
                                                                 'format = "xml"'),
    ('format = "json"\nschema = "a INT"\nvalue_tag = "v"', 'types.orders.value_tag: only used with format = "xml"'),
    ('header = true', 'types.orders.header: only used with format = "csv" (this type\'s format is "raw")'),
    ('keep_body = true', "types.orders.keep_body: only for a typed format"),
    ('format = "csv"\nschema = "a INT"\ndelimiter = "||"', "types.orders.delimiter: one character other than a "
                                                            "line break, not '||'"),
    ('format = "csv"\nschema = "a INT"\nquote = "\\n"', "types.orders.quote: one character other than a line break"),
    ('format = "csv"\nschema = "a INT"\ndelimiter = "\'"\nquote = "\'"', "types.orders.quote: must differ from the "
                                                                        "delimiter"),
    ('format = "fixed"\nschema = "a INT"', 'types.orders.widths: format = "fixed" needs widths'),
    ('format = "fixed"\nschema = "a INT, b INT"\nwidths = [3, 0]', "types.orders.widths: a width is a number of "
                                                                   "characters, at least 1 (not 0)"),
    ('format = "fixed"\nschema = "a INT, b STRING, c DATE"\nwidths = [3, 10]', "types.orders.widths: 2 widths for "
                                                                               "the 3 columns of the schema (a, b, c)"),
    ('format = "yaml"', "types.orders.format"),
    ('format = "xml"\nschema = "a INT"\nattribute_prefix = ""', "types.orders.attribute_prefix"),
])
def test_a_format_option_that_does_not_fit_names_its_key(lines: str, expected: str) -> None:
    assert expected in error(typed(lines))


def test_widths_of_a_schema_the_linter_cannot_read_are_left_to_spark() -> None:
    # The load's DDL parser says "not checked" rather than guess; Spark's parser judges it at start
    cfg = parse(typed('format = "fixed"\nschema = "a INTERVAL YEAR TO MONTH ???"\nwidths = [3]'))
    assert cfg.types["orders"].widths == [3]
