"""One harness per adapter for the source contract (`tests.support.contract.SourceContract`).

A harness puts and inspects messages on one broker, makes sources for it and loses their
connections on request. What a broker cannot do is declared here, in `limitations` (contract case
name -> reason): the contract skips those cases with that reason, never silently.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import pytest
from pydantic import SecretStr

from mqbridge.config import StompSourceConfig
from mqbridge.listeners.memory import REASON_HEADER, MemoryBroker, MemorySource
from mqbridge.listeners.stomp import StompSource
from mqbridge.records import DeliveryTracker
from mqbridge.source import Source
from tests.support.fakes.mq_server import FakeQueueManagerServer
from tests.support.fakes.mq_testing import make_source, make_topic_source, unique
from tests.support.stomp_client import StompClient
from tests.support.waiting import wait_until


class Harness:
    """The contract's view of one broker; subclasses implement every method."""

    #: Contract cases that cannot hold on this broker, with the documented reason.
    limitations: ClassVar[dict[str, str]] = {}

    @classmethod
    def start(cls, request: pytest.FixtureRequest) -> Harness:
        """A harness for one test (`request` gives access to the broker fixtures)."""
        return cls()

    def new_queue(self) -> str:
        raise NotImplementedError

    def backout_queue(self, queue: str) -> str:
        return queue + ".backout"

    def put(self, queue: str, bodies: list[bytes]) -> None:
        """Put `bodies`, in order, and return once the broker has them."""
        raise NotImplementedError

    def bodies(self, queue: str) -> list[bytes]:
        """The bodies on `queue` that no unit of work holds, left in place."""
        raise NotImplementedError

    def moved(self, queue: str) -> list[tuple[bytes, str]]:
        """(body, reason) of each message on the backout queue of `queue`."""
        raise NotImplementedError

    def source(self, queue: str, *, cuttable: bool = False) -> Source:
        raise NotImplementedError

    def cut(self, source: Source) -> None:
        """Lose the connection of `source` (every cuttable one), as a network failure would."""
        raise NotImplementedError

    def cut_after_puts(self, source: Source) -> None:
        """Arrange that the next commit of `source` loses its connection after the commit's own
        puts reached the broker and before the unit is acknowledged."""
        self.cut(source)

    def close(self) -> None:
        raise NotImplementedError


class MemoryHarness(Harness):
    """The in-process broker of `mqbridge.listeners.memory`."""

    def __init__(self) -> None:
        self.broker = MemoryBroker(f"contract-{uuid.uuid4().hex[:8]}")
        self.sources: list[MemorySource] = []

    def new_queue(self) -> str:
        return unique("contract")

    def put(self, queue: str, bodies: list[bytes]) -> None:
        self.broker.put_many(queue, bodies)

    def bodies(self, queue: str) -> list[bytes]:
        return [m.body for m in self.broker.browse(queue)]

    def moved(self, queue: str) -> list[tuple[bytes, str]]:
        return [(m.body, m.headers[REASON_HEADER]) for m in self.broker.browse(self.backout_queue(queue))]

    def source(self, queue: str, *, cuttable: bool = False) -> Source:
        src = MemorySource("memory", self.broker, queue, backout_queue=self.backout_queue(queue))
        self.sources.append(src)
        return src

    def cut(self, source: Source) -> None:
        assert self.broker.cut() >= 1

    def close(self) -> None:
        for src in self.sources:
            src.close()


class MqFakeHarness(Harness):
    """The IBM MQ adapter on the fake queue manager (tests/support/fakes)."""

    limitations: ClassVar[dict[str, str]] = {
        "test_a_partial_commit_gives_back_only_the_returned_message":
            "IBM MQ commits or backs out a unit of work whole (supports_partial_commit = False; "
            "test_a_partial_commit_returns_the_given_messages_unchanged checks the refusal)",
    }

    def __init__(self) -> None:
        self.server = FakeQueueManagerServer(dead_letter_queue="SYSTEM.DEAD.LETTER.QUEUE")
        self.sources: list[Source] = []

    def new_queue(self) -> str:
        name = unique("CONTRACT")
        # BOTHRESH 0: the contract tests moves requested by the listener, like the other adapters'.
        self.server.define_queue(name, backout_threshold=0, backout_queue=self.backout_queue(name))
        self.server.define_queue(self.backout_queue(name))
        return name

    def backout_queue(self, queue: str) -> str:
        return queue + ".BACKOUT"

    def put(self, queue: str, bodies: list[bytes]) -> None:
        self.server.put_many(queue, bodies)

    def bodies(self, queue: str) -> list[bytes]:
        return self.server.queue(queue).bodies()

    def moved(self, queue: str) -> list[tuple[bytes, str]]:
        return [(m.data, m.prop("mqbridge_reason")) for m in self.server.queue(self.backout_queue(queue)).visible()]

    def source(self, queue: str, *, cuttable: bool = False) -> Source:
        src = make_source(self.server, queue, batch=10)
        self.sources.append(src)
        return src

    def cut(self, source: Source) -> None:
        self.server.break_connections()

    def close(self) -> None:
        for src in self.sources:
            src.close()
        assert self.server.disconnects_with_open_uow == [], "a disconnect committed an open unit of work"
        self.server.close()


