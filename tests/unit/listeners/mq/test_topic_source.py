"""The IBM MQ source of a topic listener (`topic` + `subscription`) against the fake queue manager:
a durable subscription created at the first connect and resumed after, read under syncpoint like a
queue, messages keeping the topic as destination and naming their subscription, poison moved at
BOTHRESH to the listener's (else the managed queue's) backout queue, a subscription held by
another connection retried."""

from __future__ import annotations

from mqbridge.errors import ConfigError, SubscriptionInUseError
from mqbridge.listeners.mq.redrive import redrive
from mqbridge.supervision.decision import Decision, decide
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import listener_config, make_topic_source, receive_n, source_config
from tests.support.fakes.mq_topics import DURABLE_MODEL

TOPIC = "orders/eu"


def test_each_subscription_reads_every_publication_under_syncpoint_and_keeps_it_across_close(
        qm: FakeQueueManagerServer) -> None:
    # Given two topic listeners (subscriptions a and b) that connected once, then closed
    a, b = make_topic_source(qm, TOPIC, "a"), make_topic_source(qm, TOPIC, "b")
    for src in (a, b):
        src.connect()
        src.close()
    # When messages are published while they are closed, and they connect again
    qm.publish(TOPIC, b"one")
    qm.publish(TOPIC, b"two")
    a.connect()
    b.connect()
    try:
        # Then each subscription gets both, as messages of the topic naming their subscription
        got_a, got_b = receive_n(a, 2), receive_n(b, 2)
        assert [m.body for m in got_a] == [b"one", b"two"] == [m.body for m in got_b]
        assert {(m.destination, m.subscription, m.source) for m in got_a} == {(TOPIC, "a", "qm")}
        assert got_b[0].subscription == "b" and got_a[0].msg_id == got_b[0].msg_id
        # ... under syncpoint: a rollback gives them back with BackoutCount + 1, a commit removes them
        a.rollback()
        again = receive_n(a, 2)
        assert [m.delivery_count for m in again] == [2, 2]
        a.commit()
        b.commit()
        assert qm.subscription_queue("a").depth == 0 and qm.subscription_queue("b").depth == 0
    finally:
        a.close()
        b.close()
    assert set(qm.subscriptions) == {"a", "b"}  # closing keeps the durable subscriptions


def test_poison_goes_to_the_listener_s_backout_queue_else_the_model_queue_s(qm: FakeQueueManagerServer) -> None:
    # Given managed queues made from a model queue with BOTHRESH 2 and a shared BOQNAME, one
    # listener with a backout queue of its own
    qm.define_queue(DURABLE_MODEL, backout_threshold=2, backout_queue="SUBS.BACKOUT")
    qm.define_queue("SUBS.BACKOUT")
    qm.define_queue("AUDIT.BACKOUT")
    own = make_topic_source(qm, TOPIC, "audit", backout_queue="AUDIT.BACKOUT")
    shared = make_topic_source(qm, TOPIC, "billing")
    for src in (own, shared):
        src.connect()
    try:
        assert (own.backout_threshold, own.backout_queue) == (2, "AUDIT.BACKOUT")
        assert (shared.backout_threshold, shared.backout_queue) == (2, "SUBS.BACKOUT")
        qm.publish(TOPIC, b"poison")
        # When each listener backs it out twice
        for src in (own, shared):
            for _ in range(2):
                receive_n(src, 1)
                src.rollback()
            # Then the next get moves it (not handed over), in a unit committed at once
            assert src.receive(0.3) is None
        assert qm.queue("AUDIT.BACKOUT").bodies() == [b"poison"] == qm.queue("SUBS.BACKOUT").bodies()
        moved = qm.queue("AUDIT.BACKOUT").visible()[0]
        assert moved.prop("mqbridge_original_queue") == f"{TOPIC}@audit"
    finally:
        own.close()
        shared.close()


def test_a_subscription_held_by_another_connection_is_retried_not_lost(qm: FakeQueueManagerServer) -> None:
    holder, other = make_topic_source(qm, TOPIC, "held"), make_topic_source(qm, TOPIC, "held")
    holder.connect()
    try:
        try:
            other.connect()
            raise AssertionError("a second MQSUB of a subscription in use must fail")
        except SubscriptionInUseError as exc:
            assert decide(exc) is Decision.RETRY_LATER
            assert "the durable subscription 'held' is in use by another connection" in str(exc)
        assert len(qm.live_connections()) == 1  # the refused connection was not left open
    finally:
        holder.close()
    other.connect()  # once released, it resumes
    other.close()


def test_redrive_of_a_topic_listener_is_refused(qm: FakeQueueManagerServer) -> None:
    listener = listener_config("", topic=TOPIC, subscription="s", backout_queue="B")
    try:
        redrive("qm", source_config(qm), listener, None, print)  # type: ignore[arg-type]
        raise AssertionError("re-drive of a topic listener must be refused")
    except ConfigError as exc:
        assert "reads an IBM MQ topic" in str(exc)
