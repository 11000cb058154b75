"""IBM MQ reports go only to reply-to queues the listener allows (`reply_to_allow`; default: the
connected queue manager): a report to anything else is not sent, counted, logged once per
destination, and the message is committed as if it had asked for none (the fake queue manager)."""

from __future__ import annotations

import logging

import pytest

from mqbridge.listeners.mq import MqSource
from mqbridge.listeners.mq.reports import MQRO_NAN, MQRO_PAN
from mqbridge.source import BackoutMove, Landed
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import DLQ, make_source, receive_n


def depths(qm: FakeQueueManagerServer, *queues: str) -> tuple[int, ...]:
    return tuple(qm.queue(q).depth for q in queues)


def test_by_default_reports_stay_on_the_connected_queue_manager(qm: FakeQueueManagerServer, source: MqSource,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    # Given reply-to queues here (ReplyToQMgr blank or this queue manager) and on another one
    for queue in ("REPLIES", "QMOTHER"):  # QMOTHER: the transmission queue to that queue manager
        qm.define_queue(queue)
    qm.put("ORDERS", b"blank", report=MQRO_PAN, reply_to_q="REPLIES")
    qm.put("ORDERS", b"named", report=MQRO_PAN, reply_to_q="REPLIES", reply_to_qmgr=qm.name)
    for n in range(2):
        qm.put("ORDERS", f"far-{n}".encode(), report=MQRO_PAN, reply_to_q="REPLIES", reply_to_qmgr="QMOTHER")
    messages = receive_n(source, 4)
    # When they land
    with caplog.at_level(logging.WARNING, logger="mqbridge.reply_to"):
        done = source.commit(landed=[Landed(m, "orders", "b") for m in messages])
    # Then the two for this queue manager got reports; the two for QMOTHER did not, and were
    # counted and logged once; all four left the queue
    assert done is not None and (done.sent, done.not_allowed, done.failed, done.rerouted) == (2, 2, 0, 0)
    assert depths(qm, "ORDERS", "REPLIES", "QMOTHER", DLQ) == (0, 2, 0, 0)
    [logged] = [r.getMessage() for r in caplog.records]
    assert "reply-to QMOTHER/REPLIES is not allowed by the default: the connected queue manager only" in logged


def test_patterns_name_queues_here_or_qmgr_slash_queue_anywhere(qm: FakeQueueManagerServer,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    # Given reply_to_allow = a queue pattern (this queue manager only) and one other queue manager
    source = make_source(qm, "ORDERS", reply_to_allow=["RESULTS.*", "QMPARTNER/*"])
    source.connect()
    for queue in ("RESULTS.A", "AUDIT", "QMPARTNER", "QMOTHER"):
        qm.define_queue(queue)
    sent = [("RESULTS.A", ""), ("RESULTS.A", qm.name), ("ANY.QUEUE", "QMPARTNER")]
    refused = [("AUDIT", ""), ("RESULTS.A", "QMOTHER"), ("AUDIT", "")]
    for queue, qmgr in [*sent, *refused]:
        qm.put("ORDERS", f"{queue}@{qmgr}".encode(), report=MQRO_PAN, reply_to_q=queue, reply_to_qmgr=qmgr)
    messages = receive_n(source, 6)
    with caplog.at_level(logging.WARNING, logger="mqbridge.reply_to"):
        done = source.commit(landed=[Landed(m, "orders", "b") for m in messages])
    assert done is not None and (done.sent, done.not_allowed) == (3, 3)
    assert depths(qm, "ORDERS", "RESULTS.A", "QMPARTNER", "AUDIT", "QMOTHER") == (0, 2, 1, 0, 0)
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2  # AUDIT twice: logged once
    assert f"reply-to {qm.name}/AUDIT is not allowed by reply_to_allow = ['RESULTS.*', 'QMPARTNER/*']" in logged[0]
    source.close()


def test_a_nan_to_a_queue_not_allowed_is_not_sent_and_the_move_is_committed(qm: FakeQueueManagerServer) -> None:
    source = make_source(qm, "ORDERS", reply_to_allow=["REPLIES"])
    source.connect()
    qm.define_queue("AUDIT")
    qm.put("ORDERS", b"poison", report=MQRO_NAN, reply_to_q="AUDIT")
    [message] = receive_n(source, 1)
    done = source.commit(moves=[BackoutMove(message, "does not parse", "ORDERS.BACKOUT")])
    assert done is not None and (done.sent, done.not_allowed) == (0, 1)
    assert depths(qm, "ORDERS", "ORDERS.BACKOUT", "AUDIT", DLQ) == (0, 1, 0, 0)
    source.close()
