"""Maintenance beside a dead bridge's prepared bulk, on the real parts (`mqbridge run`, `compact` and
`ledger` processes, the shared ActiveMQ, local Spark): a bridge killed (SIGKILL) at `after_publish`,
then `mqbridge compact`, then `mqbridge run --until-idle`: the compaction carries the killed bulk's
file under its name, the run rolls it forward, every message once, exit 0; a purge
refuses a container holding such a bulk's files until the bulk is finished; a table two typed types
share is compacted type by type, so the next start accepts both schemas; and a start-up finding a
prepared bulk whose staged files are gone holds only that bulk's table (its sinks wait, /healthz names
the command) while the other table lands, then `mqbridge ledger --abandon` (the command it names)
forgets the bulk and the running bridge lands its messages exactly once."""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqbridge import failpoints
from mqbridge.config import TypeConfig
from mqbridge.counters import Counters
from mqbridge.errors import PurgeError
from mqbridge.landing.containers import data_files
from mqbridge.landing.executor import SparkExecutor
from mqbridge.landing.landing import Landing
from mqbridge.landing.ledger import SqliteLedger, owner_id
from mqbridge.landing.publication import recover
from mqbridge.landing.tables import file_types
from mqbridge.maintenance.engine.costs import CostModel
from mqbridge.maintenance.purge import Designation, Purger
from mqbridge.message import Bulk, Message
from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import OutputReader, account, bodies, free_port
from tests.support.http import get
from tests.support.ledger import dead_owner
from tests.support.processes import (
    landed,
    leftovers,
    mqbridge,
    run_until_idle,
    run_until_killed,
    stomp_bridge,
)
from tests.support.purge import ROWS, land_container, purge_bridge
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

T0 = datetime(2024, 6, 1, tzinfo=timezone.utc)


def command(*args: str, timeout: float = 240) -> str:
    """`mqbridge ARGS`, which must exit 0; its output."""
    proc = mqbridge(*args)
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"mqbridge {' '.join(args)}: exit {proc.returncode}\n{out}"
    return out


def published_rows(table: Path) -> int:
    """Rows of the files a reader of `table` sees, by their footers (while the bridge runs: Spark cannot
    read a table directory that holds only staging yet)."""
    rows = 0
    for path in table.glob("put_date=*/part-*.parquet"):
        try:
            rows += pq.read_metadata(path).num_rows
        except OSError:  # moved meanwhile
            continue
    return rows


def prepared_bulks(state: Path) -> list[Any]:
    """The bulks the ledger under `state` holds prepared (read-only)."""
    ledger = SqliteLedger.open_read_only(state / "ledger.sqlite3", owner=owner_id())
    try:
        return ledger.in_progress()
    finally:
        ledger.close()


