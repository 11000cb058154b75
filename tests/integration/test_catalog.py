"""Tables by name (`[spark] catalog = true`) with a local Hive metastore (an embedded Derby database
configured in the bridge's own `[spark.conf]`): after `mqbridge run`, a separate Spark process reads
the landed table by name and gets every message once; after a second run lands into a new
`put_date`, a new reader sees both partitions by name."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mqbridge.landing.jvm import JIT_OPTIONS
from tests.support import class_archive as shared_archive
from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import OutputReader
from tests.support.processes import mqbridge, run_until_idle, stomp_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

READER = """
import json, sys
from pyspark.sql import SparkSession
builder = SparkSession.builder.master("local[1]")
if sys.argv[2]:
    builder = builder.config("spark.driver.extraJavaOptions", sys.argv[2])
spark = (builder.config("spark.ui.enabled", "false")
         .config("spark.sql.catalogImplementation", "hive")
         .config("spark.sql.warehouse.dir", sys.argv[1] + "/hive-warehouse")
         .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                 "jdbc:derby:;databaseName=" + sys.argv[1] + "/metastore_db;create=true")
         .getOrCreate())
rows = spark.table("orders")
print(json.dumps({"rows": rows.count(), "distinct": rows.select("msg_id").distinct().count(),
                  "dates": sorted(str(r[0]) for r in rows.select("put_date").distinct().collect()),
                  "columns": rows.columns}))
"""


def read_by_name(tmp_path: Path) -> dict[str, Any]:
    """What a fresh Spark process on the same metastore reads as table `orders`. (The metastore is an
    embedded Derby database: one process at a time, so the bridge has stopped.) Its driver maps the
    tests' class-data archive once it is made and compiles with C1 only, as the bridges' drivers do
    (`tests.support.class_archive`, `mqbridge.landing.jvm.JIT_OPTIONS`: a short-lived JVM starts faster)."""
    java = f"{JIT_OPTIONS} {shared_archive.java_options()}".strip()
    result = subprocess.run([sys.executable, "-c", READER, str(tmp_path), java],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.timeout(600)  # three Spark JVMs with a Hive metastore and two bridge runs: ~65 s, loaded 2 cores
def test_landed_tables_are_read_by_name_from_a_hive_metastore(tmp_path: Path, amq: AmqClient) -> None:
    # Given a bridge whose [spark.conf] makes its catalog a Hive metastore, and 300 messages put now
    # (every "now" carries one producer `timestamp`, which ActiveMQ keeps: a run across midnight UTC
    # must not make a third put_date)
    q = unique_queue("catalog")
    now = int(time.time() * 1000)
    amq.put_many(q, [f"m{i}".encode() for i in range(300)], headers={"timestamp": str(now)})
    hive = f"""
catalog = true
[spark.conf]
"spark.sql.catalogImplementation" = "hive"
"spark.sql.warehouse.dir" = "{tmp_path}/hive-warehouse"
"spark.hadoop.javax.jdo.option.ConnectionURL" = "jdbc:derby:;databaseName={tmp_path}/metastore_db;create=true"
"""
    config = stomp_config(tmp_path, q, spark='master = "local[2]"' + hive)
    # When the bridge lands them
    out = run_until_idle(config)
    assert "catalog: table orders registered" in out and "could not be registered" not in out, out[-3000:]
    # Then a reader by name gets each once, with every column
    first = read_by_name(tmp_path)
    assert first["rows"] == 300 and first["distinct"] == 300, first
    assert "body" in first["columns"] and "put_date" in first["columns"]
    assert len(first["dates"]) == 1
    # When a second run lands 50 more put now (the known partition), and then 200 put three days ago
    # (ActiveMQ keeps a producer's `timestamp`): a new put_date while the table is registered
    run = OutputReader(mqbridge("run", "--config", str(config), "--until-idle", "5s"))
    try:
        amq.put_many(q, [f"k{i}".encode() for i in range(50)], headers={"timestamp": str(now)})
        wait_until(lambda: amq.depth(q) == 0, 180, "the first 50 to be committed")
        three_days_ago = str(now - 3 * 86_400_000)
        amq.put_many(q, [f"n{i}".encode() for i in range(200)], headers={"timestamp": three_days_ago})
        assert run.wait(300) == 0, run.text()[-3000:]
    finally:
        if run.wait(0) is None:
            run.terminate()
    out = run.text()
    assert "could not be registered" not in out, out[-3000:]
    assert re.search(r"catalog: partition put_date=\S+ of table orders registered", out), out[-3000:]
    # Then a new reader by name sees both partitions, every message once
    second = read_by_name(tmp_path)
    assert second["rows"] == 550 and second["distinct"] == 550, second
    assert len(second["dates"]) == 2 and first["dates"][0] in second["dates"], second
