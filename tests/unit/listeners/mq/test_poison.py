"""Poison messages and failures of the IBM MQ source: backout queue, dead-letter queue, in-doubt
commits, quiescing — never a lost or silently committed message."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.errors import BackoutFailedError, InDoubtError, SourceConnectionError, SourceQuiescingError
from mqbridge.listeners.mq import MqSource
from mqbridge.listeners.mq.mapping import unpack_dlh
from mqbridge.records import InDoubtLog
from mqbridge.source import BackoutMove
from mqbridge.tracing.backout_log import BackoutLog
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_testing import DLQ, make_source, receive_n

C = pymqi_fake.CMQC


def test_a_message_at_the_backout_threshold_goes_to_boqname_atomically_and_is_not_handed_out(qm, source) -> None:
    poison_id = qm.put("ORDERS", b"poison", backout_count=3, properties={"app": "shop"}, persistence=C.MQPER_PERSISTENT)
    qm.put("ORDERS", b"fine", backout_count=2)
    message = source.receive(1.0)
    assert message is not None and message.body == b"fine" and message.delivery_count == 3
    # The poison message was moved in its own unit of work and committed at once.
    moved = qm.queue("ORDERS.BACKOUT").visible()
    assert [m.data for m in moved] == [b"poison"]
    assert moved[0].msg_id == poison_id and moved[0].md["Persistence"] == C.MQPER_PERSISTENT
    assert moved[0].prop("app") == "shop"
    assert "BackoutCount 3 reached the backout threshold 3" in moved[0].prop("mqbridge_reason")
    assert moved[0].prop("mqbridge_original_queue") == "ORDERS" and moved[0].prop("mqbridge_delivery_count") == "4"
    assert source.moved_to_backout == 1
    source.commit()
    assert qm.queue("ORDERS").depth == 0


def test_its_own_moves_are_in_the_backout_log_once_committed_those_it_was_asked_for_are_not(
        qm, source, tmp_path: Path) -> None:
    source.backout_log = log = BackoutLog.in_state_dir(tmp_path)
    # Given a poison message moved at get time inside a unit that is backed out: nothing is recorded
    qm.put("ORDERS", b"fine")
    qm.put("ORDERS", b"poison", backout_count=3)
    assert source.receive(1.0) is not None and source.receive(0.2) is None
    source.rollback()
    # When it is moved again in a unit that is committed, beside a permanent failure the listener moves
    poison_id = qm.queue("ORDERS").messages[1].msg_id.hex()  # as the adapter names a MsgId
    fine = source.receive(1.0)
    assert fine is not None and source.receive(0.2) is None
    source.commit(moves=[BackoutMove(fine, "not an order")])
    log.close()
    # Then the adapter recorded its own move (the listener records the one it asked for)
    [moved] = log.moves()
    assert (moved.msg_id, moved.backout_queue, moved.listener, moved.delivery_count) == (
        poison_id, "ORDERS.BACKOUT", "qm:ORDERS", 5)
    assert moved.reason.startswith("BackoutCount 4 reached the backout threshold 3 of ORDERS")


def test_a_threshold_move_inside_a_unit_is_backed_out_with_it(qm, source) -> None:
    qm.put("ORDERS", b"fine")
    qm.put("ORDERS", b"poison", backout_count=3)
    assert source.receive(1.0) is not None
    assert source.receive(0.2) is None  # the poison message was moved within the open unit
    assert qm.queue("ORDERS.BACKOUT").bodies() == []  # not visible before commit
    source.rollback()
    assert qm.queue("ORDERS.BACKOUT").depth == 0
    assert [(m.data, m.backout_count) for m in qm.queue("ORDERS").messages] == [(b"fine", 1), (b"poison", 4)]


def test_a_permanent_failure_is_moved_with_its_reason_in_the_same_unit(qm, source) -> None:
    qm.put_many("ORDERS", [b"{bad json", b"{}"])
    bad, good = receive_n(source, 2)
    source.commit(moves=[BackoutMove(bad, "body is not valid JSON: line 1 column 2")])
    assert qm.queue("ORDERS").depth == 0
    moved = qm.queue("ORDERS.BACKOUT").visible()
    assert [m.data for m in moved] == [b"{bad json"]
    assert moved[0].prop("mqbridge_reason") == "body is not valid JSON: line 1 column 2"
    assert moved[0].prop("mqbridge_delivery_count") == "1"


def test_the_original_bytes_are_moved_not_the_preprocessed_ones(qm, source) -> None:
    qm.put("ORDERS", b"original")
    [message] = receive_n(source, 1)
    message.body = b"rewritten by a preprocessor"
    source.commit(moves=[BackoutMove(message, "bad", queue="ORDERS.BACKOUT")])
    assert qm.queue("ORDERS.BACKOUT").bodies() == [b"original"]


def test_when_the_backout_queue_refuses_the_dead_letter_queue_takes_it_with_an_mqdlh(qm, source) -> None:
    qm.queue("ORDERS.BACKOUT").put_inhibited = True
    qm.put("ORDERS", b"poison", backout_count=5, properties={"app": "shop"})
    assert source.receive(0.3) is None
    dead = qm.queue(DLQ).visible()
    assert len(dead) == 1 and dead[0].md["Format"] == C.MQFMT_DEAD_LETTER_HEADER
    header, original = unpack_dlh(dead[0].data)
    assert original == b"poison"
    assert header["StrucId"] == "DLH" and header["Reason"] == C.MQRC_BACKOUT_THRESHOLD_REACHED
    assert header["DestQName"] == "ORDERS" and header["DestQMgrName"] == qm.name and header["Format"] == "MQSTR"
    assert dead[0].prop("app") == "shop" and "threshold" in dead[0].prop("mqbridge_reason")
    assert source.moved_to_dead_letter == 1 and qm.queue("ORDERS").depth == 0


def test_a_permanent_failure_without_a_backout_queue_goes_to_the_dead_letter_queue(qm) -> None:
    qm.define_queue("PLAIN")
    qm.put("PLAIN", b"bad")
    src = make_source(qm, "PLAIN")
    src.connect()
    [message] = receive_n(src, 1)
    src.commit(moves=[BackoutMove(message, "does not parse")])
    header, original = unpack_dlh(qm.queue(DLQ).bodies()[0])
    assert original == b"bad" and header["Reason"] == C.MQFB_APPL_FIRST
    src.close()


def test_when_nothing_takes_a_poison_message_the_unit_is_backed_out_and_the_listener_stops(qm, source) -> None:
    qm.queue("ORDERS.BACKOUT").put_inhibited = True
    qm.queue(DLQ).put_inhibited = True
    qm.put("ORDERS", b"keep me")
    qm.put("ORDERS", b"poison")
    keep, poison = receive_n(source, 2)
    with pytest.raises(BackoutFailedError, match="ORDERS.BACKOUT.*2051.*SYSTEM.DEAD.LETTER.QUEUE"):
        source.commit(moves=[BackoutMove(poison, "bad")])
    assert [(m.data, m.backout_count) for m in qm.queue("ORDERS").visible()] == [(b"keep me", 1), (b"poison", 1)]
    assert qm.queue("ORDERS.BACKOUT").depth == 0 and qm.queue(DLQ).depth == 0


def test_threshold_disabled_by_bothresh_zero(qm) -> None:
    qm.define_queue("NOBO", backout_threshold=0)
    qm.put("NOBO", b"again", backout_count=50)
    src = make_source(qm, "NOBO")
    src.connect()
    message = src.receive(1.0)
    assert message is not None and message.delivery_count == 51
    src.commit()
    src.close()


def test_connection_lost_mid_batch_loses_nothing(qm, source) -> None:
    qm.put_many("ORDERS", [b"1", b"2", b"3", b"4"])
    receive_n(source, 2)
    qm.inject("get", C.MQRC_CONNECTION_BROKEN)
    with pytest.raises(SourceConnectionError, match="2009"):
        source.receive(0.5)
    source.close()
    assert qm.queue("ORDERS").bodies() == [b"1", b"2", b"3", b"4"]
    assert [m.backout_count for m in qm.queue("ORDERS").messages] == [1, 1, 0, 0]


@pytest.mark.parametrize("applied", [False, True])
def test_2009_on_commit_is_in_doubt_and_recorded(qm, applied: bool) -> None:
    log = InDoubtLog()
    src = MqSource("qm", make_source(qm, "ORDERS").config, "ORDERS", driver=pymqi_fake, in_doubt=log)
    src.connect()
    qm.put_many("ORDERS", [b"1", b"2"])
    messages = receive_n(src, 2)
    qm.inject("commit", C.MQRC_CONNECTION_BROKEN, applied=applied)
    with pytest.raises(InDoubtError) as info:
        src.commit()
    assert info.value.msg_ids == [m.msg_id for m in messages]
    assert isinstance(info.value, tuple(src.recoverable_errors))
    assert (src.in_doubt_units, log.units, log.messages) == (1, 1, 2)
    src.close()
    src.connect()
    if applied:
        assert qm.queue("ORDERS").depth == 0
    else:  # the queue manager backed the unit out: the copies come back, recognisably
        again = receive_n(src, 2)
        assert all(m.headers["mqbridge_in_doubt"] == "true" and m.delivery_count == 2 for m in again)
        assert src.in_doubt_redelivered == 2
        src.commit()
    src.close()


def test_2003_backed_out_on_commit_is_a_lost_unit_not_in_doubt(qm, source) -> None:
    qm.put("ORDERS", b"1")
    receive_n(source, 1)
    qm.inject("commit", C.MQRC_BACKED_OUT)
    with pytest.raises(SourceConnectionError, match="2003"):
        source.commit()
    assert qm.queue("ORDERS").bodies() == [b"1"]


def test_quiescing_finishes_the_unit_then_stops(qm, source) -> None:
    qm.put_many("ORDERS", [b"1", b"2"])
    receive_n(source, 1)
    qm.inject("get", C.MQRC_Q_MGR_QUIESCING)
    assert source.receive(0.1) is None  # the unit in hand may still be finished
    source.commit()
    assert qm.queue("ORDERS").bodies() == [b"2"]
    with pytest.raises(SourceQuiescingError):
        source.receive(0.1)


def test_quiescing_while_waiting_stops_the_listener(qm, source) -> None:
    qm.quiesce()
    with pytest.raises(SourceQuiescingError):
        source.receive(1.0)


def test_quiescing_lets_a_pending_move_finish(qm, source) -> None:
    qm.put_many("ORDERS", [b"bad", b"next"])
    [bad] = receive_n(source, 1)
    qm.quiesce()
    assert source.receive(0.1) is None
    source.commit(moves=[BackoutMove(bad, "bad")])  # puts without FAIL_IF_QUIESCING may still finish it
    assert qm.queue("ORDERS.BACKOUT").bodies() == [b"bad"]
    with pytest.raises(SourceQuiescingError):
        source.receive(0.1)


def test_pymqi_1_drivers_keep_properties_on_moves_without_headers(qm) -> None:
    qm.wildcard_names = False  # pymqi 1.x returns only the value of a wildcard MQINQMP
    qm.put("ORDERS", b"x", properties={"app": "shop"})
    src = make_source(qm, "ORDERS")
    src.connect()
    [message] = receive_n(src, 1)
    assert "app" not in message.headers and "MQMD.Format" in message.headers
    src.commit(moves=[BackoutMove(message, "bad")])
    assert qm.queue("ORDERS.BACKOUT").visible()[0].prop("app") == "shop"
    src.close()


def test_backouts_during_a_sink_outage_do_not_count_towards_bothresh(qm) -> None:
    """A unit backed out because its sink was down raised BackoutCount, but an outage is not
    poison: the adapter discounts the give-backs the listener recorded for the queue."""
    from mqbridge.listeners.mq.mapping import hex_id
    from mqbridge.records import DeliveryTracker

    msg_id = qm.put("ORDERS", b"outage victim", backout_count=3)  # BOTHRESH is 3
    tracker = DeliveryTracker()
    src = MqSource("qm", make_source(qm, "ORDERS").config, "ORDERS", driver=pymqi_fake, tracker=tracker)
    src.connect()
    try:
        tracker.gave_back_in_outage([hex_id(msg_id)])
        message = src.receive(1.0)
        assert message is not None and message.body == b"outage victim"  # handed out, not moved
        assert qm.queue("ORDERS.BACKOUT").depth == 0
        src.rollback()
    finally:
        src.close()
    # without the record it is moved, as before
    plain = make_source(qm, "ORDERS")
    plain.connect()
    try:
        assert plain.receive(0.3) is None and qm.queue("ORDERS.BACKOUT").depth == 1
    finally:
        plain.close()
