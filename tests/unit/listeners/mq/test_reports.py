"""IBM MQ action notifications (MQRO_PAN, MQRO_NAN) against the fake queue manager: put in the unit
of work that removes the message, ids per the MQRO_* options, the details in properties and body,
a missing reply-to queue rerouted to the dead-letter queue with an MQDLH, never blocking the unit."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from mqbridge.listeners.mq import MqSource
from mqbridge.listeners.mq.mapping import unpack_dlh
from mqbridge.listeners.mq.reports import (
    MQFB_NAN,
    MQFB_PAN,
    MQMT_REPORT,
    MQRO_NAN,
    MQRO_PAN,
    MQRO_PASS_CORREL_ID,
    MQRO_PASS_MSG_ID,
)
from mqbridge.source import BackoutMove, Landed
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_model import StoredMessage
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import DLQ, make_source, receive_n

C = pymqi_fake.CMQC
WHEN = datetime(2024, 5, 17, 23, 30, tzinfo=timezone.utc)


def replies(qm: FakeQueueManagerServer, queue: str = "REPLIES") -> list[StoredMessage]:
    return qm.queue(queue).visible()


def test_a_landed_message_that_asks_for_pan_gets_one_after_the_commit(qm: FakeQueueManagerServer,
                                                                      source: MqSource) -> None:
    qm.define_queue("REPLIES")
    msg_id = qm.put("ORDERS", b"order-1", correl_id=b"c-1", report=MQRO_PAN | MQRO_NAN, reply_to_q="REPLIES",
                    priority=7, persistence=C.MQPER_PERSISTENT, expiry=6000, put_time=WHEN)
    qm.put("ORDERS", b"quiet")  # asks for nothing
    first, quiet = receive_n(source, 2)
    landed = [Landed(first, "orders", "b-17"), Landed(quiet, "orders", "b-17")]

    done = source.commit(landed=landed)

    assert done is not None and (done.sent, done.failed, done.rerouted) == (1, 0, 0)
    assert qm.queue("ORDERS").depth == 0
    [report] = replies(qm)
    md = report.md
    assert (md["MsgType"], md["Feedback"], md["Report"]) == (MQMT_REPORT, MQFB_PAN, 0)
    assert md["CorrelId"] == msg_id and md["MsgId"] != msg_id  # MQRO_COPY_MSG_ID_TO_CORREL_ID, MQRO_NEW_MSG_ID
    assert (md["Priority"], md["Persistence"], md["Expiry"]) == (7, C.MQPER_PERSISTENT, 6000)
    assert report.prop("mqbridge_result") == "landed" and report.prop("mqbridge_table") == "orders"
    assert report.prop("mqbridge_bulk_id") == "b-17" and report.prop("mqbridge_put_date") == "2024-05-17"
    assert json.loads(report.data) == {"result": "landed", "message_id": first.msg_id, "queue": "ORDERS",
                                       "queue_manager": qm.name, "table": "orders", "bulk_id": "b-17",
                                       "put_date": "2024-05-17"}


def test_pass_msg_id_and_pass_correl_id_keep_the_original_ids(qm: FakeQueueManagerServer, source: MqSource) -> None:
    qm.define_queue("REPLIES")
    msg_id = qm.put("ORDERS", b"order", correl_id=b"corr-9", report=MQRO_PAN | MQRO_PASS_MSG_ID | MQRO_PASS_CORREL_ID,
                    reply_to_q="REPLIES")
    [message] = receive_n(source, 1)
    source.commit(landed=[Landed(message, "orders", "b")])
    [report] = replies(qm)
    assert report.md["MsgId"] == msg_id and report.md["CorrelId"].rstrip(b"\0") == b"corr-9"


def test_a_permanent_failure_gets_a_nan_with_the_reason_and_no_pan(qm: FakeQueueManagerServer,
                                                                    source: MqSource) -> None:
    qm.define_queue("REPLIES")
    msg_id = qm.put("ORDERS", b"{bad", report=MQRO_PAN | MQRO_NAN, reply_to_q="REPLIES")
    [bad] = receive_n(source, 1)
    done = source.commit(moves=[BackoutMove(bad, "body is not valid JSON")], landed=[])
    assert done is not None and done.sent == 1
    [report] = replies(qm)
    assert (report.md["Feedback"], report.md["CorrelId"]) == (MQFB_NAN, msg_id)
    assert report.prop("mqbridge_result") == "backout" and report.prop("mqbridge_reason") == "body is not valid JSON"
    assert report.prop("mqbridge_moved_to") == "ORDERS.BACKOUT"
    assert qm.queue("ORDERS.BACKOUT").bodies() == [b"{bad"]


def test_a_message_moved_at_the_backout_threshold_gets_a_nan_in_that_unit(qm: FakeQueueManagerServer,
                                                                          source: MqSource) -> None:
    qm.define_queue("REPLIES")
    qm.put("ORDERS", b"poison", backout_count=3, report=MQRO_NAN, reply_to_q="REPLIES")
    assert source.receive(0.3) is None  # moved (and committed) at get time, never handed out
    [report] = replies(qm)
    assert report.md["Feedback"] == MQFB_NAN and "backout threshold 3" in report.prop("mqbridge_reason")
    done = source.commit()
    assert done is not None and done.sent == 1  # counted with the next commit's report


def test_a_unit_that_does_not_commit_leaves_no_report_and_the_redelivery_gets_exactly_one(
        qm: FakeQueueManagerServer, source: MqSource) -> None:
    qm.define_queue("REPLIES")
    qm.put("ORDERS", b"order", report=MQRO_PAN, reply_to_q="REPLIES")
    [message] = receive_n(source, 1)
    qm.inject("commit", C.MQRC_BACKED_OUT)
    try:
        source.commit(landed=[Landed(message, "orders", "b-1")])
    except Exception as exc:  # the queue manager backed the unit out: it comes back
        assert "backed out" in str(exc)
    assert replies(qm) == [] and qm.queue("REPLIES").depth == 0
    [again] = receive_n(source, 1)
    assert again.delivery_count == 2
    done = source.commit(landed=[Landed(again, "orders", "b-1")])
    assert done is not None and done.sent == 1 and len(replies(qm)) == 1


def test_a_missing_reply_to_queue_sends_the_report_to_the_dead_letter_queue_and_commits(
        qm: FakeQueueManagerServer, source: MqSource) -> None:
    msg_id = qm.put("ORDERS", b"order", report=MQRO_PAN, reply_to_q="NO.SUCH.QUEUE", reply_to_qmgr=qm.name)
    qm.put("ORDERS", b"no reply-to", report=MQRO_PAN)
    first, second = receive_n(source, 2)
    done = source.commit(landed=[Landed(first, "orders", "b"), Landed(second, "orders", "b")])
    assert done is not None and (done.sent, done.rerouted, done.failed) == (0, 1, 1)
    assert qm.queue("ORDERS").depth == 0  # the messages left the queue all the same
    [dead] = qm.queue(DLQ).visible()
    header, data = unpack_dlh(dead.data)
    assert header["Reason"] == C.MQRC_UNKNOWN_OBJECT_NAME and header["DestQName"] == "NO.SUCH.QUEUE"
    assert dead.md["Feedback"] == MQFB_PAN and dead.md["CorrelId"] == msg_id
    assert json.loads(data)["result"] == "landed"


def test_a_reply_to_queue_manager_goes_by_name_resolution(qm: FakeQueueManagerServer) -> None:
    # Given a listener whose reports may go to other queue managers (by default they may not:
    # test_report_allow.py), a message whose ReplyToQMgr has a transmission queue here, and one
    # whose has none
    source = make_source(qm, "ORDERS", reply_to_allow=["*/REPLIES"])
    source.connect()
    qm.define_queue("QMREMOTE")  # the transmission queue to QMREMOTE
    qm.put("ORDERS", b"far", report=MQRO_PAN, reply_to_q="REPLIES", reply_to_qmgr="QMREMOTE")
    lost = qm.put("ORDERS", b"nowhere", report=MQRO_PAN, reply_to_q="REPLIES", reply_to_qmgr="QMUNKNOWN")
    far, nowhere = receive_n(source, 2)

    done = source.commit(landed=[Landed(far, "orders", "b"), Landed(nowhere, "orders", "b")])

    # Then the first report is on its way (the transmission queue), the second is a dead letter
    # naming the queue manager it could not reach; both messages left the queue
    assert done is not None and (done.sent, done.rerouted, done.failed) == (1, 1, 0)
    assert qm.queue("ORDERS").depth == 0
    [sent] = qm.queue("QMREMOTE").visible()
    assert sent.md["Feedback"] == MQFB_PAN and json.loads(sent.data)["message_id"] == far.msg_id
    [dead] = qm.queue(DLQ).visible()
    header, _ = unpack_dlh(dead.data)
    assert header["Reason"] == C.MQRC_UNKNOWN_REMOTE_Q_MGR
    assert (header["DestQName"], header["DestQMgrName"]) == ("REPLIES", "QMUNKNOWN")
    assert dead.md["CorrelId"] == lost
    source.close()


def test_a_unit_keeps_room_under_maxumsgs_for_each_move_and_its_nan(qm: FakeQueueManagerServer) -> None:
    # Given MAXUMSGS 10 and messages that ask for NAN reports, all of which the listener moves
    qm.max_uncommitted = 10
    qm.define_queue("REPLIES")
    for i in range(6):
        qm.put("ORDERS", f"bad-{i}".encode(), report=MQRO_PAN | MQRO_NAN, reply_to_q="REPLIES")
    src = make_source(qm, "ORDERS", batch=5)
    src.connect()
    try:
        # When a unit is read as full as it may be, and every message in it is moved
        got = [m for m in (src.receive(0.05) for _ in range(8)) if m is not None]
        done = src.commit(moves=[BackoutMove(m, "bad body") for m in got])
    finally:
        src.close()

    # Then each move and each NAN report fit in the unit of work: none failed at MAXUMSGS
    assert done is not None and (done.sent, done.failed, done.rerouted) == (len(got), 0, 0)
    assert len(got) == 3  # 3 gets + 3 moves + 3 reports (and room for one more get) within 10
    assert qm.queue("ORDERS.BACKOUT").depth == 3 and len(replies(qm)) == 3
