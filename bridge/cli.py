"""The `mqbridge` command line."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from importlib.metadata import entry_points
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from mqbridge import __version__
from mqbridge.commands.check_config import add_parser as add_check_config
from mqbridge.commands.compact import add_parser as add_compact
from mqbridge.commands.endpoint import EndpointError, add_endpoint_options, duration, endpoint
from mqbridge.commands.help import parser_help
from mqbridge.commands.listener import add_parser as add_listener
from mqbridge.commands.redrive import add_parser as add_redrive
from mqbridge.commands.replay import add_parser as add_replay
from mqbridge.commands.spark_archive import add_parser as add_spark_archive
from mqbridge.commands.where import add_parser as add_where
from mqbridge.config import load_config
from mqbridge.errors import BridgeError, ConfigError
from mqbridge.landing.ledger import ledger_path, open_ledger_for_reading, owner_id
from mqbridge.logsetup import setup_from_config, setup_logging
from mqbridge.monitoring import EXIT_UNREACHABLE, run_status
from mqbridge.plugins import PluginHost, report

if TYPE_CHECKING:
    from mqbridge.purge import Designation, Purger

log = logging.getLogger("mqbridge")
#: The levels `run --log-level` accepts (those of [logging] level).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def shown_path(path: Path | str) -> Path:
    """`path` as an operator reads it: absolute, without `..` or symlinks (`config/../data` is shown
    as the directory it is)."""
    return Path(path).resolve()


#: Entry-point group of commands other packages add: `name = "module:add_parser"`, where
#: `add_parser(subparsers)` adds one subcommand and sets its `handler` default (`mqbridge service`).
COMMANDS_GROUP = "mqbridge.commands"


def installed_commands() -> list[Callable[[Any], None]]:
    """The `add_parser` functions of the installed command entry points, by name."""
    return [entry.load() for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqbridge",
                                     description="Move messages from message queues into Spark tables.")
    parser.add_argument("--version", action="version", version=f"mqbridge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the bridge", **parser_help("run"))
    run.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    run.add_argument("--until-idle", type=duration, default=None, metavar="DURATION",
                     help="exit 0 once every listener has been idle this long and every message is committed")
    run.add_argument("--log-level", default=None, type=str.upper, choices=LOG_LEVELS,
                     help="override [logging] level (any case)")

    add_check_config(sub)
    add_spark_archive(sub)
    tables = sub.add_parser("tables", help="list each table's containers (put_date partitions): rows, "
                                           "size, oldest and newest put_timestamp", **parser_help("tables"))
    tables.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    _add_purge_parser(sub)
    add_compact(sub)
    plugins = sub.add_parser("plugins", help="list preprocessor plugins, their preprocessors and load errors",
                             **parser_help("plugins"))
    plugins.add_argument("--config", "-c", default=None, help="configuration file (TOML): adds plugin_dirs and chains")
    status = sub.add_parser("status", help="show a running bridge's health, listeners, collector and Spark; "
                                           "exit 0 healthy, 1 unhealthy, 3 unreachable", **parser_help("status"))
    add_endpoint_options(status)
    add_listener(sub)
    ledger = sub.add_parser("ledger", help="show the landing ledger; --verify: check published files exist "
                                           "(exit 1 if any is missing)", **parser_help("ledger"))
    ledger.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    ledger.add_argument("--verify", action="store_true", help="check every published bulk's files are in place")
    ledger.add_argument("--abandon", metavar="BULK", default=None,
                        help="decide about a prepared bulk of a process that is gone whose files are gone (the "
                             "start-up names it): forget it if none of its rows is in the table, record it "
                             "published if all are; anything else is refused (exit 1)")
    ledger.set_defaults(handler=cmd_ledger)
    add_where(sub)
    add_redrive(sub)
    add_replay(sub)
    run.set_defaults(handler=cmd_run)
    tables.set_defaults(handler=cmd_tables)
    plugins.set_defaults(handler=cmd_plugins)
    status.set_defaults(handler=cmd_status)
    for add_command in installed_commands():
        add_command(sub)
    return parser


def _add_purge_parser(sub: Any) -> None:
    """`mqbridge purge`: what it designates (types, age, SQL) and how (strategy, dry run)."""
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


def cmd_tables(args: argparse.Namespace) -> int:
    from mqbridge.landing.containers import containers
    from mqbridge.landing.tables import type_tables

    cfg = load_config(args.config, secrets=False)  # the footers need no password
    warehouse = cfg.resolve_path(cfg.spark.warehouse)
    print(f"warehouse: {shown_path(warehouse)}")
    for path, names in type_tables(warehouse, cfg.types).items():
        found = containers(path)
        print(f"  {path.relative_to(warehouse)}  (types: {', '.join(names)})"
              f"{'' if found else '  no rows yet'}")
        for c in found:
            oldest = c.oldest.isoformat(timespec="milliseconds") if c.oldest else "-"
            newest = c.newest.isoformat(timespec="milliseconds") if c.newest else "-"
            print(f"    put_date={c.put_date}  {c.rows:>9} rows  {c.bytes:>12} bytes  {len(c.files):>4} files  "
                  f"oldest {oldest}  newest {newest}")
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    from mqbridge.landing import DriverSecrets, create_spark_session
    from mqbridge.purge import PurgeFactory, recover_purges

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
                                 app_name=f"{cfg.spark.app_name}-purge", conf=cfg.spark.conf,
                                 secrets=DriverSecrets.of(cfg), state_dir=cfg.resolve_path(cfg.bridge.state_dir))
    purger = factory.purger(spark)
    now = datetime.now(timezone.utc)
    ages = {n: args.older_than if args.older_than is not None else t.retention for n, t in types.items()}
    # Each type at its own age; of a table other types share (or may), only the named types' rows.
    for path, designations in factory.designations(types, ages, now=now, where=args.where):
        table = path.relative_to(factory.warehouse)
        if not designations:
            print(f"{table}: no retention and no --older-than or --where: nothing designated")
            continue
        if not args.dry_run:
            recover_purges(path)
        for designation in designations:
            _purge_table(purger, path, table, designation, args)
    return 0


def _purge_table(purger: Purger, path: Path, table: Path, designation: Designation,
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


def cmd_ledger(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, secrets=False)
    if cfg.ledger.url is None:
        path = ledger_path(cfg.resolve_path(cfg.bridge.state_dir))
        if not path.exists():
            # An operator asking about it must hear that it is not there (read-only: nothing is created).
            print(f"ledger: {shown_path(path)}")
            print("  no ledger file (nothing landed with exactly_once yet, or state_dir is wrong)")
            return 1
    else:
        cfg.require_resolved("ledger")  # the PostgreSQL URL holds the password
    if args.abandon is not None:
        return _abandon(cfg, args.abandon)
    ledger = open_ledger_for_reading(cfg, owner=owner_id())
    print(f"ledger: {shown_path(ledger.path) if cfg.ledger.url is None else ledger.path}")
    try:
        stats = ledger.stats()
        oldest = datetime.fromtimestamp(stats.oldest, timezone.utc).isoformat(timespec="seconds") \
            if stats.oldest is not None else "-"
        print(f"  bulks        {stats.bulks['prepared']} prepared, {stats.bulks['published']} published")
        print(f"  identities   {stats.identities}")
        print(f"  {'file size' if cfg.ledger.url is None else 'table size':12} {stats.file_bytes} bytes")
        print(f"  oldest entry {oldest}")
        print(f"  prune runs   {stats.prune_runs}")
        if not args.verify:
            return 0
        bulks, sizes = ledger.published_bulks(), ledger.bulk_sizes()
    finally:
        ledger.close()
    return _verify(bulks, sizes)


def _abandon(cfg: Any, bulk_id: str) -> int:
    """`--abandon BULK`: the verdict of `mqbridge.landing.stuck.abandon`, carried out (exit 0) or refused (1)."""
    from mqbridge.landing.ledger import open_ledger
    from mqbridge.landing.stuck import REFUSE, abandon

    ledger = open_ledger(cfg, owner=owner_id())  # written to: the bulk is forgotten or recorded published
    try:
        verdict = abandon(ledger, bulk_id, cfg.resolve_path(cfg.spark.warehouse))
    finally:
        ledger.close()
    if verdict.action == REFUSE:
        print(f"abandon {bulk_id}: refused: {verdict.reason}")
        return 1
    print(f"abandon {bulk_id}: {verdict.reason}")
    return 0


def _verify(bulks: Sequence[Any], sizes: dict[str, int]) -> int:
    """`--verify`: every file of each published bulk is in place (or a purge or compaction removed it
    since), and each bulk no purge touched since holds one row per identity: its files' Parquet
    footers, or, in containers compacted since, its rows by bulk_id (`mqbridge.compaction.verify`)."""
    from mqbridge.compaction.verify import compacted_bulks
    from mqbridge.purge.swap import PURGE_SLACK

    missing, purged, touched = _missing_files(bulks)
    lost = {bulk_id for bulk_id, _ in missing}
    # A bulk whose container only compactions swapped since: its rows counted by bulk_id instead.
    compacted, wrong = compacted_bulks([b for b in bulks if b.bulk_id in touched - lost], sizes, slack=PURGE_SLACK)
    touched -= compacted
    wrong += _wrong_row_counts([b for b in bulks if b.bulk_id not in lost | touched | compacted], sizes)
    checked = sum(len(bulk.files) for bulk in bulks)
    since = f"; {purged} removed since by purges of their containers" if purged else ""
    skipped = f" ({len(touched)} in containers purged since: not compared)" if touched else ""
    print(f"  row counts   {len(bulks) - len(lost | touched) - len(wrong)} bulks hold one row per identity{skipped}")
    if not missing and not wrong:
        print(f"verify: OK ({len(bulks)} published bulks, {checked} files{since})")
        return 0
    if missing:
        print(f"verify: {len(missing)} of {checked} published files are missing{since}:")
        for bulk_id, final in missing:
            print(f"  {bulk_id}: {final}")
    if wrong:
        print(f"verify: {len(wrong)} published bulks do not hold one row per identity:")
        for bulk_id, found in wrong:
            print(f"  {bulk_id}: {sizes.get(bulk_id)} identities, {found}")
    return 1


def _wrong_row_counts(bulks: Sequence[Any], sizes: dict[str, int]) -> list[tuple[str, str]]:
    """The bulks whose files' footers hold another number of rows than the bulk has identities:
    (bulk id, what was found)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wrong: list[tuple[str, str]] = []
    for bulk in bulks:
        try:
            rows = sum(pq.ParquetFile(final).metadata.num_rows for _, final in bulk.files)
        except (OSError, pa.ArrowException) as exc:
            wrong.append((bulk.bulk_id, f"a file cannot be read: {' '.join(str(exc).split())}"))
            continue
        if rows != sizes.get(bulk.bulk_id):
            wrong.append((bulk.bulk_id, f"{rows} rows in {len(bulk.files)} files"))
    return wrong




