"""Unit tests of what the Delta Lake landing keeps outside Spark: the ledger's record of a bulk's table
transaction, bulks adopted from the tables into a new ledger, the jars check at start, the start-up
recovery that leaves transactional bulks to their tables, the configuration's refusals, and what
`Landing.commit` does when a write fails: the table (`settle`, given as the composition root gives it)
decides at once, or, while it cannot be asked, when the bulk's messages come back."""

from __future__ import annotations

import os
import shutil
import threading
import time
import zipfile
from pathlib import Path

import pytest

from mqbridge.config.loader import parse_config
from mqbridge.counters import Counters
from mqbridge.errors import ConfigError, LedgerUnavailableError, SinkOutageError
from mqbridge.landing import delta
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import Ledger, PreparedBulk, TableTransaction, Versions
from mqbridge.landing.publication import recover, roll_forward
from mqbridge.table_formats import formats_configured
from tests.support.processes import ROOT
from tests.support.waiting import wait_until


def _empty_delta_jars(jars_dir: Path) -> None:
    """A `<jars_dir>/delta` folder with the Delta jars' names (empty files): what `jar_files` looks for."""
    (jars_dir / "delta").mkdir()
    for jar in ("delta-storage-4.4.0.jar", "delta-spark_4.1_2.13-4.4.0.jar"):
        (jars_dir / "delta" / jar).write_bytes(b"")


def _delta_storage_jar_copied(folder: Path) -> None:
    """The project's delta-storage jar copied into `folder`, to compile the log stores against."""
    storage = sorted((ROOT / "jars" / "delta").glob("delta-storage-*.jar"))
    if not storage or shutil.which("javac") is None:  # both installed by scripts/setup.sh: never a silent skip
        pytest.fail("needs the Delta jars and a JDK's javac: run scripts/setup.sh (or scripts/jars.sh delta)")
    shutil.copy(storage[-1], folder)


def test_a_prepared_bulk_keeps_its_table_transaction_and_no_files(ledger: Ledger) -> None:
    # Given a bulk prepared with a table transaction
    ledger.prepare("b1", "orders", (), ["m1", "m2"], transaction=TableTransaction("mqbridge:h:1:2", 7))
    # Then the ledger gives it back with that transaction and no files, prepared and then published
    [bulk] = ledger.in_progress()
    assert (bulk.files, bulk.transaction) == ((), TableTransaction("mqbridge:h:1:2", 7))
    assert [b.bulk_id for b in ledger.prepared_holding(["m2"])] == ["b1"]
    ledger.mark_published("b1")
    assert ledger.published(["m1", "m2", "m3"]) == {"m1", "m2"}
    [published] = ledger.published_bulks()
    assert published.transaction == TableTransaction("mqbridge:h:1:2", 7) and published.files == ()


def test_roll_forward_refuses_a_transactional_bulk_and_recovery_leaves_it_to_its_table(
        ledger: Ledger, tmp_path: Path) -> None:
    # Given a transactional bulk of a dead owner left prepared
    ledger.prepare("b1", "orders", (), ["m1"], transaction=TableTransaction("mqbridge:gone", 1))
    [bulk] = ledger.in_progress()
    # Then no file-based step may decide it: recovery hands it on, untouched
    with pytest.raises(ValueError, match="the table decides it"):
        roll_forward(ledger, bulk, tmp_path)
    report = recover(ledger, [], warehouse=tmp_path)
    if report.skipped_live:  # the test's own process owns it: alive
        assert report.transactional == []
    else:
        assert [b.bulk_id for b in report.transactional] == ["b1"]
    assert ledger.state_of("b1") == "prepared"


def test_adopted_bulks_are_published_once_and_recognised(ledger: Ledger) -> None:
    # Given bulks read back from a Delta table into a new ledger
    assert ledger.adopt("b1~orders", "orders", ["m1", "m2", "m2"], time.time())
    assert not ledger.adopt("b1~orders", "orders", ["m1"], time.time())  # once
    # Then their identities are recognised as landed
    assert ledger.published(["m1", "m2", "m3"]) == {"m1", "m2"}
    assert ledger.stats().identities == 2


