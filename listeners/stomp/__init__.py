"""STOMP source adapter (ActiveMQ, RabbitMQ, Artemis), on stomp.py.

`DRIVER` declares what the bridge can do with a STOMP source (`mqbridge.drivers`): consume
(`StompSource`, in `source`: receiving a unit of work, committing it, giving it back), read the
backlog (`backlog`), re-drive a backout queue (`redrive`) and replay rows onto a queue (`replay`),
the last three imported when used. The rest is their implementation:

* `connection` -- the stomp.py connection and its subscription: connect within `connect_timeout`,
  SEND with a receipt, give messages back (NACK or a new subscription), close; stomp.py's errors
  wrapped once
* `commit` -- the commit of a unit: what it removes, moves and gives back, then the frames that do
  it, in a STOMP transaction or confirmed by receipts (`commit_mode`; RabbitMQ: receipts only, in
  two steps or in runs, never a copy to the source queue)
* `unit` -- bookkeeping of the messages received in one unit of work
* `mapping` -- a MESSAGE frame's headers to a message (refused at the edge if they do not parse);
  the headers of what the adapter SENDs: a copy given back (`mqbridge-requeue-*`), a move to a
  backout queue, a result to the reply-to; a message's content key (RabbitMQ redeliveries)
* `frames` -- stomp.py's listener: MESSAGE frames to the listener thread, bounded waits for
  CONNECTED, receipts and ERROR frames; closing a connection for sure; the faster header parser

Importing this package imports stomp.py (a dependency of the bridge) and makes it parse frame
headers with `frames.parse_headers`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mqbridge.drivers import Driver
from mqbridge.listeners.stomp.mapping import (
    REQUEUE_COUNT,
    REQUEUE_ID,
    REQUEUE_REASON,
    REQUEUE_REDELIVERED,
    REQUEUE_TIMESTAMP,
)
from mqbridge.listeners.stomp.source import POSSIBLE_DUPLICATES, StompSource

if TYPE_CHECKING:
    from mqbridge.backlog import ProbeFactory
    from mqbridge.listeners.stomp.stored import StompStoredSender
    from mqbridge.resend.redrive import Redrive
    from mqbridge.resend.replay import ReplayTargetFactory


def _backlog() -> ProbeFactory:
    from mqbridge.listeners.stomp.backlog import probe_for
    return probe_for


def _redrive() -> Redrive:
    from mqbridge.listeners.stomp.redrive import redrive
    return redrive


def _replay() -> ReplayTargetFactory:
    from mqbridge.listeners.stomp.replay import StompReplayTarget
    return StompReplayTarget


def _results() -> type[StompStoredSender]:
    from mqbridge.listeners.stomp.stored import StompStoredSender
    return StompStoredSender


DRIVER = Driver(kind="stomp", source=StompSource, backlog=_backlog, redrive=_redrive, replay=_replay,
                results=_results)

__all__ = ["DRIVER", "POSSIBLE_DUPLICATES", "REQUEUE_COUNT", "REQUEUE_ID", "REQUEUE_REASON", "REQUEUE_REDELIVERED",
           "REQUEUE_TIMESTAMP", "StompSource"]
