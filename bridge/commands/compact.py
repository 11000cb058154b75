"""`mqbridge compact`: plan each container of the configured tables (drop, delete, copy-and-drop or
compact, `mqbridge.maintenance.compaction.planner`) and carry the plans out, by hand; `--dry-run` prints the
plan per container and changes nothing. Each table by its format (`mqbridge.table_formats`): a Delta
table is compacted by OPTIMIZE ... ZORDER BY (put_timestamp) and purged by Delta's own commits, on a
local disk, an object store or HDFS alike."""

from __future__ import annotations

import argparse
from typing import Any

from mqbridge.commands.help import parser_help
from mqbridge.errors import ConfigError


def add_parser(sub: Any) -> None:
    """Add `compact` to the subparsers `sub`."""
    compact = sub.add_parser("compact", help="compact each container's small files into files sorted by "
                                             "put_timestamp (or purge it by retention), as the cost model says",
                             **parser_help("compact"))
    compact.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    compact.add_argument("--table", default=None, metavar="T",
                         help="only this table (its directory under the warehouse; default: every table)")
    compact.add_argument("--dry-run", action="store_true",
                         help="print each container's plan (files, action, estimated cost); change nothing")
    compact.set_defaults(handler=cmd_compact)


def cmd_compact(args: argparse.Namespace) -> int:
    from mqbridge.config import load_config
    from mqbridge.landing import DriverSecrets, create_spark_session
    from mqbridge.logsetup import setup_logging
    from mqbridge.maintenance.rounds import Compaction, plan_line, tables
    from mqbridge.table_formats import command_session_conf

    cfg = load_config(args.config, secrets=False)
    cfg.require_resolved("spark")  # the session's conf and Connect token; no source or ledger secret
    warehouse = cfg.tables_warehouse()  # a directory, or an object store's or HDFS's URI (Delta tables)
    setup_logging("WARNING")
    found = tables(cfg, args.table)
    if args.table is not None and not found:  # said before Spark starts (seconds)
        known = ", ".join(str(p.relative_to(warehouse)) for p in tables(cfg)) or "none"
        raise ConfigError(f"--table {args.table}: not a table of the configured types (tables: {known})")
    print(f"{'dry run: nothing is changed; ' if args.dry_run else ''}starting Spark ({cfg.spark.shown}) "
          "to plan each container", flush=True)
    spark = create_spark_session(master=cfg.spark.master, remote=cfg.spark.remote,
                                 app_name=f"{cfg.spark.app_name}-compact", conf=command_session_conf(cfg),
                                 secrets=DriverSecrets.of(cfg), state_dir=cfg.resolve_path(cfg.bridge.state_dir))
    compaction = Compaction(cfg, spark)
    low = compaction.low_disk()
    if low:
        print(f"free disk under [compaction] min_free_disk ({cfg.compaction.min_free_disk} bytes): retention "
              "purges first, no compaction")
    for path, types in found.items():
        planned = compaction.plan(path, types, low_disk=low)
        print(f"{path.relative_to(compaction.warehouse)}: {len(planned.plans)} containers"
              f"{' (dry run: nothing changed)' if args.dry_run else ''}")
        lines = {plan.put_date: plan_line(plan) for plan in planned.plans}
        if args.dry_run:
            print("\n".join(lines.values()))
            continue
        for plan in planned.plans:
            if plan.action == "none":
                print(lines[plan.put_date])
        for done in compaction.carry_out(planned):
            print(f"{lines[done.plan.put_date]}  measured {done.seconds:.3f}s, {done.files_after} files after",
                  flush=True)
    return 0
