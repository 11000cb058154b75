"""IBM MQ source adapter, on IBM's `ibmmq` package or its predecessor `pymqi`.

`MqSource` (in `source`) is the public surface; the rest is its implementation:

* `ending` -- MQCMIT and its outcomes, moves to the backout or dead-letter queue, results (a mixin)
* `connect` -- MQCD/MQSCO/MQCNO, opening the input queue, inquiring BOTHRESH/BOQNAME/DEADQ/MAXUMSGS
* `driver` -- loading ibmmq or pymqi (only when a source is built), wrapping their errors once
* `get` -- MQGET under syncpoint: the wait, conversion, a buffer that grows, the message handles
* `mapping` -- MQMD fields and message properties to headers, the MQDLH
* `subscribe` -- a topic listener's durable subscription: MQSUB create/resume, its managed queue
* `poison` -- moving a message to the backout or dead-letter queue in the unit of work
* `unit` -- bookkeeping of the messages got in one unit of work

Importing this package does not import a driver: `MqSource` loads one when it is constructed.
"""

from __future__ import annotations

from mqbridge.listeners.mq.source import MqSource

__all__ = ["MqSource"]
