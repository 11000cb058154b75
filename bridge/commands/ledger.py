"""`mqbridge ledger`: show the landing ledger; `--verify` checks that every published bulk's files
are in place and hold one row per identity (a Delta table's bulk: that the table's newest version
holds one row per identity with its bulk_id); `--abandon BULK` decides about a prepared bulk of a
process that is gone."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mqbridge.commands import shown_path
from mqbridge.commands.help import parser_help
from mqbridge.config import load_config
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
    if args.verify or args.abandon is not None:  # both read the tables
        cfg.local_warehouse("`mqbridge ledger --verify`" if args.verify else "`mqbridge ledger --abandon`")
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
    delta_bulks = [b for b in bulks if b.transaction is not None]
    file_bulks = [b for b in bulks if b.transaction is None]
    files_code = _verify(file_bulks, sizes) if file_bulks or not delta_bulks else 0
    delta_code = _verify_delta(delta_bulks, sizes, cfg.local_warehouse("`mqbridge ledger --verify`")) \
        if delta_bulks else 0
    return max(files_code, delta_code)


def _abandon(cfg: Any, bulk_id: str) -> int:
    """`--abandon BULK`: the verdict of `mqbridge.landing.stuck.abandon`, carried out (exit 0) or refused (1)."""
    from mqbridge.landing.ledger import open_ledger
    from mqbridge.landing.stuck import REFUSE, abandon

    ledger = open_ledger(cfg, owner=owner_id())  # written to: the bulk is forgotten or recorded published
    try:
        verdict = abandon(ledger, bulk_id, cfg.local_warehouse("`mqbridge ledger --abandon`"))
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
    footers, or, in containers compacted since, its rows by bulk_id (`mqbridge.maintenance.compaction.verify`)."""
    from mqbridge.maintenance.compaction.verify import compacted_bulks
    from mqbridge.maintenance.engine.swap import PURGE_SLACK

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


def _verify_delta(bulks: Sequence[Any], sizes: dict[str, int], warehouse: Path) -> int:
    """`--verify` of the bulks of Delta tables: each one's rows in the table's newest version (those with
    its bulk_id, read by delta-rs) are as many as its identities. A bulk with fewer, in a table a commit
    changed rows of since it was published (a purge's DELETE or rewrite), is counted apart, not compared;
    more rows, or fewer without such a commit, are listed (exit 1)."""
    from mqbridge.landing import delta_read
    from mqbridge.landing.stuck import row_bulk_id

    by_table: dict[str, list[Any]] = {}
    for bulk in bulks:
        by_table.setdefault(bulk.table, []).append(bulk)
    wrong: list[tuple[str, str]] = []
    purged = 0
    for table, members in sorted(by_table.items()):
        path = warehouse / table
        if not delta_read.is_delta(path):
            wrong += [(b.bulk_id, f"no Delta table at {path}") for b in members]
            continue
        rows = delta_read.rows_by_bulk(path, [row_bulk_id(b.bulk_id) for b in members])
        oldest = min(b.published_at for b in members)
        changes = [c.timestamp for c in delta_read.commits_since(path, oldest - delta_read.CLOCK_SLACK)
                   if c.changes_rows]
        for bulk in members:
            found, expected = rows[row_bulk_id(bulk.bulk_id)], sizes.get(bulk.bulk_id)
            if found == expected:
                continue
            if expected is not None and found < expected and any(t >= bulk.published_at - delta_read.CLOCK_SLACK
                                                                 for t in changes):
                purged += 1
                continue
            wrong.append((bulk.bulk_id, f"{found} rows with bulk_id {row_bulk_id(bulk.bulk_id)} in Delta table {path}"))
    since = f" ({purged} with rows deleted since by purges: not compared)" if purged else ""
    print(f"  delta rows   {len(bulks) - purged - len(wrong)} bulks of {len(by_table)} Delta tables hold one row "
          f"per identity{since}")
    if not wrong:
        print(f"verify: OK ({len(bulks)} published bulks of Delta tables, checked by their rows)")
        return 0
    print(f"verify: {len(wrong)} published bulks of Delta tables do not hold one row per identity:")
    for bulk_id, found_text in wrong:
        print(f"  {bulk_id}: {sizes.get(bulk_id)} identities, {found_text}")
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
    from mqbridge.maintenance.engine.swap import PURGE_SLACK, purge_history

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