def test_versions_grow_per_table() -> None:
    versions = Versions()
    assert [versions.next("a"), versions.next("a"), versions.next("b"), versions.next("a")] == [1, 2, 1, 3]


def test_missing_delta_jars_are_a_start_up_error_naming_the_command(tmp_path: Path) -> None:
    (tmp_path / "delta").mkdir()
    (tmp_path / "delta" / "delta-storage-4.4.0.jar").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"lacks delta-spark: run `mqbridge jars --config"):
        delta.jar_files(tmp_path)
    (tmp_path / "delta" / "delta-spark_4.1_2.13-4.4.0.jar").write_bytes(b"")
    given = {"spark.jars": "/x/other.jar", "spark.databricks.delta.snapshotPartitions": "8"}
    conf = delta.session_conf(tmp_path, given)
    assert conf["spark.jars"].split(",")[0] == "/x/other.jar" and len(conf["spark.jars"].split(",")) == 3
    assert conf["spark.databricks.delta.snapshotPartitions"] == "8"  # [spark] conf wins
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"


def test_delta_on_s3a_starts_with_the_conditional_put_log_store_and_without_its_jar_names_the_command(
        tmp_path: Path) -> None:
    from mqbridge.config.warehouse import parse_warehouse
    from mqbridge.landing import log_store

    _empty_delta_jars(tmp_path)
    on_s3 = parse_warehouse("s3a://bucket/wh")
    # a local or HDFS warehouse: Delta's own store (renames that never replace a file)
    assert log_store.CONF_KEY not in delta.session_conf(tmp_path, {}, tmp_path / "wh")
    assert log_store.CONF_KEY not in delta.session_conf(tmp_path, {}, parse_warehouse("hdfs://nn:9820/wh"))
    # s3a:// without the built jar: a start-up error naming the command that builds it
    with pytest.raises(ConfigError, match=r"need mqbridge's conditional-put log store .* `mqbridge jars --config"):
        delta.session_conf(tmp_path, {}, on_s3)
    (tmp_path / "delta" / log_store.JAR_NAME).write_bytes(b"")
    conf = delta.session_conf(tmp_path, {}, on_s3)
    assert conf[log_store.CONF_KEY] == log_store.CLASS_NAME
    assert str(tmp_path / "delta" / log_store.JAR_NAME) in conf["spark.jars"].split(",")
    # an operator's own log store (e.g. Delta's DynamoDB one) wins, and needs no jar of the bridge's
    (tmp_path / "delta" / log_store.JAR_NAME).unlink()
    own = {log_store.CONF_KEY: "io.delta.storage.S3DynamoDBLogStore"}
    assert delta.session_conf(tmp_path, own, on_s3)[log_store.CONF_KEY] == "io.delta.storage.S3DynamoDBLogStore"


def test_the_log_store_is_compiled_into_the_delta_jar_folder_once(tmp_path: Path) -> None:
    from mqbridge.landing import log_store

    _delta_storage_jar_copied(tmp_path)
    jar = log_store.build(tmp_path)
    assert jar == tmp_path / log_store.JAR_NAME
    with zipfile.ZipFile(jar) as archive:
        assert {"org/mqbridge/delta/ConditionalPutLogStore.class",
                "org/mqbridge/delta/LocalLinkLogStore.class"} <= set(archive.namelist())
    made = jar.stat().st_mtime_ns
    assert log_store.build(tmp_path) == jar and jar.stat().st_mtime_ns == made  # kept, not compiled again
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_a_new_log_store_version_replaces_the_older_jar_so_its_classes_cannot_shadow_the_new_ones(
        tmp_path: Path) -> None:
    from mqbridge.landing import log_store

    _delta_storage_jar_copied(tmp_path)
    (tmp_path / f"{log_store.JAR_PREFIX}1.jar").write_bytes(b"an older version")
    jar = log_store.build(tmp_path)
    assert sorted(p.name for p in tmp_path.glob(f"{log_store.JAR_PREFIX}*")) == [jar.name]


