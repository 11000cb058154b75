"""`mqbridge tables`: list each configured table's containers (put_date partitions) as its format
reads them without Spark (`mqbridge.table_formats`: a Parquet table's footers, a Delta table's log):
rows, size, files, oldest and newest put_timestamp. On an object store or HDFS, a Delta table's log is
read by delta-rs with the store's options (`BridgeConfig.tables_warehouse`).

`mqbridge tables delete`: delete a type's rows designated by identity or by SQL through each table's
format's own machinery (`mqbridge.maintenance.entries`), logged with who asked and why."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

from mqbridge.commands import shown_path
from mqbridge.commands.help import parser_help
from mqbridge.config import load_config
from mqbridge.errors import ConfigError, PurgeError


def add_parser(sub: Any) -> None:
    """Add `tables` to the subparsers `sub`."""
    tables = sub.add_parser("tables", help="list each table's containers (put_date partitions): rows, "
                                           "size, oldest and newest put_timestamp", **parser_help("tables"))
    tables.add_argument("--config", "-c", default=None, help="configuration file (TOML)")
    tables.set_defaults(handler=cmd_tables)
    actions = tables.add_subparsers(dest="tables_action", metavar="{delete}")
    delete = actions.add_parser("delete", help="delete a type's rows by identity or SQL, through the table "
                                               "format's own DELETE (Delta) or the purge engine (Parquet)",
                                description=textwrap.fill(DELETE_DESCRIPTION, 90), epilog=DELETE_EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    # SUPPRESS: a --config given before `delete` is not reset by this parser's default.
    delete.add_argument("--config", "-c", default=argparse.SUPPRESS, help="configuration file (TOML)")
    delete.add_argument("--type", required=True, metavar="NAME", help="the message type whose rows go "
                        "(its tables only; of a table shared with other types, its rows only)")
    designated = delete.add_mutually_exclusive_group(required=True)
    designated.add_argument("--identity", nargs="+", default=None, metavar="ID",
                            help="the rows of these identities (a Delta table's identity column, scoped "
                                 "or not; a Parquet table's msg_id)")
    designated.add_argument("--where", default=None, metavar="SQL", help="the rows matching this Spark SQL "
                                                                         "condition on the landed columns")
    delete.add_argument("--reason", required=True, metavar="TEXT", help="why (logged at WARNING with who asked)")
    delete.add_argument("--dry-run", action="store_true", help="count the designated rows; change nothing")
    delete.set_defaults(handler=cmd_tables_delete)


DELETE_DESCRIPTION = (
    "Delete the rows of one message type designated by --identity or --where from each table the type "
    "lands in: a Delta table by Delta's DELETE (one commit per put_date partition), a Parquet table by "
    "the purge engine (delete or copy-and-drop per container). Logged at WARNING with the OS user and "
    "--reason; the output says how many rows went per table. The ledger keeps the identities: a "
    "redelivery of a deleted message is recognised as landed and not landed again. Starts a Spark session.")
DELETE_EPILOG = """example:
  mqbridge tables delete --config bridge.toml --type orders --identity ID-1 ID-2 --reason "erasure request 42"
  mqbridge tables delete -c bridge.toml --type orders --where "headers['order-id'] = '17'" \\
      --reason "landed by mistake" --dry-run

exit codes:
  0  deleted (or, with --dry-run, counted)
  1  a table could not evaluate the condition
  2  configuration error"""


def cmd_tables(args: argparse.Namespace) -> int:
    if args.config is None:
        raise ConfigError("mqbridge tables: --config FILE is required")
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


def cmd_tables_delete(args: argparse.Namespace) -> int:
    from mqbridge.landing import DriverSecrets, create_spark_session
    from mqbridge.logsetup import setup_logging
    from mqbridge.maintenance.entries import delete_entries, who
    from mqbridge.table_formats import command_session_conf

    if args.config is None:
        raise ConfigError("mqbridge tables delete: --config FILE is required")
    cfg = load_config(args.config, secrets=False)
    cfg.require_resolved("spark")  # the session's conf and Connect token; no source or ledger secret
    setup_logging("WARNING")
    if args.type not in cfg.types:
        raise ConfigError(f"--type {args.type}: not a configured type (configured: {', '.join(cfg.types)})")
    print(f"{'dry run: nothing is changed; ' if args.dry_run else ''}starting Spark ({cfg.spark.shown}) to "
          f"{'count' if args.dry_run else 'delete'} the designated rows of type {args.type}", flush=True)
    spark = create_spark_session(master=cfg.spark.master, remote=cfg.spark.remote,
                                 app_name=f"{cfg.spark.app_name}-tables-delete", conf=command_session_conf(cfg),
                                 secrets=DriverSecrets.of(cfg), state_dir=cfg.resolve_path(cfg.bridge.state_dir))
    try:
        done = delete_entries(cfg, spark, args.type, identities=args.identity or (), where=args.where,
                              reason=args.reason, requested_by=who(), dry_run=args.dry_run)
    except PurgeError as exc:
        print(f"mqbridge tables delete: {exc}", file=sys.stderr)
        return 1
    for deleted in done:
        print(deleted.line())
    print(f"{'would delete' if args.dry_run else 'deleted'} {sum(d.rows for d in done)} rows in total")
    return 0
