"""Benchmark: what one Delta commit of a bulk costs, by ways of committing it (variants), alternated in
one driver so that the machine's load hits them alike (issue 48's performance goal).

    .venv/bin/python bench/delta_txn_commit.py [--commits 100] [--rows 5000] [--variants a,b,c,d,e,f,g,p,h,...]
        [--conf key=value ...] [--checkpoint-interval 10] [--plans] [--keep]

A bare `local[2]` driver started as `mqbridge run` starts it for a Delta type (`create_spark_session`
with `delta.session_conf`: the jars of `jars/delta`, `-Duser.timezone=UTC`, Delta's extension),
its UI on for the jobs' timings. Each round writes one bulk of `--rows` rows of 1 KB (the landed
columns of `mqbridge.landing.rows`, through a handoff Parquet file as the executor does) into each
variant's own partitioned table, in turn:

  a  the bridge's write before `delta_commit`: `handoff.raw_frame` written by Delta's DataFrame writer
     with `delta.commit_options` (txnAppId / txnVersion / userMetadata), which looks the app id's version up
  b  the same without txnAppId / txnVersion: the floor of Delta's DataFrame writer
  c  `mqbridge.landing.delta_commit.raw_job` (a first attempt): the same frame, and the same
     WriteIntoDelta command on a transaction of Delta's API, the app id registered as read but not
     looked up
  d  c with `spark.databricks.delta.stats.collect=false` (no per-file statistics), set around its commits
  e  c into a table made with `delta.checkpointInterval` = 100 instead of 10 (Delta's default)
  f  c into a table made with `delta.dataSkippingStatsColumns` = put_timestamp (the statistics the
     bridge reads, `delta.containers`; row counts are always kept) instead of the first 32 columns
  p  no Delta at all: the Parquet path's Spark job (`handoff.raw_write`, appended to a plain partitioned
     directory; no ledger, no publication), the floor a Delta commit is compared with
  g  c into a table whose statistics are those of f and the columns a reader's filter can skip files by
     (each file is one bulk of one type: received_timestamp, bulk_id, message_type, source, destination)

Variants that are g with one difference (issue 48: where a Delta commit's time goes beyond p's; G_VARIANTS):

  h  no checksum file (`spark.databricks.delta.writeChecksumFile.enabled` false)
  i  statistics collected by the frame's schema, not the table's (`stats.collect.using.tableSchema` false)
  j  no mergeSchema option          k  the frame not sorted (Delta's writer sorts by put_date if it must)
  m  no operation metrics in the commit info (`spark.databricks.delta.history.metricsEnabled` false)
  n  adaptive query execution off   t  no per-file statistics at all (only to size their cost)
  v  every column nullable: no NOT NULL check, DeltaInvariantCheckerExec (only to size its cost)
  q  the dictionary of msg_id and body off by session settings (Delta drops WRITE_OPTIONS' own: it keeps
     only a few writer options, and its Parquet writer's Hadoop conf is the session's)
  r  q and identity's dictionary off   s  r and m   z  h, i, s and t together: the ceiling of settings

Each Delta commit of c-g and the variants after is also split in Python (`delta_commit.start`, the
`writeAndReturnCommitData` call, the `commitIfNeeded` call) and by the Spark job's start and end
(pre-job, post-job); `--plans` prints each variant's last commit's SQL operators and stage metrics.

Per commit it prints the wall time, the driver JVM's CPU, the Spark jobs the commit ran (the UI's
REST API) and, from the table's files' modification times, the parts: until the last data file,
then the log entry `<v>.json`, then the checksum `<v>.crc`; a commit that wrote a checkpoint is
marked. Then per variant: median, quartiles, min/max of commit ms and rows/s, separately for
commits with and without a checkpoint, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqbridge.landing import delta, delta_commit  # noqa: E402
from mqbridge.landing import handoff as handoff_module  # noqa: E402
from mqbridge.landing.containers import SORT_COLUMNS  # noqa: E402
from mqbridge.landing.handoff import raw_frame, raw_write  # noqa: E402
from mqbridge.landing.ledger import TableTransaction  # noqa: E402
from mqbridge.landing.rows import IDENTITY_COLUMN, arrow_table  # noqa: E402
from mqbridge.landing.session import create_spark_session  # noqa: E402
from mqbridge.landing.writes.frames import WRITE_OPTIONS  # noqa: E402
from mqbridge.message import Bulk, Message  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: The session settings of variants that are `c` with a difference, set around each of their commits.
VARIANT_CONF = {"d": {"spark.databricks.delta.stats.collect": "false"},
                "e": {"spark.databricks.delta.properties.defaults.checkpointInterval": "100"},
                "f": {"spark.databricks.delta.properties.defaults.dataSkippingStatsColumns": "put_timestamp"},
                "g": {"spark.databricks.delta.properties.defaults.dataSkippingStatsColumns":
                      "put_timestamp,received_timestamp,bulk_id,message_type,source,destination"}}
#: Variants that are `g` with one difference (issue 48: where a Delta commit's time goes beyond the Parquet job's).
G_VARIANTS = {"h": {"spark.databricks.delta.writeChecksumFile.enabled": "false"},
              "i": {"spark.databricks.delta.stats.collect.using.tableSchema": "false"},
              "j": {},  # no mergeSchema option (commit_options without it)
              "k": {},  # the frame not sorted by the bench (Delta's writer sorts by put_date itself if it must)
              "m": {"spark.databricks.delta.history.metricsEnabled": "false"},
              "v": {},  # the frame's columns all nullable: no NOT NULL check (only to size its cost)
              "n": {"spark.sql.adaptive.enabled": "false"},
              # Delta keeps only a few writer options (maxRecordsPerFile, compression, ...) and drops
              # WRITE_OPTIONS' dictionary settings; its Parquet writer's Hadoop conf is the session's
              # (plus the table's properties), so the session's settings reach it
              "q": {f"parquet.enable.dictionary#{c}": "false" for c in ("msg_id", "body")},
              "r": {f"parquet.enable.dictionary#{c}": "false" for c in ("msg_id", "body", "identity")}}
G_VARIANTS["s"] = {**G_VARIANTS["r"], **G_VARIANTS["m"]}
G_VARIANTS["t"] = {"spark.databricks.delta.stats.collect": "false"}  # only to size the statistics' cost
# the ceiling of what session settings can take off (some of them weaken what the bridge relies on)
G_VARIANTS["z"] = {**G_VARIANTS["h"], **G_VARIANTS["i"], **G_VARIANTS["s"], **G_VARIANTS["t"]}
for _v, _extra in G_VARIANTS.items():
    VARIANT_CONF[_v] = {**VARIANT_CONF["g"], **_extra}
APP_ID = "mqbridge:bench-host:1:1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_bulk(n: int, first: int, day: datetime) -> Bulk:
    """`n` messages of 1 KB with ActiveMQ-like ids and headers, each body distinct, put on `day`."""
    bulk = Bulk("bench")
    for i in range(first, first + n):
        msg_id = f"ID:bench-host-40000-1700000000000-1:1:1:1:{i}"
        bulk.add(Message(msg_id=msg_id, body=os.urandom(512).hex().encode(), source="bench",
                         destination="/queue/bench", put_timestamp=day, received_timestamp=day,
                         delivery_count=1, token=msg_id, identity=msg_id,
                         headers={"persistent": "true", "priority": "4", "expires": "0", "subscription": "sub-1",
                                  "ack": msg_id}))
    return bulk


#: The parts of the last transaction-API commit, timed in Python (s): `delta_commit.start` (DeltaLog.forTable,
#: startTransaction, the command built over py4j), `writeAndReturnCommitData` (the Spark job and the files'
#: actions), `commitIfNeeded` (the log entry, the checksum, post-commit hooks, the snapshot's update).
PY_TIMES: dict[str, float] = {}
_product_start = delta_commit.start


def _timed_start(*args: Any, **kwargs: Any) -> Any:
    began = time.perf_counter()
    pending = _product_start(*args, **kwargs)
    PY_TIMES["start"] = time.perf_counter() - began
    return pending


def _timed_commit(self: Any) -> int:
    """PendingCommit.commit's two calls, each timed."""
    none = self.jvm.scala.Option.empty()
    began = time.perf_counter()
    data = self.command.writeAndReturnCommitData(self.txn, self.jspark, none, False)
    wrote = time.perf_counter()
    committed = self.txn.commitIfNeeded(data.actions(), self.operation, data.stringTags())
    PY_TIMES["write"], PY_TIMES["commit"] = wrote - began, time.perf_counter() - wrote
    return int(committed.get()) if committed.isDefined() else -1


