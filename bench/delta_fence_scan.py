"""Benchmark: what the fence scan costs a bulk's Delta commit (issue 51): with a ledger other hosts share
(`TableTransaction.check_fence`), a commit's first attempt reads the commits since its own previous one
(`delta_commit._fenced`, Delta's `getChanges`) for a fence of its version; without, it reads nothing.

    .venv/bin/python bench/delta_fence_scan.py [--commits 40] [--warm 3] [--rows 5000] [--others 3]

A bare `local[2]` driver started as `mqbridge run` starts it for a Delta type (`delta.session_conf`: the
jars of `jars/delta`, the bridge's defaults for new tables). Each round commits one bulk of `--rows` rows
of 1 KB (the landed columns, through a handoff file, by `delta_commit.raw_job` as the executor does) into
each variant's own table, in turn:

  off     check_fence off: a first attempt registers its app id as read, looks nothing up
  on      check_fence on, the table written by this bridge alone: no commit since its own previous, so
          the scan has nothing to read (it returns before `getChanges`)
  on+N    check_fence on, N commits of other bridges (other app ids, 100 rows each) between two of its own:
          the scan reads those N commits

Per variant: the commit's wall time (median [q1, q3]) and the scan's (`_fenced`). Then, once per table
as the rounds left it, the look-up a process's first version of a table makes instead (`txnVersion`,
which computes the snapshot's transactions from the table's whole state: a bridge started again).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqbridge.landing import delta, delta_commit  # noqa: E402
from mqbridge.landing.containers import SORT_COLUMNS  # noqa: E402
from mqbridge.landing.ledger import TableTransaction  # noqa: E402
from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table  # noqa: E402
from mqbridge.landing.session import create_spark_session  # noqa: E402
from mqbridge.landing.writes.frames import WRITE_OPTIONS  # noqa: E402
from mqbridge.message import Bulk, Message  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP_ID = "mqbridge:bench-host:1:1"
#: Seconds of each `_fenced` call of this process, in order (the variant's commit reads its own).
SCANS: list[float] = []
_product_fenced = delta_commit._fenced


def _timed_fenced(*args: Any) -> bool:
    started = time.perf_counter()
    try:
        return _product_fenced(*args)
    finally:
        SCANS.append(time.perf_counter() - started)


def make_bulk(n: int, first: int) -> Bulk:
    """`n` messages of 1 KB with ActiveMQ-like ids, each body distinct."""
    day = datetime(2026, 11, 1, 12, tzinfo=UTC)
    bulk = Bulk("bench")
    for i in range(first, first + n):
        msg_id = f"ID:bench-host-40000-1700000000000-1:1:1:1:{i}"
        bulk.add(Message(msg_id=msg_id, body=os.urandom(512).hex().encode(), source="bench",
                         destination="/queue/bench", put_timestamp=day, received_timestamp=day,
                         delivery_count=1, token=msg_id, identity=msg_id))
    return bulk


def commit(spark: Any, table: Path, handoff: Path, rows: int, first: int, transaction: TableTransaction) -> float:
    """One bulk of `rows` rows committed into `table` by the executor's job with `transaction`: seconds."""
    bulk = make_bulk(rows, first)
    job = delta_commit.raw_job(spark, arrow_table(bulk, list(range(rows))), handoff, str(table), tasks=1, groups=1,
                               sort=SORT_COLUMNS, writer_options=WRITE_OPTIONS, identity=IDENTITY_COLUMN,
                               bulk_id=f"{transaction.app_id}-{transaction.version}", transaction=transaction)
    started = time.perf_counter()
    job()
    elapsed = time.perf_counter() - started
    shutil.rmtree(handoff, ignore_errors=True)
    return elapsed


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    ms = sorted(v * 1000 for v in values)
    q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
    return f"{statistics.median(ms):8.1f} [{q[0]:.1f}, {q[2]:.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=40, help="commits per variant (after the warm-up)")
    parser.add_argument("--warm", type=int, default=3, help="warm-up commits per variant, not counted")
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--others", type=int, default=3, help="other bridges' commits between two (variant on+N)")
    args = parser.parse_args()
    delta_commit._fenced = _timed_fenced  # type: ignore[assignment]
    variants = ["off", "on", f"on+{args.others}"]
    print("load before:", os.getloadavg(), flush=True)
    spark = create_spark_session(master="local[2]", app_name="bench-delta-fence-scan",
                                 conf=delta.session_conf(ROOT / "jars", {}))
    work = Path(tempfile.mkdtemp(prefix="bench-delta-fence-"))
    commits: dict[str, list[float]] = {v: [] for v in variants}
    scans: dict[str, list[float]] = {v: [] for v in variants}
    first = 0
    try:
        for round_no in range(1, args.warm + args.commits + 1):
            for v in variants:
                table = work / v
                if v.startswith("on+"):
                    for other in range(args.others):  # other bridges' commits since this one's previous
                        commit(spark, table, work / "_handoff" / f"o{other}", 100, first,
                               TableTransaction(f"mqbridge:other-host:{other}:1", round_no))
                        first += 100
                SCANS.clear()
                transaction = TableTransaction(APP_ID, round_no, check_fence=v != "off")
                elapsed = commit(spark, table, work / "_handoff" / v, args.rows, first, transaction)
                first += args.rows
                if round_no > args.warm:
                    commits[v].append(elapsed)
                    scans[v].extend(SCANS)
            print(f"round {round_no}: " + ", ".join(f"{v} {commits[v][-1] * 1000:.0f} ms" for v in variants
                                                    if commits[v] and round_no > args.warm), flush=True)
        print(f"\n{args.rows} rows per commit, {args.commits} commits per variant after {args.warm} of warm-up, "
              "alternated; load after:", os.getloadavg())
        print("variant   commit ms: median [q1, q3]   fence scan ms: median [q1, q3]  scans")
        for v in variants:
            print(f"{v:8}  {spread(commits[v]):28}  {spread(scans[v]):30}  {len(scans[v])}")
        print("\nthe look-up of a first version in a process (txnVersion: the table's state rebuilt), per table:")
        jvm = spark._jvm
        assert jvm is not None
        for v in variants:
            delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(work / v))
            txn = delta_log.startTransaction()
            started = time.perf_counter()
            txn.txnVersion("mqbridge:restarted-host:1:1")
            elapsed = (time.perf_counter() - started) * 1000
            print(f"{v:8}  {elapsed:8.1f} ms (table version {int(txn.readVersion())})")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
