"""`[[listeners]] topic` + `subscription`: a durable topic subscription instead of a queue —
exactly one of queue and topic, a subscription with every topic, what each broker needs, and
`{subscription}` in table templates."""

from __future__ import annotations

import pytest

from mqbridge.config.tables import render, template_problem
from tests.unit.config.texts import SOURCE, TYPES, error, parse

RABBIT = SOURCE + 'broker = "rabbitmq"\n'
MQ = '[sources.qm]\nkind = "mq"\nqueue_manager = "QM1"\nconn_name = "mqhost(1414)"\n'
ACTIVEMQ = SOURCE + 'ack_mode = "individual"\n'


def topic_listener(extra: str = "", *, subscription: str | None = "audit", queue: str | None = None) -> str:
    lines = ['[[listeners]]', 'source = "amq"', 'topic = "/topic/orders"', 'message_type = "orders"',
             'backout_queue = "/queue/orders.backout"']
    if subscription is not None:
        lines.append(f'subscription = "{subscription}"')
    if queue is not None:
        lines.append(f'queue = "{queue}"')
    return "\n".join(lines) + "\n" + extra


def test_a_topic_listener_is_named_topic_at_subscription_and_holds_one_unit() -> None:
    cfg = parse(TYPES + ACTIVEMQ + topic_listener() + topic_listener(subscription="billing"))
    first, second = cfg.listeners
    assert (first.queue, first.source_destination, first.subscription) == ("/topic/orders@audit", "/topic/orders",
                                                                         "audit")
    assert second.queue == "/topic/orders@billing"
    assert first.in_flight == 1 and first.identity == "msg_id"


def test_a_rabbitmq_topic_listener_reads_its_subscription_queue_and_gives_back_by_nack() -> None:
    from mqbridge.config.topics import requeue_destination

    cfg = parse(TYPES + RABBIT + topic_listener('in_flight = 2\nthreads = 2\n'))
    [listener] = cfg.listeners
    assert listener.identity == "msg_id"  # RabbitMQ's message-id is per delivery: at-least-once, said at start
    assert cfg.sources["amq"].ack_mode == "individual"  # type: ignore[union-attr]  # NACK: no copy is ever sent
    assert requeue_destination("rabbitmq", listener.subscription, listener.queue) == \
        "/amq/queue/audit"
    assert requeue_destination("activemq", listener.subscription, "/topic/t") == "/topic/t"


@pytest.mark.parametrize("text, expected", [
    (TYPES + ACTIVEMQ + topic_listener(subscription=None),
     "listeners[0].subscription: required with topic: the name of the durable subscription"),
    (TYPES + ACTIVEMQ + topic_listener(queue="/queue/orders"), "listeners[0].queue: set queue or topic, not both"),
    (TYPES + ACTIVEMQ + '[[listeners]]\nsource = "amq"\nmessage_type = "orders"\nbackout_queue = "/queue/b"\n',
     "listeners[0].queue: required key is missing (or set topic and subscription instead)"),
    (TYPES + ACTIVEMQ + '[[listeners]]\nsource = "amq"\nqueue = "/queue/q"\nsubscription = "s"\n'
     'message_type = "orders"\nbackout_queue = "/queue/b"\n', "listeners[0].subscription: only with topic"),
    (TYPES + ACTIVEMQ + topic_listener(subscription="a b"), "listeners[0].subscription: must match the pattern"),
    (TYPES + ACTIVEMQ + topic_listener().replace("/topic/orders", "/queue/orders"),
     "listeners[0].topic: '/queue/orders' is not a STOMP topic: write /topic/NAME"),
    (TYPES + SOURCE + topic_listener(), 'listeners[0].topic: needs ack_mode = "individual" on its source'),
    (TYPES + ACTIVEMQ + topic_listener("threads = 2\n"), "listeners[0].threads: must be 1 on an ActiveMQ topic"),
    (TYPES + ACTIVEMQ + topic_listener("in_flight = 2\n"), "listeners[0].in_flight: must be 1 on an ActiveMQ"),
    (TYPES + ACTIVEMQ.replace('kind = "stomp"', 'kind = "stomp"\nbroker = "artemis"') + topic_listener(),
     "listeners[0].topic: topic listeners (durable subscriptions) are for IBM MQ sources and STOMP sources with "
     "broker activemq or rabbitmq; not for broker 'artemis'"),
    (TYPES + '[sources.amq]\nkind = "memory"\n' + topic_listener(),
     "listeners[0].topic: topic listeners (durable subscriptions) are for IBM MQ sources and STOMP sources with "
     "broker activemq or rabbitmq; not for a memory source"),
    (TYPES + ACTIVEMQ + topic_listener() + topic_listener().replace("/topic/orders", "/topic/other"),
     "listeners[1].subscription: 'audit' is already the subscription of listeners[0] on this source"),
    (TYPES + ACTIVEMQ + topic_listener('identity = "stamp"\n'), 'listeners[0].identity: "stamp" is no longer'),
    (TYPES.replace('bulk_size = "5MB"', 'table = "t_{subscription}"') + ACTIVEMQ
     + '[[listeners]]\nsource = "amq"\nqueue = "/queue/q"\nmessage_type = "orders"\nbackout_queue = "/queue/b"\n',
     "listeners[0].message_type: the table of type 'orders' has {subscription}, which only a topic listener has"),
])
def test_wrong_topic_listeners_are_refused_naming_the_key(text: str, expected: str) -> None:
    assert expected in error(text)


