"""The gates a listener thread waits at before it receives its next batch: an `IntakeGate` that
its owner opens and closes (the memory guard, `mqbridge.supervision.guard`; a sink's circuit breaker,
`mqbridge.bulks.breaker`), and the `AllOpenGate` of one listener, open while all of its gates are."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable


class IntakeGate:
    """Open: listeners read. Closed: listeners wait before their next batch."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.clear()

    def wait(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for the gate to be open; True if it is."""
        return self._open.wait(timeout)


class AllOpenGate(IntakeGate):
    """A gate that is open when all of its gates are (the memory guard's and a sink breaker's):
    what a listener thread waits at before its next batch. Its parts are opened and closed by their
    owners, never through it."""

    def __init__(self, gates: Iterable[IntakeGate]) -> None:
        super().__init__()
        self.gates = list(gates)

    def add(self, gate: IntakeGate) -> None:
        """Wait for `gate` too from now on (the sink of a type a classify hook routed messages to)."""
        if all(gate is not known for known in self.gates):
            self.gates = [*self.gates, gate]  # a new list: readers iterate a snapshot without a lock

    def open(self) -> None:
        raise TypeError("open the gates an AllOpenGate is made of")

    def close(self) -> None:
        raise TypeError("close the gates an AllOpenGate is made of")

    @property
    def is_open(self) -> bool:
        return all(gate.is_open for gate in self.gates)

    def wait(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for every gate to be open; True if they are."""
        deadline = time.monotonic() + timeout
        for gate in self.gates:
            if not gate.wait(max(0.0, deadline - time.monotonic())):
                return False
        return self.is_open