def _missing_files(bulks: Sequence[Any]) -> tuple[list[tuple[str, str]], int, set[str]]:
    """The published files that are missing, (bulk id, path), except those in a container a purge
    swapped or dropped after the bulk was published (the table's purge history); how many of
    those there were; and the bulks with a file in such a container (whose rows a purge changed)."""
    from mqbridge.purge import purge_history
    from mqbridge.purge.swap import PURGE_SLACK

    histories: dict[str, dict[str, float]] = {}
    missing: list[tuple[str, str]] = []
    purged = 0
    touched: set[str] = set()
    for bulk in bulks:
        for _, final in bulk.files:
            container = os.path.dirname(final)
            table = os.path.dirname(container)
            if table not in histories:
                histories[table] = purge_history(Path(table))
            swapped = histories[table].get(os.path.basename(container))
            since = swapped is not None and swapped >= bulk.published_at - PURGE_SLACK
            if since:
                touched.add(bulk.bulk_id)
            if os.path.exists(final):
                continue
            if since:
                purged += 1
            else:
                missing.append((bulk.bulk_id, final))
    return missing, purged, touched


def cmd_plugins(args: argparse.Namespace) -> int:
    setup_logging("CRITICAL")  # load errors are part of the listing
    host = PluginHost.from_config(load_config(args.config, secrets=False)) if args.config else PluginHost()
    host.start(strict=False)
    text, ok = report(host)
    host.close()
    print(text)
    return 0 if ok else 1


