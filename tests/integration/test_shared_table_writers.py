"""Two `mqbridge run` processes with separate ledgers (`state_dir`s) landing into one table of one
warehouse, on the shared ActiveMQ: a write of one that lands no rows (every body fails its type's
JSON schema in Spark) leaves the table as it was, with every row the other committed meanwhile;
each one's `mqbridge ledger --verify` passes. The order is forced, not left to timing: the first
process stops at failpoint `after_write_staged` (its empty write staged, not cleaned up yet) until
the second has landed and committed everything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.amq import AmqClient, unique_queue
from tests.support.exactly_once import OutputReader, account
from tests.support.processes import landed, leftovers, mqbridge, process_bridge, run_until_idle
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

#: Valid JSON whose `qty` is not an INT: only Spark's parser finds it, so the write runs and lands nothing.
BAD_BODY = b'{"order_id": "A-%d", "qty": "many"}'


def typed_bridge(queue: str) -> Any:
    """Bridge A: type `typed` (JSON, parsed by Spark) into table `shared`, its ledger in `state-a`."""
    return (process_bridge("typed", state_dir="state-a").without("types.orders")
            .set("spark", master="local[1]")
            .set("types.typed", format="json", schema="order_id STRING, qty INT", bulk_size="128KB",
                 bulk_timeout="500ms").add("types.typed", 'table = "shared"')
            .set("sources.amq", kind="stomp", heartbeat="10s")
            .listener(source="amq", queue=queue, threads=1, batch=50, wait="200ms", message_type="typed",
                      backout_queue=f"{queue}.backout"))


def raw_bridge(queue: str) -> Any:
    """Bridge B: raw type `orders` written by pyarrow into the same table, its ledger in `state-b`."""
    return (process_bridge("raw", state_dir="state-b").set("spark", writer="arrow")
            .add("types.orders", 'table = "shared"')
            .set("sources.amq", kind="stomp", heartbeat="10s")
            .listener(source="amq", queue=queue, threads=2, batch=100, wait="200ms", message_type="orders",
                      backout_queue=f"{queue}.backout"))


def verify(config: Path) -> str:
    """`mqbridge ledger --config CONFIG --verify`, which must pass; its output."""
    proc = mqbridge("ledger", "--config", str(config), "--verify")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return out


def test_a_write_that_lands_no_rows_leaves_another_bridges_rows_in_the_shared_table(
        tmp_path: Path, spark: Any, amq: AmqClient) -> None:
    # Given bridge A's queue holding only bodies its schema refuses, bridge B's holding 200 raw messages
    qa, qb = unique_queue("shared-typed"), unique_queue("shared-raw")
    amq.put_many(qa, [BAD_BODY % i for i in range(5)])
    sent = [f"raw-{i:04d}:".encode() + bytes(range(256)) for i in range(200)]
    amq.put_many(qb, sent)
    config_a = typed_bridge(qa).write(tmp_path / "a.toml")
    config_b = raw_bridge(qb).write(tmp_path / "b.toml")
    table = tmp_path / "landing" / "shared"
    gate = tmp_path / "gate"

    # When A's write (table `shared` not there yet when it starts) has staged nothing but not finished...
    proc = mqbridge("run", "--config", str(config_a), "--until-idle", "3s", failpoint=f"after_write_staged:{gate}")
    a = OutputReader(proc)
    try:
        def a_at_failpoint() -> bool:
            assert proc.poll() is None, f"bridge A ended ({proc.returncode}) before its write:\n{a.text()[-5000:]}"
            return Path(f"{gate}.reached").exists()
        wait_until(a_at_failpoint, 240, "bridge A's write to stage its (empty) bulk")
        assert not table.exists() or not list(table.glob("put_date=*"))

        # ...B lands and commits all its messages into the same table
        run_until_idle(config_b)
        assert sum(landed(spark, table).values()) == len(sent)

        # ...and then A's write ends, having landed no rows
        gate.touch()
        code = a.wait(240)
        assert code == 0, f"bridge A: {code}\n{a.text()[-5000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Then every row B committed is still there, once; both ledgers verify
    result = account(sent, landed(spark, table))
    assert result.clean, str(result)
    assert "verify: OK (" in verify(config_b)
    assert "verify: OK (0 published bulks" in verify(config_a)
    # A moved its bodies to its backout queue (the schema refused them), and left nothing behind
    assert amq.depth(qa) == 0 and amq.depth(qb) == 0 and amq.depth(f"{qa}.backout") == 5
    assert leftovers(table) == []
    assert "does not convert to the column type" in a.text(), a.text()[-3000:]

