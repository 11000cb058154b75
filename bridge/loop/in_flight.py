"""A listener's units in flight: its source connections and the units of work they hold.

A listener thread reads a unit of work, hands it to the collector and, instead of waiting for its
results, reads the next unit on another connection of its own (`[[listeners]] in_flight`
connections, each with its own unit of work: a STOMP transaction, an IBM MQ syncpoint). So the
listener keeps receiving while Spark writes the bulk that holds its earlier units, and the next bulk
can grow past `threads x batch`. Units are finished (committed or given back) in the order they
were read, each on the connection it was read on; a connection holds one unit at a time.

What a listener holds can be asked from another thread (`Connections.holding`, for `mqbridge
where`): the unit being read, the units waiting for their results and the one being finished.
The listener thread only swaps references for it; the asking thread copies and scans.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from mqbridge.identity import answers_to
from mqbridge.loop.unit_plan import UnitResults
from mqbridge.message import Bulk, Message
from mqbridge.source import Source

log = logging.getLogger("mqbridge.listener")


@dataclass(frozen=True)
class Held:
    """A delivery the running bridge holds (`mqbridge.supervision.supervisor.Bridge.holding`)."""

    message: Message
    listener: str = ""  # the listener thread holding its unit ("": only the collector holds it)
    unit: str = ""  # that unit's stage: reading | pending | finishing (`Connections.holding`)
    bulk_id: str = ""  # the collector's bulk holding it ("": none, e.g. still being read)
    bulk_state: str = ""  # collecting | queued | writing (`BulkCollector.holding`)


@dataclass
class PendingUnit:
    """A unit of work handed to the collector, waiting for its results on its `source`."""

    source: Source
    results: UnitResults
    #: Waits for the results and finishes the unit (plan, then commit or give back) on `source`.
    finish: Callable[[], None]
    #: The messages read in the unit (for `Connections.holding`).
    batch: Sequence[Message] = ()

    @property
    def ready(self) -> bool:
        """Every result is in: finishing will not wait."""
        return self.results.wait(0)


class Connections:
    """The listener's sources and its pending units, oldest first."""

    def __init__(self, sources: Sequence[Source]) -> None:
        if not sources:
            raise ValueError("a listener needs at least one source connection")
        self.sources = list(sources)
        self.pending: deque[PendingUnit] = deque()
        self._last = -1  # the index `free` returned last
        self._reading: Sequence[Message] = ()  # the unit being read, not pending yet
        self._finishing: PendingUnit | None = None  # popped from `pending`, being finished

    def __iter__(self) -> Iterator[Source]:
        return iter(self.sources)

    def __len__(self) -> int:
        return len(self.sources)

    def free(self) -> Source | None:
        """A connection holding no unit, or None when every one does: the free one read least
        recently, so that each is read in turn (a broker dispatches to every consumer: what it sent
        to a connection that was never read again would wait there)."""
        held = {id(unit.source) for unit in self.pending}
        count = len(self.sources)
        for step in range(1, count + 1):
            index = (self._last + step) % count
            if id(self.sources[index]) not in held:
                self._last = index
                return self.sources[index]
        return None

    def add(self, unit: PendingUnit) -> None:
        self.pending.append(unit)

    def oldest(self) -> PendingUnit | None:
        return self.pending[0] if self.pending else None

    def pop_oldest(self) -> PendingUnit:
        return self.pending.popleft()

    @contextmanager
    def reading(self, batch: Sequence[Message]) -> Iterator[None]:
        """While the listener reads `batch` into a unit (ledger, preprocessors, collector)."""
        self._reading = batch
        try:
            yield
        finally:
            self._reading = ()

    def finish(self, unit: PendingUnit) -> None:
        """Finish `unit` (popped from `pending`): wait for its results, then commit or give it back."""
        self._finishing = unit
        try:
            unit.finish()
        finally:
            self._finishing = None

    def holding(self, key: str) -> list[tuple[str, Message]]:
        """The deliveries this listener holds whose msg_id or identity is `key`, each with its unit's
        stage: "reading" (not all handed to the collector yet), "pending" (waiting for results),
        "finishing" (its results awaited or in, being committed or given back). Called from another
        thread: it copies references and never waits for the listener."""
        if not key:
            return []
        finishing = self._finishing
        units = [("reading", self._reading)] + ([("finishing", finishing.batch)] if finishing else [])
        units += [("pending", unit.batch) for unit in _copy(self.pending)]
        return [(stage, m) for stage, batch in units for m in tuple(batch)
                if key == m.msg_id or answers_to(m.identity, key)]

    def finish_after_failure(self, finish: Callable[[PendingUnit], None], name: str) -> None:
        """The listener `name` ends on an error with units in flight on other connections: `finish`
        each (its messages may have landed: committing them avoids a redelivery); one that cannot be
        finished is given back (rolled back) on its connection."""
        while self.pending:
            unit = self.pending.popleft()
            try:
                finish(unit)
            except BaseException as exc:
                log.warning("%s: a unit of work in flight could not be finished after the listener failed (%s): "
                            "giving it back", name, exc)
                try:
                    unit.source.rollback()
                except Exception:
                    log.debug("%s: rollback failed", name, exc_info=True)


def _copy(units: deque[PendingUnit]) -> list[PendingUnit]:
    """`units` as a list, although the listener thread may change the deque meanwhile."""
    for _ in range(10):
        try:
            return list(units)
        except RuntimeError:  # "deque mutated during iteration": try again
            continue
    return []


def held(key: str, collected: Sequence[tuple[Message, Bulk, str]],
         threads: Sequence[tuple[str, Connections]]) -> list[Held]:
    """The deliveries whose msg_id or identity is `key`: each listener thread's (`threads`: its name
    and connections) with its unit's stage, and the bulk and its state where the collector holds it
    (`collected`, `BulkCollector.holding`). From copies of references: nothing here waits for a
    listener thread, and the collector's lock was held only to copy."""
    bulks = [(m, bulk.bulk_id, state) for m, bulk, state in collected]
    found: list[Held] = []
    for name, connections in threads:
        for unit, message in connections.holding(key):
            # The collector may hold a preprocessed copy: the same delivery by its ids.
            match = next((b for b in bulks if b[0] is message), None) or next(
                (b for b in bulks if (b[0].msg_id, b[0].identity) == (message.msg_id, message.identity)), None)
            if match is not None:
                bulks.remove(match)
            found.append(Held(message, name, unit, *(match[1:] if match else ("", ""))))
    return found + [Held(message, bulk_id=bulk_id, bulk_state=state) for message, bulk_id, state in bulks]
