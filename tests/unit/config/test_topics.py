"""`[[listeners]] topic` + `subscription`: a durable topic subscription instead of a queue —
exactly one of queue and topic, a subscription with every topic, what each broker needs, and
`{subscription}` in table templates."""

from __future__ import annotations

import pytest

from mqbridge.config.tables import render, template_problem
from tests.unit.config.texts import SOURCE, TYPES, error, parse

RABBIT = SOURCE + 'broker = "rabbitmq"\n'
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


def test_a_rabbitmq_topic_listener_stamps_into_its_subscription_queue() -> None:
    from mqbridge.config.topics import requeue_destination

    [listener] = parse(TYPES + RABBIT + topic_listener('in_flight = 2\nthreads = 2\n')).listeners
    assert listener.identity == "stamp"  # RabbitMQ's message-id is per delivery
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
     "listeners[0].topic: topic listeners (durable subscriptions) are for STOMP sources with broker activemq or "
     "rabbitmq; not for broker 'artemis'"),
    (TYPES + ACTIVEMQ + topic_listener() + topic_listener().replace("/topic/orders", "/topic/other"),
     "listeners[1].subscription: 'audit' is already the subscription of listeners[0] on this source"),
    (TYPES + ACTIVEMQ + topic_listener('identity = "stamp"\n'), "listeners[0].identity: stamp sends a copy"),
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