def test_delta_on_a_local_warehouse_commits_through_the_link_log_store_when_its_jar_is_there(
        tmp_path: Path) -> None:
    from mqbridge.config.warehouse import parse_warehouse
    from mqbridge.landing import log_store

    _empty_delta_jars(tmp_path)
    manager = "spark.sql.streaming.checkpointFileManagerClass"
    # without the jar: Delta's own store (as safe, only slower), the checksum writer without forks all the same
    conf = delta.session_conf(tmp_path, {}, tmp_path / "wh")
    assert log_store.LOCAL_CONF_KEY not in conf and conf[manager] == delta.LOCAL_WAREHOUSE_CONF[manager]
    (tmp_path / "delta" / log_store.JAR_NAME).write_bytes(b"")
    for warehouse in (tmp_path / "wh", None):
        conf = delta.session_conf(tmp_path, {}, warehouse)
        assert conf[log_store.LOCAL_CONF_KEY] == log_store.LOCAL_CLASS_NAME
        assert conf[manager].endswith("FileSystemBasedCheckpointFileManager")
    # the operator's own choices win
    own = delta.session_conf(tmp_path, {log_store.LOCAL_CONF_KEY: "io.delta.storage.HDFSLogStore", manager: "x"})
    assert (own[log_store.LOCAL_CONF_KEY], own[manager]) == ("io.delta.storage.HDFSLogStore", "x")
    # object stores and HDFS: neither (their file systems fork nothing)
    for uri in ("s3a://bucket/wh", "hdfs://nn:9820/wh"):
        conf = delta.session_conf(tmp_path, {}, parse_warehouse(uri))
        assert log_store.LOCAL_CONF_KEY not in conf and manager not in conf


def test_vacuum_lists_files_in_as_many_tasks_as_the_driver_host_has_cores_unless_spark_conf_says(
        tmp_path: Path) -> None:
    # VACUUM's listing runs `parallelPartitionDiscovery.parallelism` tasks (10,000 by default, checked with
    # Spark: tests/integration/test_delta_vacuum_listing.py).
    _empty_delta_jars(tmp_path)
    key = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    assert delta.session_conf(tmp_path, {})[key] == str(max(2, os.cpu_count() or 2))
    assert delta.session_conf(tmp_path, {key: "64"})[key] == "64"  # [spark] conf wins


BASE = """
[spark]
table_format = "delta"
[sources.amq]
kind = "stomp"
[[listeners]]
source = "amq"
queue = "/queue/orders"
message_type = "orders"
backout_queue = "/queue/orders.backout"
"""


def test_a_delta_type_may_have_retention_compaction_and_the_catalog() -> None:
    config = parse_config(BASE.replace("[spark]", "[spark]\ncatalog = true") +
                          '[types.orders]\nretention = "7d"\n[compaction]\ninterval = "1h"')
    assert config.types["orders"].retention == 7 * 86400 and config.spark.catalog


def test_a_type_may_choose_its_own_table_format() -> None:
    config = parse_config(BASE.replace('table_format = "delta"', "") + '[types.orders]\ntable_format = "delta"')
    assert formats_configured(config.types, config.spark.table_format) == {"delta": ["orders"]}
    assert config.spark.table_format == "parquet"


def _landing(ledger: Ledger, tmp_path: Path, settle: object) -> Landing:
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600, warehouse=tmp_path)
    landing.in_doubt.settle = settle  # type: ignore[assignment]
    return landing


