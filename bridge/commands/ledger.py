"""`mqbridge ledger`: show the landing ledger; `--verify` checks that every published bulk's files
are in place and hold one row per identity (a Delta table's bulk: that the table's newest version
holds one row per identity with its bulk_id); `--abandon BULK` decides about a prepared bulk of a
process that is gone."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from mqbridge.commands import shown_path
from mqbridge.commands.help import parser_help
from mqbridge.config import load_config
from mqbridge.config.warehouse import Location
from mqbridge.landing.ledger import ledger_path, open_ledger_for_reading, owner_id


def add_parser(sub: Any) -> None:
    """Add `ledger` to the subparsers `sub`."""
    ledger = sub.add_parser("ledger", help="show the landing ledger; --verify: check published files exist "
                                           "(exit 1 if any is missing)", **parser_help("ledger"))
    ledger.add_argument("--config", "-c", required=True, help="configuration file (TOML)")
    ledger.add_argument("--verify", action="store_true", help="check every published bulk's files are in place")
    ledger.add_argument("--abandon", metavar="BULK", default=None,
                        help="decide about a prepared bulk of a process that is gone whose files are gone (the "
                             "start-up names it): forget it if none of its rows is in the table, record it "
                             "published if all are; anything else is refused (exit 1). A Delta table's bulk: "
                             "its table's log decides (its version fenced first if it never committed)")
    ledger.set_defaults(handler=cmd_ledger)


def cmd_ledger(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, secrets=False)
    if args.verify or args.abandon is not None:  # both read the tables: an object store's keys must resolve
        cfg.tables_warehouse()
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
    return _verify(bulks, sizes, cfg.tables_warehouse())


def _abandon(cfg: Any, bulk_id: str) -> int:
    """`--abandon BULK`: the verdict of `mqbridge.landing.stuck.abandon`, carried out (exit 0) or refused (1)."""
    from mqbridge.landing.ledger import open_ledger
    from mqbridge.landing.stuck import REFUSE, abandon

    ledger = open_ledger(cfg, owner=owner_id())  # written to: the bulk is forgotten or recorded published
    try:
        verdict = abandon(ledger, bulk_id, cfg.tables_warehouse())
    finally:
        ledger.close()
    if verdict.action == REFUSE:
        print(f"abandon {bulk_id}: refused: {verdict.reason}")
        return 1
    print(f"abandon {bulk_id}: {verdict.reason}")
    return 0


def _verify(bulks: Sequence[Any], sizes: dict[str, int], warehouse: Location) -> int:
    """`--verify`: each published bulk checked by the format of the table it landed in (its
    `verify`: a Parquet bulk's files and their footers, a Delta bulk's rows by bulk_id), format by
    format; with no bulk at all, the default format's check says so. 0 when all hold, else 1."""
    from mqbridge.table_formats import DEFAULT, FORMATS, format_of_bulk

    by_format: dict[str, list[Any]] = {name: [] for name in sorted(FORMATS, key=lambda n: FORMATS[n] is not DEFAULT)}
    for bulk in bulks:
        by_format[format_of_bulk(warehouse / bulk.table, bulk).name].append(bulk)
    codes = [FORMATS[name].verify(members, sizes, warehouse) for name, members in by_format.items()
             if members or (FORMATS[name] is DEFAULT and not bulks)]
    return max(codes, default=0)
