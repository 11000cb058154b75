"""Benchmark: what a Delta commit costs each writer when one or two bridges write one table (issue 51,
docs/scaling.md), each writer its own process and `local[2]` driver started as `mqbridge run` starts it
for a Delta type, committing as a bridge with a shared ledger does (`delta_commit.stage_raw`, then
`StagedCommit.commit` with `check_fence`), without the rest of the bridge.

    .venv/bin/python bench/delta_two_writers.py [--writers 1,2] [--rows 1000] [--seconds 40] [--rounds 1]
                                                 [--conf key=value ...]

For each writer count of `--writers` (alternated `--rounds` times) the writers start together on a new
table and commit bulks of `--rows` rows of 1 KB, one after the other each, for `--seconds`. Each writer
prints, over its commits after the first: how many; the median stage (the Spark job that writes the
files) and commit (in the table's turn) in ms; how many commits ran Spark jobs and how many jobs in all
(a commit alone runs none: the jobs are Delta rebuilding the state of a snapshot that has no checksum
file, `Snapshot.protocolMetadataICTAndLMCReconstruction` and `computeChecksum`); how many snapshots the
commits started on had no checksum file (another writer's version read before its `.crc` was written);
its JVM's CPU-s per commit. delta-rs reads the table back at the end: every row once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from delta_txn_commit import ROOT, make_bulk  # noqa: E402

DAY = datetime(2026, 11, 1, 12, tzinfo=UTC)


def _stage_name(tracker: Any, stage: int) -> str:
    info = tracker.getStageInfo(stage)
    return info.name if info is not None else "?"


def child(args: argparse.Namespace) -> None:
    """One writer: its driver, its warm-up commit, then commits until `--seconds` after the go file."""
    import psutil

    from mqbridge.landing import delta, delta_commit, delta_create
    from mqbridge.landing.containers import SORT_COLUMNS
    from mqbridge.landing.ledger import TableTransaction
    from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table
    from mqbridge.landing.session import create_spark_session
    from mqbridge.landing.writes.delta import empty_frame
    from mqbridge.landing.writes.frames import WRITE_OPTIONS

    conf = dict(item.split("=", 1) for item in args.conf)
    spark = create_spark_session(master="local[2]", app_name=f"bench-two-writers-{args.index}",
                                 conf=delta.session_conf(ROOT / "jars", conf))
    jvm = psutil.Process(int(spark._jvm.java.lang.ProcessHandle.current().pid()))
    tracker = spark.sparkContext.statusTracker()
    table, work = args.table, Path(args.work)
    app = f"mqbridge:bench-writer-{args.index}:1:1"
    first_row = args.index * 10_000_000

    def bulk(version: int) -> Any:
        return arrow_table(make_bulk(args.rows, first_row + version * args.rows, DAY), list(range(args.rows)))

    def commit(version: int) -> dict[str, Any]:
        handoff = work / f"h{args.index}-{version}"
        spark.sparkContext.setJobGroup(f"stage-{version}", "stage")
        began = time.perf_counter()
        staged = delta_commit.stage_raw(spark, bulk(version), handoff, table, tasks=1, groups=1, sort=SORT_COLUMNS,
                                        writer_options=WRITE_OPTIONS, identity=IDENTITY_COLUMN,
                                        bulk_id=f"{app}-{version}")
        assert staged is not None and not staged.changes_metadata
        staged_at = time.perf_counter()
        group = f"commit-{version}"
        spark.sparkContext.setJobGroup(group, group)
        staged.commit(TableTransaction(app, version, check_fence=True))
        spark.sparkContext.setJobGroup("", "")
        done = time.perf_counter()
        shutil.rmtree(handoff, ignore_errors=True)
        snapshot = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table) \
            .unsafeVolatileSnapshot()
        jobs = tracker.getJobIdsForGroup(group)
        stages = [stage for job in jobs for stage in (tracker.getJobInfo(job).stageIds or [])]
        names = sorted({_stage_name(tracker, stage) for stage in stages})
        return {"stage": staged_at - began, "commit": done - staged_at, "names": names,
                "jobs": len(tracker.getJobIdsForGroup(group)),
                "stage_jobs": len(tracker.getJobIdsForGroup(f"stage-{version}")),
                "crc": bool(snapshot.checksumOpt().isDefined())}

    if args.index == 0:
        delta_create.make_table(spark, table, lambda: empty_frame(spark, None))
    while not Path(table, "_delta_log").is_dir():
        time.sleep(0.05)
    commit(1)  # the JVM warm, its DeltaLog loaded
    Path(args.work, f"ready-{args.index}").touch()
    go = Path(args.work, "go")
    while not go.exists():
        time.sleep(0.01)
    cpu = sum(jvm.cpu_times()[:2])
    started = time.perf_counter()
    records = []
    version = 1
    while time.perf_counter() - started < args.seconds:
        version += 1
        records.append(commit(version))
    cpu = sum(jvm.cpu_times()[:2]) - cpu
    print(json.dumps({"writer": args.index, "records": records, "seconds": time.perf_counter() - started,
                      "jvm_cpu": cpu}), flush=True)
    spark.stop()


def run(writers: int, args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-two-writers-"))
    table = str(work / "table")
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "--index", str(i), "--table", table,
                               "--work", str(work), "--rows", str(args.rows), "--seconds", str(args.seconds),
                               *[f"--conf={c}" for c in args.conf]],
                              stdout=subprocess.PIPE, text=True) for i in range(writers)]
    deadline = time.monotonic() + 300
    while not all(Path(work, f"ready-{i}").exists() for i in range(writers)):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit(f"the writers did not all get ready within 300 s (work dir {work})")
        time.sleep(0.1)
    Path(work, "go").touch()
    total = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=args.seconds + 600)
        result = json.loads(out.strip().splitlines()[-1])
        recs = result["records"][1:]  # the first commit after the go may meet the other's warm-up
        jobs = [r["jobs"] for r in recs]
        print(f"  writers {writers} writer {result['writer']}: {len(recs)} commits in {result['seconds']:.0f} s, "
              f"stage {1000 * statistics.median(r['stage'] for r in recs):.0f} ms, "
              f"commit {1000 * statistics.median(r['commit'] for r in recs):.0f} ms "
              f"(mean {1000 * statistics.mean(r['commit'] for r in recs):.0f}), "
              f"commits with jobs {sum(1 for j in jobs if j)} ({sum(jobs)} jobs), "
              f"stages with more than their job {sum(1 for r in recs if r['stage_jobs'] > 1)}, "
              f"snapshots after the commit without a checksum {sum(1 for r in recs if not r['crc'])}, "
              f"JVM {result['jvm_cpu'] / len(result['records']):.2f} CPU-s per commit", flush=True)
        names: dict[str, int] = {}
        for r in recs:
            for name in r["names"]:
                names[name] = names.get(name, 0) + 1
        if names:
            print(f"    the commits' Spark stages: {names}", flush=True)
        total += len(result["records"]) + 1
    from deltalake import DeltaTable

    ids = DeltaTable(table).to_pyarrow_table(columns=["msg_id"]).column("msg_id").to_pylist()
    print(f"  rows {len(ids):,}, distinct {len(set(ids)):,}, expected {total * args.rows:,}", flush=True)
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", default="1,2")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting of every writer, key=value")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    for round_no in range(args.rounds):
        for writers in (int(w) for w in args.writers.split(",")):
            print(f"round {round_no}, {writers} writer(s), load {os.getloadavg()[0]:.1f}", flush=True)
            run(writers, args)


if __name__ == "__main__":
    main()
