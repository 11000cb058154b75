"""What RabbitMQ (3.10, STOMP plugin) does that the bridge's RabbitMQ defaults rest on, checked with a
bare stomp.py client and no bridge: a transaction's ACK is applied even when its SEND is refused;
a SEND's receipt outside a transaction means the queue took it, and a refused SEND gets none; a
foreign `user-id` header is refused; NACK requeues (one message with `client-individual`, every
unacknowledged one up to it with `client`); quorum queues count disconnects in `x-delivery-count`;
`message-id` is new on every delivery.

Queue limits are set with a policy (`rabbitmqctl set_policy` on one queue of the shared broker):
the 3.10 STOMP plugin takes `x-max-length` and `x-queue-type` from headers, but not `x-overflow`.
"""

from __future__ import annotations

import pytest

from tests.support.rabbit_plain import (
    BareStomp,
    bodies_of,
    declare,
    delete_queues,
    drain,
    queue_policy,
    unique_name,
)

pytestmark = pytest.mark.integration

#: A queue that holds one message and refuses any more (RabbitMQ closes the publisher's connection).
FULL_AT_ONE = {"max-length": 1, "overflow": "reject-publish"}


@pytest.mark.parametrize("receipts_before", [False, True], ids=["no-receipt-before", "receipted-send-before"])
def test_a_transaction_applies_its_ack_even_when_its_send_is_refused_by_a_full_queue(
        rabbitmq: tuple[str, int], receipts_before: bool) -> None:
    """Why the bridge no longer stamps (re-SEND a copy with an id and ACK the original in one
    transaction): RabbitMQ answers the COMMIT's receipt and applies the transaction's frames one by
    one; the SEND that `reject-publish` refuses does not stop the ACK after it. The original is
    gone and its copy was never queued: the message is lost. Nothing tells the client unless the
    connection had asked a receipt for an earlier SEND (RabbitMQ then confirms its publications
    and closes the connection at the refusal, after the COMMIT's receipt); otherwise it stays open
    with no ERROR at all."""
    full, source = unique_name("facts-full"), unique_name("facts-tx-source")
    with queue_policy(full, FULL_AT_ONE):
        # Given a queue that is full, and a message received on another queue (client-individual)
        filler = BareStomp(rabbitmq)
        assert filler.send(f"/queue/{full}", b"filler")
        filler.close()
        producer = BareStomp(rabbitmq)
        assert producer.send(f"/queue/{source}", b"acked") and producer.send(f"/queue/{source}", b"kept")
        producer.close()
        consumer = BareStomp(rabbitmq)
        if receipts_before:
            assert consumer.send(f"/queue/{source}.other", b"receipted")
        consumer.subscribe(f"/queue/{source}", "client-individual", {"prefetch-count": "1"})
        [message] = consumer.take(1)
        assert bytes(message.body) == b"acked"
        # When one transaction SENDs a copy to the full queue and ACKs the original
        consumer.conn.begin("tx")
        consumer.conn.send(f"/queue/{full}", b"copy", headers={"persistent": "true", "transaction": "tx"})
        consumer.conn.ack(message.headers["ack"], transaction="tx")
        consumer.conn.commit("tx", headers={"receipt": "commit"})
        # Then the COMMIT is receipted; the connection is closed only if it asked receipts before
        assert consumer.wait_receipt("commit"), consumer.errors
        assert consumer.wait_closed(timeout=3) is receipts_before
        assert consumer.errors == []
        consumer.close()
        # and the ACK was applied: the original is gone, and its copy is not on the full queue
        assert bodies_of(drain(rabbitmq, f"/queue/{source}")) == [b"kept"]
        assert bodies_of(drain(rabbitmq, f"/queue/{full}")) == [b"filler"]
    delete_queues(source, f"{source}.other")


def test_a_receipted_send_outside_a_transaction_to_a_full_queue_gets_no_receipt_and_the_connection_closes(
        rabbitmq: tuple[str, int]) -> None:
    """What `commit_mode = "receipted"` relies on to fail before any ACK: a SEND that
    `reject-publish` refuses is never receipted; RabbitMQ closes the connection (no ERROR frame
    reaches stomp.py first), and the queue does not hold the message."""
    full = unique_name("facts-full-receipt")
    with queue_policy(full, FULL_AT_ONE):
        client = BareStomp(rabbitmq)
        assert client.send(f"/queue/{full}", b"taken")
        # When a second message is sent with a receipt to the full queue
        refused = client.send(f"/queue/{full}", b"refused")
        # Then no receipt came; the connection is closed; only the first message is queued
        assert refused is False
        assert client.closed
        client.close()
        assert bodies_of(drain(rabbitmq, f"/queue/{full}")) == [b"taken"]


