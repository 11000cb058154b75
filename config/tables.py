"""Table templates: `[types.X] table = "{source}_{destination}"` lands one table per queue.

A template's placeholders are `{source}` (the source's configured name), `{destination}` (the
queue or topic the message was read from), `{type}` (the message type) and `{subscription}` (the
durable subscription of a `topic` listener: one table per subscription, docs/topics.md). Each value is
sanitised into a directory name before it is put in: a leading STOMP prefix (`/queue/`,
`/topic/`, `/temp-queue/`, `/temp-topic/`) is dropped, the rest is lower-cased, every character
other than a-z 0-9 `_ . -` becomes `_`, and leading `_ . -` are removed (Spark and Parquet readers
skip directories whose name starts with `_` or `.`). So `/queue/Orders.EU` becomes `orders.eu` and
the IBM MQ queue `APP.ORDERS` becomes `app.orders`. Two destinations that sanitise to the same name
share one table; their rows differ in the `destination` column.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PLACEHOLDERS = ("source", "destination", "type", "subscription")
_FIELD = re.compile(r"\{([^{}]*)\}")
_PREFIX = re.compile(r"^/(?:queue|topic|temp-queue|temp-topic)/", re.IGNORECASE)
_UNSAFE = re.compile(r"[^a-z0-9_.-]")
#: Longest sanitised value (file systems allow 255 bytes per name; the template adds its own text).
MAX_PART = 100


def is_template(table: str) -> bool:
    """True when `table` has a `{placeholder}`."""
    return "{" in table or "}" in table


def template_problem(table: str) -> str | None:
    """Why `table` is not a valid template (unknown placeholder, stray brace), or None."""
    for name in _FIELD.findall(table):
        if name not in PLACEHOLDERS:
            return (f"unknown placeholder {{{name}}} in table template {table!r} "
                    f"(known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})")
    if "{" in _FIELD.sub("", table) or "}" in _FIELD.sub("", table):
        return f"unbalanced brace in table template {table!r}"
    return None


def sanitise(value: str) -> str:
    """`value` as one directory name (see the module docstring); "unnamed" if nothing is left."""
    text = _UNSAFE.sub("_", _PREFIX.sub("", value.strip()).lower()).lstrip("_.-")
    return text[:MAX_PART] or "unnamed"


def render(table: str, *, source: str, destination: str, message_type: str, subscription: str = "") -> str:
    """The table directory for one message: `table` with its placeholders filled in, sanitised."""
    if not is_template(table):
        return table
    values = {"source": source, "destination": destination, "type": message_type, "subscription": subscription}
    return _FIELD.sub(lambda m: sanitise(values[m[1]]), table)


def glob_pattern(table: str) -> str:
    """A glob matching every directory `table` can render to (each placeholder as `*`)."""
    return _FIELD.sub("*", table)


def table_dirs(warehouse: Path, table: str) -> list[Path]:
    """The existing directories of `table` (a template's, found by `glob_pattern`) under `warehouse`."""
    if not is_template(table):
        return [warehouse / table]
    return sorted(p for p in warehouse.glob(glob_pattern(table))
                  if p.is_dir() and not p.name.startswith(("_", ".")))


def mixed_format_problems(default: str, types: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """One table has one format: types whose (plain) table is the same and whose `table_format` (their
    own, else `default`, `[spark] table_format`) differs, each pair as a problem at the later type's
    `table_format`. Templates are left to the maintenance's check of the tables they render."""
    first: dict[str, tuple[str, str]] = {}
    problems: list[tuple[tuple[str, ...], str]] = []
    for name in sorted(types):
        table = types[name].table or name
        if is_template(table):
            continue
        kind = types[name].table_format or default
        other, other_kind = first.setdefault(table, (name, kind))
        if other_kind != kind:
            problems.append((("types", name, "table_format"),
                             f'"{kind}", but type {other} lands in the same table {table!r} as "{other_kind}": '
                             "one table has one format; set [types.X] table_format alike (or give one a table "
                             "of its own)"))
    return problems


def partition_problems(default: str, types: Mapping[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """`[types.X] partition_by` refused where it cannot hold: "hour" for a type whose tables are not Iceberg
    (Parquet and Delta tables are partitioned by their put_date column; an hour column would change their
    layout, which Delta fixes when it creates a table), and types landing in one (plain) table with
    different values (each process would evolve the table's spec its own way)."""
    problems: list[tuple[tuple[str, ...], str]] = []
    first: dict[str, tuple[str, str]] = {}
    for name in sorted(types):
        kind = types[name].table_format or default
        partition_by = types[name].partition_by
        if partition_by == "hour" and kind != "iceberg":
            problems.append((("types", name, "partition_by"),
                             f'"hour" is for Iceberg tables (hours(put_timestamp)); this type lands {kind} tables, '
                             'partitioned by put_date: use "day", or table_format = "iceberg"'))
            continue
        table = types[name].table or name
        if is_template(table):
            continue
        other, other_by = first.setdefault(table, (name, partition_by))
        if other_by != partition_by:
            problems.append((("types", name, "partition_by"),
                             f'"{partition_by}", but type {other} lands in the same table {table!r} by "{other_by}": '
                             "one table has one partitioning; set partition_by alike"))
    return problems
