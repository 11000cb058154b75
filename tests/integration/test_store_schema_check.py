"""A typed type's schema checked against a Delta table on the S3 server (S3Proxy, `scripts/s3.sh`) as
against a local table: the table's log (read by delta-rs with the options of the `[spark.conf]` S3A
keys, the secret from `${FILE:…}`) says what it was written with; a narrowed column is refused by
`check-config` and by `run` before any listener connects (exit 2, the table, the column, the old and new
type named; nothing read from the queue), an added column is accepted. Before this, nothing was
checked on a store: the write itself failed, bulk after bulk."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.delta_tables import DELTA_SPARK
from tests.support.object_stores import S3Server
from tests.support.processes import mqbridge, stomp_bridge

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

deltalake = pytest.importorskip("deltalake")


def config(tmp_path: Path, queue: str, s3: S3Server, bucket: str, schema: str, name: str) -> Path:
    secret = tmp_path / "s3-secret"
    secret.write_text(s3.secret_key)
    secret.chmod(0o600)
    toml = (stomp_bridge(queue, threads=1, batch=50, spark=DELTA_SPARK)
            .set("spark", warehouse=f"s3a://{bucket}/wh")
            .set("spark.conf", **{**s3.spark_conf(), "spark.hadoop.fs.s3a.secret.key": f"${{FILE:{secret}}}"})
            .set("types.orders", format="json", schema=schema))
    return toml.write(tmp_path / f"{name}.toml")


def test_a_narrowed_column_is_refused_against_the_delta_log_on_s3_and_an_added_one_accepted(
        tmp_path: Path, amq: AmqClient, s3_server: S3Server) -> None:
    # Given a Delta table on S3 written with qty BIGINT (by delta-rs, as another engine might have)
    bucket = s3_server.new_bucket("schema")
    rows = pa.table({"msg_id": ["m1"], "order_id": ["a1"], "qty": pa.array([1], pa.int64())})
    deltalake.write_deltalake(f"s3://{bucket}/wh/orders", rows, storage_options=s3_server.storage_options())
    q = unique_queue("store-schema")
    amq.put_many(q, [b'{"order_id": "b1", "qty": 2}'] * 3)
    # When the type's schema narrows qty to INT
    narrowed = config(tmp_path, q, s3_server, bucket, "order_id STRING, qty INT", "narrowed")
    checked = mqbridge("check-config", "--config", str(narrowed))
    check_out, _ = checked.communicate(timeout=120)
    refused = mqbridge("run", "--config", str(narrowed), "--until-idle", "3s")
    run_out, _ = refused.communicate(timeout=240)
    # Then check-config and run refuse it, naming the table, the column, its old and its new type
    expected = f"table s3a://{bucket}/wh/orders: column 'qty': bigint -> int"
    assert checked.returncode == 1 and expected in check_out, check_out[-3000:]
    assert refused.returncode == 2 and expected in run_out and "_delta_log" in run_out, run_out[-3000:]
    assert s3_server.secret_key not in check_out + run_out
    # And the orders are still on the queue, never delivered to the refused bridge
    waiting = amq.browse(q)
    assert len(waiting) == 3 and not any(f.headers.get("redelivered") == "true" for f in waiting)
    # When the schema adds a nullable column instead, check-config accepts it
    added = config(tmp_path, q, s3_server, bucket, "order_id STRING, qty BIGINT, channel STRING", "added")
    accepted = mqbridge("check-config", "--config", str(added))
    accepted_out, _ = accepted.communicate(timeout=120)
    assert accepted.returncode == 0 and "qty" not in accepted_out, accepted_out[-3000:]
