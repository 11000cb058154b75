"""A purge's scope: a type's tables come from the markers landing writes, never from a glob of the
warehouse; rows of a shared table are designated by `message_type`; check-config names types that
can share a table."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mqbridge.cli import main
from mqbridge.config import TypeConfig
from mqbridge.landing.publication import publish, staged_moves, staging_dir
from mqbridge.landing.tables import (
    MARKER,
    add_types,
    file_types,
    holders,
    marker_types,
    shared_tables,
    tables_of_type,
    type_tables,
)
from mqbridge.maintenance.purge.designation import Designation, type_designations
from tests.support.configs import orders_config

NOW = datetime(2024, 6, 10, tzinfo=timezone.utc)
DAY = 86400.0


def stage(table: Path, bulk_id: str, types: list[str]) -> list[tuple[str, str]]:
    """One staged file of `bulk_id` for `table`, one row per entry of `types`; its moves."""
    staging = staging_dir(table, "host:1:2.00", bulk_id)
    directory = staging / "put_date=2024-06-01"
    directory.mkdir(parents=True)
    pq.write_table(pa.table({"message_type": types, "body": [b"x"] * len(types)}),
                   directory / "part-00000-x.c000.snappy.parquet")
    return staged_moves(table, staging, bulk_id)


def test_publishing_a_bulk_records_its_types_in_the_table_marker(tmp_path: Path) -> None:
    # Given a table that has no marker yet
    table = tmp_path / "landing" / "orders"
    assert marker_types(table) is None
    # When a bulk of type a is published, then one holding a and b, then the first again (a replay)
    publish(stage(table, "b1", ["a", "a"]))
    assert marker_types(table) == {"a"}
    publish(stage(table, "b2", ["a", "b"]))
    moves = stage(table, "b3", ["c"])
    publish(moves)
    publish(moves)
    # Then the marker lists every type landed, as one JSON file, and no temporary file is left
    assert json.loads((table / MARKER).read_text()) == {"types": ["a", "b", "c"]}
    assert [p.name for p in table.iterdir() if p.name.startswith(MARKER)] == [MARKER]


def test_file_types_reads_footers_or_the_column(tmp_path: Path) -> None:
    one, mixed = tmp_path / "one.parquet", tmp_path / "mixed.parquet"
    pq.write_table(pa.table({"message_type": ["a"] * 3}), one)
    pq.write_table(pa.table({"message_type": ["b", "a", "b"]}), mixed)
    pq.write_table(pa.table({"message_type": ["x"]}), tmp_path / "nostats.parquet", write_statistics=False)
    assert file_types(str(one)) == {"a"}
    assert file_types(str(mixed)) == {"a", "b"}
    assert file_types(str(tmp_path / "nostats.parquet")) == {"x"}


def warehouse_with(tmp_path: Path, markers: dict[str, list[str] | None]) -> Path:
    """Table directories under a warehouse, each with a marker of these types (None: no marker)."""
    warehouse = tmp_path / "landing"
    for name, types in markers.items():
        (warehouse / name / "put_date=2024-06-01").mkdir(parents=True)
        if types is not None:
            add_types(warehouse / name, types)
    return warehouse


def test_a_templated_type_has_the_tables_its_marker_names_never_another_types(tmp_path: Path) -> None:
    # Given tables q1, q2 landed by a `{destination}` type, orders by a plain type, and old (unmarked) q0
    warehouse = warehouse_with(tmp_path, {"q1": ["dest"], "q2": ["dest", "orders"], "orders": ["orders"],
                                          "q0": None, "_hidden": None})
    # Then the template's tables are its marked ones and the unmarked one; never the other type's
    assert [p.name for p in tables_of_type(warehouse, "dest", "{destination}")] == ["q0", "q1", "q2"]
    # and a plain table is its exact path, even before it exists
    assert tables_of_type(warehouse, "orders", "orders") == [warehouse / "orders"]
    assert tables_of_type(warehouse, "new", "new") == [warehouse / "new"]
    # and only names the template can render count: a prefix, or {type} as the type's own name
    assert [p.name for p in tables_of_type(warehouse, "dest", "q{destination}")] == ["q0", "q1", "q2"]
    assert tables_of_type(warehouse, "q9", "{type}") == []
    types = {"dest": TypeConfig(table="{destination}"), "orders": TypeConfig(table="orders")}
    assert {p.name: names for p, names in type_tables(warehouse, types).items()} == {
        "orders": ["orders"], "q0": ["dest"], "q1": ["dest"], "q2": ["dest"]}


def test_holders_are_the_marked_types_and_every_type_that_can_render_the_table(tmp_path: Path) -> None:
    warehouse = warehouse_with(tmp_path, {"orders": ["orders"], "q1": ["dest"], "legacy": None})
    types = {"dest": TypeConfig(table="{destination}"), "orders": TypeConfig(table="orders"),
             "audit": TypeConfig(table="audit_{type}")}
    assert holders(warehouse, warehouse / "orders", types) == {"orders", "dest"}
    assert holders(warehouse, warehouse / "q1", types) == {"dest"}
    assert holders(warehouse, warehouse / "legacy", types) == {"dest"}


def test_each_type_of_a_shared_table_is_designated_at_its_own_retention_and_by_message_type() -> None:
    ages: dict[str, float | None] = {"a": DAY, "b": 7 * DAY, "c": None}
    # Two types with different retentions in one table: one designation each, restricted to its rows
    first, second = type_designations(["a", "b"], ages, {"a", "b"}, now=NOW)
    assert (first.cutoff, first.message_types) == (NOW - timedelta(days=1), ("a",))
    assert (second.cutoff, second.message_types) == (NOW - timedelta(days=7), ("b",))
    assert "message_type IN ('a')" in first.sql and first.describe().endswith("of type a")
    # A table only one type can hold: every row, as before
    [only] = type_designations(["a"], ages, {"a"}, now=NOW)
    assert only.message_types == () and "message_type" not in only.sql
    # --type a on a table b may hold too: a's rows only
    [named] = type_designations(["a"], ages, {"a", "b"}, now=NOW)
    assert named.message_types == ("a",)
    # The same age (--older-than) for both: one designation of both types' rows
    [both] = type_designations(["a", "b"], {"a": DAY, "b": DAY}, {"a", "b", "c"}, now=NOW)
    assert both.message_types == ("a", "b")
    # No age and no --where: nothing; with --where: the where, restricted
    assert type_designations(["c"], ages, {"c", "a"}, now=NOW) == []
    [where] = type_designations(["c"], ages, {"c", "a"}, now=NOW, where="x = 1")
    assert where == Designation(where="x = 1", message_types=("c",))


def test_a_message_type_is_quoted_as_a_sql_string() -> None:
    assert "message_type IN ('it\\'s')" in Designation(where="true", message_types=("it's",)).sql


@pytest.mark.parametrize(("tables", "shared"), [
    ({"a": "orders", "b": "orders"}, [("a", "b", "orders")]),
    ({"a": "{destination}", "b": "orders"}, [("a", "b", "orders")]),
    ({"a": "amq_{destination}", "b": "orders"}, []),
    ({"a": "amq_{destination}", "b": "amq_orders"}, [("a", "b", "amq_orders")]),
    ({"a": "{source}_{destination}", "b": "{source}_{destination}"}, [("a", "b", "{source}_{destination}")]),
    ({"a": "t_{type}", "b": "t_{type}"}, []),  # each type its own table
    ({"a": "t_{type}", "b": "t_a"}, [("a", "b", "t_a")]),
    ({"a": "", "b": "a"}, [("a", "b", "a")]),  # a's table defaults to its name
    ({"a": "orders", "b": "payments"}, []),
])
def test_types_that_can_share_a_table(tables: dict[str, str], shared: list[tuple[str, str, str]]) -> None:
    assert shared_tables({name: TypeConfig(table=t) for name, t in tables.items()}) == shared


def test_check_config_warns_about_types_sharing_a_table_and_accepts_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = orders_config('[bridge]\nname = "scope"\nplugin_dirs = []\n[monitoring]\nlisten = ""')
    text += '\n[types.audit]\ntable = "{destination}"\n'
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr()
    assert f"{path}:16: warning: types.audit.table: types audit and orders can land in the same table 'orders'" \
        in out.out
    assert "OK with 1 warning (" in out.out