class MqTopicHarness(MqFakeHarness):
    """The IBM MQ adapter reading a topic through a durable subscription on the fake queue manager:
    each "queue" is a topic string with one subscription, made at `new_queue` as the bridge makes
    it (published messages reach only existing subscriptions)."""

    limitations: ClassVar[dict[str, str]] = {
        **MqFakeHarness.limitations,
        "test_a_unit_of_work_is_hidden_from_other_consumers_until_commit_removes_it":
            "one connection at a time holds a durable subscription (another one's MQSUB gets "
            "MQRC_SUBSCRIPTION_IN_USE and is retried): there is no other consumer to hide a unit from",
    }

    def new_queue(self) -> str:
        topic = "contract/" + unique("T").split(".")[1].lower()
        self.server.define_queue(self.backout_queue(topic))
        made = self._source(topic)
        made.connect()
        made.close()
        return topic

    def backout_queue(self, queue: str) -> str:
        return queue.replace("/", ".").upper() + ".BACKOUT"

    def put(self, queue: str, bodies: list[bytes]) -> None:
        for body in bodies:
            self.server.publish(queue, body)

    def bodies(self, queue: str) -> list[bytes]:
        return self.server.subscription_queue(self._subscription(queue)).bodies()

    def source(self, queue: str, *, cuttable: bool = False) -> Source:
        src = self._source(queue)
        self.sources.append(src)
        return src

    def _source(self, topic: str) -> Source:
        # backout_threshold 0: the contract tests moves requested by the listener, like the queue harness's.
        return make_topic_source(self.server, topic, self._subscription(topic), batch=10, backout_threshold=0,
                                 backout_queue=self.backout_queue(topic))

    @staticmethod
    def _subscription(topic: str) -> str:
        return topic.replace("/", ".") + ".sub"


class StompHarness(Harness):
    """The STOMP adapter on a real broker, through a TCP proxy whose connections can be cut."""

    broker: ClassVar[str]  # StompSourceConfig.broker
    ack_mode: ClassVar[str]  # StompSourceConfig.ack_mode
    fixture: ClassVar[str]  # the session fixture giving the broker's (host, port)
    commit_mode: ClassVar[str | None] = None  # StompSourceConfig.commit_mode; None: the broker's default
    credentials: ClassVar[dict[str, Any]] = {}

    def __init__(self, address: tuple[str, int]) -> None:
        from tests.support.tcpproxy import TcpProxy

        self.address = address
        self.proxy = TcpProxy(address)
        self.sources: list[StompSource] = []
        self.queues: list[str] = []
        self.client = StompClient(address, self.credentials, browser=self.broker == "activemq")

    @classmethod
    def start(cls, request: pytest.FixtureRequest) -> Harness:
        return cls(request.getfixturevalue(cls.fixture))

    def new_queue(self) -> str:
        queue = f"/queue/test.contract.{uuid.uuid4().hex[:8]}"
        self.queues.append(queue)
        return queue

    def put(self, queue: str, bodies: list[bytes]) -> None:
        self.client.put_many(queue, bodies)

    def bodies(self, queue: str) -> list[bytes]:
        return [bytes(f.body) for f in self.client.browse(queue)]

    def moved(self, queue: str) -> list[tuple[bytes, str]]:
        return [(bytes(f.body), f.headers.get(REASON_HEADER, ""))
                for f in self.client.browse(self.backout_queue(queue))]

    def source(self, queue: str, *, cuttable: bool = False) -> Source:
        port = self.proxy.port if cuttable else self.address[1]
        cfg = StompSourceConfig.model_validate(dict(
            host=self.address[0], port=port, heartbeat=2.0, connect_timeout=3.0, broker=self.broker,
            ack_mode=self.ack_mode, commit_mode=self.commit_mode, **self.credentials))
        src = StompSource("stomp", cfg, queue, prefetch=10, tracker=self.tracker(), client_name="contract")
        self.sources.append(src)
        return src

    def cut(self, source: Source) -> None:
        assert self.proxy.cut() >= 1
        # Wait until stomp.py has noticed, so the next call fails at once instead of waiting
        # for a receipt that cannot come.
        frames = source._connection.frames  # type: ignore[attr-defined]
        wait_until(lambda: frames.disconnected.is_set(), 10, "stomp.py to see the cut")

    def tracker(self) -> DeliveryTracker:
        """The delivery records of a new source: its own (a process of its own)."""
        return DeliveryTracker()

    def cut_after_puts(self, source: Source) -> None:
        # The adapter SENDs (moves, copies given back) and waits for their receipts before it ACKs:
        # a cut at the first ACK lands inside the transaction (receipted: between the two).
        self.cut_at_ack(source, 1)

    def cut_at_ack(self, source: Source, call: int) -> None:
        """Cut the connection of `source` just before its `call`-th ACK write (1: the first)."""
        connection = source._connection  # type: ignore[attr-defined]
        ack = connection.ack  # the ACK frames of one call, in one write
        calls = [0]

        def cut_then_ack(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] == call:
                self.cut(source)
            return ack(*args, **kwargs)

        connection.ack = cut_then_ack

    def close(self) -> None:
        for src in self.sources:
            src.close()
        self.proxy.close()
        for queue in self.queues:
            self.client.drain(queue)
            self.client.drain(self.backout_queue(queue))


