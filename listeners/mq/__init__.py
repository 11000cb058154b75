"""IBM MQ source adapter, on IBM's `ibmmq` package or its predecessor `pymqi`.

`DRIVER` declares what the bridge can do with an IBM MQ source (`mqbridge.drivers`): consume
(`MqSource`, in `source`), read the backlog (`backlog`: CURDEPTH), re-drive a backout queue
(`redrive`) and replay rows onto a queue (`replay`), the last three imported when used. The rest is
their implementation:

* `ending` -- MQCMIT and its outcomes, moves to the backout or dead-letter queue, results (a mixin)
* `connect` -- MQCD/MQSCO/MQCNO, opening the input queue, inquiring BOTHRESH/BOQNAME/DEADQ/MAXUMSGS
* `driver` -- loading ibmmq or pymqi (only when a source is built), wrapping their errors once
* `get` -- MQGET under syncpoint: the wait, conversion, a buffer that grows, the message handles
* `mapping` -- MQMD fields and message properties to headers, the MQDLH
* `subscribe` -- a topic listener's durable subscription: MQSUB create/resume, its managed queue
* `poison` -- moving a message to the backout or dead-letter queue in the unit of work
* `unit` -- bookkeeping of the messages got in one unit of work

Importing this package does not import an MQ library: `MqSource` loads one when it is constructed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mqbridge.drivers import Driver
from mqbridge.listeners.mq.source import MqSource

if TYPE_CHECKING:
    from mqbridge.backlog import ProbeFactory
    from mqbridge.resend.redrive import Redrive
    from mqbridge.resend.replay import ReplayTargetFactory


def _backlog() -> ProbeFactory:
    from mqbridge.listeners.mq.backlog import probe_for
    return probe_for


def _redrive() -> Redrive:
    from mqbridge.listeners.mq.redrive import redrive
    return redrive


def _replay() -> ReplayTargetFactory:
    from mqbridge.listeners.mq.replay import MqReplayTarget
    return MqReplayTarget


DRIVER = Driver(kind="mq", source=MqSource, backlog=_backlog, redrive=_redrive, replay=_replay)

__all__ = ["DRIVER", "MqSource"]
