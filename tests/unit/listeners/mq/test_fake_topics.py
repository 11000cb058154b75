"""Publish/subscribe of the fake queue manager (`tests.support.fakes.mq_topics`), in process: durable
managed subscriptions made and resumed with MQSUB, publications copied to every subscription at
the put (at the commit under syncpoint), the real reason codes, and subscriptions that survive the
client's disconnect and the queue manager's restart in persistent mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fakes import pymqi_fake as mq
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_topics import DURABLE_MODEL

C = mq.CMQC
DURABLE = C.MQSO_CREATE | C.MQSO_RESUME | C.MQSO_DURABLE | C.MQSO_MANAGED | C.MQSO_FAIL_IF_QUIESCING


def connect(server: FakeQueueManagerServer) -> mq.QueueManager:
    qmgr = mq.QueueManager(None, disconnect_on_exit=False)  # type: ignore[arg-type]
    qmgr.connect_with_options(server.name, cd=mq.CD(ChannelName=b"CH", ConnectionName=b"h(1)"))
    return qmgr


def subscribe(qmgr: mq.QueueManager, name: str, topic: str = "orders/eu", options: int = DURABLE) -> mq.Subscription:
    sd = mq.SD(Options=options)
    sd.set_vs("SubName", name.encode())
    sd.set_vs("ObjectString", topic.encode())
    sub = mq.Subscription(qmgr)
    sub.sub(sub_desc=sd)
    return sub


def get(sub: mq.Subscription, *, syncpoint: bool = True, browse: bool = False) -> bytes:
    options = (C.MQGMO_SYNCPOINT if syncpoint else C.MQGMO_NO_SYNCPOINT) | C.MQGMO_NO_PROPERTIES
    options |= C.MQGMO_BROWSE_FIRST if browse else 0
    return sub.get(1000, mq.MD(), mq.GMO(Options=options))


def reason(call: object) -> int:
    with pytest.raises(mq.MQMIError) as info:
        call()  # type: ignore[operator]
    return int(info.value.reason)


@pytest.fixture
def qm() -> FakeQueueManagerServer:
    server = FakeQueueManagerServer(dead_letter_queue="DLQ")
    yield server  # type: ignore[misc]
    server.close()


def test_each_subscription_gets_a_copy_of_every_publication_at_the_commit(qm: FakeQueueManagerServer) -> None:
    # Given two durable managed subscriptions on one topic string and a topic object naming it
    qm.define_topic("ORDERS", "orders")
    app = connect(qm)
    a, b = subscribe(app, "a"), subscribe(app, "b")
    publisher = connect(qm)
    # When a publisher puts to the topic object (+ string) under syncpoint, and one MQPUT1 by string
    topic = mq.Topic(publisher, topic_name="ORDERS", topic_string="eu")
    topic.pub(b"one", mq.MD(), mq.PMO(Options=C.MQPMO_SYNCPOINT))
    # Then nothing is visible before the commit, and each subscription has one copy after it
    assert qm.subscription_queue("a").bodies() == [] and qm.subscription_queue("b").bodies() == []
    publisher.commit()
    od = mq.OD(ObjectType=C.MQOT_TOPIC, Version=C.MQOD_VERSION_4)
    od.set_vs("ObjectString", b"orders/eu")
    publisher.put1(od, b"two", mq.MD(), mq.PMO())
    assert qm.subscription_queue("a").bodies() == [b"one", b"two"] == qm.subscription_queue("b").bodies()
    # ... with one MsgId per publication in both subscriptions
    ids = [[m.msg_id for m in qm.subscription_queue(n).visible()] for n in ("a", "b")]
    assert ids[0] == ids[1] and len(set(ids[0])) == 2
    # And the handle MQSUB returned reads like a queue: browse, syncpoint, backout with BackoutCount
    assert get(a, browse=True) == b"one"
    assert get(a) == b"one"
    app.backout()
    md = mq.MD()
    assert a.get(1000, md, mq.GMO(Options=C.MQGMO_SYNCPOINT | C.MQGMO_NO_PROPERTIES)) == b"one"
    assert md.BackoutCount == 1
    app.commit()
    assert qm.subscription_queue("a").bodies() == [b"two"]
    assert get(b, syncpoint=False) == b"one"


def test_a_publication_before_a_subscription_exists_reaches_nobody(qm: FakeQueueManagerServer) -> None:
    publisher = connect(qm)
    mq.Topic(publisher, topic_string="orders/eu").pub(b"lost", mq.MD(), mq.PMO())
    sub = subscribe(connect(qm), "late")
    assert reason(lambda: get(sub)) == C.MQRC_NO_MSG_AVAILABLE


def test_the_real_reason_codes(qm: FakeQueueManagerServer) -> None:
    first, second = connect(qm), connect(qm)
    held = subscribe(first, "held")
    # Another connection resuming a subscription whose handle is open: 2429
    assert reason(lambda: subscribe(second, "held")) == C.MQRC_SUBSCRIPTION_IN_USE
    # Resuming one that does not exist: 2428; creating one that exists: 2432; durable without a name: 2440
    assert reason(lambda: subscribe(second, "missing", options=C.MQSO_RESUME | C.MQSO_MANAGED)) == \
        C.MQRC_NO_SUBSCRIPTION
    assert reason(lambda: subscribe(second, "held", options=C.MQSO_CREATE | C.MQSO_DURABLE | C.MQSO_MANAGED)) == \
        C.MQRC_SUB_ALREADY_EXISTS
    assert reason(lambda: subscribe(second, "", options=DURABLE)) == C.MQRC_SUB_NAME_ERROR
    assert reason(lambda: subscribe(second, "x", topic="", options=DURABLE)) == C.MQRC_TOPIC_STRING_ERROR
    # The managed handle takes no put
    assert reason(lambda: held.sub_queue.put(b"x")) == C.MQRC_NOT_OPEN_FOR_OUTPUT  # type: ignore[union-attr]
    # Once the holder closes its handle (the durable subscription stays), the other may resume it
    held.close(sub_close_options=C.MQCO_KEEP_SUB, close_sub_queue=True)
    subscribe(second, "held").close()
    assert "held" in qm.subscriptions


def test_a_durable_subscription_outlives_a_broken_connection_and_remove_sub_deletes_it(
        qm: FakeQueueManagerServer) -> None:
    app = connect(qm)
    subscribe(app, "keep")
    qm.break_connections()
    # A non-durable one ends with its connection; the durable one is resumed by the next connection
    other = connect(qm)
    non_durable = subscribe(other, "", options=C.MQSO_CREATE | C.MQSO_MANAGED)
    mq.Topic(other, topic_string="orders/eu").pub(b"m", mq.MD(), mq.PMO())
    assert get(non_durable) == b"m"
    sub = subscribe(other, "keep")
    assert get(sub, syncpoint=False) == b"m"
    non_durable.close()
    assert [s.name for s in qm.subscriptions.values()] == ["keep"]
    sub.close(sub_close_options=C.MQCO_REMOVE_SUB, close_sub_queue=True)
    assert qm.subscriptions == {} and not [q for q in qm.queues if q.startswith("SYSTEM.MANAGED")]


def test_managed_queues_take_the_model_queue_s_backout_settings(qm: FakeQueueManagerServer) -> None:
    qm.define_queue(DURABLE_MODEL, backout_threshold=2, backout_queue="SUBS.BACKOUT")
    sub = subscribe(connect(qm), "modelled")
    queue = sub.get_sub_queue()
    assert queue is not None
    assert queue.inquire(C.MQIA_BACKOUT_THRESHOLD) == 2
    assert queue.inquire(C.MQCA_BACKOUT_REQ_Q_NAME).strip() == b"SUBS.BACKOUT"


def test_durable_subscriptions_and_their_messages_survive_a_restart_in_persistent_mode(tmp_path: Path) -> None:
    # Given a persistent queue manager with a durable subscription holding one publication, of which
    # a dead process had got one under syncpoint
    state = tmp_path / "qm.state"
    qm = FakeQueueManagerServer("QMPS", state_file=state)
    qm.define_topic("ORDERS", "orders")
    app = connect(qm)
    sub = subscribe(app, "d", topic="orders")
    qm.publish("orders", b"kept")
    assert get(sub) == b"kept"
    qm.crash()
    # When the queue manager is loaded again
    again = FakeQueueManagerServer(state_file=state)
    try:
        # Then the subscription is there, its unit backed out, and publications reach it again
        assert again.topics == {"ORDERS": "orders"} and list(again.subscriptions) == ["d"]
        resumed = subscribe(connect(again), "d", topic="orders", options=C.MQSO_RESUME | C.MQSO_DURABLE
                            | C.MQSO_MANAGED)
        again.publish("orders", b"after")
        md = mq.MD()
        assert resumed.get(1000, md, mq.GMO(Options=C.MQGMO_NO_SYNCPOINT | C.MQGMO_NO_PROPERTIES)) == b"kept"
        assert md.BackoutCount == 1
        assert get(resumed, syncpoint=False) == b"after"
    finally:
        again.close()