delta_commit.start = _timed_start  # type: ignore[assignment]
delta_commit.PendingCommit.commit = _timed_commit  # type: ignore[method-assign]


def options_without_merge(bulk_id: str, transaction: Any) -> dict[str, str]:
    """Variant j: `delta.commit_options` without mergeSchema."""
    return {k: v for k, v in delta.commit_options(bulk_id, transaction).items() if k != "mergeSchema"}


def unsorted_frame(spark: Any, rows: Any, handoff: Path, *, tasks: int, groups: int, sort: Any, options: Any,
                   identity: str | None = None) -> tuple[Any, Any]:
    """Variant k: `handoff.raw_frame` without its sortWithinPartitions (the rest as it builds it)."""
    parts = handoff_module._java_parts(spark, sort, options)
    path = handoff_module.handoff_file(rows, handoff, 1 if tasks > 1 else groups)
    jdf = parts.session.read().schema(parts.schema).format("parquet").load(str(path)).drop("_row")
    jdf = jdf.withColumnRenamed("_identity", identity) if identity else jdf.drop("_identity")
    return parts, handoff_module.partitioned(jdf, tasks, groups)


def nullable_frame(spark: Any, rows: Any, handoff: Path, *, tasks: int, groups: int, sort: Any, options: Any,
                   identity: str | None = None) -> tuple[Any, Any]:
    """Variant v (only to size the NOT NULL check's cost, `DeltaInvariantCheckerExec`): `handoff.raw_frame`
    read with every column nullable, so that its table has no NOT NULL column to check."""
    from pyspark.sql.types import StructField, StructType

    from mqbridge.landing.rows import SPARK_SCHEMA

    parts = handoff_module._java_parts(spark, sort, options)
    schema = StructType([StructField(f.name, f.dataType, True) for f in SPARK_SCHEMA.fields])
    path = handoff_module.handoff_file(rows, handoff, 1 if tasks > 1 else groups)
    jdf = parts.session.read().schema(parts.session.parseDataType(schema.json())).format("parquet") \
        .load(str(path)).drop("_row")
    jdf = jdf.withColumnRenamed("_identity", identity) if identity else jdf.drop("_identity")
    return parts, handoff_module.partitioned(jdf, tasks, groups).sortWithinPartitions(sort[0], parts.sort_rest)