def install_signal_handlers(stop: threading.Event, reload: threading.Event | None = None) -> None:
    """First SIGINT/SIGTERM: graceful shutdown. Second: exit at once (unacked messages return
    to the source when the connection drops). SIGHUP: sets `reload` (the control thread reloads
    plugins and the configuration file)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            os._exit(128 + signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    if reload is not None and hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda _signum, _frame: reload.set())


def cmd_status(args: argparse.Namespace) -> int:
    try:
        url, credentials = endpoint(args)
    except EndpointError as exc:
        print(f"mqbridge status: {exc}", file=sys.stderr)
        return exc.code
    code, text = run_status(url, args.timeout, credentials)
    print(text, file=sys.stdout if code != EXIT_UNREACHABLE else sys.stderr)
    return code


def cmd_run(args: argparse.Namespace) -> int:
    from mqbridge.app import run_bridge  # pyspark: see cmd_tables

    cfg = load_config(args.config)
    setup_from_config(cfg, args.log_level)
    stop, reload = threading.Event(), threading.Event()
    install_signal_handlers(stop, reload)
    # A person watching a terminal gets one live progress line; a service's journal, a pipe or CI
    # keep the per-tick summary as a log line.
    progress = sys.stderr if args.until_idle is not None and sys.stderr.isatty() else None
    end_process(run_bridge(cfg, until_idle=args.until_idle, stop_event=stop, reload_event=reload,
                           progress=progress))


def end_process(code: int) -> NoReturn:
    """End `mqbridge run` with `code` once the bridge has shut down, without the interpreter's
    teardown. Why: by now everything the bridge owns is closed (listeners committed or backed
    out, bulks landed, the ledger closed), but library objects still run code at teardown, and
    some of it can block forever: a Spark Connect session left from before a server restart closes
    its gRPC channel in `__del__`, which hangs at interpreter exit. A service that does not end
    after its work is done gets killed by systemd instead. (The JVM of a local session exits by
    itself when our end of its pipe closes.)"""
    lingering = [t.name for t in threading.enumerate()
                 if t.is_alive() and not t.daemon and t is not threading.current_thread()]
    if lingering:
        log.debug("ending with library threads still running: %s", ", ".join(lingering))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except ConfigError as exc:
        print(f"mqbridge: configuration error: {exc}", file=sys.stderr)
        return 2
    except BridgeError as exc:
        print(f"mqbridge: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
