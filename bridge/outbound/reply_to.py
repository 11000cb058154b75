"""Where results may go: a listener's `reply_to_allow` (glob patterns, `fnmatch` rules, case
sensitive). A result or report is sent with the bridge's own authority, so a producer must not be
able to name any destination it likes; one the list does not allow is not sent, is counted
(`Confirmations.not_allowed`, the `results_not_allowed` counter) and logged once per destination,
and the message is committed as if it had asked for nothing.

IBM MQ (reports to ReplyToQ at ReplyToQMgr). A pattern with a `/` matches "QMGR/QUEUE" (a blank
ReplyToQMgr is the connected queue manager); a pattern without one matches the queue on the
connected queue manager only, so `"RESULTS.*"` never opens another queue manager (`"*/RESULTS.*"`
does). Unset: only the connected queue manager (ReplyToQMgr blank or its name), any queue there.

STOMP (results to `reply-to`). A pattern matches the destination as the producer wrote it
(`/queue/results.*`, `/temp-queue/*`). Unset: every destination, since a STOMP destination is always
on the broker the listener is connected to (STOMP has no foreign broker to send to).
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from collections.abc import Sequence

log = logging.getLogger("mqbridge.reply_to")  # the name operators configure


class FirstTimes:
    """Which keys were met before: `first(key)` is True once per key (thread-safe)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def first(self, key: str) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True


class ReplyAllowList:
    """The reply destinations one listener may send results to (see the module docstring).
    `refusals` is shared by the listener's connections, so that each destination is logged once."""

    def __init__(self, patterns: Sequence[str] | None, *, listener: str, queue_manager: str | None = None,
                 refusals: FirstTimes | None = None) -> None:
        self.patterns = None if patterns is None else tuple(patterns)
        self.listener = listener
        self.queue_manager = queue_manager  # IBM MQ: the connected queue manager's name
        self.refusals = refusals if refusals is not None else FirstTimes()

    def allows(self, destination: str) -> bool:
        """A STOMP destination is allowed."""
        return self.patterns is None or any(fnmatch.fnmatchcase(destination, p) for p in self.patterns)

    def allows_mq(self, queue: str, queue_manager: str) -> bool:
        """An IBM MQ reply-to queue at `queue_manager` (blank: the connected one) is allowed."""
        own = (self.queue_manager or "").strip()
        qmgr = queue_manager.strip() or own
        if self.patterns is None:
            return qmgr == own
        return any(fnmatch.fnmatchcase(f"{qmgr}/{queue}", p) if "/" in p else (qmgr == own and
                                                                                fnmatch.fnmatchcase(queue, p))
                   for p in self.patterns)

    def refused(self, destination: str, what: str) -> None:
        """Log, the first time for this destination, that `what` was not sent to it."""
        if self.refusals.first(destination):
            allowed = ("reply_to_allow = [" + ", ".join(repr(p) for p in self.patterns) + "]"
                       if self.patterns is not None else "the default: the connected queue manager only")
            log.warning("%s: %s not sent: reply-to %s is not allowed by %s; the message is committed without "
                        "it (counted in results_not_allowed; logged once per destination)", self.listener, what,
                        destination, allowed)
