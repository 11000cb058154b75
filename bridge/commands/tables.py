"""`mqbridge tables`: list each configured table's containers (put_date partitions) as its format
reads them without Spark (`mqbridge.table_formats`: a Parquet table's footers, a Delta table's log):
rows, size, files, oldest and newest put_timestamp. On an object store or HDFS, a Delta table's log is
read by delta-rs with the store's options (`BridgeConfig.tables_warehouse`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mqbridge.commands import shown_path
from mqbridge.commands.help import parser_help
from mqbridge.config import load_config


def add_parser(sub: Any) -> None:
    """Add `tables` to the subparsers `sub`."""
    tables = sub.add_parser("tables", help="list each table's containers (put_date partitions): rows, "
                                           "size, oldest and newest put_timestamp", **parser_help("tables"))
    tables.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    tables.set_defaults(handler=cmd_tables)


def cmd_tables(args: argparse.Namespace) -> int:
    from mqbridge.landing.delta_read import error_text
    from mqbridge.landing.tables import type_tables
    from mqbridge.table_formats import format_of

    cfg = load_config(args.config, secrets=False)  # the footers need no password (an object store's keys: resolved)
    warehouse = cfg.tables_warehouse()
    print(f"warehouse: {shown_path(warehouse) if isinstance(warehouse, Path) else warehouse}")
    for path, names in type_tables(warehouse, cfg.types).items():
        table_format = format_of(path)
        try:
            found = table_format.containers(path)
            kind = table_format.describe(path)
        except OSError as exc:  # an object store or HDFS that cannot be reached, or refuses the keys
            print(f"mqbridge tables: table {path} could not be read: {error_text(exc)}", file=sys.stderr)
            return 1
        print(f"  {path.relative_to(warehouse)}  ({kind}; types: {', '.join(names)})"
              f"{'' if found else '  no rows yet'}")
        for c in found:
            oldest = c.oldest.isoformat(timespec="milliseconds") if c.oldest else "-"
            newest = c.newest.isoformat(timespec="milliseconds") if c.newest else "-"
            print(f"    put_date={c.put_date}  {c.rows:>9} rows  {c.bytes:>12} bytes  {len(c.files):>4} files  "
                  f"oldest {oldest}  newest {newest}")
    return 0
