"""Purge and `ledger --verify` on tables that hold more than one kind of row, on the real parts
(`mqbridge purge`, `compact`, `run` and `ledger` processes, local Spark, the shared ActiveMQ): a
retention purge by copy-and-drop, and one by delete, of a container two typed types (JSON, different
columns) share rewrite each type's rows with that type's columns only (a file of both types, from an
earlier compaction, is rewritten alone and keeps its age), keep every survivor and drop every
designated row, and the next `mqbridge run` accepts both schemas (before, the purge mixed the types'
columns and the next start exited 2 "schema change refused"); and after a compaction of the tables a
`table = "{destination}"` type spread its bulks over (ledger ids `<bulk>.<n>`, rows carrying `<bulk>`),
`mqbridge ledger --verify` still counts each bulk's rows (before, it reported 0 rows for each)."""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqbridge.config import TypeConfig
from mqbridge.counters import Counters
from mqbridge.landing.containers import data_files
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.landing.schema_check import read_container
from mqbridge.landing.schema_verdicts import check_schemas
from mqbridge.landing.tables import file_types
from mqbridge.maintenance.engine.swap import fresh_name, record_purge
from mqbridge.message import Bulk, Message
from tests.support.amq import AmqClient, unique_queue
from tests.support.processes import mqbridge
from tests.support.purge import purge_bridge

pytestmark = pytest.mark.integration

T0 = datetime(2024, 6, 1, tzinfo=timezone.utc)
#: Two JSON types with no column in common, landing in one table.
SCHEMAS = {"alpha": "order_id STRING, qty INT", "beta": "invoice STRING, total DOUBLE"}
KEYS = {"alpha": "order_id", "beta": "invoice"}


def command(*args: str, timeout: float = 240) -> str:
    """`mqbridge ARGS`, which must exit 0; its output."""
    proc = mqbridge(*args)
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"mqbridge {' '.join(args)}: exit {proc.returncode}\n{out}"
    return out


def columns_of(message_type: str) -> set[str]:
    return {c.split()[0] for c in SCHEMAS[message_type].split(", ")}


def key_of(message_type: str, n: int) -> str:
    return f"O-{n}" if message_type == "alpha" else f"I-{n}"


def typed_bulk(message_type: str, start: int, count: int, now: datetime) -> Bulk:
    """`count` JSON messages of `message_type` (its own columns), all put on 2024-06-01; the even
    ones received then too (older than any retention), the odd ones received `now` (within it)."""
    bulk = Bulk(message_type)
    for n in range(start, start + count):
        body = {"order_id": key_of("alpha", n), "qty": n} if message_type == "alpha" else \
            {"invoice": key_of("beta", n), "total": n / 4}
        put = T0 + timedelta(minutes=n)
        bulk.add(Message(msg_id=f"{message_type}-{n}", body=json.dumps(body).encode(), source="amq",
                         destination="/queue/typed", message_type=message_type, put_timestamp=put,
                         received_timestamp=put if n % 2 == 0 else now))
    return bulk


def land(spark: Any, warehouse: Path, state: Path, executors: dict[str, TypeConfig], bulks: list[Bulk]) -> None:
    """Land `bulks` as a bridge does (staged, ledger, published), each with its type's executor."""
    ledger = SqliteLedger.open(state / "ledger.sqlite3", owner=owner_id())
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0,
                      warehouse=warehouse)
    try:
        made = {name: SparkExecutor(spark, warehouse, name, config, landing=landing)
                for name, config in executors.items()}
        for bulk in bulks:
            assert all(r.ok for r in made[bulk.message_type].execute(bulk))
    finally:
        landing.close()


# -- a retention purge of a shared typed table ----------------------------------------------------
def merge_into_one_file(spark: Any, table: Path, files: list[Path]) -> Path:
    """Replace `files` (of one container of `table`) by one file holding all their rows read together
    (every type's columns), as a compaction before the per-type rule wrote it, recorded as one."""
    container = files[0].parent
    out = table / "_earlier_compaction"
    (read_container(spark, table, files).coalesce(1).write.mode("overwrite").partitionBy("put_date")
     .parquet(str(out)))
    [written] = (out / container.name).glob("part-*.parquet")
    merged = container / fresh_name(written)
    os.replace(written, merged)
    shutil.rmtree(out)
    for path in files:
        path.unlink()
    record_purge(table, container.name, "compact")
    return merged