# RabbitMQ 3.10 classic queues (ARCHITECTURE.md): the STOMP message-id is per delivery and they send
# no x-delivery-count (quorum queues only, and it counts disconnects too), so a message that comes back
# has a new id and the bridge's count by id starts again, unless a commit gave it back unlanded (then
# the adapter knows it again by its content: mqbridge.listeners.stomp.source).
_RABBIT_NEW_ID = ("RabbitMQ: the STOMP message-id is per delivery; a unit given back whole (rollback) or with its "
                  "connection may have landed, so its redelivery is not taken for it")


class ActiveMqCumulative(StompHarness):
    broker, ack_mode, fixture = "activemq", "cumulative", "activemq"


class ActiveMqIndividual(StompHarness):
    broker, ack_mode, fixture = "activemq", "individual", "activemq"


# Without a transaction, a commit cut between its SENDs and its ACK cannot be undone (checked by
# check_a_receipted_commit_cut_after_its_sends_duplicates_and_loses_nothing instead).
_RECEIPTED = {"test_a_partial_commit_that_dies_gives_everything_back_once":
              'commit_mode = "receipted": moves and copies confirmed before the ACK stay; duplicates, never losses'}


class ActiveMqReceipted(ActiveMqCumulative):
    commit_mode = "receipted"
    limitations: ClassVar[dict[str, str]] = _RECEIPTED


class ActiveMqIndividualReceipted(ActiveMqIndividual):
    commit_mode = "receipted"
    limitations: ClassVar[dict[str, str]] = _RECEIPTED


class RabbitMqIndividual(StompHarness):
    """RabbitMQ's defaults: `ack_mode = "individual"` (give-backs by NACK), `commit_mode = "receipted"`
    (the only one RabbitMQ allows: every SEND confirmed before any ACK, the landed messages ACKed before
    the moves are SENT)."""

    broker, ack_mode, fixture = "rabbitmq", "individual", "rabbitmq"
    credentials: ClassVar[dict[str, Any]] = {"user": "guest", "password": SecretStr("guest"), "vhost": "/",
                                             "allow_plaintext_password": True}
    limitations: ClassVar[dict[str, str]] = {
        "test_a_redelivered_message_keeps_its_id_and_its_count_rises": _RABBIT_NEW_ID,
        "test_after_a_lost_connection_the_message_comes_back_with_its_id": _RABBIT_NEW_ID,
    }


class RabbitMqCumulative(RabbitMqIndividual):
    """`ack_mode = "cumulative"` (ack: client): the unit is settled in runs of ACKs and NACKs, after
    every SEND is confirmed; no copy is sent to the source queue."""

    ack_mode = "cumulative"
    limitations: ClassVar[dict[str, str]] = {**RabbitMqIndividual.limitations, **_RECEIPTED}
