"""`mqbridge purge`: remove designated rows (older than a retention, or matching SQL) from each
container, by delete, copy-and-drop or drop as the cost model says; `--dry-run` prints the plan. A
table is purged by its format's purger (`mqbridge.table_formats`): a Delta table's containers are its
put_date partitions, purged by Delta's own commits; for each, the output says the strategy that ran,
and what the format says of the table after (for a Delta table the rows left and the version a reader
can still time-travel to until VACUUM). A warehouse on an object store or HDFS holds Delta tables
only: purged the same way, through S3A or HDFS."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from mqbridge.commands.endpoint import duration
from mqbridge.commands.help import parser_help
from mqbridge.config import load_config
from mqbridge.config.warehouse import Location
from mqbridge.errors import ConfigError
from mqbridge.logsetup import setup_logging

if TYPE_CHECKING:
    from mqbridge.maintenance.purge import Designation, PurgeFactory
    from mqbridge.table_formats import TablePurger


def add_parser(sub: Any) -> None:
    """Add `purge` to the subparsers `sub`: what it designates (types, age, SQL) and how (strategy, dry run)."""
    purge = sub.add_parser("purge", help="remove designated rows (older than a retention, or matching SQL) from "
                                         "each container, by delete, copy-and-drop or drop, as the cost model says",
                           **parser_help("purge"))
    purge.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    purge.add_argument("--type", action="append", default=None, metavar="NAME",
                       help="only this message type's tables (repeatable; default: every type)")
    purge.add_argument("--older-than", type=duration, default=None, metavar="DURATION",
                       help="designate rows put longer ago than this (default: the type's retention)")
    purge.add_argument("--where", default=None, metavar="SQL", help="designate rows matching this Spark SQL "
                                                                    "condition (with --older-than: both)")
    purge.add_argument("--strategy", choices=("auto", "delete", "copy"), default="auto",
                       help="auto: the cheaper estimate (default); a container whose rows are all "
                            "designated is always dropped")
    purge.add_argument("--dry-run", action="store_true", help="print the plan and estimates; change nothing")
    purge.set_defaults(handler=cmd_purge)


def cmd_purge(args: argparse.Namespace) -> int:
    from mqbridge.landing import DriverSecrets, create_spark_session
    from mqbridge.maintenance.purge import PurgeFactory
    from mqbridge.maintenance.purge.limits import Limits
    from mqbridge.table_formats import command_session_conf

    cfg = load_config(args.config, secrets=False)
    cfg.require_resolved("spark")  # the session's conf and Connect token; no source or ledger secret
    setup_logging("WARNING")
    unknown = sorted(set(args.type or ()) - set(cfg.types))
    if unknown:
        raise ConfigError(f"--type {', '.join(unknown)}: not a configured type (configured: {', '.join(cfg.types)})")
    types = {name: t for name, t in cfg.types.items() if not args.type or name in args.type}
    factory = PurgeFactory(cfg)
    # Said before the wait: a local session starts a JVM (seconds), a remote one needs its server.
    print(f"dry run: nothing is changed; starting Spark ({cfg.spark.shown}) to count the designated rows"
          if args.dry_run else f"starting Spark ({cfg.spark.shown}) to plan and purge each container", flush=True)
    spark = create_spark_session(master=cfg.spark.master, remote=cfg.spark.remote,
                                 app_name=f"{cfg.spark.app_name}-purge", conf=command_session_conf(cfg),
                                 secrets=DriverSecrets.of(cfg), state_dir=cfg.resolve_path(cfg.bridge.state_dir))
    now = datetime.now(timezone.utc)
    by_hand = args.older_than is not None or args.where is not None
    limits = Limits(factory, spark, now=now)
    if by_hand:  # the designation given here, instead of the configured rules
        ages = {n: args.older_than if args.older_than is not None else t.retention for n, t in types.items()}
        tables = factory.designations(types, ages, now=now, where=args.where)
    else:  # each type's retention and max_rows (the free-space floor after them)
        tables = factory.table_designations(types, limits, now=now)
    # Each type at its own age; of a table other types share (or may), only the named types' rows.
    for path, designations in tables:
        table = path.relative_to(factory.warehouse)
        if not designations:
            print(f"{table}: no retention and no --older-than or --where: nothing designated" if by_hand or not
                  any(types[n].max_rows for n in types) else f"{table}: nothing designated by retention or max_rows")
            continue
        _purge_designations(factory, spark, path, designations, args)
    if not by_hand and cfg.purge.min_free_disk is not None:
        if args.dry_run:
            print("dry run: the free space is measured before the rules above have run")
        found = limits.free_space_designations(types)
        if not found:
            print("min_free_disk: the warehouse has enough free space: nothing designated")
        for path, designation in found:
            _purge_designations(factory, spark, path, [designation], args)
    return 0


def _purge_designations(factory: PurgeFactory, spark: Any, path: Location, designations: list[Designation],
                        args: argparse.Namespace) -> None:
    """Purge one table by `designations` (recovering a killed run first) and print what was done."""
    table = path.relative_to(factory.warehouse)
    table_format = factory.format_of(path)
    purger = factory.purger_for(path, spark)
    if not args.dry_run:
        table_format.recover(path)  # a purge or compaction killed mid-run: finished or rolled back
    for designation in designations:
        _purge_table(purger, path, table, designation, args)
    if not args.dry_run:
        for line in table_format.purge_summary(purger, path, factory.config.purge.vacuum_retention):
            print(f"{table}: {line}")


def _purge_table(purger: TablePurger, path: Location, table: PurePath, designation: Designation,
                 args: argparse.Namespace) -> None:
    """Plan one designation of one table, print the plan, and (unless --dry-run) run it."""
    plans = purger.plan(path, designation, args.strategy)
    print(f"{table}: designated: {designation.describe()}; {len(plans)} containers affected"
          f"{' (dry run: nothing changed)' if args.dry_run else ''}")
    lines = {id(plan): _purge_line(plan) for plan in plans}
    if args.dry_run:
        for plan in plans:
            print(lines[id(plan)])
        return
    for result in purger.run(plans, designation):
        print(f"{lines[id(result.plan)]}  measured {result.seconds:.3f}s", flush=True)


def _purge_line(plan: Any) -> str:
    e = plan.estimate
    return (f"  put_date={plan.put_date}  designated {plan.designated}/{plan.rows}  "
            f"estimated delete {e.delete_seconds:.3f}s  copy-and-drop {e.copy_seconds:.3f}s  strategy {e.strategy}")
