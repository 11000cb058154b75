"""Exactly-once landing from IBM MQ on the real parts: `mqbridge run` killed with SIGKILL at each
step of the landing protocol (failpoints), then restarted with `--until-idle`.

The queue manager is the fake one in persistent mode (its state file outlives the bridge process,
as a real queue manager's log does; the bridge imports it as `pymqi` from
tests/support/fake_pymqi_path). After the kill, the first thing to open the state file backs out
the unit of work the dead process left open (BackoutCount + 1), as MQ does when a client dies.
Every message must then be in its table exactly once, byte-identical, with its MsgId, CorrelId and
properties; the queue, its backout queue and the dead-letter queue empty; no staging leftovers.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.support.bridge import read_table
from tests.support.exactly_once import bodies
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.processes import MQ_BOQ as BOQ
from tests.support.processes import MQ_DLQ as DLQ
from tests.support.processes import MQ_QUEUE as QUEUE
from tests.support.processes import (
    fake_mq_env,
    landed,
    leftovers,
    mq_config,
    run_until_idle,
    run_until_killed,
)

pytestmark = pytest.mark.integration

COUNT = 3000
WHEN = datetime(2024, 5, 17, 8, 30, 15, 250000, tzinfo=timezone.utc)


def fill_queue_manager(state: Path, name: str, sent: list[bytes]) -> list[bytes]:
    """A persistent queue manager on `state` with `sent` on ORDERS (BOTHRESH 5, BOQNAME
    ORDERS.BOQ), each with a CorrelId and properties; closed again. Their MsgIds."""
    qm = FakeQueueManagerServer(name, dead_letter_queue=DLQ, state_file=state)
    try:
        qm.define_queue(QUEUE, backout_threshold=5, backout_queue=BOQ)
        qm.define_queue(BOQ)
        with qm.deferred_persistence():
            return [qm.put(QUEUE, body, correl_id=f"c{i}".encode(), properties={"region": "eu", "seq": i},
                           put_time=WHEN, put_appl_name="shop.exe") for i, body in enumerate(sent)]
    finally:
        qm.close()


@pytest.mark.parametrize("failpoint", [
    "after_stage", "after_prepare", "after_publish", "before_source_commit", "after_source_commit"])
def test_kill_at_each_step_then_restart_lands_every_message_exactly_once(
        tmp_path: Path, spark: Any, failpoint: str) -> None:
    # Given 3,000 messages on a persistent fake queue manager, and a bridge process that dies at
    # the failpoint on its first bulk (two listener threads, units of 100)
    state, name = tmp_path / "qm.state", f"QMEO{failpoint.upper().replace('_', '')}"[:48]
    sent = bodies(COUNT, failpoint)
    ids = fill_queue_manager(state, name, sent)
    config = mq_config(tmp_path, name)
    env = fake_mq_env(state)
    table = tmp_path / "landing" / "orders"
    run_until_killed(config, failpoint, env_extra=env)
    # (the dead process left its unit of work open: the queue manager backs it out, as MQ does)
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        backed_out = qm.recovered["messages_backed_out"]
        assert backed_out >= (0 if failpoint == "after_source_commit" else 100), backed_out
        assert all(m.backout_count <= 1 for m in qm.queue(QUEUE).messages)
    finally:
        qm.close()
    # When it is started again and runs until idle
    out = run_until_idle(config, env_extra=env)
    # Then every message is in the table exactly once, byte-identical; nothing is left behind
    rows = landed(spark, table)
    assert set(rows) == set(sent), f"{len(set(sent) - set(rows))} lost, {len(set(rows) - set(sent))} unexpected"
    assert [b for b, n in rows.items() if n > 1] == [], "duplicated"
    assert leftovers(table) == []
    # ... with its MsgId, CorrelId, MQMD and properties
    records = read_table(spark, table)
    assert sorted(r.msg_id for r in records) == sorted(i.hex() for i in ids)
    row = next(r for r in records if bytes(r.body) == sent[7])
    assert row.correlation_id == b"c7".ljust(24, b"\0").hex()
    assert row.put_timestamp.astimezone(timezone.utc) == WHEN
    assert row.headers["MQMD.PutApplName"] == "shop.exe" and row.headers["region"] == "eu"
    assert row.headers["seq"] == "7" and row.source == "qm" and row.destination == QUEUE
    # ... and the queue manager (as the next process to open it sees it) holds nothing more
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        assert qm.name == name
        assert qm.queue(QUEUE).depth == 0, f"{qm.queue(QUEUE).depth} left on the queue"
        assert qm.queue(BOQ).depth == 0 and qm.queue(DLQ).depth == 0
        assert qm.recovered == {"messages_backed_out": 0}, "the last run left a unit of work open"
    finally:
        qm.close()
    if failpoint in ("after_prepare", "after_publish"):
        assert re.search(r"ledger recovery: [1-9]\d* bulks rolled forward", out), out
    if failpoint in ("after_prepare", "after_publish", "before_source_commit"):
        # the killed unit comes back (backed out by the queue manager) and is recognised, not landed again
        assert "already landed; committed without landing them again" in out, out