@pytest.mark.parametrize("strategy", ["copy", "delete"])
def test_a_purge_of_a_table_two_typed_types_share_keeps_each_types_columns_and_the_next_start_runs(
        tmp_path: Path, spark: Any, amq: AmqClient, strategy: str) -> None:
    # Given table `shared` of two JSON types with different columns: an older file holding a bulk of
    # each (both types' columns, as an earlier compaction wrote it), then two bulks of 10 rows of
    # each type in files of their own; half the rows of every bulk older than the types' retention
    warehouse, state = tmp_path / "landing", tmp_path / "state"
    now = datetime.now(timezone.utc)
    typed = {name: TypeConfig(format="json", schema=ddl, table="shared") for name, ddl in SCHEMAS.items()}
    land(spark, warehouse, state, typed, [typed_bulk(name, 0, 10, now) for name in SCHEMAS])
    table, container = warehouse / "shared", warehouse / "shared" / "put_date=2024-06-01"
    merged = merge_into_one_file(spark, table, data_files(container))
    merged_mtime = merged.stat().st_mtime_ns
    land(spark, warehouse, state, typed, [typed_bulk(name, 10 * b, 10, now) for name in SCHEMAS for b in (1, 2)])
    assert len(data_files(container)) == 5
    toml = purge_bridge(queue=unique_queue(f"shared-purge-{strategy}"), message_type="alpha").set("monitoring",
                                                                                                   listen="")
    for name, ddl in SCHEMAS.items():
        toml = (toml.set(f"types.{name}", format="json", schema=ddl, retention="30d")
                .add(f"types.{name}", 'table = "shared"'))
    config = toml.write(tmp_path / "bridge.toml")
    check_schemas(toml.parse(tmp_path / "bridge.toml"))  # each type's newest file is its own: accepted

    # When the retention purge runs with that strategy (exit 0)
    out = command("purge", "--config", str(config), "--strategy", strategy)
    assert "designated 30/60" in out and f"strategy {strategy}" in out, out

    # Then the next start accepts both types' schemas (a refused change would exit 2), and the ledger verifies
    proc = mqbridge("run", "--config", str(config), "--until-idle", "2s")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "schema change refused" not in out
    assert "verify: OK (6 published bulks" in command("ledger", "--config", str(config), "--verify")
    # and each type's rows are in files with that type's columns only, but for the older file of both
    # types, rewritten alone with its columns and its age; the odd (recent) rows of each type survive,
    # every even (old) one is gone
    survivors: dict[str, list[str]] = {name: [] for name in SCHEMAS}
    both = []
    for path in data_files(container):
        types = sorted(file_types(str(path)))
        columns = set(pq.read_schema(path).names)
        if types == sorted(SCHEMAS):
            both.append(path)
            assert columns_of("alpha") | columns_of("beta") <= columns, columns
            assert path.stat().st_mtime_ns == merged_mtime
        else:
            [name] = types
            [other] = set(SCHEMAS) - {name}
            assert columns_of(name) <= columns and not columns_of(other) & columns, (path.name, columns)
        for row in pq.read_table(path).to_pylist():
            survivors[row["message_type"]].append(row[KEYS[row["message_type"]]])
    assert len(both) == 1 and both[0].name != merged.name, both
    for name in SCHEMAS:
        assert sorted(survivors[name]) == sorted(key_of(name, n) for n in range(1, 30, 2)), survivors


# -- ledger --verify of a templated type's bulks after a compaction ------------------------------
def test_ledger_verify_counts_the_rows_of_a_bulk_spread_over_several_tables_after_a_compaction(
        tmp_path: Path, spark: Any) -> None:
    # Given a type with `table = "{destination}"` whose three bulks each landed in two tables
    # (ledger bulks `<bulk>.0` and `<bulk>.1`; their rows carry `<bulk>`)
    warehouse, state = tmp_path / "landing", tmp_path / "state"
    bulks = []
    for b in range(3):
        bulk = Bulk("orders")
        for n in range(10 * b, 10 * b + 10):
            put = T0 + timedelta(minutes=n)
            bulk.add(Message(msg_id=f"m{n}", body=f"body {n}".encode(), source="amq",
                             destination="/queue/east" if n % 2 else "/queue/west", message_type="orders",
                             put_timestamp=put, received_timestamp=put))
        bulks.append(bulk)
    land(spark, warehouse, state, {"orders": TypeConfig(table="{destination}")}, bulks)
    tables = sorted(p.name for p in warehouse.iterdir() if p.is_dir())
    assert tables == ["east", "west"], tables
    config = (purge_bridge().set("monitoring", listen="").set("compaction", small_files=2)
              .set("types.orders", format="raw")
              .add("types.orders", 'table = "{destination}"').write(tmp_path / "bridge.toml"))
    assert "verify: OK (6 published bulks" in command("ledger", "--config", str(config), "--verify")

    # When both tables' containers are compacted into one file each
    out = command("compact", "--config", str(config))
    assert out.count("action compact") == 2, out
    assert [len(data_files(c)) for c in sorted(warehouse.glob("*/put_date=*"))] == [1, 1]

    # Then the ledger still verifies: each table's rows of each bulk are as many as its ledger bulk's
    out = command("ledger", "--config", str(config), "--verify")
    assert "verify: OK (6 published bulks" in out, out