def test_a_topic_listener_needs_a_backout_queue_like_any_stomp_listener() -> None:
    text = TYPES + ACTIVEMQ + topic_listener().replace('backout_queue = "/queue/orders.backout"\n', "")
    assert "listeners[0].backout_queue: required for a stomp source" in error(text)


def test_subscription_is_a_table_placeholder() -> None:
    assert template_problem("{type}_{subscription}") is None
    assert render("{type}_{subscription}", source="amq", destination="/topic/orders", message_type="orders",
                  subscription="Audit.EU") == "orders_audit.eu"
    cfg = parse(TYPES.replace('bulk_size = "5MB"', 'table = "orders_{subscription}"') + ACTIVEMQ + topic_listener())
    assert cfg.types["orders"].table == "orders_{subscription}"


def test_topic_identities_are_scoped_by_subscription_and_queue_identities_are_not() -> None:
    from mqbridge.identity import scoped

    assert scoped("ID:1", "amq:audit") != scoped("ID:1", "amq:billing")
    assert scoped("ID:1", "") == "ID:1"  # a queue listener's ledger entries stay as they were


def test_the_durable_subscribe_headers_of_each_broker() -> None:
    from mqbridge.listeners.stomp.connection import durable_headers

    assert durable_headers("activemq", "audit") == {"activemq.subscriptionName": "audit"}
    assert durable_headers("rabbitmq", "audit") == {"durable": "true", "auto-delete": "false", "x-queue-name": "audit"}


def mq_topic_listener(extra: str = "", topic: str = "orders/eu", subscription: str = "orders.audit") -> str:
    return (f'[[listeners]]\nsource = "qm"\ntopic = "{topic}"\nsubscription = "{subscription}"\n'
            f'message_type = "orders"\n{extra}')


def test_an_ibm_mq_topic_listener_reads_a_topic_string_through_one_connection() -> None:
    # No backout_queue needed: as on a queue, the managed queue's BOQNAME (the model queue's) is used
    text = TYPES.replace('bulk_size = "5MB"', 'table = "orders_{subscription}"') + MQ
    first, second = parse(text + mq_topic_listener() + mq_topic_listener(
        'backout_queue = "ORDERS.BILLING.BACKOUT"\n', subscription="orders.billing")).listeners
    assert (first.queue, first.source_destination, first.subscription) == (
        "orders/eu@orders.audit", "orders/eu", "orders.audit")
    assert (first.threads, first.in_flight, first.identity, first.backout_queue) == (1, 1, "msg_id", None)
    assert second.backout_queue == "ORDERS.BILLING.BACKOUT"


@pytest.mark.parametrize("extra, topic, expected", [
    ("threads = 2\n", "orders/eu", "listeners[0].threads: must be 1 on an IBM MQ topic"),
    ("in_flight = 2\n", "orders/eu", "listeners[0].in_flight: must be 1 on an IBM MQ topic"),
    ("", "/topic/orders", "listeners[0].topic: '/topic/orders' is a STOMP topic; on IBM MQ write the topic string"),
    ("", "x" * 10241, "listeners[0].topic: is longer than 10240 bytes, the longest IBM MQ topic string"),
    ("selector = \"region = 'EU'\"\n", "orders/eu",
     "listeners[0].selector: not supported on an IBM MQ topic listener"),
])
def test_wrong_ibm_mq_topic_listeners_are_refused_naming_the_key(extra: str, topic: str, expected: str) -> None:
    assert expected in error(TYPES + MQ + mq_topic_listener(extra, topic=topic))
