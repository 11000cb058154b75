"""`mqbridge replay`: turn landed rows back into messages on a destination of a configured source,
read through Spark in `put_timestamp` order, each sent once across kills (`mqbridge.resend.replay`).
A Delta table is read with Delta Lake (the jars of `[spark] jars_dir` in the command's own driver), as
of an older version with `--as-of-version` or `--as-of-timestamp` (time travel, until VACUUM), from a
local warehouse, an object store or HDFS."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mqbridge.commands.endpoint import duration
from mqbridge.commands.help import parser_help
from mqbridge.errors import ConfigError, ReplayRefusedError
from mqbridge.landing.ledger import ledger_path, open_ledger_for_reading, owner_id
from mqbridge.resend.replay.identities import AS_LANDED, Reader, Renewal, count_drops, readers_of, refusal, renewal_for

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig
    from mqbridge.config.warehouse import Location
    from mqbridge.resend.replay import ReplayRow, ReplayTarget


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
    replay.add_argument("--as-of-version", type=int, default=None, metavar="N",
                        help="a Delta table: read its rows as of version N (Delta time travel: rows a purge "
                             "deleted since are read until VACUUM removes that version's files)")
    replay.add_argument("--as-of-timestamp", default=None, metavar="TS",
                        help="a Delta table: read its rows as of the version current at TS (e.g. "
                             "\"2026-05-01 12:00:00\"), as --as-of-version")
    replay.add_argument("--to", required=True, metavar="DEST", help="the destination (queue) to send them to")
    replay.add_argument("--source", default=None, metavar="NAME",
                        help="the source DEST belongs to (required when the configuration has several)")
    replay.add_argument("--batch", type=int, default=100, metavar="N", help="rows per unit of work (default 100)")
    replay.add_argument("--replay-id", default=None, metavar="ID",
                        help="name of this replay in the replay ledger (default: derived from the options, so the "
                             "same command resumes); a new id sends every row again")
    replay.add_argument("--new-identity", action="store_true",
                        help="give the replayed messages new identities under the identity rules of the listeners "
                             "that read DEST (header:NAME: a new value, the old one in mqbridge-replayed-NAME; IBM "
                             "MQ msg_id: a new MsgId), so that the bridge lands them again instead of dropping them "
                             "as already landed")
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
    if getattr(args, "new_identity", False):  # another replay: its rows carry other identities
        what.append("new-identity")
    as_of = [getattr(args, "as_of_version", None), getattr(args, "as_of_timestamp", None)]
    if any(v is not None for v in as_of):  # other rows (absent: the id of a replay from before these options)
        what.append(as_of)
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


def landed_check(cfg: BridgeConfig, readers: Sequence[Reader], renewal: Renewal, target: ReplayTarget,
                 rows: Callable[[], Iterable[ReplayRow]], destination: str,
                 say: Callable[[str], None]) -> Callable[[set[str]], None] | None:
    """The check `replay` runs before sending (None: nothing to check): the rows not sent yet by
    this replay, read again, must not be ones a listener reading `destination` drops as already
    landed (`mqbridge.resend.replay.identities`). Rules `renewal` covers are left out: a renewed identity
    the ledger knows was landed by this very replay."""
    checked = [r for r in readers if not renewal.covers(r.rule)]
    if not checked or not cfg.bridge.exactly_once:
        return None
    if cfg.ledger.url is None and not ledger_path(cfg.resolve_path(cfg.bridge.state_dir)).exists():
        return None  # nothing ever landed under this state_dir

    def check(sent_before: set[str]) -> None:
        ledger = open_ledger_for_reading(cfg, owner=owner_id())
        try:
            drops = count_drops(rows(), checked, target.delivered, ledger.published, skip=sent_before)
        finally:
            ledger.close()
        if drops.rows:
            raise ReplayRefusedError(f"replay refused: {refusal(drops, checked, destination)}")
        say(f"checked {drops.checked} rows against the landing ledger: none would be dropped as already landed "
            f"by {', '.join(sorted({r.name for r in checked}))}")

    return check


def cmd_replay(args: argparse.Namespace) -> int:
    from mqbridge.config import load_config
    from mqbridge.landing import DriverSecrets, create_spark_session
    from mqbridge.logsetup import setup_logging
    from mqbridge.resend.replay import ReplayLedger, Selection, read_rows, replay, replay_target
    from mqbridge.table_formats import command_session_conf, format_of

    cfg = load_config(args.config)  # the source's password: the command connects to the broker
    setup_logging("WARNING")
    if args.batch < 1:
        raise ConfigError(f"--batch {args.batch}: must be 1 or more")
    source_name = _source_of(cfg, args.source)
    warehouse = cfg.tables_warehouse()
    table = table_under(warehouse, args.table)
    if args.as_of_version is not None and args.as_of_timestamp is not None:
        raise ConfigError("--as-of-version and --as-of-timestamp: give one of them")
    if args.as_of_version is not None and args.as_of_version < 0:
        raise ConfigError(f"--as-of-version {args.as_of_version}: a Delta version is 0 or more")
    table_format = format_of(table)
    if args.as_of_version is not None or args.as_of_timestamp is not None:  # refused before Spark starts
        table_format.check_time_travel(args.table)
    replay_id = replay_id_of(args, source_name)
    selection = dataclasses.replace(
        Selection.of(args.where, args.older_than, args.newer_than, datetime.now(timezone.utc)),
        as_of_version=args.as_of_version, as_of_timestamp=args.as_of_timestamp)
    state_dir = cfg.resolve_path(cfg.bridge.state_dir)
    source = cfg.sources[source_name]
    readers = readers_of(cfg, source_name, args.to)
    renewal = renewal_for(readers) if args.new_identity else AS_LANDED
    # The target first: a destination it refuses leaves nothing behind, not even the replay ledger.
    target = replay_target(source.kind, source_name, source, args.to, replay_id, args.in_doubt_wait, renewal)
    print(f"replay {replay_id}: rows of {args.table} to {args.to} (source {source_name}); {target.guarantee}",
          flush=True)
    for note in target.notes:
        print(f"note: {note}", flush=True)
    if args.new_identity:
        print(f"--new-identity: {_renewal_line(renewal, readers, args.to)}", flush=True)
    try:
        ledger = ReplayLedger.in_state_dir(state_dir)
        try:
            print(f"starting Spark ({cfg.spark.shown}) to read the rows in put_timestamp order", flush=True)
            # Its own driver reads the table: what the formats and the store need (Delta's and S3A's jars)
            conf = command_session_conf(cfg)
            spark = create_spark_session(master=cfg.spark.master, remote=cfg.spark.remote,
                                         app_name=f"{cfg.spark.app_name}-replay", conf=conf,
                                         secrets=DriverSecrets.of(cfg), state_dir=state_dir)
            check = landed_check(cfg, readers, renewal, target, lambda: read_rows(spark, table, selection), args.to,
                                 _say)
            report = replay(read_rows(spark, table, selection), target, ledger, replay_id, batch=args.batch,
                            say=_say, before_sending=check)
            batches, rows = ledger.sent(replay_id)
        finally:
            ledger.close()
    finally:
        target.close()
    print(f"replay {replay_id}: {report.sent} rows sent now in {report.batches} batches, {report.skipped} sent by "
          f"earlier runs; {rows} rows in {batches} batches in all (replay ledger {ledger.path})")
    return 0


def table_under(warehouse: Location, name: str) -> Location:
    """The table `name` (a type's `table`) under `warehouse`: a directory there, or (on an object store
    or HDFS) a table its format finds there; ConfigError naming the warehouse otherwise, or when `name`
    leads out of it."""
    from mqbridge.table_formats import format_of

    missing = ConfigError(f"--table {name}: no such table under the warehouse {warehouse}")
    parts = name.replace("\\", "/").split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise missing
    table = warehouse / name
    if not format_of(table).holds(table):
        raise missing
    return table


def _say(line: str) -> None:
    print(line, flush=True)


def _renewal_line(renewal: Renewal, readers: Sequence[Reader], destination: str) -> str:
    """What `--new-identity` changes, for the command's output."""
    if not readers:
        return f"no listener of this configuration reads {destination}: nothing to renew"
    changes = [f"header {name} gets a new value (the old one in mqbridge-replayed-{name})"
               for name in sorted(renewal.headers)]
    if renewal.msg_id:
        changes.append("an IBM MQ row gets a new MsgId (a STOMP broker gives every message a new id anyway)")
    if any(r.rule == "body-sha256" for r in readers):
        changes.append("body-sha256 cannot be renewed (the body is sent byte-exact)")
    return "; ".join(changes) if changes else "the listeners reading it give replayed messages new identities anyway"

