"""Tables by name (`[spark] catalog = true`) with a local Hive metastore (Derby, the session's own
`[spark.conf]`): after `mqbridge run`, a separate Spark process reads the landed table by name,
every partition included, and gets every message once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.processes import run_until_idle, stomp_config

pytestmark = pytest.mark.integration

READER = """
import json, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.sql.catalogImplementation", "hive")
         .config("spark.sql.warehouse.dir", sys.argv[1] + "/hive-warehouse")
         .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                 "jdbc:derby:;databaseName=" + sys.argv[1] + "/metastore_db;create=true")
         .getOrCreate())
rows = spark.table("orders")
print(json.dumps({"rows": rows.count(), "distinct": rows.select("msg_id").distinct().count(),
                  "partitions": [r[0] for r in spark.sql("SHOW PARTITIONS orders").collect()],
                  "columns": rows.columns}))
"""


def test_landed_tables_are_read_by_name_from_a_hive_metastore(tmp_path: Path, amq: AmqClient) -> None:
    q = unique_queue("catalog")
    amq.put_many(q, [f"m{i}".encode() for i in range(500)])
    hive = f"""
catalog = true
[spark.conf]
"spark.sql.catalogImplementation" = "hive"
"spark.sql.warehouse.dir" = "{tmp_path}/hive-warehouse"
"spark.hadoop.javax.jdo.option.ConnectionURL" = "jdbc:derby:;databaseName={tmp_path}/metastore_db;create=true"
"""
    config = stomp_config(tmp_path, q, spark='master = "local[2]"' + hive)
    out = run_until_idle(config)
    assert "could not be registered" not in out, out[-3000:]
    # the metastore is an embedded Derby database: one process at a time, so the bridge has stopped
    result = subprocess.run([sys.executable, "-c", READER, str(tmp_path)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["rows"] == 500 and seen["distinct"] == 500, seen
    assert seen["partitions"] and all(p.startswith("put_date=") for p in seen["partitions"])
    assert "body" in seen["columns"] and "put_date" in seen["columns"]