def test_a_failed_write_that_its_table_says_never_committed_gives_the_bulk_back(ledger: Ledger, tmp_path: Path) -> None:
    # Given a write that fails, and a table that says (after fencing) the version never committed
    asked: list[str] = []

    def settle(bulk: PreparedBulk) -> bool:
        asked.append(bulk.bulk_id)
        ledger.forget(bulk.bulk_id)
        return False

    def write(transaction: TableTransaction) -> None:
        raise RuntimeError("the job failed")

    landing = _landing(ledger, tmp_path, settle)
    # When the bulk is committed: the write's own error, the table asked once, nothing kept
    with pytest.raises(RuntimeError, match="the job failed"):
        landing.commit("b1", "orders", ["m1", "m2"], write)
    assert asked == ["b1"] and ledger.in_progress() == [] and ledger.published(["m1", "m2"]) == set()
    landing.close()


def test_a_failed_write_that_did_commit_is_recorded_published(ledger: Ledger, tmp_path: Path) -> None:
    # Given a write whose answer was lost although it committed (the table finds its version)
    def settle(bulk: PreparedBulk) -> bool:
        ledger.mark_published(bulk.bulk_id)
        return True

    def write(transaction: TableTransaction) -> None:
        raise ConnectionError("session lost after the commit")

    landing = _landing(ledger, tmp_path, settle)
    # When the bulk is committed: success, its messages landed
    landing.commit("b1", "orders", ["m1", "m2"], write)
    assert ledger.published(["m1", "m2"]) == {"m1", "m2"}
    landing.close()


def _after_a_write_its_table_could_not_answer(ledger: Ledger, tmp_path: Path) -> tuple[Landing, threading.Event]:
    """A landing whose commit of b1 (m1, m2) failed while its table could not even be asked whether it
    committed (the store refusing the credentials): asserted an outage naming both failures, with b1 still
    prepared. Set the event for the table to answer (b1 never committed: forgotten)."""
    answers = threading.Event()

    def settle(bulk: PreparedBulk) -> bool:
        if not answers.is_set():
            raise PermissionError("403 Forbidden")
        ledger.forget(bulk.bulk_id)
        return False

    def write(transaction: TableTransaction) -> None:
        raise PermissionError("403 Forbidden")

    landing = _landing(ledger, tmp_path, settle)
    with pytest.raises(SinkOutageError, match="cannot be asked whether it committed") as raised:
        landing.commit("b1", "orders", ["m1", "m2"], write)
    assert "403 Forbidden" in str(raised.value)
    assert [b.bulk_id for b in ledger.in_progress()] == ["b1"]
    return landing, answers


def test_a_failed_write_whose_table_cannot_be_asked_stays_prepared_and_is_asked_when_its_messages_return(
        ledger: Ledger, tmp_path: Path) -> None:
    # Given a write that failed while the table could not even be asked: an outage, the bulk still prepared
    landing, answers = _after_a_write_its_table_could_not_answer(ledger, tmp_path)
    # When its messages come back before the table answers, they are not answered for
    with pytest.raises(LedgerUnavailableError):
        landing.published(["m1"])
    # And once it answers, the bulk is decided (never committed: forgotten) and they land anew
    answers.set()
    assert landing.published(["m1", "m2"]) == set()
    assert ledger.in_progress() == []
    landing.close()


def test_a_failed_write_whose_table_cannot_be_asked_is_decided_at_a_tick_once_it_answers(
        ledger: Ledger, tmp_path: Path) -> None:
    # Given a failed write whose table could not be asked, so that the bulk stays prepared by this live
    # process (other bridges leave a live owner's bulk alone: its messages may never come back here)
    landing, answers = _after_a_write_its_table_could_not_answer(ledger, tmp_path)
    # When the table answers again and a control tick comes, without the messages coming back
    answers.set()
    landing.on_tick(None)  # type: ignore[arg-type]  # (the landing's tick reads nothing of the bridge)
    # Then the tick's thread decides the bulk (never committed: forgotten), and the messages are free
    wait_until(lambda: landing.counters.total("recovery_rolled_back") == 1, 10,
               "a control tick to decide the bulk its table now answers for")
    assert ledger.in_progress() == []
    assert landing.published(["m1", "m2"]) == set()
    landing.close()
