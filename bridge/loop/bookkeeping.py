"""The delivery bookkeeping of one queue, as a listener thread keeps it: one object that the listener
tells what became of its messages, and that updates every record the queue keeps about them.

The records themselves (`DeliveryTracker`, `PoisonLog` in `mqbridge.records`) are shared by the
queue's listener threads and its source adapters, and kept across restarts of those threads. The
listener loop reaches them only through a `DeliveryBook`: callers say what happened (`failed`,
`given_back_in_outage`, `backed_out`, `left_queue`, ...), the book knows which records that changes
(the shape of kombu's `virtual.QoS`, which keeps a channel's unacked state behind `ack`/`reject`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from mqbridge.message import Message
from mqbridge.records import DeliveryTracker, PoisonLog


@dataclass(frozen=True)
class DeliveryRecords:
    """What the book knew of some deliveries at one moment: the state a unit's plan is decided on
    (`mqbridge.loop.unit_plan.plan_unit`)."""

    outage_give_backs: Mapping[str, int] = field(default_factory=dict)  # by msg_id
    last_reasons: Mapping[str, str] = field(default_factory=dict)  # by msg_id

    def counted(self, message: Message) -> int:
        """The deliveries of `message` that count towards the backout threshold (`DeliveryBook.counted`)."""
        return message.delivery_count - self.outage_give_backs.get(message.msg_id, 0)

    def last_reason(self, msg_id: str) -> str | None:
        """Why its last delivery failed, as far as the book knew."""
        return self.last_reasons.get(msg_id)


class DeliveryBook:
    """The delivery bookkeeping of one queue, for one listener thread: its `DeliveryTracker` (why
    deliveries failed, which were given back in an outage) and its `PoisonLog` (message failures,
    suspects of a backed-out unit)."""

    def __init__(self, tracker: DeliveryTracker, poison: PoisonLog) -> None:
        self.tracker = tracker
        self.poison = poison

    @staticmethod
    def key(message: Message) -> str:
        """What a message's failures are counted by: its ledger identity (stable across
        redeliveries on every broker), else its message id."""
        return message.identity or message.msg_id

    # -- what the listener asks ----------------------------------------------------------------
    @property
    def isolating(self) -> bool:
        """The queue has suspects: read units of one message (see `PoisonLog`)."""
        return self.poison.isolating

    def counted(self, message: Message) -> int:
        """The deliveries that count towards the backout threshold: those not given back because
        the sink was unavailable (`given_back_in_outage`)."""
        return message.delivery_count - self.tracker.outage_give_backs(message.msg_id)

    def last_reason(self, message: Message) -> str | None:
        """Why the message's last delivery failed (for the backout queue's reason header)."""
        return self.tracker.last_reason(message.msg_id)

    def records(self, messages: Iterable[Message]) -> DeliveryRecords:
        """What the book knows now of these messages' deliveries."""
        give_backs: dict[str, int] = {}
        reasons: dict[str, str] = {}
        for message in messages:
            msg_id = message.msg_id
            give_backs[msg_id] = self.tracker.outage_give_backs(msg_id)
            reason = self.tracker.last_reason(msg_id)
            if reason is not None:
                reasons[msg_id] = reason
        return DeliveryRecords(give_backs, reasons)

    # -- what happened -------------------------------------------------------------------------
    def read_alone(self, message: Message) -> None:
        """The message was read as a unit of one while the queue has suspects."""
        self.poison.read_alone(message.msg_id)

    def failed(self, message: Message, reason: str) -> None:
        """This delivery of the message failed: remember why (the backout queue's reason header)."""
        self.tracker.failed(message.msg_id, reason)

    def blamed(self, message: Message) -> int:
        """A failure was the message's own (a preprocessor raised, its write failed; never an
        outage): count it for the halt policy. Returns its failures so far, this one included."""
        return self.poison.failed(self.key(message))

    def given_back_in_outage(self, messages: Iterable[Message]) -> None:
        """These messages go back to the source because their sink is unavailable: the delivery
        this causes does not count towards their backout threshold."""
        self.tracker.gave_back_in_outage(m.msg_id for m in messages)

    def backed_out(self, suspects: Iterable[Message], unit_size: int) -> None:
        """A unit of `unit_size` messages was backed out whole because of a message failure; the
        culprit is among `suspects`: the queue's listeners read units of one until they left."""
        self.poison.suspect((m.msg_id for m in suspects), unit_size)

    def left_queue(self, messages: Sequence[Message]) -> None:
        """These messages left the queue (committed, moved aside): stop counting their deliveries
        and failures; they are no longer suspects."""
        self.tracker.forget([m.msg_id for m in messages])
        self.poison.left_queue(m.msg_id for m in messages)
        self.poison.forget(self.key(m) for m in messages)
