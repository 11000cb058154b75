"""A bulk's Delta commit after another writer's commit of the same table (two bridges on one table),
checked with a bare Spark and Delta (the session's Delta-enabled driver, no bridge) on real tables: what
it costs in Spark jobs. The commit builds the table's file list for its checksum file by one more Spark
job only when the checksum keeps that list (Delta's default, not the bridge's); it waits for the other
writer's checksum file, which Delta writes just after the log entry, rather than rebuild the state by
Spark jobs without it (`mqbridge.landing.delta_checksums`), once only for a writer that writes none, and
again once a late file turns up. (The commit protocol itself: test_delta_commit.py.)"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.delta_commits import APP, frame_rows
from tests.support.delta_tables import delta_jars_fetched  # noqa: F401 (the module's autouse fixture)
from tests.support.object_stores import DeltaSpark

pytestmark = pytest.mark.integration

# --- run in the Delta-enabled driver (`DeltaSpark.run`): module-level functions -------------------


def jobs_of_a_commit_on_another_writers_version(spark: Any, root: str, all_files_in_crc: str) -> dict[str, int]:
    """With `spark.databricks.delta.allFilesInCrc.enabled` = `all_files_in_crc`: the Spark jobs of a staged
    bulk's commit (`StagedCommit.commit`, as the bridge commits) on a table nobody else wrote meanwhile, and
    of one after another writer's commit (another app id and another DeltaLog, as another bridge's), read
    before that writer's checksum file is there (it writes it after its commit)."""
    from pathlib import Path

    from mqbridge.landing import delta_commit
    from mqbridge.landing.ledger import TableTransaction

    spark.conf.set("spark.databricks.delta.allFilesInCrc.enabled", all_files_in_crc)
    tracker = spark.sparkContext.statusTracker()
    found: dict[str, int] = {}
    for case in ("alone", "after another writer"):
        path = f"{root}/{case.replace(' ', '-')}"
        for k in range(3):  # a table of a few commits, each with its checksum file
            delta_commit.write_frame(frame_rows(spark, f"warm-{k}", range(k * 5, k * 5 + 5)), path, f"warm-{k}",
                                     TableTransaction(APP, k + 1))
        pending = delta_commit.start(frame_rows(spark, "bulk", range(100, 105)), path, "bulk", None)
        assert pending is not None
        staged = delta_commit.StagedCommit(spark, path, pending)  # its files written, as the bridge stages them
        if case == "after another writer":  # as another process's: its own DeltaLog, not this one's
            spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
            delta_commit.write_frame(frame_rows(spark, "other", range(200, 205)), path, "other",
                                     TableTransaction("mqbridge:another-bridge", 1))
            # ... read before its checksum file is there (the other process writes it after its commit)
            newest = max(Path(path, "_delta_log").glob("*.crc"))
            newest.unlink()
            spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
        group = f"commit-{case}-{all_files_in_crc}".replace(" ", "-")
        spark.sparkContext.setJobGroup(group, group)
        staged.commit(TableTransaction(APP, 10))
        spark.sparkContext.setJobGroup("", "")
        found[case] = len(tracker.getJobIdsForGroup(group))
    spark.conf.unset("spark.databricks.delta.allFilesInCrc.enabled")
    return found


