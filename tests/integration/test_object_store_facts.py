"""What Delta Lake on an object store and on HDFS does that the `delta` landing rests on, checked with a
bare Spark driver (Delta 4.4.0 and S3A's jars, no bridge) against a real S3-compatible server (S3Proxy
on its file-system backend, scripts/s3.sh) and Hadoop's own HDFS mini cluster (scripts/hdfs.sh): an
append reads back; a second write with the same `txnAppId`/`txnVersion` is skipped by Delta itself
(no new commit); `deltalake` (delta-rs) reads the S3 table and its `transaction_version`; the S3 server
refuses a second conditional create of one object (HTTP 412, the first one's bytes kept), and the
bridge's Delta log store (`mqbridge.landing.log_store`, which the driver commits through on S3) answers a
second writer of one version with the `FileAlreadyExistsException` Delta's commit retries on; the S3 secret
is on neither the driver JVM's command line nor in its environment; and the errors S3A raises for a
wrong secret (403 `AccessDeniedException`), a bucket that does not exist (404 `UnknownStoreException`)
and an endpoint that does not answer (`ConnectException` after S3A's retries, bounded by
`fs.s3a.attempts.maximum` and `fs.s3a.retry.limit`: with their defaults it gives up only after about
ten minutes). The driver is the session's `delta_spark` (tests/integration/conftest.py).
"""

from __future__ import annotations

import uuid
from typing import Any

import psutil
import pytest

from mqbridge.landing import log_store
from tests.support.delta_tables import conditional_creates, delta_log_store, log_store_writes
from tests.support.exactly_once import free_port
from tests.support.object_stores import DeltaSpark, S3Server

pytestmark = pytest.mark.integration

APP_ID = "mqbridge-facts"


def _ok(outcome: dict[str, object]) -> object:
    assert outcome["ok"], outcome.get("traceback")
    return outcome["value"]


def _appends_once_per_transaction(delta_spark: DeltaSpark, table: str) -> None:
    """Version 1 lands, version 1 again is skipped, version 2 lands: two commits, each row once."""
    _ok(delta_spark.append(table, [1, 2, 3], APP_ID, 1))
    _ok(delta_spark.append(table, [1, 2, 3], APP_ID, 1))
    _ok(delta_spark.append(table, [4], APP_ID, 2))
    assert _ok(delta_spark.read_ids(table)) == [1, 2, 3, 4]
    assert _ok(delta_spark.history(table)) == ["0:WRITE", "1:WRITE"]


def test_delta_on_s3_lands_once_per_transaction_and_delta_rs_reads_it(
        delta_spark: DeltaSpark, s3_server: S3Server) -> None:
    from deltalake import DeltaTable

    bucket = s3_server.new_bucket("facts")
    _appends_once_per_transaction(delta_spark, f"s3a://{bucket}/landing/t")
    # (committed through the bridge's log store, as the bridge's driver is told to: `spark.delta.logStore.s3a.impl`)
    assert _ok(delta_spark.run(delta_log_store, f"s3a://{bucket}/landing/t")) == log_store.CLASS_NAME

    table = DeltaTable(f"s3://{bucket}/landing/t", storage_options=s3_server.storage_options())
    assert sorted(table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()) == [1, 2, 3, 4]
    assert table.transaction_version(APP_ID) == 2
    assert table.transaction_version("another-app") is None
    assert table.version() == 1


@pytest.mark.parametrize(("write_twice", "refused_with"), [
    # The promise mqbridge's Delta log store rests on, asked through S3A's own conditional create
    # (If-None-Match: *): the server refuses the second create of one object with HTTP 412. (A plain
    # create with overwrite=false only looks first: two at once both write.)
    (conditional_creates, "org.apache.hadoop.fs.s3a.RemoteFileChangedException"),
    # Two writers of one version through the bridge's log store: the second gets the exception by which
    # Delta's commit detects a concurrent commit (it then checks for a conflict and tries the next
    # version). Delta's default store on S3 wrote over the first instead (two Spark drivers appending 40
    # commits each to one table on this server: 79 of 80 rows kept).
    (log_store_writes, "java.nio.file.FileAlreadyExistsException"),
], ids=["s3-server", "log-store"])
def test_the_second_writer_of_one_log_file_on_s3_is_refused_and_the_first_ones_bytes_kept(
        delta_spark: DeltaSpark, s3_server: S3Server, write_twice: Any, refused_with: str) -> None:
    bucket = s3_server.new_bucket("facts")
    outcome = _ok(delta_spark.run(write_twice, f"s3a://{bucket}/t/_delta_log/00000000000000000001.json"))
    assert outcome == {"first": "written", "second": refused_with, "content": "first"}, outcome


