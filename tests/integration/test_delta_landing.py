"""Delta Lake tables (`[spark] table_format = "delta"`) on the real parts: `mqbridge run` with its own Spark
driver and the Delta jars of `scripts/jars.sh delta`, on a real ActiveMQ, killed with SIGKILL at each step
of the landing protocol in turn (each start recovering the kill before); every message must be in the
Delta table exactly once, as `deltalake` (delta-rs, an independent reader) sees it, with the queue empty.
And the facts the protocol rests on, checked with a bare Spark and Delta: a repeated transaction version
is skipped, an empty commit fences a version, the log tells each app id's version."""

from __future__ import annotations

import collections
import re
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mqbridge.landing import delta
from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import (
    DELTA_SPARK,
    JARS,
    bulk_counts_now,
    bulk_counts_until,
    delta_facts,
    delta_jars_fetched,  # noqa: F401 (the module's autouse fixture)
    delta_rows,
)
from tests.support.exactly_once import account, bodies
from tests.support.object_stores import DeltaSpark
from tests.support.processes import (
    killed_in_turn,
    mqbridge,
    run_until_idle,
    run_until_killed,
    stomp_bridge,
    stomp_config,
)

pytestmark = pytest.mark.integration

deltalake = pytest.importorskip("deltalake")


def delta_config(tmp_path: Path, queue: str) -> Path:
    return stomp_config(tmp_path, queue, spark=DELTA_SPARK)


@pytest.mark.parametrize("failpoint", ["after_stage", "after_prepare"])
def test_overlapping_writes_killed_at_a_step_land_every_message_once_and_staged_files_stay_unseen(
        tmp_path: Path, amq: AmqClient, failpoint: str) -> None:
    # Given a Delta table that exists (50 messages landed), 600 more messages, and a bridge writing two
    # bulks of the type at a time (`writes_per_type = 2`), whose raw bulks' files pyarrow writes
    # (`writer = "arrow"`: before the bulk's turn, `delta_commit.stage_arrow`, while the bulk before it
    # commits; the Spark job that does the same, `stage_raw`, is killed in the test below), that dies at the failpoint
    q = unique_queue(f"delta-overlap-{failpoint}")
    first = bodies(50, f"{failpoint}-first")
    amq.put_many(q, first)
    arrow = DELTA_SPARK.replace('writer = "spark"', 'writer = "arrow"')
    config = stomp_bridge(q, spark=arrow).set("collector", writes_per_type=2).write(tmp_path / "bridge.toml")
    run_until_idle(config)
    sent = bodies(600, failpoint)
    amq.put_many(q, sent)
    run_until_killed(config, failpoint)
    table = tmp_path / "landing" / "orders"
    if failpoint == "after_stage":  # the killed bulk's files were written before its turn, and not committed
        in_log = {Path(f).name for f in deltalake.DeltaTable(str(table)).file_uris()}
        on_disk = {f.name for f in table.rglob("*.parquet") if not any(p.startswith("_") for p in f.parts)}
        assert on_disk - in_log, (sorted(on_disk), sorted(in_log))
    # When it is started again and runs until idle
    out = run_until_idle(config)
    # Then every message is in the Delta table exactly once: the files a killed bulk had written and
    # never committed are in no reader's view
    result = account(first + sent, delta_rows(table))
    assert result.clean, f"{result}\n{out[-4000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    # and every file the table holds was written by pyarrow, not by a Spark job
    writers = {pq.read_metadata(uri.removeprefix("file://")).created_by.split(" version")[0]
               for uri in deltalake.DeltaTable(str(table)).file_uris()}
    assert writers == {"parquet-cpp-arrow"}, writers


@pytest.mark.timeout(900)
def test_a_bridge_killed_at_each_step_lands_every_message_once_into_the_delta_table(
        tmp_path: Path, amq: AmqClient) -> None:
    # Given 600 messages (units of 200 on two threads) and a bridge landing into a Delta table
    q = unique_queue("delta-steps")
    sent = bodies(600, "steps")
    amq.put_many(q, sent)
    config = delta_config(tmp_path, q)
    # When it is killed at each step of the landing in turn (each start recovers what the kill before left,
    # then dies at the next step), then runs until idle
    runs = killed_in_turn(config, ("after_stage", "after_prepare", "after_publish", "before_source_commit"))
    # Then every message is in the Delta table exactly once: 0 lost, 0 duplicated, 0 unexpected
    rows = delta_rows(tmp_path / "landing" / "orders")
    result = account(sent, rows)
    assert result.clean, f"{result}\n{runs.last[-4000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0
    # ... the table was asked: the version of the bulk killed after_prepare never committed, the one killed
    # after_publish did
    after = runs.after
    assert "never committed into table orders: fenced and rolled back" in after["after_prepare"], runs.last[-4000:]
    assert "had committed into table orders: recorded published" in after["after_publish"], runs.last[-4000:]
    # ... and the units killed after_publish and before_source_commit came back and were recognised, not
    # landed again
    assert "already landed; committed without landing them again" in after["after_publish"], runs.last[-4000:]
    assert "already landed; committed without landing them again" in after["before_source_commit"], runs.last[-4000:]


