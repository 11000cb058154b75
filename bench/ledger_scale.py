"""The landing ledger at the size of a full dedupe window: does landing slow down as it grows, and
what do `/metrics` (`Ledger.stats`) and the hourly prune cost there?

    .venv/bin/python bench/ledger_scale.py [--identities 10000000] [--bulks 40] [--keep]

1. An SQLite ledger is pre-filled with N identities (published bulks of 2,000, MQ-like message ids,
   published over the last 7 days; inserted directly, in big transactions), in a temporary
   directory. Its counters are left out, so that the first `SqliteLedger.open` counts them (timed: what
   opening a ledger from before the counters costs once).
2. Landing throughput of the ledger's path, as `Landing.published` and `Landing.land` call it: per
   bulk of 2,000 new identities `published()`, `prepare()`, `mark_published()` (two fsynced
   commits), on the pre-filled ledger and on an empty one; identities as MQ message ids (in
   sequence) and as body hashes (sha256: random over the key space, the worst case).
3. `stats()` (what every control tick, `/metrics` and `/status` read) on each, and for comparison
   the `COUNT(*)` queries it ran before the counters.
4. A prune of the oldest 1% of the pre-filled ledger, in batches: its total time, the longest
   batch (the longest the lock is held), and the longest land cycle measured while it runs.
5. The ledger's size on disk per million identities.

Prints numbers; it is not a test. The pre-filled file (~100 bytes per identity) is built in a
temporary directory and removed at the end unless `--keep`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqbridge.landing.ledger import Ledger, SqliteLedger, owner_id  # noqa: E402
from mqbridge.landing.ledger.schema import COUNTERS  # noqa: E402

BULK = 2_000
WINDOW = 7 * 24 * 3600.0
MOVES = '[["/w/orders/_staging/o/b/put_date=2024-01-01/part-00000.parquet", ' \
        '"/w/orders/put_date=2024-01-01/part-b-00000.parquet"]]'


def msg_id(n: int) -> str:
    """An IBM MQ-like message id (48 hex digits: "AMQ QM1" padded, then a counter)."""
    return f"414D5120514D31202020202020202020{n:016X}"


def body_hash(n: int) -> str:
    """A body-sha256 identity: random over the key space."""
    return hashlib.sha256(f"body-{n}-{uuid.uuid4()}".encode()).hexdigest()


def prefill(path: Path, identities: int) -> float:
    """Create the ledger at `path` holding `identities` published identities; returns seconds."""
    start = time.perf_counter()
    SqliteLedger.open(path, owner=owner_id()).close()  # the schema, as the bridge creates it
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous = OFF")
    db.execute("PRAGMA cache_size = -262144")
    bulks = (identities + BULK - 1) // BULK
    now, owner = time.time(), owner_id()
    per_txn = 250  # bulks (500,000 identities) per transaction
    for first in range(0, bulks, per_txn):
        db.execute("BEGIN")
        rows, bulk_rows = [], []
        for b in range(first, min(first + per_txn, bulks)):
            bulk_id = str(uuid.uuid4())
            published = now - WINDOW + WINDOW * b / bulks
            size = min(BULK, identities - b * BULK)
            bulk_rows.append((bulk_id, "orders", MOVES, owner, "published", published - 1, published, size))
            rows.extend((msg_id(b * BULK + i), bulk_id) for i in range(size))
        db.executemany("INSERT INTO bulks VALUES (?, ?, ?, ?, ?, ?, ?, ?)", bulk_rows)
        db.executemany("INSERT INTO identities VALUES (?, ?)", rows)
        db.execute("COMMIT")
        print(f"\r  pre-filled {min((first + per_txn) * BULK, identities):,} identities", end="", flush=True)
    db.execute(f"DELETE FROM meta WHERE key IN ({', '.join('?' * len(COUNTERS))})", tuple(COUNTERS))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    # Written with synchronous=OFF: flushed now, or the ledger's first fsyncs would flush it all
    # (hundreds of ms each, measured), which the landing of a real ledger never meets.
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    print()
    return time.perf_counter() - start


def land_cycles(ledger: Ledger, identities: Iterator[str], bulks: int) -> list[float]:
    """`bulks` land cycles of BULK new identities each; the seconds of each."""
    times = []
    for _ in range(bulks):
        batch = [next(identities) for _ in range(BULK)]
        bulk_id = str(uuid.uuid4())
        start = time.perf_counter()
        assert not ledger.published(batch)
        ledger.prepare(bulk_id, "orders", [(f"/w/_staging/{bulk_id}/p.parquet", f"/w/p-{bulk_id}.parquet")], batch)
        ledger.mark_published(bulk_id)
        times.append(time.perf_counter() - start)
    return times


def numbered(make: Callable[[int], str], start: int) -> Iterator[str]:
    """make(start), make(start + 1), …"""
    n = start
    while True:
        yield make(n)
        n += 1


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median, max) seconds of `repeat` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times)


def old_stats(path: Path) -> None:
    """The queries `stats()` ran before the counters (a full count of both tables)."""
    db = sqlite3.connect(path)
    try:
        db.execute("SELECT state, COUNT(*) FROM bulks GROUP BY state").fetchall()
        db.execute("SELECT COUNT(*) FROM identities").fetchone()
        db.execute("SELECT MIN(prepared_at) FROM bulks").fetchone()
    finally:
        db.close()


def report_landing(ledgers: dict[str, Ledger], start: int, bulks: int) -> None:
    """Land `bulks` bulks of each identity kind on each ledger, one bulk on each in turn (so that a
    drift of the machine, e.g. its disk's fsync times or other load, hits both alike); print the
    rates (identities/s) and how much slower the pre-filled ledger is."""
    for kind, make in (("msg_id", msg_id), ("body-sha256", body_hash)):
        times: dict[str, list[float]] = {name: [] for name in ledgers}
        sources = {name: numbered(make, start + n * 10 ** 10) for n, name in enumerate(ledgers)}
        for ledger in ledgers.values():
            land_cycles(ledger, numbered(make, start + 10 ** 9), 3)  # warm-up, not counted
        for b in range(bulks):
            for name in sorted(ledgers, reverse=bool(b % 2)):
                times[name] += land_cycles(ledgers[name], sources[name], 1)
        rates = {name: BULK * len(t) / sum(t) for name, t in times.items()}
        for name, t in times.items():
            print(f"  {name:10} {kind:12} {rates[name]:>10,.0f} identities/s  (per bulk of {BULK}: median "
                  f"{statistics.median(t) * 1000:.1f} ms, mean {statistics.mean(t) * 1000:.1f} ms, "
                  f"max {max(t) * 1000:.1f} ms)")
        median_change = statistics.median(times["empty"]) / statistics.median(times["pre-filled"]) - 1
        print(f"  {kind}: pre-filled is {100 * (rates['pre-filled'] / rates['empty'] - 1):+.1f}% vs empty "
              f"(medians: {100 * median_change:+.1f}%)")


def report_stats(name: str, ledger: Ledger, path: Path) -> None:
    """Time `stats()` and the counts it used to run."""
    median, worst = timed(ledger.stats, 50)
    old_median, old_worst = timed(lambda: old_stats(path), 3)
    print(f"  {name:10} stats(): median {median * 1000:.2f} ms, max {worst * 1000:.2f} ms;  "
          f"the former COUNT(*)s: median {old_median * 1000:.1f} ms, max {old_worst * 1000:.1f} ms")


def report_prune(ledger: Ledger, identities: int, bulks: int) -> None:
    """Prune the oldest 1% while landing goes on in this thread; time both."""
    import mqbridge.landing.ledger.base as module

    batches: list[float] = []
    original = ledger._prune_batch

    def batch(cutoff: float) -> tuple[int, int]:
        start = time.perf_counter()
        try:
            return original(cutoff)
        finally:
            batches.append(time.perf_counter() - start)

    ledger._prune_batch = batch  # type: ignore[method-assign]
    removed: list[int] = []
    pruner = threading.Thread(target=lambda: removed.append(ledger.prune(WINDOW * 0.99)))
    start = time.perf_counter()
    pruner.start()
    during: list[float] = []
    while pruner.is_alive() and len(during) < 10 * bulks:
        during.extend(land_cycles(ledger, numbered(msg_id, identities + 3 * 10 ** 9 + len(during) * BULK), 1))
    pruner.join()
    seconds = time.perf_counter() - start
    print(f"  prune of the oldest 1%: {removed[0]:,} identities in {seconds:.2f} s, {len(batches)} batches of "
          f"<= {module.PRUNE_BATCH_IDENTITIES} identities; batch median {statistics.median(batches) * 1000:.1f} ms, "
          f"max {max(batches) * 1000:.1f} ms")
    if during:
        print(f"  land cycles during the prune: {len(during)}, median {statistics.median(during) * 1000:.1f} ms, "
              f"max {max(during) * 1000:.1f} ms")


def size_on_disk(path: Path) -> int:
    """The file and its write-ahead log after a checkpoint."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())


def main() -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--identities", type=int, default=10_000_000, help="identities in the pre-filled ledger")
    parser.add_argument("--bulks", type=int, default=40, help="bulks of 2,000 landed per measurement")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ledger-scale-"))
    try:
        run(base, args.identities, args.bulks)
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return 0


def run(base: Path, identities: int, bulks: int) -> None:
    """The measurements of the module docstring, on ledgers under `base`."""
    print(f"SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs")
    full_path, empty_path = base / "full" / "ledger.sqlite3", base / "empty" / "ledger.sqlite3"
    full_path.parent.mkdir()
    print(f"pre-filled in {prefill(full_path, identities):.1f} s ({identities:,} identities)")
    size = size_on_disk(full_path)
    print(f"size on disk: {size / 2 ** 20:,.0f} MiB, {size / 2 ** 20 / (identities / 1e6):,.1f} MiB per million "
          "identities")
    start = time.perf_counter()
    full = SqliteLedger.open(full_path, owner=owner_id())
    print(f"first open (counts the counters once): {time.perf_counter() - start:.2f} s; "
          f"stats: {full.stats().identities:,} identities")
    empty = SqliteLedger.open(empty_path, owner=owner_id())
    try:
        print("landing throughput of the ledger path (published + prepare + mark_published):")
        report_landing({"empty": empty, "pre-filled": full}, identities, bulks)
        print("stats():")
        report_stats("empty", empty, empty_path)
        report_stats("pre-filled", full, full_path)
        report_prune(full, identities, bulks)
        stats = full.stats()
        print(f"after: {stats.identities:,} identities, bulks {stats.bulks}")
    finally:
        full.close()
        empty.close()


if __name__ == "__main__":
    raise SystemExit(main())
