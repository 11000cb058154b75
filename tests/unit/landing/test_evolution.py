"""The pure comparison of a type's old and new schema (`mqbridge.landing.evolution.compare`): which
changes may land beside the files written before, and why the others are refused. The widening rules
are the ones measured with Spark 4.1's Parquet readers (tests/integration/test_schema_evolution.py
reads them back with real Spark)."""

from __future__ import annotations

import pytest

from mqbridge.config.ddl import ddl_schema
from mqbridge.landing.evolution import compare, widens


def verdict(old: str, new: str):  # type: ignore[no-untyped-def]
    return compare(ddl_schema(old), ddl_schema(new))


def test_an_unchanged_schema_changes_nothing() -> None:
    found = verdict("id STRING, amount DECIMAL(12,2) NOT NULL", "ID string, amount decimal(12, 2) NOT NULL")
    assert found.ok and not found.changed


@pytest.mark.parametrize(("old", "new"), [
    ("a INT", "a BIGINT"), ("a TINYINT", "a SMALLINT"), ("a SMALLINT", "a BIGINT"), ("a BYTE", "a INT"),
    ("a INT", "a DOUBLE"), ("a SHORT", "a DOUBLE"), ("a FLOAT", "a DOUBLE"), ("a DATE", "a TIMESTAMP_NTZ"),
    ("a DECIMAL(10,2)", "a DECIMAL(12,2)"), ("a DECIMAL(10,2)", "a DECIMAL(20,4)"),
    ("a DECIMAL(5,2)", "a DECIMAL(20,2)"),
    ("a INT", "a DECIMAL(10,0)"), ("a INT", "a DECIMAL(12,2)"), ("a BIGINT", "a DECIMAL(20,0)"),
    ("a DECIMAL", "a DECIMAL(11)"),
    ("a STRUCT<x: INT>", "a STRUCT<x: BIGINT>"), ("a ARRAY<INT>", "a ARRAY<BIGINT>"),
    ("a MAP<STRING, FLOAT>", "a MAP<STRING, DOUBLE>"),
])
def test_a_widened_type_is_allowed(old: str, new: str) -> None:
    found = verdict(old, new)
    assert found.ok, [c.line() for c in found.refused]
    assert len(found.widened) == 1 and found.widened[0].column.startswith("a")


@pytest.mark.parametrize(("old", "new", "why"), [
    ("a BIGINT", "a INT", "narrowed"), ("a DOUBLE", "a FLOAT", "narrowed"),
    ("a DECIMAL(12,2)", "a DECIMAL(10,2)", "narrowed"),
    ("a BIGINT", "a DOUBLE", "changed type"), ("a INT", "a FLOAT", "changed type"),
    ("a INT", "a STRING", "changed type"),
    ("a DATE", "a TIMESTAMP", "changed type"), ("a TIMESTAMP", "a TIMESTAMP_NTZ", "changed type"),
    ("a FLOAT", "a DECIMAL(20,5)", "changed type"), ("a STRING", "a BINARY", "changed type"),
    ("a DECIMAL(5,2)", "a DECIMAL(5,3)", "may only gain digits"), ("a INT", "a DECIMAL(11,2)", "changed type"),
    ("a STRUCT<x: BIGINT>", "a STRUCT<x: INT>", "narrowed"), ("a ARRAY<STRING>", "a ARRAY<INT>", "changed type"),
    ("a MAP<STRING, INT>", "a MAP<INT, INT>", "key type"), ("a ARRAY<INT>", "a INT", "changed type"),
    ("a STRUCT<x: INT>", "a STRING", "changed type"),
])
def test_a_changed_or_narrowed_type_is_refused_with_the_reason(old: str, new: str, why: str) -> None:
    found = verdict(old, new)
    assert not found.ok
    assert why in found.refused[0].problem, found.refused[0].line()
    assert found.refused[0].old and found.refused[0].new


def test_a_nullable_added_column_is_allowed_and_a_not_null_one_refused() -> None:
    found = verdict("id STRING", "id STRING, note STRING, qty INT NOT NULL")
    assert [c.column for c in found.added] == ["note"]
    assert [c.column for c in found.refused] == ["qty"] and "added as NOT NULL" in found.refused[0].problem


def test_a_dropped_column_is_refused_naming_it() -> None:
    found = verdict("id STRING, amount DECIMAL(12,2), note STRING", "id STRING, note STRING")
    assert [(c.column, c.old, c.new) for c in found.refused] == [("amount", "decimal(12,2)", "")]
    assert found.refused[0].line() == ("column 'amount': decimal(12,2) -> (dropped): dropped: the files written "
                                       "before still hold it")


def test_nullable_made_not_null_is_refused_and_the_reverse_allowed() -> None:
    assert "made NOT NULL" in verdict("id STRING", "id STRING NOT NULL").refused[0].problem
    assert verdict("id STRING NOT NULL", "id STRING").ok
    assert verdict("id STRING NOT NULL", "id STRING NOT NULL").ok


def test_nested_fields_follow_the_same_rules_and_are_named_by_their_path() -> None:
    found = verdict("o STRUCT<x: INT, y: STRING>, l ARRAY<STRUCT<s: STRING>>",
                    "o STRUCT<x: BIGINT, z: DATE>, l ARRAY<STRUCT<s: STRING, n: INT NOT NULL>>")
    assert [c.column for c in found.widened] == ["o.x"]
    assert [c.column for c in found.added] == ["o.z"]
    assert sorted((c.column, c.problem.split(":")[0]) for c in found.refused) == [("l[].n", "added as NOT NULL"),
                                                                                  ("o.y", "dropped")]


def test_char_and_varchar_are_strings_in_the_files() -> None:
    assert not verdict("c CHAR(3)", "c STRING").changed
    assert not verdict("c STRING", "c VARCHAR(10)").changed


def test_several_changes_are_all_reported() -> None:
    found = verdict("a INT, b STRING, c DOUBLE", "a BIGINT, c FLOAT, d STRING")
    assert [c.column for c in found.widened] == ["a"] and [c.column for c in found.added] == ["d"]
    assert sorted(c.column for c in found.refused) == ["b", "c"]


def test_widens_is_not_symmetric() -> None:
    assert widens(ddl_schema("a INT").fields[0].dataType, ddl_schema("a BIGINT").fields[0].dataType)
    assert not widens(ddl_schema("a BIGINT").fields[0].dataType, ddl_schema("a INT").fields[0].dataType)