def test_delta_skips_a_repeated_or_fenced_version_and_its_log_tells_each_apps_version(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a bare Spark with the Delta jars (no bridge): the session's Delta-enabled driver
    # When a table is written with repeated, newer and fenced transaction versions
    outcome = delta_spark.run(delta_facts, str(tmp_path / "t"))
    # Then each promise the landing protocol rests on holds
    assert outcome["ok"], outcome.get("traceback")
    facts = outcome["value"]
    assert len(facts) == 5 and all(facts.values()), facts


@pytest.mark.timeout(600)  # 20,000 deliveries and two bridge starts on a busy 2-core machine
def test_a_wiped_state_dir_is_rebuilt_from_the_delta_tables_and_nothing_lands_twice(
        tmp_path: Path, amq: AmqClient) -> None:
    # Given 10,000 messages landed into a Delta table (identity: the body's hash) by a bridge killed
    # before its last source commit, and its state_dir (the ledger) wiped afterwards: a replaced disk
    q = unique_queue("delta-rebuild")
    sent = bodies(10_000, "rb")
    amq.put_many(q, sent)
    config = stomp_config(tmp_path, q, extra_listener='identity = "body-sha256"', spark=DELTA_SPARK)
    run_until_killed(config, "before_source_commit")
    shutil.rmtree(tmp_path / "state")
    # When every message is delivered again (those the broker still holds, and all 10,000 re-sent)
    amq.put_many(q, sent)
    out = run_until_idle(config)
    # Then the new ledger learnt the landed messages from the table first, and none landed twice
    assert re.search(r"ledger rebuilt from the tables: [1-9]\d* identities", out), out[-4000:]
    rows = delta_rows(tmp_path / "landing" / "orders")
    result = account(sent, rows)
    assert result.clean, f"{result}\n{out[-4000:]}"
    assert amq.depth(q) == 0 and amq.depth(q + ".backout") == 0


@pytest.mark.timeout(600)
def test_concurrent_readers_only_ever_see_whole_bulks(tmp_path: Path, amq: AmqClient,
                                                      delta_spark: DeltaSpark) -> None:
    # Given a bridge landing 1,500 messages into a Delta table in many bulks (units of 200, bulks of at
    # most 128 KB), and two readers polling the table meanwhile: a second Spark session (the session's
    # Delta-enabled driver, another process, started before the bridge) and delta-rs in this one
    q = unique_queue("delta-readers")
    sent = bodies(1500, "rd")
    amq.put_many(q, sent)
    table = tmp_path / "landing" / "orders"
    stop = tmp_path / "stop-reading"
    delta_spark.driver_pid()
    reader = delta_spark.submit(bulk_counts_until, str(table), str(stop))
    bridge = mqbridge("run", "--config", str(delta_config(tmp_path, q)), "--until-idle", "3s")
    seen: list[dict[str, int]] = []
    while bridge.poll() is None:
        if (counts := bulk_counts_now(table)) is not None:
            seen.append(counts)
        time.sleep(0.1)
    out = bridge.communicate()[0]
    stop.touch()
    read = reader.result(timeout=120)
    assert read["ok"], read.get("traceback")
    spark_seen: list[dict[str, int]] = read["value"]
    assert bridge.returncode == 0, out[-4000:]
    # Then every bulk either reader saw was whole: as many rows as the bulk has in the end
    final = collections.Counter(deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["bulk_id"])
                                .column("bulk_id").to_pylist())
    assert sum(final.values()) == len(sent) and len(final) > 3, final
    partial = [(bulk, n, final[bulk]) for snapshot in seen + spark_seen for bulk, n in snapshot.items()
               if n != final[bulk]]
    assert partial == [], partial[:5]
    # and both readers did read while the bridge was landing (snapshots between the first and last bulk)
    for name, snapshots in (("delta-rs", seen), ("Spark", spark_seen)):
        assert any(0 < sum(s.values()) < len(sent) for s in snapshots), f"{name} saw no table in between"
    # and the table keeps per-file statistics of the columns a reader skips files by, put_timestamp's
    # among them (the bridge's containers read them), not of msg_id (delta.STATS_COLUMNS)
    landed = deltalake.DeltaTable(str(table))
    assert landed.metadata().configuration.get("delta.dataSkippingStatsColumns") == ",".join(delta.STATS_COLUMNS)
    stats = pa.table(landed.get_add_actions(flatten=True)).column_names
    assert "min.put_timestamp" in stats and "min.bulk_id" in stats and "min.msg_id" not in stats, stats


def test_a_missing_delta_jar_is_a_start_up_error_naming_the_command_that_fetches_it(tmp_path: Path) -> None:
    # Given a bridge configured for Delta tables whose jars_dir lacks the Delta jars
    config = stomp_config(tmp_path, unique_queue("delta-nojars"), spark=DELTA_SPARK.replace(str(JARS), str(tmp_path)))
    # When it starts: it refuses before connecting anything, naming the command
    proc = mqbridge("run", "--config", str(config), "--until-idle", "1s")
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 2, out[-3000:]
    assert "needs the Delta Lake jars" in out and "mqbridge jars --config" in out, out[-3000:]


def test_mqbridge_jars_fetches_the_pinned_jars_checked_against_their_checksums(tmp_path: Path) -> None:
    # When the jars are fetched from Maven Central into an empty folder, and again
    for _ in range(2):
        proc = mqbridge("jars", "--dir", str(tmp_path))
        out = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, out
    # Then they are the project's (byte for byte: the fetched jars, and the log store of Delta tables on S3
    # compiled beside them), and a repository without them is an error that says so
    for jar in (JARS / "delta").glob("*.jar"):
        assert (tmp_path / "delta" / jar.name).read_bytes() == jar.read_bytes()
    proc = mqbridge("jars", "--dir", str(tmp_path / "other"), "--repository", "https://repo.maven.apache.org/none")
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1 and "cannot fetch the checksum of delta-spark" in out, out
