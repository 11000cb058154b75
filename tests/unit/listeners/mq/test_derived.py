"""Derived messages (`mqbridge.outbound.outbox`) on IBM MQ against the fake queue manager: put under syncpoint
with the commit that removes their message (visible only after MQCMIT, gone with a backout), their
headers as message properties; a queue that refuses one fails the commit and nothing is removed."""

from __future__ import annotations

import pytest

from mqbridge.errors import SourceError
from mqbridge.listeners.mq import MqSource
from mqbridge.outbound.outbox import Derived
from mqbridge.source import Landed
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import receive_n

C = pymqi_fake.CMQC


def test_derived_messages_are_put_in_the_unit_that_removes_the_message(qm: FakeQueueManagerServer,
                                                                      source: MqSource) -> None:
    qm.define_queue("AUDIT")
    qm.put("ORDERS", b"order-1")
    [message] = receive_n(source, 1)
    derived = (Derived("AUDIT", b'{"of": 1}', {"notice_of": message.msg_id}), Derived("AUDIT", b"\xff\x00"))
    source.commit(landed=[Landed(message, "orders", "b-1", derived=derived)])
    assert qm.queue("ORDERS").depth == 0
    text, binary = qm.queue("AUDIT").visible()
    assert (text.data, text.prop("notice_of"), text.md["Format"]) == (b'{"of": 1}', message.msg_id, C.MQFMT_STRING)
    assert (binary.data, binary.md["Format"], binary.md["Persistence"]) == (b"\xff\x00", C.MQFMT_NONE,
                                                                             C.MQPER_PERSISTENT)


def test_a_unit_backed_out_leaves_no_derived_message(qm: FakeQueueManagerServer, source: MqSource) -> None:
    qm.define_queue("AUDIT")
    qm.put("ORDERS", b"order-1")
    [message] = receive_n(source, 1)
    qm.inject("commit", C.MQRC_BACKED_OUT)
    with pytest.raises(SourceError, match="backed out"):
        source.commit(landed=[Landed(message, "orders", "b-1", derived=(Derived("AUDIT", b"n"),))])
    assert qm.queue("AUDIT").depth == 0 and qm.queue("ORDERS").depth == 1


def test_a_queue_that_refuses_a_derived_message_fails_the_commit(qm: FakeQueueManagerServer,
                                                                 source: MqSource) -> None:
    qm.define_queue("AUDIT")
    qm.put("ORDERS", b"order-1")
    [message] = receive_n(source, 1)
    landed = [Landed(message, "orders", "b-1", derived=(Derived("AUDIT", b"n"), Derived("NO.SUCH.QUEUE", b"n")))]
    with pytest.raises(SourceError, match="derived message of message .* to NO.SUCH.QUEUE was refused"):
        source.commit(landed=landed)
    source.rollback()  # what closing the listener's source does with the open unit
    assert qm.queue("AUDIT").depth == 0 and qm.queue("ORDERS").depth == 1