# -- kill at after_publish, then compact, then run ----------------------------------------------
def test_a_compaction_after_a_kill_at_after_publish_leaves_the_bulk_to_roll_forward(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given a container of landed files, and a bridge killed after moving its next bulk's file into it
    q = unique_queue("kill-compact")
    config = stomp_bridge(q).set("compaction", small_files=2).write(tmp_path / "bridge.toml")
    table = tmp_path / "landing" / "orders"
    first, second = bodies(60, "first"), bodies(50, "second")
    amq.put_many(q, first)
    run_until_idle(config)
    amq.put_many(q, second)
    run_until_killed(config, "after_publish")
    [killed] = prepared_bulks(tmp_path / "state")
    assert all(Path(final).exists() for _, final in killed.files)  # in the table, not recorded published
    assert len(list(table.glob("put_date=*/*.parquet"))) >= 2

    # When the container is compacted: exit 0, the killed bulk's files carried under their names
    out = command("compact", "--config", str(config))
    assert "action compact" in out, out
    assert all(Path(final).exists() for _, final in killed.files), out

    # Then the next run rolls the bulk forward and recognises its messages: every one exactly once
    out = run_until_idle(config)
    assert re.search(r"ledger recovery: 1 bulks rolled forward", out), out
    result = account(first + second, landed(spark, table))
    assert result.clean, str(result)
    assert amq.depth(q) == 0 and leftovers(table) == []
    assert "verify: OK (" in command("ledger", "--config", str(config), "--verify")
    # and, the bulk finished, the next compaction rewrites its files too
    command("compact", "--config", str(config))
    assert [len(data_files(c)) for c in table.glob("put_date=*")] == [1]
    assert account(first + second, landed(spark, table)).clean
    assert "verify: OK (" in command("ledger", "--config", str(config), "--verify")


# -- a purge beside a bulk not yet published ----------------------------------------------------
class Killed(BaseException):
    """The process "dies" here (a BaseException: the landing's retry of a publication does not catch it)."""


def test_a_purge_leaves_a_container_holding_a_bulk_not_yet_published_until_it_is_finished(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a container of 1,000 landed rows, and a bulk of a process that died after moving its file in
    warehouse, state = tmp_path / "landing", tmp_path / "state"
    table = land_container(spark, warehouse, state)
    owner = dead_owner()
    ledger = SqliteLedger.open(state / "ledger.sqlite3", owner=owner)
    landing = Landing(ledger=ledger, owner=owner, counters=Counters(), dedupe_window=3600.0, warehouse=warehouse)

    def die_after_publish(point: str) -> None:
        if point == "after_publish":
            raise Killed

    monkeypatch.setattr(failpoints, "hit", die_after_publish)
    executor = SparkExecutor(spark, warehouse, "orders", TypeConfig(table="orders"), landing=landing, arrow="snappy")
    bulk = Bulk("orders")
    bulk.add(Message(msg_id="late-1", body=b"late", source="amq", destination="/queue/orders", message_type="orders",
                     put_timestamp=T0 + timedelta(hours=1), received_timestamp=T0 + timedelta(hours=1)))
    with pytest.raises(Killed):
        executor.execute(bulk)
    ledger.close()
    monkeypatch.undo()
    container = table / "put_date=2024-06-01"
    files = sorted(p.name for p in data_files(container))
    purger = Purger(spark, CostModel(state / "purge_costs.json"))
    everything = Designation(cutoff=T0 + timedelta(days=30))

    # When a purge designates every row of that container: it is refused, naming the bulk; nothing changes
    [plan] = purger.plan(table, everything)
    with pytest.raises(PurgeError, match=f"holds files of bulk {bulk.bulk_id}, prepared and not yet recorded"):
        list(purger.run([plan], everything))
    assert sorted(p.name for p in data_files(container)) == files

    # When the bulk is finished (the next start of its bridge rolls it forward): the purge goes through
    mine = SqliteLedger.open(state / "ledger.sqlite3", owner=owner_id())
    try:
        assert recover(mine, [table], warehouse=warehouse).rolled_forward == 1
    finally:
        mine.close()
    [plan] = purger.plan(table, everything)
    assert plan.rows == ROWS + 1
    [result] = list(purger.run([plan], everything))
    assert result.strategy == "drop" and sum(pq.read_metadata(p).num_rows for p in data_files(container)) == 0


# -- a table two typed types share --------------------------------------------------------------
SCHEMAS = {"alpha": "order_id STRING, qty INT", "beta": "invoice STRING, total DOUBLE"}


def typed_bulk(message_type: str, start: int, count: int) -> Bulk:
    """`count` JSON messages of `message_type` (its own columns), put on 2024-06-01."""
    bulk = Bulk(message_type)
    for n in range(start, start + count):
        body = ({"order_id": f"O-{n}", "qty": n} if message_type == "alpha" else {"invoice": f"I-{n}", "total": n / 4})
        put = T0 + timedelta(minutes=n)
        bulk.add(Message(msg_id=f"{message_type}-{n}", body=json.dumps(body).encode(), source="amq",
                         destination="/queue/typed", message_type=message_type, put_timestamp=put,
                         received_timestamp=put))
    return bulk


def test_compacting_a_table_two_typed_types_share_keeps_each_types_columns_and_the_next_start_runs(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given table `shared` holding three small files of each of two JSON types with different columns
    warehouse, state = tmp_path / "landing", tmp_path / "state"
    ledger = SqliteLedger.open(state / "ledger.sqlite3", owner=owner_id())
    landing = Landing(ledger=ledger, owner=ledger.owner, counters=Counters(), dedupe_window=3600.0,
                      warehouse=warehouse)
    try:
        for name, ddl in SCHEMAS.items():
            executor = SparkExecutor(spark, warehouse, name, TypeConfig(format="json", schema=ddl, table="shared"),
                                     landing=landing)
            for b in range(3):
                assert all(r.ok for r in executor.execute(typed_bulk(name, 10 * b, 10)))
    finally:
        landing.close()
    container = warehouse / "shared" / "put_date=2024-06-01"
    assert len(data_files(container)) == 6
    q = unique_queue("shared-typed-start")
    toml = purge_bridge(queue=q, message_type="alpha").set("monitoring", listen="").set("compaction", small_files=2)
    for name, ddl in SCHEMAS.items():
        toml = toml.set(f"types.{name}", format="json", schema=ddl).add(f"types.{name}", 'table = "shared"')
    config = toml.write(tmp_path / "bridge.toml")

    # When it is compacted (exit 0)
    command("compact", "--config", str(config))

    # Then each type's rows are in files of their own, with their own columns only, none lost
    files = data_files(container)
    assert len(files) == 2 and sorted(sorted(file_types(str(p))) for p in files) == [["alpha"], ["beta"]]
    for path in files:
        [name] = file_types(str(path))
        other = next(n for n in SCHEMAS if n != name)
        columns = set(pq.read_schema(path).names)
        assert {c.split()[0] for c in SCHEMAS[name].split(", ")} <= columns, columns
        assert not {c.split()[0] for c in SCHEMAS[other].split(", ")} & columns, columns
        assert pq.read_metadata(path).num_rows == 30
    # and the next start accepts both types' schemas (a refused change would exit 2), and the ledger verifies
    proc = mqbridge("run", "--config", str(config), "--until-idle", "2s")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "schema change refused" not in out
    assert "verify: OK (6 published bulks" in command("ledger", "--config", str(config), "--verify")


# -- a start-up with a gone staged file -----------------------------------------------------------
ABANDON = re.compile(r"`(mqbridge ledger --config (\S+) --abandon (\S+))`")


def test_a_bulk_whose_staged_files_are_gone_holds_only_its_table_until_the_named_command_is_run(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given a bridge of two tables killed with a bulk of table `orders` prepared, whose staged files
    # are then lost (its messages were never committed: they are still on their queue)
    q_orders, q_other = unique_queue("gone-orders"), unique_queue("gone-other")
    port = free_port()
    config = (stomp_bridge(q_orders, threads=1)
              .set("monitoring", listen=f"127.0.0.1:{port}")
              .set("spark", probe_interval_max="1s", until_idle_outage_limit="5m")
              .set("types.other", bulk_size="128KB", bulk_timeout="500ms")
              .listener(source="amq", queue=q_other, threads=1, batch=100, wait="200ms", message_type="other",
                        backout_queue=f"{q_other}.backout")
              .write(tmp_path / "bridge.toml"))
    orders_sent, other_sent = bodies(30, "orders"), bodies(40, "other")
    amq.put_many(q_orders, orders_sent)
    run_until_killed(config, "after_prepare")
    [stuck] = prepared_bulks(tmp_path / "state")
    shutil.rmtree(tmp_path / "landing" / "orders" / "_staging")
    amq.put_many(q_other, other_sent)

    # When the bridge starts again
    proc = mqbridge("run", "--config", str(config), "--until-idle", "2s")
    bridge = OutputReader(proc)
    try:
        # Then the other table lands, and only table `orders` waits, saying why and what to run
        def other_landed() -> bool:
            assert proc.poll() is None, f"the bridge ended ({proc.returncode}):\n{bridge.text()[-6000:]}"
            return published_rows(tmp_path / "landing" / "other") == len(other_sent)
        wait_until(other_landed, 240, "table `other` to land its 40 messages")
        status, health = get(f"http://127.0.0.1:{port}/healthz")
        assert status == 503 and "sink orders: unavailable" in health and "sink other" not in health, health
        assert f"--abandon {stuck.bulk_id}" in health, health
        assert not (tmp_path / "landing" / "orders").exists() or not list(
            (tmp_path / "landing" / "orders").glob("put_date=*"))
        [(cmd, named_config, bulk_id)] = {m.groups() for m in ABANDON.finditer(bridge.text())}
        assert (Path(named_config), bulk_id) == (config.absolute(), stuck.bulk_id), cmd

        # When the operator runs the command it names
        out = command(*cmd.split()[1:])
        assert (f"abandon {stuck.bulk_id}: none of its {stuck.identities} rows is in table orders: "
                "the bulk is forgotten") in out, out

        # Then the running bridge lands table `orders` too, and ends idle
        code = bridge.wait(240)
        assert code == 0, f"exit {code}\n{bridge.text()[-6000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "no longer stuck (forgotten): table orders lands again" in bridge.text()
    for table, sent in (("orders", orders_sent), ("other", other_sent)):
        result = account(sent, landed(spark, tmp_path / "landing" / table))
        assert result.clean, f"{table}: {result}"
    assert amq.depth(q_orders) == 0 and amq.depth(q_other) == 0
    assert leftovers(tmp_path / "landing" / "orders") == []
    assert "verify: OK (" in command("ledger", "--config", str(config), "--verify")
