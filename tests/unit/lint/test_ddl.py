"""A type's `schema` is checked as Spark DDL without Spark (`mqbridge.config.ddl`)."""

from __future__ import annotations

import pytest

from mqbridge.config.ddl import EXAMPLE, DdlError, ddl_columns


@pytest.mark.parametrize("ddl, columns", [
    ("order_id STRING, amount DECIMAL(12,2)", ["order_id", "amount"]),
    (EXAMPLE, ["order_id", "amount", "items"]),
    ("a: int, b: string", ["a", "b"]),  # the legacy colon form
    ("`weird name` MAP<STRING, ARRAY<BIGINT>> NOT NULL COMMENT 'x, y'", ["weird name"]),
    ("d dec, n numeric(38), t TIMESTAMP_NTZ, v VARCHAR(10), i INTERVAL DAY TO SECOND", ["d", "n", "t", "v", "i"]),
    ("s struct<>", ["s"]),
])
def test_valid_ddl_gives_its_columns(ddl: str, columns: list[str]) -> None:
    assert ddl_columns(ddl) == columns


@pytest.mark.parametrize("ddl, expected", [
    ("order_id STRNG", "expected a Spark type (STRING, INT"),
    ("amount DECIMAL(40,2)", "expected a precision 1 to 38 at column 16, found '40'"),
    ("amount DECIMAL(5,6)", "expected a scale 0 to 5"),
    ("items ARRAY<INT", "expected '>' at the end"),
    ("a INT b INT", "expected ',' or the end at column 7, found 'b'"),
    ("a INT,", "expected a column name at the end"),
    ("m MAP<STRING>", "expected ',' at column 13, found '>'"),
    ("i INTERVAL SECOND TO DAY", "expected a unit smaller than SECOND"),
])
def test_malformed_ddl_says_where_and_what_was_expected(ddl: str, expected: str) -> None:
    with pytest.raises(DdlError) as info:
        ddl_columns(ddl)
    assert str(info.value).startswith(expected)
