"""STOMP source adapter (ActiveMQ, RabbitMQ, Artemis), on stomp.py.

`StompSource` (in `source`) is the public surface; the rest is its implementation:

* `frames` -- stomp.py's listener: MESSAGE frames to the listener thread, bounded waits for
  CONNECTED, receipts and ERROR frames; closing a connection for sure; the faster header parser
* `mapping` -- a MESSAGE frame's headers to a message (refused at the edge if they do not parse);
  the headers of the copies the adapter SENDs: given back or stamped (`mqbridge-requeue-*`),
  moved to a backout queue, a result to the reply-to

Importing this package imports stomp.py (a dependency of the bridge) and makes it parse frame
headers with `frames.parse_headers`.
"""

from __future__ import annotations

from mqbridge.listeners.stomp.mapping import (
    REQUEUE_COUNT,
    REQUEUE_ID,
    REQUEUE_REASON,
    REQUEUE_REDELIVERED,
    REQUEUE_TIMESTAMP,
)
from mqbridge.listeners.stomp.source import STAMP_GRACE, StompSource

__all__ = ["REQUEUE_COUNT", "REQUEUE_ID", "REQUEUE_REASON", "REQUEUE_REDELIVERED", "REQUEUE_TIMESTAMP",
           "STAMP_GRACE", "StompSource"]