def commits_after_another_writers_late_checksum(spark: Any, root: str) -> dict[str, Any]:
    """Another writer (its own DeltaLog: the table by another path, a symlink, as another process has its
    own) commits between two of this process's bulks, and its checksum file comes late (put back 0.3 s
    after; hidden meanwhile) or never: the Spark jobs of this process's staged commit (`StagedCommit.commit`)
    with the wait for it (`delta_checksums`) and without (`CHECKSUM_WAIT` 0); then how long a transaction's
    wait takes for a writer that writes no checksum files, the first time and the next, and for one whose
    file came after a wait ran out."""
    import os
    import threading
    from pathlib import Path

    from mqbridge.landing import delta_checksums, delta_commit
    from mqbridge.landing.ledger import TableTransaction

    tracker = spark.sparkContext.statusTracker()
    facts: dict[str, Any] = {}

    def other_commits(alias: str, version: int, checksum: str) -> None:
        """The other writer's commit of `version` of its app id; its checksum file then "late", "never" or kept."""
        delta_commit.write_frame(frame_rows(spark, f"other-{version}", range(1000 + version * 5, 1005 + version * 5)),
                                 alias, f"other-{version}", TableTransaction("mqbridge:another-bridge", version))
        if checksum == "kept":
            return
        newest = max(Path(alias, "_delta_log").glob("[0-9]*.crc"))  # not a hidden one
        hidden = newest.with_name("hidden-" + newest.name)
        newest.rename(hidden)
        if checksum == "late":
            threading.Timer(0.3, hidden.rename, (newest,)).start()

    def our_commit(path: str, version: int, alias: str, checksum: str) -> int:
        """This process's bulk `version`: its files staged, the other writer's commit, then its commit: its jobs."""
        pending = delta_commit.start(frame_rows(spark, f"bulk-{version}", range(version * 5, version * 5 + 5)),
                                     path, f"bulk-{version}", None)
        assert pending is not None
        staged = delta_commit.StagedCommit(spark, path, pending)
        other_commits(alias, version, checksum)
        group = f"late-checksum-{Path(path).name}-{version}"
        spark.sparkContext.setJobGroup(group, group)
        staged.commit(TableTransaction(APP, version))
        spark.sparkContext.setJobGroup("", "")
        return len(tracker.getJobIdsForGroup(group))

    for case, wait in (("waited", delta_checksums.CHECKSUM_WAIT), ("not waited", 0.0)):
        path, alias = f"{root}/{case.replace(' ', '-')}", f"{root}/{case.replace(' ', '-')}-alias"
        delta_commit.write_frame(frame_rows(spark, "bulk-1", range(0, 5)), path, "bulk-1", TableTransaction(APP, 1))
        os.symlink(path, alias)
        our_commit(path, 2, alias, "kept")  # the first met commit of another writer: the table shared from now on
        saved, delta_checksums.CHECKSUM_WAIT = delta_checksums.CHECKSUM_WAIT, wait
        try:
            facts[f"jobs, {case}"] = our_commit(path, 3, alias, "late")
        finally:
            delta_checksums.CHECKSUM_WAIT = saved
        time.sleep(0.4)  # the late checksum file back before the table is removed
        facts[f"shared, {case}"] = delta_checksums.shared(path)
    path, alias = f"{root}/never", f"{root}/never-alias"
    delta_commit.write_frame(frame_rows(spark, "bulk-1", range(0, 5)), path, "bulk-1", TableTransaction(APP, 1))
    os.symlink(path, alias)
    our_commit(path, 2, alias, "kept")
    delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    saved, delta_checksums.CHECKSUM_WAIT = delta_checksums.CHECKSUM_WAIT, 0.3
    try:
        for attempt in ("first", "next"):
            other_commits(alias, 10 if attempt == "first" else 11, "never")
            began = time.monotonic()
            delta_checksums.meet_newest(spark._jvm, delta_log, path)
            facts[f"wait without checksums, {attempt}"] = time.monotonic() - began
        other_commits(alias, 12, "kept")
        delta_checksums.meet_newest(spark._jvm, delta_log, path)
        facts["waits again once a checksum file is found"] = path not in delta_checksums._without_checksums
        # a slow writer: its checksum file comes after the wait ran out (0.3 s late, a wait of 0.1 s)
        delta_checksums.CHECKSUM_WAIT = 0.1
        other_commits(alias, 13, "late")
        delta_checksums.meet_newest(spark._jvm, delta_log, path)
        facts["a late checksum file: the wait ran out"] = path in delta_checksums._without_checksums
        time.sleep(0.4)  # ... and the file turns up
        delta_checksums.CHECKSUM_WAIT = 0.3
        other_commits(alias, 14, "never")
        began = time.monotonic()
        delta_checksums.meet_newest(spark._jvm, delta_log, path)
        facts["wait after a late checksum file turned up"] = time.monotonic() - began
    finally:
        delta_checksums.CHECKSUM_WAIT = saved
    return facts


def test_a_commit_after_another_writers_builds_the_tables_file_list_only_when_the_checksum_keeps_it(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a table a bulk's transaction started on, and another writer's commit before the bulk's commit (two
    # bridges on one table), with Delta's default and with the bridge's allFilesInCrc setting
    from mqbridge.landing.delta import DEFAULT_CONF

    runs = {}
    for setting in ("true", "false"):
        outcome = delta_spark.run(jobs_of_a_commit_on_another_writers_version, str(tmp_path / setting), setting)
        assert outcome["ok"], outcome.get("traceback")
        runs[setting] = outcome["value"]
    print(runs)
    # Then alone the commit runs no Spark job; after another writer's commit it rebuilds the table's state
    # from the log (jobs), and with the file list in the checksum (Delta's default) one job more, which
    # builds the list (`RecordChecksum.incrementallyComputeAddFiles`: in 34 of 63 stack samples of two
    # bridges on one table, which made 542 msg/s together against 5,240 for one); the bridge's sessions
    # start without the list
    assert runs["true"]["alone"] == runs["false"]["alone"] == 0, runs
    assert runs["false"]["after another writer"] < runs["true"]["after another writer"], runs
    assert DEFAULT_CONF["spark.databricks.delta.allFilesInCrc.enabled"] == "false"


def test_a_commit_after_another_writers_version_waits_for_its_checksum_file_instead_of_rebuilding_the_state(
        tmp_path: Path, delta_spark: DeltaSpark) -> None:
    # Given a table this process and another writer commit to (two bridges), and the other's newest commit
    # whose checksum file comes 0.3 s late (written after its log entry; hidden meanwhile)
    outcome = delta_spark.run(commits_after_another_writers_late_checksum, str(tmp_path))
    assert outcome["ok"], outcome.get("traceback")
    facts = outcome["value"]
    print(facts)
    # Then this process's commit waited for it and ran no Spark job; without the wait Delta rebuilt the
    # snapshot's protocol and metadata and the new checksum from the log, by Spark jobs
    assert facts["shared, waited"] and facts["shared, not waited"], facts
    assert facts["jobs, waited"] == 0, facts
    assert facts["jobs, not waited"] > 0, facts
    # And a writer that writes no checksum files costs one wait, not one per commit, until one is found again
    assert 0.3 <= facts["wait without checksums, first"] < 1.0, facts
    assert facts["wait without checksums, next"] < 0.2, facts
    assert facts["waits again once a checksum file is found"], facts
    # And a writer whose checksum file came after a wait ran out (a slow writer on a busy host, not one that
    # writes none) is waited for again at the next commit
    assert facts["a late checksum file: the wait ran out"], facts
    assert 0.3 <= facts["wait after a late checksum file turned up"] < 1.0, facts
