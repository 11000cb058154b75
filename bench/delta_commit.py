"""Benchmark: what one Delta commit costs, out of the bridge, and where its time goes.

    .venv/bin/python bench/delta_commit.py [--sizes 2000,10000] [--repeat 12] [--warm 20]

A real `local[2]` driver started as `mqbridge run` starts it for a Delta type (its JIT C1 only, the
Delta jars of `jars/delta`, Delta's SQL extension and catalog, `delta.session_conf`), a real SQLite
landing ledger, and the executor of a raw type with `table_format = "delta"`: each bulk is staged as
Parquet by one Spark job and appended to the Delta table by a second (`delta.commit_staged`, one
commit with the bridge's txnAppId / txnVersion). After `--warm` writes of 2,000 rows, each size is
written `--repeat` times. Each write prints its wall time and the driver JVM's CPU, the commit's
wall time and JVM CPU, the commit's parts by the table's file times (until its data files are
written, then its log entry `_delta_log/<v>.json`, its checksum `<v>.crc`, and until the write
returns: a checkpoint every tenth version), and the Spark jobs the commit ran with their wall time
(from the driver's own REST API: `/api/v1/applications/<id>/jobs`). Then the median of each per
size, and the commits that wrote a checkpoint against the others.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.steady import DeltaCommit, delta_commits  # noqa: E402
from mqbridge.config import TypeConfig  # noqa: E402
from mqbridge.counters import Counters  # noqa: E402
from mqbridge.landing import delta  # noqa: E402
from mqbridge.landing.executor import SparkExecutor  # noqa: E402
from mqbridge.landing.landing import Landing  # noqa: E402
from mqbridge.landing.ledger.sqlite import SqliteLedger  # noqa: E402
from mqbridge.landing.session import create_spark_session  # noqa: E402
from mqbridge.message import Bulk, Message, utcnow  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

#: bulk id -> the commit as timed here; and the driver JVM's CPU seconds spent in it
_commits: dict[str, DeltaCommit] = {}
_commit_cpu: dict[str, float] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def instrument(jvm: psutil.Process) -> None:
    """Time each `delta.commit_staged` where the executor calls it (a module attribute looked up per call)."""
    commit_staged = delta.commit_staged

    def timed(spark: Any, staging: Any, table_path: Any, bulk_id: str, transaction: Any) -> None:
        cpu, start, wall = sum(jvm.cpu_times()[:2]), time.perf_counter(), time.time()
        try:
            commit_staged(spark, staging, table_path, bulk_id, transaction)
        finally:
            _commits[bulk_id] = DeltaCommit(bulk_id, start, time.perf_counter() - start, wall, time.time())
            _commit_cpu[bulk_id] = sum(jvm.cpu_times()[:2]) - cpu

    delta.commit_staged = timed


def make_bulk(n: int, first: int) -> Bulk:
    """`n` messages of 1 KB with ActiveMQ-like ids and headers, each body distinct."""
    bulk = Bulk("bench")
    for i in range(first, first + n):
        msg_id = f"ID:bench-host-40000-1700000000000-1:1:1:1:{i}"
        bulk.add(Message(msg_id=msg_id, body=os.urandom(512).hex().encode(), source="bench",
                         destination="/queue/bench", put_timestamp=utcnow(), received_timestamp=utcnow(),
                         delivery_count=1, token=msg_id,
                         headers={"persistent": "true", "priority": "4", "expires": "0", "subscription": "sub-1",
                                  "ack": msg_id}))
    return bulk


def spark_jobs(ui: str) -> list[dict[str, Any]]:
    """The driver's jobs so far (its REST API), each with its start and end on the wall clock."""
    with urllib.request.urlopen(f"{ui}/api/v1/applications", timeout=10) as response:
        app = json.load(response)[0]["id"]
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/jobs", timeout=10) as response:
        jobs: list[dict[str, Any]] = json.load(response)

    def wall(text: str | None) -> float | None:  # "2026-11-28T23:12:31.170GMT"
        if not text:
            return None
        return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()

    for job in jobs:
        job["start"], job["end"] = wall(job.get("submissionTime")), wall(job.get("completionTime"))
    return jobs