def rest(ui: str, path: str) -> Any:
    """The driver UI's REST API at /api/v1/applications/<app><path>."""
    with urllib.request.urlopen(f"{ui}/api/v1/applications", timeout=10) as response:
        app = json.load(response)[0]["id"]
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}{path}", timeout=30) as response:
        return json.load(response)


def print_plan(ui: str, sql_ids: list[int], stage_ids: list[int]) -> None:
    """The SQL executions' operators with their metrics, and the stages' task metrics, of one commit."""
    for sql_id in sql_ids:
        execution = rest(ui, f"/sql/{sql_id}?details=true&planDescription=false")
        print(f"  sql {sql_id} {execution.get('description', '')[:60]!r} {execution.get('duration')} ms")
        for node in execution.get("nodes", []):
            metrics = "; ".join(f"{m['name']}={m['value']}" for m in node.get("metrics", [])
                                if any(w in m["name"] for w in ("time", "rows", "written", "files", "size")))
            print(f"    [{node['nodeId']}] {node['nodeName'][:40]}: {metrics[:300]}")
    for stage_id in stage_ids:
        for stage in rest(ui, f"/stages/{stage_id}"):
            keys = ("numTasks", "executorRunTime", "executorCpuTime", "executorDeserializeTime",
                    "resultSerializationTime", "jvmGcTime", "inputRecords", "outputRecords",
                    "shuffleWriteRecords", "memoryBytesSpilled")
            print(f"  stage {stage_id} {stage.get('name', '')[:50]!r} "
                  + " ".join(f"{k}={stage.get(k)}" for k in keys)
                  + f" cpu_ms={int(stage.get('executorCpuTime', 0)) // 1_000_000}")


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


def job_label(job: dict[str, Any]) -> str:
    text = (job.get("description") or job.get("name") or "").split("\n")[0]
    return " ".join(text.split()[:5])[:48]


def parts_by_files(table: Path, version: int, start: float, end: float) -> dict[str, float]:
    """The commit's parts by its files' modification times (s): data files, log entry, checksum."""
    log_dir = table / "_delta_log"
    entry = log_dir / f"{version:020d}.json"
    crc = log_dir / f"{version:020d}.crc"
    data = [p.stat().st_mtime for p in table.glob("put_date=*/*.parquet") if p.stat().st_mtime >= start - 0.001]
    out: dict[str, float] = {}
    last_data = max(data) if data else start
    out["data"] = last_data - start
    if entry.exists():
        out["log"] = entry.stat().st_mtime - last_data
        if crc.exists():
            out["crc"] = crc.stat().st_mtime - entry.stat().st_mtime
            out["after"] = end - crc.stat().st_mtime
    out["checkpoint"] = float(any(log_dir.glob(f"{version:020d}.checkpoint*.parquet")))
    return out