def test_a_receipted_send_to_a_durable_queue_with_room_is_on_the_queue_when_the_receipt_comes(
        rabbitmq: tuple[str, int]) -> None:
    """The other half: a RECEIPT for a persistent SEND outside a transaction means the durable
    queue took the message; another connection consumes it at once."""
    name = unique_name("facts-receipt")
    declare(rabbitmq, name)
    consumer = BareStomp(rabbitmq)
    consumer.subscribe(f"/queue/{name}", "client-individual")
    producer = BareStomp(rabbitmq)
    # When a message is sent and its receipt comes
    assert producer.send(f"/queue/{name}", b"receipted", {"test-header": "kept"})
    # Then the other connection gets it, the producer's header with it
    [message] = consumer.take(1, timeout=5)
    assert (bytes(message.body), message.headers["test-header"]) == (b"receipted", "kept")
    consumer.conn.ack(message.headers["ack"])
    producer.close()
    consumer.close()
    assert drain(rabbitmq, f"/queue/{name}", quiet=0.5) == []
    delete_queues(name)


def test_a_send_carrying_another_users_user_id_is_refused_and_the_value_under_another_header_is_taken(
        rabbitmq: tuple[str, int]) -> None:
    """Why a move drops a received `user-id` header: RabbitMQ validates it against the
    authenticated user. A SEND carrying another user's is refused (ERROR precondition_failed, the
    connection closed, nothing queued); the same message with the value under another header
    name is taken."""
    name = unique_name("facts-user-id")
    declare(rabbitmq, name)
    client = BareStomp(rabbitmq)
    # When a message carries the user-id of another user than the one logged in (guest)
    refused = client.send(f"/queue/{name}", b"foreign", {"user-id": "someone-else"})
    # Then it is refused with precondition_failed, and the connection is closed
    assert refused is False
    assert client.wait_closed()
    assert any(e.startswith("precondition_failed") and "someone-else" in e for e in client.errors), client.errors
    client.close()
    # When the same message carries the value under another header name, Then it is taken as it is
    again = BareStomp(rabbitmq)
    assert again.send(f"/queue/{name}", b"kept aside", {"mqbridge-original-user-id": "someone-else"})
    again.close()
    [message] = drain(rabbitmq, f"/queue/{name}")
    assert (bytes(message.body), message.headers["mqbridge-original-user-id"]) == (b"kept aside", "someone-else")
    assert "user-id" not in message.headers
    delete_queues(name)


def test_nack_with_client_individual_requeues_that_message_alone_and_it_comes_back_redelivered(
        rabbitmq: tuple[str, int]) -> None:
    """How the bridge gives back part of a unit on RabbitMQ (`ack_mode = "individual"`): a NACK
    requeues that one message at once; it comes back on the same subscription with
    `redelivered: true` (and a new message-id); the other unacknowledged messages stay where they
    are, neither redelivered nor acknowledged."""
    name = unique_name("facts-nack-individual")
    declare(rabbitmq, name)
    producer = BareStomp(rabbitmq)
    for body in (b"a", b"b", b"c"):
        assert producer.send(f"/queue/{name}", body)
    producer.close()
    client = BareStomp(rabbitmq)
    client.subscribe(f"/queue/{name}", "client-individual")
    got = client.take(3)
    assert [(bytes(f.body), f.headers["redelivered"]) for f in got] == [(b"a", "false"), (b"b", "false"),
                                                                       (b"c", "false")]
    # When b alone is NACKed
    client.conn.nack(got[1].headers["ack"])
    # Then b comes back, flagged redelivered, under a new message-id; nothing else comes
    [back] = client.take(1)
    assert (bytes(back.body), back.headers["redelivered"]) == (b"b", "true")
    assert back.headers["message-id"] != got[1].headers["message-id"]
    assert client.until_quiet(1.0) == []
    # and a and c are still held unacknowledged: ACK them and b, and the queue is empty
    for frame in (got[0], got[2], back):
        client.conn.ack(frame.headers["ack"])
    client.close()
    assert drain(rabbitmq, f"/queue/{name}", quiet=0.5) == []
    delete_queues(name)