def job_name(job: dict[str, Any]) -> str:
    """What a job did: its description without the bridge's part (Delta names its own jobs after
    what they compute) and its call site, one word-ish."""
    text = re.sub(r"mqbridge Delta commit of bulk \S+:?", "", (job.get("description") or "").split("\n")[0])
    text = text.replace("Delta:", "").strip(" :")
    site = (job.get("name") or "?").split(" at ")
    return "_".join(part for part in (text[:40], site[0], site[-1].split(":")[0] if len(site) > 1 else "")
                    if part).replace(" ", "_")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2000,10000")
    parser.add_argument("--repeat", type=int, default=12, help="writes per size (a checkpoint every tenth version)")
    parser.add_argument("--warm", type=int, default=20, help="writes of 2,000 rows first")
    parser.add_argument("--keep", action="store_true", help="keep the warehouse (table, log, ledger)")
    parser.add_argument("--no-ledger", action="store_true",
                        help="at-least-once: a plain commit without txnAppId / txnVersion (no landing ledger)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting of the session (repeatable), e.g. "
                             "spark.databricks.delta.stats.collect=false")
    args = parser.parse_args()

    port = free_port()
    given = dict(item.split("=", 1) for item in args.spark_conf)
    conf = delta.session_conf(ROOT / "jars", {**given, "spark.ui.enabled": "true", "spark.ui.port": str(port)})
    spark = create_spark_session(master="local[2]", app_name="mqbridge-delta-commit", conf=conf)
    ui = f"http://127.0.0.1:{port}"
    jvm = next(p for p in psutil.Process().children(recursive=True) if "java" in p.name())
    instrument(jvm)
    warehouse = Path(tempfile.mkdtemp(prefix="mqbridge-delta-commit-"))
    ledger = SqliteLedger.open(warehouse / "ledger.db", owner="bench")
    landing = Landing(ledger=ledger, owner="bench", counters=Counters(), dedupe_window=3600.0, warehouse=warehouse)
    executor = SparkExecutor(spark, warehouse, "bench", TypeConfig(table="bench"),
                             landing=None if args.no_ledger else landing, table_format="delta")
    table = warehouse / "bench"
    first = 0
    writes: list[tuple[int, str, float, float]] = []  # rows, bulk id, wall, JVM CPU
    try:
        started = time.perf_counter()
        for _ in range(args.warm):
            executor.execute(make_bulk(2000, first))
            first += 2000
        print(f"local[2], Delta {', '.join(j.name for j in delta.jar_files(ROOT / 'jars'))}, {given or 'no settings'}, "
              f"{'no ledger (a plain commit)' if args.no_ledger else 'ledger (txnAppId / txnVersion)'}; "
              f"{args.warm} warm writes of 2,000 rows in {time.perf_counter() - started:.0f} s")
        print(f"{'rows':>6} {'wall':>6} {'jvm':>6} | {'commit':>6} {'jvm':>6} | {'data':>6} {'log':>6} {'crc':>6} "
              f"{'after':>6} | the commit's Spark jobs (s)")
        for n in (int(s) for s in args.sizes.split(",")):
            for _ in range(args.repeat):
                bulk = make_bulk(n, first)
                first += n
                cpu, start = sum(jvm.cpu_times()[:2]), time.perf_counter()
                results = executor.execute(bulk)
                wall = time.perf_counter() - start
                assert all(r.ok for r in results), results[0]
                bulk_id = max(_commits.values(), key=lambda c: c.start).bulk_id  # this write's commit
                writes.append((n, bulk_id, wall, sum(jvm.cpu_times()[:2]) - cpu))
                commit = delta_commits({bulk_id: _commits[bulk_id]}, table)[0]
                jobs = [j for j in spark_jobs(ui) if j["start"] is not None
                        and commit.wall_start - 0.01 <= j["start"] <= commit.wall_end]
                print(f"{n:>6} {wall:>6.3f} {writes[-1][3]:>6.2f} | {commit.seconds:>6.3f} "
                      f"{_commit_cpu[bulk_id]:>6.2f} | "
                      f"{_part(commit.data_written, commit.wall_start):>6} "
                      f"{_part(commit.log_written, commit.data_written):>6} "
                      f"{_part(commit.checksum_written, commit.log_written):>6} "
                      f"{_part(commit.wall_end, commit.log_written):>6} | v{commit.version}"
                      f"{' checkpoint' if commit.checkpoint_written else ''}: "
                      + ", ".join(f"{job_name(j)} {(j['end'] or commit.wall_end) - j['start']:.3f}" for j in jobs),
                      flush=True)
        summary(writes, table)
    finally:
        spark.stop()
        if args.keep:
            print(f"kept {warehouse}")
        else:
            shutil.rmtree(warehouse, ignore_errors=True)
    return 0


def _part(end: float | None, start: float | None) -> str:
    return f"{end - start:.3f}" if end is not None and start is not None else "-"


def summary(writes: list[tuple[int, str, float, float]], table: Path) -> None:
    """Medians per size; the commits that wrote a checkpoint against the others (all sizes)."""
    placed = {c.bulk_id: c for c in delta_commits({w[1]: _commits[w[1]] for w in writes}, table)}
    for n in sorted({w[0] for w in writes}):
        of = [w for w in writes if w[0] == n]
        commits = [placed[w[1]] for w in of]
        wall = statistics.median(w[2] for w in of)
        commit = statistics.median(c.seconds for c in commits)
        jvm = statistics.median(w[3] for w in of)
        commit_jvm = statistics.median(_commit_cpu[c.bulk_id] for c in commits)
        print(f"{n:>6} rows, median of {len(of)}: write {wall:.3f} s (JVM CPU {jvm:.2f} s),"
              f" Delta commit {commit:.3f} s (JVM CPU {commit_jvm:.2f} s)"
              f" = {commit / wall:.0%} of the write, {commit / n * 1e6:.0f} us per row; the rest (staging job, "
              f"Arrow, ledger) {wall - commit:.3f} s")
    checkpointing = [c for c in placed.values() if c.checkpoint_written is not None]
    others = [c for c in placed.values() if c.checkpoint_written is None]
    for label, group in (("writing a checkpoint", checkpointing), ("the others", others)):
        if not group:
            continue
        after = [c.wall_end - c.log_written for c in group if c.log_written is not None]
        checkpoint = [c.checkpoint_written - c.log_written for c in group
                      if c.checkpoint_written is not None and c.log_written is not None]
        print(f"commits {label} ({len(group)}: versions {', '.join(str(c.version) for c in group)}): median "
              f"{statistics.median(c.seconds for c in group):.3f} s, after the log entry "
              f"{statistics.median(after):.3f} s"
              + (f", the checkpoint file {statistics.median(checkpoint):.3f} s after the log entry"
                 if checkpoint else ""))


if __name__ == "__main__":
    sys.exit(main())
