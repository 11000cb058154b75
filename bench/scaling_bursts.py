"""The ceilings of the two parts N bridges share besides the broker, each measured by a short direct
burst without any bridge (`bench/scaling.py`): the PostgreSQL ledger's transactions per second, and
the commits per second one Delta table takes."""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from mqbridge.landing.ledger import TableTransaction
from mqbridge.landing.ledger.postgres import PostgresLedger

ROOT = Path(__file__).resolve().parent.parent


def pg_counts(db: Any) -> tuple[int, int]:
    """(transactions committed in the database, statements executed by anyone but this benchmark's
    own look-ups: pg_stat_statements' calls). Each call is itself one transaction of the caller's."""
    xacts = db.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]
    calls = db.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
                       "WHERE query NOT LIKE '%pg_stat%'").fetchone()[0]
    return int(xacts), int(calls)


def ledger_burst(url: str, db: Any, rows: int, writers: int, seconds: float) -> tuple[float, float, float]:
    """`writers` threads, each a ledger of its own in schema `bench_burst`, repeat a bulk's ledger cycle
    as the landing makes it (`published` look-up, `prepare` with a Delta transaction, `mark_published`)
    with `rows` new identities each, for `seconds`: (ledger transactions/s, statements/s, cycles/s)."""
    stop = threading.Event()
    cycles = [0] * writers
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        ledger = PostgresLedger.open_url(url, owner=f"burst-host:{index}:1.00", schema="bench_burst", lease=60)
        try:
            version = 0
            while not stop.is_set():
                version += 1
                ids = [uuid.uuid4().hex for _ in range(rows)]
                bulk = f"burst-{index}-{version}"
                ledger.published(ids)
                ledger.prepare(bulk, "burst", [], ids, transaction=TableTransaction(f"burst:{index}", version))
                ledger.mark_published(bulk)
                cycles[index] += 1
        except BaseException as exc:  # reported by the caller: a burst that failed measured nothing
            errors.append(exc)
        finally:
            ledger.close()

    threads = [threading.Thread(target=writer, args=(i,), name=f"ledger-burst-{i}") for i in range(writers)]
    for thread in threads:
        thread.start()
    # the connections and the schema are made before the count starts
    deadline = time.perf_counter() + 60
    while sum(cycles) < writers and not errors:
        if time.perf_counter() > deadline:
            raise TimeoutError("the ledger burst's writers made no cycle in 60 s")
        time.sleep(0.05)
    x0, s0 = pg_counts(db)
    c0, t0 = sum(cycles), time.perf_counter()
    stop.wait(seconds)
    x1, s1 = pg_counts(db)
    c1, t1 = sum(cycles), time.perf_counter()
    stop.set()
    for thread in threads:
        thread.join(60)
    if errors:
        raise RuntimeError(f"the ledger burst failed: {errors[0]!r}") from errors[0]
    wall = t1 - t0
    return (x1 - x0 - 2) / wall, (s1 - s0) / wall, (c1 - c0) / wall


def table_burst(work: Path, rows: int, seconds: float, warm: int = 3) -> tuple[float, float, float, int]:
    """Commits of `rows` rows each into one new Delta table, one after the other from one driver
    (`local[2]`, started as `mqbridge run` starts it for a Delta type), as a bridge with a shared ledger
    makes them (`check_fence`: each looks for a fence first), for `seconds` after `warm` commits:
    (commits/s, median seconds per commit, median seconds of its log part (`log_parts`), commits counted).
    Each commit waits for the one before, so this is the rate one writer gets; the table's own serial
    part, which bounds the commits of all writers together, is the log part."""
    import statistics

    from mqbridge.landing import delta, delta_commit
    from mqbridge.landing.containers import SORT_COLUMNS
    from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
    from mqbridge.landing.session import create_spark_session
    from mqbridge.landing.writes.frames import WRITE_OPTIONS
    from mqbridge.message import Bulk, Message

    spark = create_spark_session(master="local[2]", app_name="bench-scaling-table",
                                 conf=delta.session_conf(ROOT / "jars", {}))
    table, handoff = work / "ceiling", work / "_handoff"
    day = datetime(2026, 11, 1, 12, tzinfo=UTC)
    times: list[float] = []
    try:
        version = 0
        started = 0.0
        while True:
            version += 1
            bulk = Bulk("bench")
            for i in range(rows):
                msg_id = f"ID:scaling-{version}-{i}"
                bulk.add(Message(msg_id=msg_id, body=os.urandom(512).hex().encode(), source="bench",
                                 destination="/queue/bench", put_timestamp=day, received_timestamp=day,
                                 delivery_count=1, token=msg_id, identity=msg_id))
            app = "mqbridge:scaling-host:1:1"
            job = delta_commit.raw_job(spark, arrow_table(bulk, list(range(rows))), handoff, str(table), tasks=1,
                                       groups=1, sort=SORT_COLUMNS, writer_options=WRITE_OPTIONS,
                                       identity=IDENTITY_COLUMN, bulk_id=f"{app}-{version}",
                                       transaction=TableTransaction(app, version, check_fence=True))
            began = time.perf_counter()
            job()
            shutil.rmtree(handoff, ignore_errors=True)
            if version == warm:
                started = time.perf_counter()
            elif version > warm:
                times.append(time.perf_counter() - began)
                if time.perf_counter() - started >= seconds:
                    break
        per_s = len(times) / (time.perf_counter() - started)
        return per_s, statistics.median(times), statistics.median(log_parts(table, warm)), len(times)
    finally:
        spark.stop()


def log_parts(table: Path, first: int) -> list[float]:
    """Per commit from version `first` on: seconds from its last data file written to its log entry
    (`_delta_log/<v>.json`) written, by the files' modification times. That is the commit protocol
    (the newest snapshot, the conflict check, the entry put only if absent): the part of a commit that
    two writers of one table cannot overlap, while their data files are written side by side."""
    import json

    parts = []
    for entry in sorted((table / "_delta_log").glob("*.json")):
        if int(entry.stem) < first:
            continue
        adds = [json.loads(line)["add"]["path"] for line in entry.read_text().splitlines() if '"add"' in line]
        written = [(table / unquote(path)).stat().st_mtime for path in adds]
        if written:
            parts.append(entry.stat().st_mtime - max(written))
    return parts
