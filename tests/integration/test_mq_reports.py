"""IBM MQ action notifications under `mqbridge run` killed for real: messages asking for MQRO_PAN and
MQRO_NAN on the persistent fake queue manager (see test_exactly_once_mq.py); a bridge killed after
putting its reports but before MQCMIT, then after publishing a bulk, then run to the end. Each message
gets exactly one report (PAN if it landed, NAN if it went to the backout queue): 0 missing, 0 extra."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mqbridge.listeners.mq.reports import MQFB_NAN, MQFB_PAN, MQRO_NAN, MQRO_PAN
from tests.support.bridge import read_table
from tests.support.configs import LISTENER
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.processes import MQ_BOQ as BOQ
from tests.support.processes import MQ_DLQ as DLQ
from tests.support.processes import MQ_QUEUE as QUEUE
from tests.support.processes import (
    fake_mq_env,
    leftovers,
    mq_bridge,
    mq_config,
    run_until_idle,
    run_until_killed,
)

pytestmark = pytest.mark.integration

REPLIES = "ORDERS.REPLIES"


@pytest.mark.timeout(600)
def test_each_message_gets_exactly_one_report_across_kills(tmp_path: Path, spark: Any) -> None:
    # Given 600 messages asking for PAN and NAN, 20 of them already at BOTHRESH (they are moved)
    state, name = tmp_path / "qm.state", "QMREPORTS"
    qm = FakeQueueManagerServer(name, dead_letter_queue=DLQ, state_file=state)
    try:
        qm.define_queue(QUEUE, backout_threshold=5, backout_queue=BOQ)
        qm.define_queue(BOQ)
        qm.define_queue(REPLIES)
        with qm.deferred_persistence():
            ids = [qm.put(QUEUE, f"order-{i:04d}".encode(), report=MQRO_PAN | MQRO_NAN, reply_to_q=REPLIES,
                          backout_count=5 if i % 30 == 0 else 0) for i in range(600)]
    finally:
        qm.close()
    poison = {ids[i] for i in range(0, 600, 30)}
    config, env = mq_config(tmp_path, name), fake_mq_env(state)
    table = tmp_path / "landing" / "orders"

    # When the bridge is killed after putting a unit's reports (no MQCMIT), then after publishing a
    # bulk, then runs until idle
    run_until_killed(config, "after_results_put", env_extra=env)
    run_until_killed(config, "after_publish", env_extra=env)
    out = run_until_idle(config, env_extra=env)

    # Then every message landed once or was moved, and each has exactly one report of the right kind
    landed_ids = sorted(r.msg_id for r in read_table(spark, table))
    assert landed_ids == sorted(i.hex() for i in ids if i not in poison)
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        reports = qm.queue(REPLIES).visible()
        by_correl: dict[bytes, list[int]] = {}
        for report in reports:
            by_correl.setdefault(report.md["CorrelId"], []).append(report.md["Feedback"])
        assert [c for c, found in by_correl.items() if len(found) > 1] == [], "a message got two reports"
        assert {c for c, [f] in by_correl.items() if f == MQFB_PAN} == set(ids) - poison
        assert {c for c, [f] in by_correl.items() if f == MQFB_NAN} == poison
        landed_report = next(json.loads(r.data) for r in reports if r.md["Feedback"] == MQFB_PAN)
        assert landed_report["table"] == "orders" and landed_report["bulk_id"]
        assert qm.queue(QUEUE).depth == 0 and qm.queue(BOQ).depth == 20 and qm.queue(DLQ).depth == 0
    finally:
        qm.close()
    assert "already landed; committed without landing them again" in out, out[-3000:]
    assert leftovers(table) == []


@pytest.mark.timeout(600)
def test_reports_go_only_to_reply_queues_the_listener_allows(tmp_path: Path, spark: Any) -> None:
    # Given messages asking for PAN reports: to the allowed queue on this queue manager, to another
    # queue here, to the allowed queue's name on another queue manager (a queue-only pattern does
    # not open it), and to a partner queue manager the list names
    state, name = tmp_path / "qm.state", "QMALLOW"
    qm = FakeQueueManagerServer(name, dead_letter_queue=DLQ, state_file=state)
    try:
        for queue in (QUEUE, REPLIES, "AUDIT", "QMOTHER", "QMPARTNER"):  # QMOTHER, QMPARTNER: transmission queues
            qm.define_queue(queue)
        with qm.deferred_persistence():
            for n in range(10):
                qm.put(QUEUE, f"own-{n}".encode(), report=MQRO_PAN, reply_to_q=REPLIES)
                qm.put(QUEUE, f"audit-{n}".encode(), report=MQRO_PAN, reply_to_q="AUDIT", reply_to_qmgr=name)
                qm.put(QUEUE, f"other-{n}".encode(), report=MQRO_PAN, reply_to_q=REPLIES, reply_to_qmgr="QMOTHER")
                qm.put(QUEUE, f"partner-{n}".encode(), report=MQRO_PAN, reply_to_q="IN", reply_to_qmgr="QMPARTNER")
    finally:
        qm.close()
    toml = mq_bridge(name).add(LISTENER, f'reply_to_allow = ["{REPLIES}", "QMPARTNER/*"]')
    config, env = toml.write(tmp_path / "bridge.toml"), fake_mq_env(state)

    # When the bridge runs until idle
    out = run_until_idle(config, env_extra=env)

    # Then all 40 landed and left the queue; only the allowed destinations got reports; the others
    # were logged once each, and nothing went to the dead-letter queue
    assert len(read_table(spark, tmp_path / "landing" / "orders")) == 40
    qm = FakeQueueManagerServer(state_file=state, register=False)
    try:
        assert qm.queue(QUEUE).depth == 0 and qm.queue(DLQ).depth == 0
        assert (qm.queue(REPLIES).depth, qm.queue("QMPARTNER").depth) == (10, 10)
        assert (qm.queue("AUDIT").depth, qm.queue("QMOTHER").depth) == (0, 0)
    finally:
        qm.close()
    for refused in (f"reply-to {name}/AUDIT is not allowed", "reply-to QMOTHER/ORDERS.REPLIES is not allowed"):
        assert out.count(refused) == 1, out[-5000:]