def test_nack_with_client_acks_requeues_every_unacknowledged_message_up_to_it(rabbitmq: tuple[str, int]) -> None:
    """With `ack: client` RabbitMQ takes NACK, like ACK, as "multiple" (no header changes that):
    a NACK of the second of four unacknowledged messages requeues the first and the second (both
    come back redelivered), not the two after it. An ACK afterwards of the fourth acknowledges the
    third and the fourth but not the two redelivered (they were delivered after it). So a partial
    give-back with cumulative acks must ACK what lies before each NACK first."""
    name = unique_name("facts-nack-client")
    declare(rabbitmq, name)
    producer = BareStomp(rabbitmq)
    for body in (b"a", b"b", b"c", b"d"):
        assert producer.send(f"/queue/{name}", body)
    producer.close()
    client = BareStomp(rabbitmq)
    client.subscribe(f"/queue/{name}", "client")
    got = client.take(4)
    # When b is NACKed
    client.conn.nack(got[1].headers["ack"])
    # Then a and b come back, redelivered; c and d do not
    back = client.take(2)
    assert sorted((bytes(f.body), f.headers["redelivered"]) for f in back) == [(b"a", "true"), (b"b", "true")]
    assert client.until_quiet(1.0) == []
    # When d is ACKed, Then c and d are gone, a and b (delivered again after d) are not
    client.conn.ack(got[3].headers["ack"])
    client.close()
    assert sorted(bodies_of(drain(rabbitmq, f"/queue/{name}"))) == [b"a", b"b"]
    # When a is ACKed before b is NACKed, Then only b comes back
    producer = BareStomp(rabbitmq)
    for body in (b"e", b"f"):
        assert producer.send(f"/queue/{name}", body)
    producer.close()
    client = BareStomp(rabbitmq)
    client.subscribe(f"/queue/{name}", "client")
    e, f = client.take(2)
    client.conn.ack(e.headers["ack"])
    client.conn.nack(f.headers["ack"])
    [back_f] = client.take(1)
    assert (bytes(back_f.body), back_f.headers["redelivered"]) == (b"f", "true")
    client.conn.ack(back_f.headers["ack"])
    client.close()
    assert drain(rabbitmq, f"/queue/{name}", quiet=0.5) == []
    delete_queues(name)


def test_a_quorum_queue_counts_every_disconnect_in_x_delivery_count_without_any_nack(
        rabbitmq: tuple[str, int]) -> None:
    """Why the backout threshold on RabbitMQ uses the bridge's own count only: a quorum queue's
    `x-delivery-count` rises each time a consumer's connection ends with the message unacknowledged
    (a crash, kill -9, a cut connection), no NACK sent; the first delivery has no such header."""
    name = unique_name("facts-quorum-count")
    declare(rabbitmq, name, {"x-queue-type": "quorum"})
    queue = f"/amq/queue/{name}"  # /queue/NAME would declare it again as a classic queue: refused
    producer = BareStomp(rabbitmq)
    assert producer.send(queue, b"counted")
    producer.close()
    seen = []
    for _ in range(3):  # received, then the connection ends without ACK or NACK
        client = BareStomp(rabbitmq)
        client.subscribe(queue, "client-individual")
        [message] = client.take(1)
        seen.append((message.headers.get("x-delivery-count"), message.headers["redelivered"]))
        client.close()
    assert seen == [(None, "false"), ("1", "true"), ("2", "true")]
    assert bodies_of(drain(rabbitmq, queue)) == [b"counted"]
    delete_queues(name)


def test_rabbitmq_gives_a_message_a_new_message_id_on_every_delivery(rabbitmq: tuple[str, int]) -> None:
    """Why `message-id` cannot recognise a redelivery on RabbitMQ: it is a per-delivery tag
    (`T_<subscription>@@<session>@@<n>`), new after a NACK on the same connection and after a
    reconnect; what the producer set stays."""
    name = unique_name("facts-message-id")
    declare(rabbitmq, name)
    producer = BareStomp(rabbitmq)
    assert producer.send(f"/queue/{name}", b"one", {"producer-id": "p-1"})
    producer.close()
    ids = []
    client = BareStomp(rabbitmq)
    client.subscribe(f"/queue/{name}", "client-individual")
    [first] = client.take(1)
    client.conn.nack(first.headers["ack"])
    [second] = client.take(1)
    client.close()  # the connection ends with it unacknowledged
    client = BareStomp(rabbitmq)
    client.subscribe(f"/queue/{name}", "client-individual")
    [third] = client.take(1)
    client.conn.ack(third.headers["ack"])
    client.close()
    ids = [f.headers["message-id"] for f in (first, second, third)]
    assert len(set(ids)) == 3, ids
    assert {f.headers["producer-id"] for f in (first, second, third)} == {"p-1"}
    assert drain(rabbitmq, f"/queue/{name}", quiet=0.5) == []
    delete_queues(name)
