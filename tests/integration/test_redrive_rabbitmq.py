"""Re-drive on RabbitMQ (each copy confirmed by its receipt before the originals are acknowledged;
the default identity, msg_id): killed between its confirmed copies and their ACKs it leaves that
batch on both queues (counted: the duplicates RabbitMQ's non-atomic transactions cost); run again it
moves each message, keeping the id the ledger knows (the landed delivery's message-id, carried by
the move as `mqbridge-original-message-id`), so neither a second copy nor a copy of a message that
had landed is landed twice: 0 lost, 0 duplicated rows."""

from __future__ import annotations

import collections
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.bridge import read_table
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit, account, bodies
from tests.support.processes import mqbridge, run_until_idle, stomp_config
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def test_redrive_on_rabbitmq_loses_nothing_across_a_kill_and_keeps_the_id_the_ledger_knows(tmp_path: Path, spark: Any,
                                                           rabbitmq: tuple[str, int]) -> None:
    # Given six messages landed by a bridge with the default identity on RabbitMQ (their delivery's id) ...
    rabbit = Rabbit(rabbitmq)
    queue = f"/queue/test.redrive.{uuid.uuid4().hex[:8]}"
    backout = queue + ".backout"
    landed, moved = bodies(6, "landed"), bodies(2, "moved")
    rabbit.put(queue, [(body, {"x-app": "shop"}) for body in landed])
    config = stomp_config(tmp_path, queue, port=rabbitmq[1], broker="rabbitmq", extra_source=RABBIT_SOURCE,
                          threads=1, batch=50)
    run_until_idle(config, idle="2s")
    rows = read_table(spark, tmp_path / "landing" / "orders")
    assert sorted(bytes(r.body) for r in rows) == sorted(landed)
    # ... and on its backout queue two messages the bridge had moved and copies of two that landed
    # (a crash in receipted mode can leave a moved message on both queues)
    twins = [(bytes(r.body), {"mqbridge-original-message-id": r.msg_id, "mqbridge-reason": "twin"}) for r in rows[:2]]
    aside = [(body, {"mqbridge-original-message-id": f"moved-{i}", "mqbridge-reason": "poison"})
             for i, body in enumerate(moved)]
    rabbit.put(backout, twins + aside)
    cli = ("redrive", "--config", str(config), "--listener", queue, "--batch", "3")

    # When a re-drive is killed after its first batch's copies were confirmed, before their ACKs
    proc = mqbridge(*cli, failpoint="redrive_before_commit")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, out
    wait_until(lambda: rabbit.depth(backout) == 4, 30, "RabbitMQ to give the killed re-drive's batch back")
    # ... that batch is on both queues: three duplicated messages, nothing lost
    assert rabbit.depth(queue) == 3
    # ... the bridge takes the copies, the re-drive runs again and moves all four, the bridge runs again
    run_until_idle(config, idle="2s")
    proc = mqbridge(*cli)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "re-drive: 4 moved" in out, out
    run_until_idle(config, idle="2s")

    # Then each message is in the table once: the twins and the second copies were recognised by their ids
    after = read_table(spark, tmp_path / "landing" / "orders")
    accounting = account(landed + moved, collections.Counter(bytes(r.body) for r in after))
    assert accounting.clean, accounting
    assert {r.msg_id for r in after if bytes(r.body) in moved} == {"moved-0", "moved-1"}
    assert {r.headers["mqbridge-redriven-reason"] for r in after if bytes(r.body) in moved} == {"poison"}
    assert rabbit.depth(queue) == 0 and rabbit.depth(backout) == 0
