"""Which message types a table belongs to: the marker file each table keeps, and what a purge or
`check-config` derives from it.

A type's `table` may be a template (`"{destination}"`, see `mqbridge.config.tables`), so the
tables of a type are the ones it actually rendered. Landing records them: when a bulk is published
into a table (`mqbridge.landing.publication.publish`, under the table's lock, before its files move in),
the message types of its rows are added to `<table>/_mqbridge_table.json` (written atomically;
readers skip `_` names). A purge finds a type's tables from these markers, never by a glob of the
warehouse alone, and restricts its designation to the type's rows (`message_type`) wherever the
table holds, or may hold, rows of other types.

On an object store or HDFS the tables are Delta's or (on S3) Iceberg's, one format per warehouse, and they
keep no marker: a template's tables there are the tables whose names it can render, found by listing the
warehouse through delta-rs's own store client (`delta_read.directories`; no Python file system under
pyarrow), as an unmarked local table: a directory holding a Delta log, or an Iceberg table of the
configuration's catalog.

A Spark append without the ledger (`exactly_once = false` with the Spark writer) writes straight
into the table and publishes nothing, so its tables get no marker: they are treated as tables landed
before markers existed (`tables_of_type`).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import overload

from mqbridge.config import TypeConfig
from mqbridge.config.tables import glob_pattern, is_template, sanitise
from mqbridge.config.warehouse import Location, ObjectStoreUri

#: The marker of a table: `{"types": [...]}`, the message types that have landed into it.
MARKER = "_mqbridge_table.json"
#: What one sanitised placeholder value can look like (`mqbridge.config.tables.sanitise`).
_VALUE = r"[a-z0-9][a-z0-9_.-]*"
_FIELD = re.compile(r"\{([^{}]*)\}")


def marker_types(table: Location) -> frozenset[str] | None:
    """The message types `table`'s marker lists, or None when it has no (readable) marker (a table on
    an object store or HDFS never has one: only Delta tables land there, and they keep none)."""
    if not isinstance(table, Path):
        return None
    try:
        data = json.loads((table / MARKER).read_text(encoding="utf-8"))
        return frozenset(str(t) for t in data["types"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return None  # torn or foreign: as if landed before markers existed


def add_types(table: Path, types: Iterable[str]) -> None:
    """Add `types` to `table`'s marker (tmp file, fsync, rename, fsync of the directory). The
    caller holds the table's lock (`containers.table_lock`): one writer per table on this host."""
    known = marker_types(table) or frozenset()
    wanted = known | frozenset(types)
    if wanted == known:
        return
    tmp = table / f"{MARKER}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(json.dumps({"types": sorted(wanted)}) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, table / MARKER)
    if os.name != "nt":  # directories cannot be opened for fsync on Windows
        fd = os.open(table, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def file_types(path: str) -> set[str]:
    """The `message_type` values of one Parquet file: from its footer's statistics when each row
    group holds one value (no data read), else from the column itself."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    column = meta.schema.to_arrow_schema().get_field_index("message_type")
    if column < 0 or meta.num_rows == 0:
        return set()
    found: set[str] = set()
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max or stats.min != stats.max:
            values = pq.read_table(path, columns=["message_type"]).column(0).unique().to_pylist()
            return {str(v) for v in values if v is not None}
        found.add(stats.min if isinstance(stats.min, str) else bytes(stats.min).decode())
    return found


def record_landing(moves: Sequence[tuple[str, str]]) -> None:
    """Before `moves` (staged file, final path) are published: add the message types of their rows
    to each target table's marker. A file already moved (a publication done again) is read at its
    final path. The caller holds the tables' locks."""
    by_table: dict[Path, set[str]] = {}
    for staged, final in moves:
        table = Path(final).parents[1]  # <table>/put_date=…/part-…
        source = staged if os.path.exists(staged) else final
        by_table.setdefault(table, set()).update(file_types(source))
    for table, types in by_table.items():
        if types:
            os.makedirs(table, exist_ok=True)
            add_types(table, types)


def table_regex(table: str, message_type: str) -> re.Pattern[str]:
    """Every table name `table` (a template or not) can render to for `message_type`."""
    if not is_template(table):
        return re.compile(re.escape(table))
    parts, last = [], 0
    for m in _FIELD.finditer(table):
        parts.append(re.escape(table[last:m.start()]))
        parts.append(re.escape(sanitise(message_type)) if m[1] == "type" else _VALUE)
        last = m.end()
    parts.append(re.escape(table[last:]))
    return re.compile("".join(parts))


@overload
def tables_of_type(warehouse: Path, name: str, table: str) -> list[Path]: ...
@overload
def tables_of_type(warehouse: Location, name: str, table: str) -> list[Location]: ...
def tables_of_type(warehouse: Location, name: str, table: str) -> list[Path] | list[Location]:
    """The table directories of type `name` (configured `table`): a plain table's exact path
    (even before it exists); a template's, every directory it can render whose marker lists `name`.

    A directory without a marker was landed before markers existed (or by a Spark append without
    the ledger). A plain table's exact path is unambiguous and stays the type's. A template's
    unmarked directory is taken as the type's when its name matches the template; a directory
    whose marker lists only other types is never taken. An unmarked directory can still hold
    another type's rows (`{destination}` beside a plain `orders`): `holders` counts every type
    that can render it, so a purge then designates by `message_type` too.
    """
    if not is_template(table):
        return [warehouse / table]
    pattern = table_regex(table, name)
    if isinstance(warehouse, ObjectStoreUri):
        return _rendered_on_store(warehouse, table, pattern)
    found: list[Path] = []
    for path in sorted(warehouse.glob(glob_pattern(table))):
        if not path.is_dir() or any(part.startswith(("_", ".")) for part in path.relative_to(warehouse).parts):
            continue
        if not pattern.fullmatch(path.relative_to(warehouse).as_posix()):
            continue
        types = marker_types(path)
        if types is None or name in types:  # None: landed before markers existed (see above)
            found.append(path)
    return found


def _rendered_on_store(warehouse: ObjectStoreUri, table: str, pattern: re.Pattern[str]) -> list[Location]:
    """The tables on an object store or HDFS that the template `table` rendered (names matching `pattern`):
    its directories listed level by level by delta-rs (`delta_read.directories`, one listing per level of
    the template), each taken when it holds a Delta log or is an Iceberg table of the configuration's
    catalog (asked through pyiceberg: a directory left by a table dropped from the catalog is not one).
    No marker there (`marker_types`): a table is the type's by its name, as an unmarked local one."""
    from mqbridge.landing.delta_read import directories, is_delta
    from mqbridge.landing.iceberg_catalog import is_table_on_store

    levels = glob_pattern(table).split("/")
    found: list[ObjectStoreUri] = [warehouse]
    for level in levels:
        found = [parent / child for parent in found for child in directories(parent)
                 if fnmatch.fnmatchcase(child, level) and not child.startswith(("_", "."))]
    return [uri for uri in found if pattern.fullmatch(uri.relative_to(warehouse).as_posix())
            and (is_delta(uri) or is_table_on_store(uri))]


@overload
def type_tables(warehouse: Path, types: Mapping[str, TypeConfig]) -> dict[Path, list[str]]: ...
@overload
def type_tables(warehouse: Location, types: Mapping[str, TypeConfig]) -> dict[Location, list[str]]: ...
def type_tables(warehouse: Location,
                types: Mapping[str, TypeConfig]) -> dict[Path, list[str]] | dict[Location, list[str]]:
    """Every table directory of the configured `types` (`tables_of_type`), with the types found in it."""
    found: dict[Location, list[str]] = {}
    for name, type_cfg in types.items():
        for path in tables_of_type(warehouse, name, type_cfg.table or name):
            found.setdefault(path, []).append(name)
    return dict(sorted(found.items(), key=lambda item: str(item[0])))


def holders(warehouse: Location, table: Location, types: Mapping[str, TypeConfig]) -> frozenset[str]:
    """The types whose rows `table` holds or may hold: those its marker lists, and every configured
    type whose table (a template's: any rendering) is this one."""
    name = table.relative_to(warehouse).as_posix()
    could = {n for n, t in types.items() if table_regex(t.table or n, n).fullmatch(name)}
    return frozenset(could) | (marker_types(table) or frozenset())


def shared_tables(types: Mapping[str, TypeConfig]) -> list[tuple[str, str, str]]:
    """Pairs of types that can land in one table, as (type, type, the table or template): two
    identical plain tables or templates, or a template that can render another type's plain table."""
    found = []
    names = sorted(types)
    for i, a in enumerate(names):
        ta = types[a].table or a
        for b in names[i + 1:]:
            tb = types[b].table or b
            if is_template(ta) != is_template(tb):  # a template and a plain table it may render
                template, plain, of = (ta, tb, a) if is_template(ta) else (tb, ta, b)
                if table_regex(template, of).fullmatch(plain):
                    found.append((a, b, plain))
            elif table_regex(ta, a).pattern == table_regex(tb, b).pattern:
                found.append((a, b, ta))
    return found
