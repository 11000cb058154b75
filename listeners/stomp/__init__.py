"""STOMP source adapter (ActiveMQ, RabbitMQ, Artemis), on stomp.py.

`StompSource` (in `source`) is the public surface; the rest is its implementation:

* `frames` -- stomp.py's listener: MESSAGE frames to the listener thread, bounded waits for
  CONNECTED, receipts and ERROR frames; closing a connection for sure; the faster header parser

Importing this package imports stomp.py (a dependency of the bridge) and makes it parse frame
headers with `frames.parse_headers`.
"""

from __future__ import annotations

from mqbridge.listeners.stomp.source import (
    REQUEUE_COUNT,
    REQUEUE_ID,
    REQUEUE_REASON,
    REQUEUE_REDELIVERED,
    REQUEUE_TIMESTAMP,
    STAMP_GRACE,
    StompSource,
)

__all__ = ["REQUEUE_COUNT", "REQUEUE_ID", "REQUEUE_REASON", "REQUEUE_REDELIVERED", "REQUEUE_TIMESTAMP",
           "STAMP_GRACE", "StompSource"]
