"""The records one queue keeps about its messages, shared by its listener threads and its source
adapters and kept across restarts of those threads (`mqbridge.source.QueueShared` holds one of
each): delivery counts where the broker keeps none (`DeliveryTracker`), the ids of deliveries in
doubt (`InDoubtLog`), and the failures of poison suspects (`PoisonLog`). The listener loop updates
them through one `mqbridge.loop.bookkeeping.DeliveryBook`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence


class DeliveryTracker:
    """Counts deliveries per message id for sources that do not report a delivery count
    (ActiveMQ over STOMP), shared by every listener thread of one queue.

    Entries are dropped when a message is committed; the map is bounded so a stream of
    messages that never come back cannot grow it without limit. Counts live in memory: after a
    restart of the bridge a message starts counting again (the broker's `redelivered` flag
    still shows it was seen before).

    Where the broker's message id is new on every delivery (RabbitMQ), an adapter also records the
    deliveries it gave back *unlanded*, by a key of their content (`gave_back_unlanded`), so that a
    redelivery with that content takes over the earlier delivery's id and count (`earlier_delivery`),
    and how often a SEND about a message ended in a connection the broker closed without a reason
    (`send_dropped`).
    """

    def __init__(self, max_entries: int = 1_000_000) -> None:
        self._lock = threading.Lock()
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._reasons: dict[str, str] = {}
        self._outages: dict[str, int] = {}
        self._max = max_entries
        self._given_back: OrderedDict[str, list[str]] = OrderedDict()  # content key -> msg ids, oldest first
        self._dropped: OrderedDict[str, int] = OrderedDict()  # content key -> SENDs ended by a dropped connection

    def delivered(self, msg_id: str) -> int:
        """Record one delivery and return how many the bridge has seen, this one included."""
        with self._lock:
            count = self._counts.pop(msg_id, 0) + 1
            self._counts[msg_id] = count
            while len(self._counts) > self._max:
                old, _ = self._counts.popitem(last=False)
                self._reasons.pop(old, None)
                self._outages.pop(old, None)
            return count

    def gave_back_in_outage(self, msg_ids: Iterable[str]) -> None:
        """These messages go back to the source because their sink is unavailable (an outage):
        the delivery this causes must not count towards their backout threshold."""
        with self._lock:
            for msg_id in msg_ids:
                self._outages[msg_id] = self._outages.get(msg_id, 0) + 1
            while len(self._outages) > self._max:  # ids that never come back (per-delivery ids)
                del self._outages[next(iter(self._outages))]

    def outage_give_backs(self, msg_id: str) -> int:
        """How many of the message's deliveries were given back for an outage (not to be counted
        towards its backout threshold); in memory, like the counts."""
        with self._lock:
            return self._outages.get(msg_id, 0)

    def failed(self, msg_id: str, reason: str) -> None:
        """Remember why the last delivery failed, for the backout queue's reason header."""
        with self._lock:
            if msg_id in self._counts:
                self._reasons[msg_id] = reason

    def last_reason(self, msg_id: str) -> str | None:
        with self._lock:
            return self._reasons.get(msg_id)

    def forget(self, msg_ids: Sequence[str]) -> None:
        """The messages left the source: stop counting them."""
        with self._lock:
            for msg_id in msg_ids:
                self._counts.pop(msg_id, None)
                self._reasons.pop(msg_id, None)
                self._outages.pop(msg_id, None)

    # -- brokers whose message ids are per delivery (RabbitMQ) ---------------------------------
    def gave_back_unlanded(self, deliveries: Iterable[tuple[str, str]]) -> None:
        """These deliveries, (content key, msg_id), go back to the source and never landed (given
        back, or a move whose commit failed). Their redelivery is recognised by its content key only
        to carry their id and count on: a delivery that may have landed is never recorded here, so a
        message with the same content that takes over one of these ids is never taken for landed."""
        with self._lock:
            for key, msg_id in deliveries:
                self._given_back.setdefault(key, []).append(msg_id)
                self._given_back.move_to_end(key)
            while len(self._given_back) > self._max:  # given back, then taken by another consumer
                self._given_back.popitem(last=False)

    @property
    def holds_given_back(self) -> bool:
        """Whether any delivery given back unlanded waits for its redelivery (else no key is needed)."""
        return bool(self._given_back)

    def earlier_delivery(self, key: str) -> str | None:
        """The id of the oldest delivery given back unlanded with content `key`, taken now (a
        redelivery takes it over), or None."""
        with self._lock:
            ids = self._given_back.get(key)
            if not ids:
                return None
            msg_id = ids.pop(0)
            if not ids:
                del self._given_back[key]
            return msg_id

    def send_dropped(self, key: str) -> int:
        """A SEND about the message with content `key` ended with the connection closed by the broker
        without a reason; how many of its SENDs did so, this one included."""
        with self._lock:
            count = self._dropped.pop(key, 0) + 1
            self._dropped[key] = count
            while len(self._dropped) > self._max:
                self._dropped.popitem(last=False)
            return count


