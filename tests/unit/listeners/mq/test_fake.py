"""The fake queue manager behaves as IBM MQ documents it (so tests against it mean something)."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.fakes import pymqi_fake as mq
from tests.support.fakes.mq_server import FakeQueueManagerServer

C = mq.CMQC


@pytest.fixture
def server() -> Iterator[FakeQueueManagerServer]:
    s = FakeQueueManagerServer(dead_letter_queue="DLQ", max_uncommitted=5)
    s.define_queue("Q", backout_threshold=3, backout_queue="Q.BO")
    s.define_queue("Q.BO")
    yield s
    s.close()


def connect(server: FakeQueueManagerServer, **kw: object) -> mq.QueueManager:
    qmgr = mq.QueueManager(None, **kw)  # type: ignore[arg-type]
    qmgr.connect_with_options(server.name, cd=mq.CD(ChannelName=b"CH", ConnectionName=b"h(1)"))
    return qmgr


def get(queue: mq.Queue, *, syncpoint: bool = True, wait_ms: int = 0, md: mq.MD | None = None,
        max_length: int | None = 1000) -> tuple[bytes, mq.MD]:
    md = md or mq.MD()
    gmo = mq.GMO(Options=(C.MQGMO_SYNCPOINT if syncpoint else C.MQGMO_NO_SYNCPOINT)
                 | (C.MQGMO_WAIT if wait_ms else 0) | C.MQGMO_FAIL_IF_QUIESCING | C.MQGMO_NO_PROPERTIES,
                 WaitInterval=wait_ms)
    return queue.get(max_length, md, gmo), md


def test_syncpoint_get_hides_until_commit_and_backout_restores_in_place_with_count(server) -> None:
    server.put_many("Q", [b"a", b"b", b"c"])
    qmgr = connect(server)
    queue = mq.Queue(qmgr, "Q", C.MQOO_INPUT_AS_Q_DEF)
    assert get(queue)[0] == b"a" and get(queue)[0] == b"b"
    assert server.queue("Q").bodies() == [b"c"]
    assert server.queue("Q").depth == 3  # CURDEPTH counts uncommitted gets
    qmgr.backout()
    assert server.queue("Q").bodies() == [b"a", b"b", b"c"]
    assert [m.backout_count for m in server.queue("Q").messages] == [1, 1, 0]
    get(queue)
    qmgr.commit()
    assert server.queue("Q").bodies() == [b"b", b"c"]


def test_mqdisc_with_an_open_unit_of_work_commits_it_and_is_recorded(server) -> None:
    server.put("Q", b"x")
    qmgr = connect(server)
    get(mq.Queue(qmgr, "Q", C.MQOO_INPUT_AS_Q_DEF))
    qmgr.disconnect()
    assert server.queue("Q").bodies() == []
    assert len(server.disconnects_with_open_uow) == 1


def test_garbage_collection_disconnects_by_default_and_that_commits(server) -> None:
    server.put("Q", b"x")
    qmgr = connect(server)
    get(mq.Queue(qmgr, "Q", C.MQOO_INPUT_AS_Q_DEF))
    del qmgr
    gc.collect()
    assert server.queue("Q").bodies() == []
    assert server.disconnects_with_open_uow[0]["via"] == "__del__"


def test_broken_connection_backs_out_and_later_calls_fail_2009(server) -> None:
    server.put("Q", b"x")
    qmgr = connect(server)
    queue = mq.Queue(qmgr, "Q", C.MQOO_INPUT_AS_Q_DEF)
    get(queue)
    assert server.break_connections() == 1
    assert server.queue("Q").messages[0].backout_count == 1 and server.queue("Q").bodies() == [b"x"]
    with pytest.raises(mq.MQMIError) as info:
        qmgr.commit()
    assert info.value.reason == C.MQRC_CONNECTION_BROKEN


def test_no_message_after_the_wait_interval_is_2033(server) -> None:
    queue = mq.Queue(connect(server), "Q", C.MQOO_INPUT_AS_Q_DEF)
    started = time.monotonic()
    with pytest.raises(mq.MQMIError) as info:
        get(queue, wait_ms=200)
    assert info.value.reason == C.MQRC_NO_MSG_AVAILABLE
    assert time.monotonic() - started >= 0.19


def test_a_waiting_get_is_woken_by_a_put(server) -> None:
    queue = mq.Queue(connect(server), "Q", C.MQOO_INPUT_AS_Q_DEF)
    threading.Timer(0.1, lambda: server.put("Q", b"late")).start()
    assert get(queue, wait_ms=5000)[0] == b"late"


def test_max_uncommitted_messages_is_2024(server) -> None:
    server.put_many("Q", [b"m"] * 6)
    queue = mq.Queue(connect(server), "Q", C.MQOO_INPUT_AS_Q_DEF)
    for _ in range(5):
        get(queue)
    with pytest.raises(mq.MQMIError) as info:
        get(queue)
    assert info.value.reason == C.MQRC_SYNCPOINT_LIMIT_REACHED


def test_truncated_message_fails_2080_and_stays_on_the_queue(server) -> None:
    server.put("Q", b"x" * 100)
    queue = mq.Queue(connect(server), "Q", C.MQOO_INPUT_AS_Q_DEF)
    with pytest.raises(mq.MQMIError) as info:
        get(queue, max_length=10)
    assert info.value.reason == C.MQRC_TRUNCATED_MSG_FAILED and info.value.original_length == 100
    assert server.queue("Q").bodies() == [b"x" * 100]


def test_a_reused_md_matches_only_the_previous_msg_id(server) -> None:
    server.put_many("Q", [b"1", b"2"])
    qmgr = connect(server)
    queue = mq.Queue(qmgr, "Q", C.MQOO_INPUT_AS_Q_DEF)
    _, md = get(queue)
    with pytest.raises(mq.MQMIError) as info:
        get(queue, md=md)  # default MatchOptions: MsgId + CorrelId of the first message
    assert info.value.reason == C.MQRC_NO_MSG_AVAILABLE


def test_warnings_raise_but_the_message_is_got(server) -> None:
    server.put("Q", b"caf\xe9", ccsid=9999)  # no converter for this CCSID
    qmgr = connect(server)
    queue = mq.Queue(qmgr, "Q", C.MQOO_INPUT_AS_Q_DEF)
    gmo = mq.GMO(Options=C.MQGMO_SYNCPOINT | C.MQGMO_CONVERT)
    with pytest.raises(mq.MQMIError) as info:
        queue.get(100, mq.MD(), gmo)
    assert info.value.comp == C.MQCC_WARNING and info.value.reason == C.MQRC_NOT_CONVERTED
    assert info.value.message == b"caf\xe9"
    qmgr.commit()
    assert server.queue("Q").bodies() == []


def test_puts_under_syncpoint_are_invisible_until_commit_and_vanish_on_backout(server) -> None:
    qmgr = connect(server)
    qmgr.put1("Q.BO", b"p", mq.MD(), mq.PMO(Options=C.MQPMO_SYNCPOINT))
    assert server.queue("Q.BO").bodies() == []
    qmgr.backout()
    assert server.queue("Q.BO").depth == 0
    qmgr.put1("Q.BO", b"p", mq.MD(), mq.PMO(Options=C.MQPMO_SYNCPOINT))
    qmgr.commit()
    assert server.queue("Q.BO").bodies() == [b"p"]


def test_attributes_faults_quiescing_and_thread_affinity(server) -> None:
    qmgr = connect(server)
    queue = mq.Queue(qmgr, "Q", C.MQOO_INPUT_AS_Q_DEF | C.MQOO_INQUIRE)
    assert queue.inquire(C.MQIA_BACKOUT_THRESHOLD) == 3
    assert queue.inquire(C.MQCA_BACKOUT_REQ_Q_NAME).rstrip() == b"Q.BO"
    assert qmgr.inquire(C.MQCA_DEAD_LETTER_Q_NAME).rstrip() == b"DLQ"
    assert qmgr.inquire(C.MQIA_MAX_UNCOMMITTED_MSGS) == 5
    server.inject("get", C.MQRC_Q_MGR_QUIESCING)
    with pytest.raises(mq.MQMIError) as info:
        get(queue)
    assert info.value.reason == C.MQRC_Q_MGR_QUIESCING
    errors: list[int] = []

    def foreign() -> None:
        try:
            qmgr.commit()
        except mq.MQMIError as exc:
            errors.append(exc.reason)

    thread = threading.Thread(target=foreign)
    thread.start()
    thread.join()
    assert errors == [C.MQRC_HCONN_ERROR]
    server.quiesce()
    with pytest.raises(mq.MQMIError) as info:
        get(queue, wait_ms=5000)
    assert info.value.reason == C.MQRC_Q_MGR_QUIESCING


def test_message_properties_travel_through_a_handle(server) -> None:
    server.put("Q", b"x", properties={"a": "1", "big": "v" * 100})
    qmgr = connect(server)
    handle = mq.MessageHandle(qmgr)
    gmo = mq.GMO(Version=4, Options=C.MQGMO_SYNCPOINT | C.MQGMO_PROPERTIES_IN_HANDLE, MsgHandle=handle.msg_handle)
    mq.Queue(qmgr, "Q", C.MQOO_INPUT_AS_Q_DEF).get(100, mq.MD(), gmo)
    assert handle.properties.get("%") == ("1", "a")
    with pytest.raises(mq.MQMIError) as info:
        handle.properties.get("%", impo_options=C.MQIMPO_INQ_NEXT, max_value_length=10)
    assert info.value.reason == C.MQRC_PROPERTY_VALUE_TOO_BIG and info.value.data_length == 100
    assert handle.properties.get("%", impo_options=C.MQIMPO_INQ_PROP_UNDER_CURSOR, max_value_length=100)[1] == "big"
    handle.properties.set(b"reason", "r")
    qmgr.put1("Q.BO", b"x", mq.MD(), mq.PMO(OriginalMsgHandle=handle.msg_handle))
    assert server.queue("Q.BO").messages[0].prop("reason") == "r"
