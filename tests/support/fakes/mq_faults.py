"""Faults injected into the fake queue manager per verb (`inject`): the next calls of a verb fail with
a reason; 2009 and the other breaking reasons end the connection (its unit of work backed out),
2003 backs the unit out. Mixed into `FakeQueueManagerServer`, whose attributes these are."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests.support.fakes import mq_cmqc as CMQC
from tests.support.fakes.mq_model import Connection, Fault, MQMIError

# Reasons after which the connection is gone (the unit of work is backed out by the QM).
BREAKING_REASONS = frozenset({CMQC.MQRC_CONNECTION_BROKEN, CMQC.MQRC_Q_MGR_STOPPING, CMQC.MQRC_CONNECTION_STOPPING,
                              CMQC.MQRC_HOST_NOT_AVAILABLE, CMQC.MQRC_Q_MGR_NOT_AVAILABLE})


class Faults:
    """Injected faults."""

    cond: threading.Condition
    faults: list[Fault]

    # the server's own (annotations only: a definition here would stand in front of them)
    _break: Callable[[Connection, int], None]
    _backout: Callable[[Connection], None]

    def inject(self, op: str, reason: int, *, after: int = 0, times: int = 1, queue: str | None = None,
               applied: bool = False, comp: int = CMQC.MQCC_FAILED) -> Fault:
        """Make the next `times` calls of `op` (after skipping `after` of them) fail with `reason`."""
        fault = Fault(op, reason, comp, queue, after, times, applied)
        with self.cond:
            self.faults.append(fault)
        return fault

    def _match_fault(self, conn: Connection | None, op: str, queue: str | None) -> Fault | None:
        for fault in self.faults:
            if fault.op != op or fault.fired >= fault.times or (fault.queue and fault.queue != queue):
                continue
            if fault.after > 0:
                fault.after -= 1
                continue
            fault.fired += 1
            return fault
        return None

    def _maybe_fault(self, conn: Connection | None, op: str, queue: str | None) -> None:
        fault = self._match_fault(conn, op, queue)
        if fault is not None:
            self._raise_fault(conn, fault)

    def _raise_fault(self, conn: Connection | None, fault: Fault) -> None:
        if conn is not None and fault.reason in BREAKING_REASONS:
            self._break(conn, fault.reason)
        if fault.reason == CMQC.MQRC_BACKED_OUT and conn is not None:
            self._backout(conn)
        raise MQMIError(fault.comp, fault.reason)
