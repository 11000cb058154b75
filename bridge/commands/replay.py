"""`mqbridge replay`: turn landed rows back into messages on a destination of a configured source,
read through Spark in `put_timestamp` order, each sent once across kills (`mqbridge.replay`)."""

from __future__ import annotations

import argparse
import hashlib
import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mqbridge.commands.endpoint import duration
from mqbridge.commands.help import parser_help
from mqbridge.errors import ConfigError

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig


def add_parser(sub: Any) -> None:
    """Add `replay` to the subparsers `sub`."""
    replay = sub.add_parser("replay", help="send landed rows of a table back to a queue as messages, in put_timestamp "
                                           "order, each once (a killed replay resumes)", **parser_help("replay"))
    replay.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    replay.add_argument("--table", required=True, metavar="T", help="the table: its directory under the warehouse "
                                                                     "(a type's `table`)")
    replay.add_argument("--where", default=None, metavar="SQL", help="only rows matching this Spark SQL condition")
    replay.add_argument("--older-than", type=duration, default=None, metavar="DURATION",
                        help="only rows put longer ago than this")
    replay.add_argument("--newer-than", type=duration, default=None, metavar="DURATION",
                        help="only rows put less long ago than this")
    replay.add_argument("--to", required=True, metavar="DEST", help="the destination (queue) to send them to")
    replay.add_argument("--source", default=None, metavar="NAME",
                        help="the source DEST belongs to (required when the configuration has several)")
    replay.add_argument("--batch", type=int, default=100, metavar="N", help="rows per unit of work (default 100)")
    replay.add_argument("--replay-id", default=None, metavar="ID",
                        help="name of this replay in the replay ledger (default: derived from the options, so the "
                             "same command resumes); a new id sends every row again")
    replay.add_argument("--in-doubt-wait", type=duration, default=10.0, metavar="DURATION",
                        help="after a kill: how long to wait for the marker of a batch left in doubt (default 10s)")
    replay.set_defaults(handler=cmd_replay)


def replay_id_of(args: argparse.Namespace, source: str) -> str:
    """The replay's id: given, or a digest of what it selects and where it sends, so that running the
    same command again resumes it."""
    if args.replay_id:
        if not args.replay_id.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"--replay-id {args.replay_id!r}: only letters, digits, '-' and '_'")
        return str(args.replay_id)
    what = [args.table, args.where, args.older_than, args.newer_than, source, args.to]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]


def _source_of(cfg: BridgeConfig, name: str | None) -> str:
    if name is not None:
        if name not in cfg.sources:
            raise ConfigError(f"--source {name}: not a configured source (configured: {', '.join(cfg.sources)})")
        return name
    if len(cfg.sources) != 1:
        raise ConfigError(f"--source is needed: the configuration has {len(cfg.sources)} sources "
                          f"({', '.join(cfg.sources)})")
    return next(iter(cfg.sources))


def cmd_replay(args: argparse.Namespace) -> int:
    from mqbridge.config import load_config
    from mqbridge.landing import DriverSecrets, create_spark_session
    from mqbridge.logsetup import setup_logging
    from mqbridge.replay import ReplayLedger, Selection, read_rows, replay, replay_target

    cfg = load_config(args.config)  # the source's password: the command connects to the broker
    setup_logging("WARNING")
    if args.batch < 1:
        raise ConfigError(f"--batch {args.batch}: must be 1 or more")
    source_name = _source_of(cfg, args.source)
    warehouse = cfg.resolve_path(cfg.spark.warehouse)
    table = (warehouse / args.table).resolve()
    if warehouse.resolve() not in table.parents or not table.is_dir():
        raise ConfigError(f"--table {args.table}: no such table under the warehouse {warehouse}")
    replay_id = replay_id_of(args, source_name)
    selection = Selection.of(args.where, args.older_than, args.newer_than, datetime.now(timezone.utc))
    state_dir = cfg.resolve_path(cfg.bridge.state_dir)
    ledger = ReplayLedger.in_state_dir(state_dir)
    source = cfg.sources[source_name]
    target = replay_target(source.kind, source_name, source, args.to, replay_id, args.in_doubt_wait)
    print(f"replay {replay_id}: rows of {args.table} to {args.to} (source {source_name}); {target.guarantee}",
          flush=True)
    print(f"starting Spark ({cfg.spark.shown}) to read the rows in put_timestamp order", flush=True)
    spark = create_spark_session(master=cfg.spark.master, remote=cfg.spark.remote,
                                 app_name=f"{cfg.spark.app_name}-replay", conf=cfg.spark.conf,
                                 secrets=DriverSecrets.of(cfg), state_dir=state_dir)
    try:
        report = replay(read_rows(spark, table, selection), target, ledger, replay_id, batch=args.batch,
                        say=lambda line: print(line, flush=True))
    finally:
        target.close()
        ledger.close()
    batches, rows = ReplayLedger.in_state_dir(state_dir).sent(replay_id)
    print(f"replay {replay_id}: {report.sent} rows sent now in {report.batches} batches, {report.skipped} sent by "
          f"earlier runs; {rows} rows in {batches} batches in all (replay ledger {ledger.path})")
    return 0