def test_delta_on_hdfs_lands_once_per_transaction(delta_spark: DeltaSpark, hdfs_cluster: str) -> None:
    _appends_once_per_transaction(delta_spark, f"{hdfs_cluster}/facts/{uuid.uuid4().hex}/t")


def test_the_s3_secret_is_not_on_the_drivers_command_line_nor_in_its_environment(
        delta_spark: DeltaSpark, s3_server: S3Server) -> None:
    bucket = s3_server.new_bucket("facts")
    _ok(delta_spark.append(f"s3a://{bucket}/t", [1]))  # the driver did get the secret
    driver = psutil.Process(delta_spark.driver_pid())
    assert "org.apache.spark.deploy.SparkSubmit" in driver.cmdline()
    for process in (driver, driver.parent()):
        assert process is not None
        assert not any(s3_server.secret_key in arg for arg in process.cmdline())
        assert not any(s3_server.secret_key in value for value in process.environ().values())


def test_a_wrong_secret_is_a_403_access_denied(delta_spark: DeltaSpark, s3_server: S3Server) -> None:
    bucket = s3_server.new_bucket("facts")
    outcome = delta_spark.append(f"s3a://{bucket}/t", [1], options={
        f"fs.s3a.bucket.{bucket}.secret.key": "not-the-secret-0123456789abcdefghijklmnop"})
    assert not outcome["ok"]
    assert outcome["python_class"] == "Py4JJavaError"
    chain = outcome["java_chain"]
    assert chain[0].startswith(f"java.nio.file.AccessDeniedException: s3a://{bucket}/t/_delta_log"), chain
    assert chain[-1].startswith("software.amazon.awssdk.services.s3.model.S3Exception: The request signature "
                                "we calculated does not match the signature you provided."), chain
    assert "Status Code: 403" in chain[-1]
    assert "not-the-secret" not in " ".join(chain)


def test_a_missing_bucket_is_an_unknown_store(delta_spark: DeltaSpark) -> None:
    bucket = f"facts-missing-{uuid.uuid4().hex[:12]}"
    outcome = delta_spark.append(f"s3a://{bucket}/t", [1])
    assert not outcome["ok"]
    chain = outcome["java_chain"]
    assert chain[0].startswith("org.apache.hadoop.fs.s3a.UnknownStoreException: "), chain
    assert bucket in chain[0]
    assert chain[-1].startswith("software.amazon.awssdk.services.s3.model.NoSuchBucketException: "
                                "The specified bucket does not exist"), chain
    assert "Status Code: 404" in chain[-1]


def test_an_unreachable_endpoint_is_a_connect_exception_after_bounded_retries(delta_spark: DeltaSpark) -> None:
    """With S3A's defaults (fs.s3a.attempts.maximum 5 SDK attempts inside fs.s3a.retry.limit 7 S3A
    retries from fs.s3a.retry.interval 500ms) this write failed after 616 s; bounded here to one of each."""
    bucket = f"facts-unreachable-{uuid.uuid4().hex[:12]}"
    outcome = delta_spark.append(f"s3a://{bucket}/t", [1], timeout=120, options={
        f"fs.s3a.bucket.{bucket}.endpoint": f"http://127.0.0.1:{free_port()}",
        f"fs.s3a.bucket.{bucket}.attempts.maximum": "1",
        f"fs.s3a.bucket.{bucket}.retry.limit": "1",
        f"fs.s3a.bucket.{bucket}.retry.interval": "100ms"})
    assert not outcome["ok"]
    chain = outcome["java_chain"]
    assert chain[0].startswith("java.net.ConnectException: "), chain
    assert "software.amazon.awssdk.core.exception.SdkClientException" in " ".join(chain)
    assert chain[-1] == "java.net.ConnectException: Connection refused", chain
    assert outcome["seconds"] < 60, outcome["seconds"]
    print(f"unreachable endpoint failed after {outcome['seconds']:.1f} s; {chain[0]}")

