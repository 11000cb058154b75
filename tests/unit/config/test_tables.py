"""Table templates (`[types.X] table = "{destination}"`): validation and sanitised names."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.config import TypeConfig
from mqbridge.config.tables import render, sanitise, table_dirs
from tests.unit.config.texts import LISTENER, SOURCE, error, parse


@pytest.mark.parametrize(("value", "expected"), [
    ("/queue/Orders.EU", "orders.eu"),
    ("/topic/prices", "prices"),
    ("APP.ORDERS.IN", "app.orders.in"),
    ("/queue/a/b c", "a_b_c"),
    ("__hidden", "hidden"),
    ("///", "unnamed"),
])
def test_values_become_safe_directory_names(value: str, expected: str) -> None:
    assert sanitise(value) == expected


def test_a_template_renders_per_message() -> None:
    assert render("{source}_{destination}", source="amq", destination="/queue/Orders",
                  message_type="orders") == "amq_orders"
    assert render("{type}/{destination}", source="amq", destination="Q1", message_type="Orders") == "orders/q1"
    assert render("plain", source="a", destination="b", message_type="c") == "plain"


@pytest.mark.parametrize(("table", "problem"), [
    ("{queue}", "unknown placeholder {queue}"),
    ("{destination", "unbalanced brace"),
    ("../{destination}", "not a safe table directory"),
])
def test_bad_templates_are_rejected_with_the_reason(table: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("{", r"\{")):
        TypeConfig(table=table)


def test_the_tables_of_a_template_are_the_directories_it_created(tmp_path: Path) -> None:
    for name in ("amq_a", "amq_b", "_staging", "other"):
        (tmp_path / name).mkdir()
    assert [p.name for p in table_dirs(tmp_path, "amq_{destination}")] == ["amq_a", "amq_b"]
    assert table_dirs(tmp_path, "missing") == [tmp_path / "missing"]


# -- one table, one format ------------------------------------------------------------------------
def test_types_sharing_a_table_with_different_formats_are_refused_at_load_naming_both() -> None:
    # Given two types landing in one table "orders", one Delta and one Parquet (the default)
    text = ('[spark]\ntable_format = "parquet"\n[types.orders]\n[types.returns]\ntable = "orders"\n'
            'table_format = "delta"\n' + SOURCE + LISTENER)
    # When the configuration is loaded, then it is refused at the later type's key, naming both types
    message = error(text)
    assert "types.returns.table_format" in message, message
    assert 'type orders lands in the same table \'orders\' as "parquet"' in message and "one table has one format" \
        in message, message


def test_types_sharing_a_table_in_one_format_and_types_of_their_own_tables_load() -> None:
    # Given two Delta types sharing a table (one by its own setting, one by [spark]) and a Parquet type apart
    text = ('[spark]\ntable_format = "delta"\n[types.orders]\n[types.returns]\ntable = "orders"\n'
            'table_format = "delta"\n[types.audit]\ntable_format = "parquet"\n' + SOURCE + LISTENER)
    # When loaded, then it is accepted as written
    config = parse(text)
    assert config.types["returns"].table == "orders" and config.types["audit"].table_format == "parquet"