class InDoubtLog:
    """Message ids of units of work whose commit outcome is unknown (IBM MQ 2009 on MQCMIT, no
    STOMP receipt).

    One per queue, shared between listener threads and restarts, so that a redelivered copy of an
    in-doubt message can be recognised. Bounded: the oldest ids are forgotten first.
    """

    def __init__(self, max_ids: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._max = max_ids
        self.units = 0
        self.messages = 0

    def record(self, msg_ids: Iterable[str]) -> None:
        with self._lock:
            self.units += 1
            for msg_id in msg_ids:
                self.messages += 1
                self._ids[msg_id] = None
                self._ids.move_to_end(msg_id)
            while len(self._ids) > self._max:
                self._ids.popitem(last=False)

    def __contains__(self, msg_id: object) -> bool:
        with self._lock:
            return msg_id in self._ids


class PoisonLog:
    """Message failures of one queue: how often each message failed on its own account, and which
    messages are *suspects*. One per queue, shared by its listener threads and kept across their
    restarts (not across a restart of the process).

    Suspects. A unit of work that can only be backed out whole (IBM MQ) and was backed out because
    of a message failure holds a culprit among its messages: those are suspects. While a queue has
    suspects, its listeners read units of one message (as the IBM MQ JMS classes effectively do
    after a backout), so a culprit fails alone and only its delivery count rises. Isolation ends
    when every suspect has left the queue (committed or moved), or when `budget` messages were read
    alone without meeting a suspect (another consumer took it): a backed-out unit comes back within
    as many reads as it had messages.

    Failures. Message failures (a preprocessor raised, a write result that counts towards a
    backout threshold; never an outage) are counted per message across redeliveries, for the
    listener's halt policy when no backout threshold will ever move the message.
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._suspects: OrderedDict[str, None] = OrderedDict()
        self._budget = 0
        self._failures: OrderedDict[str, int] = OrderedDict()
        self._max = max_entries
        self.isolated_reads = 0  # messages read alone while isolating (status, tests)

    # -- suspects (by message id) ----------------------------------------------------------------
    def suspect(self, msg_ids: Iterable[str], unit_size: int) -> None:
        """A unit of `unit_size` messages was backed out because of a message failure; `msg_ids`
        may have caused it."""
        with self._lock:
            for msg_id in msg_ids:
                self._suspects[msg_id] = None
                self._suspects.move_to_end(msg_id)
            while len(self._suspects) > self._max:
                self._suspects.popitem(last=False)
            if self._suspects:
                self._budget = max(self._budget, unit_size)

    @property
    def isolating(self) -> bool:
        """Read units of one message: the queue has suspects."""
        with self._lock:
            return bool(self._suspects)

    def is_suspect(self, msg_id: str) -> bool:
        with self._lock:
            return msg_id in self._suspects

    def read_alone(self, msg_id: str) -> None:
        """A message was read as a unit of one while isolating: a read that is not a suspect uses
        up one of the budget, and an exhausted budget ends isolation."""
        with self._lock:
            self.isolated_reads += 1
            if msg_id in self._suspects or not self._suspects:
                return
            self._budget -= 1
            if self._budget <= 0:
                self._suspects.clear()
                self._budget = 0

    def left_queue(self, msg_ids: Iterable[str]) -> None:
        """These messages left the queue (committed, moved): no longer suspects, no failures."""
        with self._lock:
            for msg_id in msg_ids:
                self._suspects.pop(msg_id, None)
            if not self._suspects:
                self._budget = 0

    # -- failure counts (by message key: the ledger identity, else the message id) ---------------
    def failed(self, key: str) -> int:
        """Count one message failure of `key`; returns its failures so far, this one included."""
        with self._lock:
            count = self._failures.pop(key, 0) + 1
            self._failures[key] = count
            while len(self._failures) > self._max:
                self._failures.popitem(last=False)
            return count

    def failures(self, key: str) -> int:
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, keys: Iterable[str]) -> None:
        """These messages left the queue: stop counting their failures."""
        with self._lock:
            for key in keys:
                self._failures.pop(key, None)
