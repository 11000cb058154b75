"""The ceilings of the two parts N bridges share besides the broker, each measured by a short direct
burst without any bridge (`bench/scaling.py`): the PostgreSQL ledger's transactions per second, and
the commits per second one Delta table takes; and what one commit costs when k drivers commit into
that table at once (`writers_burst`: each driver a process of its own, as each bridge has its own JVM).

    .venv/bin/python bench/scaling_bursts.py writer TABLE ROWS INDEX GATE   (one driver of writers_burst)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
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

    spark = _driver("bench-scaling-table")
    table, handoff = work / "ceiling", work / "_handoff"
    times: list[float] = []
    try:
        version = 0
        started = 0.0
        while True:
            version += 1
            began = time.perf_counter()
            _commit(spark, table, handoff, rows, version, "mqbridge:scaling-host:1:1")
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


def _driver(name: str) -> Any:
    """A Spark driver as `mqbridge run` starts one for a Delta type (`local[2]`, the bridge's Delta conf)."""
    from mqbridge.landing import delta
    from mqbridge.landing.session import create_spark_session

    return create_spark_session(master="local[2]", app_name=name, conf=delta.session_conf(ROOT / "jars", {}))


def _commit(spark: Any, table: Path, handoff: Path, rows: int, version: int, app: str) -> None:
    """One bulk of `rows` 1 KB rows committed into the Delta table `table` as a bridge with a shared
    ledger commits it (`delta_commit.raw_job`, its transaction `app`/`version`, the fence look-up on)."""
    from mqbridge.landing import delta_commit
    from mqbridge.landing.containers import SORT_COLUMNS
    from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
    from mqbridge.landing.writes.frames import WRITE_OPTIONS
    from mqbridge.message import Bulk, Message

    day = datetime(2026, 11, 1, 12, tzinfo=UTC)
    bulk = Bulk("bench")
    for i in range(rows):
        msg_id = f"ID:scaling-{app}-{version}-{i}"
        bulk.add(Message(msg_id=msg_id, body=os.urandom(512).hex().encode(), source="bench",
                         destination="/queue/bench", put_timestamp=day, received_timestamp=day,
                         delivery_count=1, token=msg_id, identity=msg_id))
    job = delta_commit.raw_job(spark, arrow_table(bulk, list(range(rows))), handoff, str(table), tasks=1,
                               groups=1, sort=SORT_COLUMNS, writer_options=WRITE_OPTIONS,
                               identity=IDENTITY_COLUMN, bulk_id=f"{app}-{version}",
                               transaction=TableTransaction(app, version, check_fence=True))
    job()
    shutil.rmtree(handoff, ignore_errors=True)


@dataclass(frozen=True)
class WritersBurst:
    """What `writers` drivers committing into one Delta table at once measured."""

    writers: int
    rows: int
    commits_per_s: float  # all writers together
    cpu_per_commit: float  # CPU-s of a writer's process (its Python and its JVM) per commit
    seconds_per_commit: float  # median wall time of one commit, the writers' commits pooled


def writers_burst(work: Path, writers: int, rows: int, seconds: float, warm: int = 3) -> WritersBurst:
    """`writers` processes, each a Spark driver of its own (`_driver`), commit bulks of `rows` rows into
    one new Delta table, each commit after its own one before, for `seconds` once every driver has made
    `warm` commits (its JIT warm): what a commit costs in CPU and in time when that many writers share
    the table and this machine's cores, as N bridges do. A commit whose snapshot another writer's commit
    made stale costs more (docs/scaling.md): the burst at one writer against two and three says how much."""
    gate = work / f"gate-{writers}"
    gate.mkdir(parents=True)
    table = work / f"writers-{writers}"
    procs = [subprocess.Popen([sys.executable, __file__, "writer", str(table), str(rows), str(i), str(gate),
                               str(warm)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for i in range(writers)]
    try:
        deadline = time.monotonic() + 300
        while len(list(gate.glob("ready-*"))) < writers:
            dead = [p.returncode for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the writers burst's {writers} drivers were not all ready within 300 s "
                                   f"({len(list(gate.glob('ready-*')))} ready; exit codes of the dead: {dead})")
            time.sleep(0.2)
        (gate / "go").touch()
        time.sleep(seconds)
        (gate / "stop").touch()
        reports = []
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"a driver of the writers burst failed (exit {proc.returncode})")
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    import statistics

    commits = sum(r["commits"] for r in reports)
    return WritersBurst(writers, rows, commits_per_s=sum(r["commits"] / r["wall"] for r in reports),
                        cpu_per_commit=sum(r["cpu"] for r in reports) / max(commits, 1),
                        seconds_per_commit=statistics.median(t for r in reports for t in r["times"]))


def _tree_cpu() -> float:
    """CPU seconds of this process and its children (the driver's JVM) so far."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _writer(table: Path, rows: int, index: int, gate: Path, warm: int) -> None:
    """One driver of `writers_burst`: `warm` commits, ready, then commits from `go` until `stop`; prints
    its commits, their wall times, and its CPU from `go` to the end of its last commit as JSON."""
    spark = _driver(f"bench-scaling-writer-{index}")
    handoff = table.parent / f"_handoff-{table.name}-{index}"
    app = f"mqbridge:scaling-host-{index}:1:1"
    try:
        version = 0
        if index > 0:  # the first writer creates the table: two creations of one table at once conflict
            while not (gate / "created").exists():
                time.sleep(0.05)
        for _ in range(warm):
            version += 1
            _commit(spark, table, handoff, rows, version, app)
            (gate / "created").touch()
        (gate / f"ready-{index}").touch()
        while not (gate / "go").exists():
            time.sleep(0.01)
        cpu0, t0 = _tree_cpu(), time.perf_counter()
        times = []
        while not (gate / "stop").exists():
            version += 1
            began = time.perf_counter()
            _commit(spark, table, handoff, rows, version, app)
            times.append(time.perf_counter() - began)
        print(json.dumps({"commits": len(times), "times": times, "wall": time.perf_counter() - t0,
                          "cpu": _tree_cpu() - cpu0}), flush=True)
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


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "writer":
    _writer(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]), int(sys.argv[6]))