def delta_writer_job(spark: Any, rows: Any, handoff: Path, table: str, options: dict[str, str]) -> Any:
    """Variants a and b: the bulk's Java Dataset (`handoff.raw_frame`) appended by Delta's DataFrame
    writer with `options`, partitioned by put_date; calling it runs the job."""
    parts, jdf = raw_frame(spark, rows, handoff, tasks=1, groups=1, sort=SORT_COLUMNS, options=WRITE_OPTIONS,
                           identity=IDENTITY_COLUMN)
    writer = jdf.write().options(parts.options).partitionBy(parts.partition).mode("append").format("delta")
    for key, value in options.items():
        writer = writer.option(key, value)
    return lambda: writer.save(table)


def table_version(table: Path) -> int:
    versions = [int(p.name.split(".")[0]) for p in (table / "_delta_log").glob("*.json") if p.name[0].isdigit()]
    return max(versions) if versions else -1


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 4:
        m = statistics.median(values)
        return min(values), m, max(values)
    q = statistics.quantiles(values, n=4)
    return q[0], q[1], q[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=100, help="commits per variant (after the warm-up)")
    parser.add_argument("--warm", type=int, default=3, help="warm-up commits per variant, not counted")
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--variants", default="a,b,c")
    parser.add_argument("--checkpoint-interval", type=int, default=0, help="delta.checkpointInterval of new tables")
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting key=value (repeatable)")
    parser.add_argument("--plans", action="store_true",
                        help="print each variant's last commit's SQL operators (metrics) and stages (task metrics)")
    parser.add_argument("--keep", action="store_true", help="keep the tables (printed) instead of removing them")
    args = parser.parse_args()
    variants = args.variants.split(",")
    conf = {"spark.ui.enabled": "true", "spark.ui.port": str(free_port())}
    for item in args.conf:
        key, _, value = item.partition("=")
        conf[key] = value
    if args.checkpoint_interval:
        conf["spark.databricks.delta.properties.defaults.checkpointInterval"] = str(args.checkpoint_interval)
    settings = delta.session_conf(ROOT / "jars", conf)
    print("load before:", os.getloadavg(), flush=True)
    spark = create_spark_session(master="local[2]", app_name="bench-delta-txn-commit", conf=settings)
    ui = spark.sparkContext.uiWebUrl or ""
    jvm = next(p for p in psutil.Process().children(recursive=True) if "java" in p.name())
    work = Path(tempfile.mkdtemp(prefix="bench-delta-txn-"))
    tables = {v: work / f"table_{v}" for v in variants}
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    version = 0
    day = datetime(2026, 11, 1, 12, tzinfo=UTC)
    first_row = 0
    try:
        for round_no in range(args.warm + args.commits):
            version += 1
            day_of_round = day + timedelta(days=round_no // 40)  # a new partition now and then
            for v in variants:
                bulk = make_bulk(args.rows, first_row, day_of_round)
                first_row += args.rows
                rows = arrow_table(bulk, list(range(args.rows)))
                handoff = work / "_staging" / f"{v}-{round_no}"
                bulk_id = f"bench-{v}-{round_no}"
                transaction = TableTransaction(APP_ID, version)
                table = str(tables[v])
                if v == "p":
                    job = raw_write(spark, rows, handoff, table, mode="append", tasks=1, sort=SORT_COLUMNS,
                                    options=WRITE_OPTIONS)
                elif v in ("a", "b"):
                    job = delta_writer_job(spark, rows, handoff, table,
                                           delta.commit_options(bulk_id, transaction if v == "a" else None))
                elif v in ("k", "v"):
                    delta_commit.raw_frame = unsorted_frame if v == "k" else nullable_frame  # type: ignore
                    try:
                        job = delta_commit.raw_job(spark, rows, handoff, table, tasks=1, groups=1, sort=SORT_COLUMNS,
                                                   writer_options=WRITE_OPTIONS, identity=IDENTITY_COLUMN,
                                                   bulk_id=bulk_id, transaction=transaction)
                    finally:
                        delta_commit.raw_frame = raw_frame
                else:
                    job = delta_commit.raw_job(spark, rows, handoff, table, tasks=1, groups=1, sort=SORT_COLUMNS,
                                               writer_options=WRITE_OPTIONS, identity=IDENTITY_COLUMN,
                                               bulk_id=bulk_id, transaction=transaction)
                before_jobs = {j["jobId"] for j in spark_jobs(ui)}
                if args.plans:
                    before_sql = {e["id"] for e in rest(ui, "/sql?details=false")}
                    before_stages = {st["stageId"] for st in rest(ui, "/stages")}
                for key, value in VARIANT_CONF.get(v, {}).items():
                    spark.conf.set(key, value)
                if v == "j":  # asked when the commit starts, inside job()
                    delta_commit.commit_options = options_without_merge  # type: ignore[assignment]
                PY_TIMES.clear()
                cpu, start, wall = sum(jvm.cpu_times()[:2]), time.perf_counter(), time.time()
                try:
                    job()
                finally:
                    delta_commit.commit_options = delta.commit_options
                seconds, end = time.perf_counter() - start, time.time()
                for key in VARIANT_CONF.get(v, {}):
                    spark.conf.unset(key)
                cpu = sum(jvm.cpu_times()[:2]) - cpu
                shutil.rmtree(handoff)
                tv = table_version(tables[v])
                parts = parts_by_files(tables[v], tv, wall, end)
                jobs = [j for j in spark_jobs(ui) if j["jobId"] not in before_jobs]
                if args.plans and round_no == args.warm + args.commits - 1:
                    print(f"{v}: the last commit's SQL executions and stages")
                    new_sql = sorted(e["id"] for e in rest(ui, "/sql?details=false") if e["id"] not in before_sql)
                    new_stages = sorted(s["stageId"] for s in rest(ui, "/stages") if s["stageId"] not in before_stages)
                    print_plan(ui, new_sql, new_stages)
                started = [j["start"] for j in jobs if j["start"]]
                ended = [j["end"] for j in jobs if j["end"]]
                record = {"round": round_no, "version": tv, "seconds": seconds, "cpu": cpu, "parts": parts,
                          "py": dict(PY_TIMES), "pre_job": (min(started) - wall) if started else 0.0,
                          "post_job": (end - max(ended)) if ended else 0.0,
                          "jobs": [(job_label(j), (j["end"] or end) - (j["start"] or wall)) for j in sorted(
                              jobs, key=lambda j: j["jobId"])]}
                if round_no >= args.warm:
                    results[v].append(record)
                ck = " CHECKPOINT" if parts.get("checkpoint") else ""
                print(f"{v} r{round_no:3d} v{tv:3d} {seconds * 1000:7.0f} ms cpu {cpu:5.2f}s "
                      f"data {parts.get('data', 0):.2f} log {parts.get('log', 0):.2f} crc {parts.get('crc', 0):.2f} "
                      f"after {parts.get('after', 0):.2f}{ck} pre-job {record['pre_job']:.2f} "
                      f"post-job {record['post_job']:.2f} py "
                      + " ".join(f"{k} {t:.3f}" for k, t in record["py"].items()) + " jobs "
                      + "; ".join(f"{name} {t:.2f}" for name, t in record["jobs"]), flush=True)
    finally:
        print("load after:", os.getloadavg(), flush=True)
        os.system("uptime")
        if args.keep:
            print("tables kept under", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.rows} rows per commit, {args.commits} commits per variant, alternated; conf {args.conf} "
          f"checkpointInterval {args.checkpoint_interval or 'default'}")
    print("variant  kind         n   commit ms: median [q1, q3] (min-max)   rows/s median   JVM cpu-s median  jobs"
          "  pre-job/post-job ms  py start/write/commit ms (medians)")
    for v in variants:
        for kind, picked in (("all", results[v]),
                             ("no-ckpt", [r for r in results[v] if not r["parts"].get("checkpoint")]),
                             ("checkpoint", [r for r in results[v] if r["parts"].get("checkpoint")])):
            if not picked:
                continue
            ms = [r["seconds"] * 1000 for r in picked]
            q1, med, q3 = quartiles(ms)
            rate = statistics.median(args.rows / r["seconds"] for r in picked)
            cpu = statistics.median(r["cpu"] for r in picked)
            njobs = statistics.median(len(r["jobs"]) for r in picked)
            pre = statistics.median(r["pre_job"] for r in picked) * 1000
            post = statistics.median(r["post_job"] for r in picked) * 1000
            py = "/".join(f"{statistics.median(r['py'][k] for r in picked) * 1000:.0f}"
                          for k in ("start", "write", "commit") if all(k in r["py"] for r in picked))
            print(f"{v:7s}  {kind:10s} {len(picked):3d}   {med:7.0f} [{q1:6.0f}, {q3:6.0f}] "
                  f"({min(ms):.0f}-{max(ms):.0f})   {rate:9.0f}       {cpu:6.2f}         {njobs:.0f}"
                  f"     {pre:4.0f}/{post:4.0f}          {py or '-'}")


if __name__ == "__main__":
    main()
