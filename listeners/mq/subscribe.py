"""A topic listener's durable subscription on IBM MQ (`topic` + `subscription`, docs/topics.md).

MQSUB with MQSO_CREATE | MQSO_RESUME | MQSO_DURABLE | MQSO_MANAGED: the first connect creates the
subscription, every later one resumes it; the queue manager keeps the topic's publications for it in
a managed queue (made from the model queue the topic's MNGDDURMODQ names, by default
SYSTEM.DURABLE.MODEL.QUEUE) while the bridge is down. MQSUB returns a handle to that queue, opened
for input and browse (and inquire), which the listener reads exactly like a queue: MQGET under
syncpoint, BackoutCount, BOTHRESH/BOQNAME inquired on it (the model queue's, unless the listener
sets `backout_threshold`/`backout_queue`). Closing keeps the subscription (MQCO_KEEP_SUB); it is
removed only by the operator (DELETE SUB).

The same calls exist in pymqi and ibmmq (`SD.set_vs`, `Subscription.sub`, `.get`,
`.get_sub_queue`, `.close`). A subscription whose handle another connection holds fails with
MQRC_SUBSCRIPTION_IN_USE (2429): another bridge reads it, or the queue manager has not yet ended
this bridge's previous connection (kill -9): `SubscriptionInUseError`, retried, not a lost
connection.
"""

from __future__ import annotations

import logging
from typing import Any

from mqbridge.errors import SubscriptionInUseError
from mqbridge.listeners.mq.driver import quietly, reason_of, wrap

log = logging.getLogger(__name__)

MQRC_SUBSCRIPTION_IN_USE = 2429


def open_subscription(driver: Any, errors: tuple[type[BaseException], ...], qmgr: Any, where: str, topic: str,
                      subscription: str) -> tuple[Any, Any]:
    """(subscription, its managed queue): the durable subscription `subscription` to the topic
    string `topic`, created or resumed, and the queue handle MQSUB returned to read it through."""
    c = driver.CMQC
    sd = driver.SD()
    sd["Options"] = (c.MQSO_CREATE | c.MQSO_RESUME | c.MQSO_DURABLE | c.MQSO_MANAGED
                     | c.MQSO_FAIL_IF_QUIESCING)
    sd.set_vs("SubName", subscription.encode())
    sd.set_vs("ObjectString", topic.encode())
    sub = driver.Subscription(qmgr)
    try:
        sub.sub(sub_desc=sd)
    except errors as exc:
        if reason_of(exc) == MQRC_SUBSCRIPTION_IN_USE:
            raise SubscriptionInUseError(
                f"MQSUB of {where}: the durable subscription {subscription!r} is in use by another connection "
                "(another bridge reads it, or the queue manager has not yet ended this bridge's previous "
                "connection); retrying") from exc
        raise wrap(exc, f"MQSUB of the durable subscription {subscription!r} to topic string {topic!r} ({where})",
                   at_connect=True) from exc
    return sub, sub.get_sub_queue()


def close_subscription(driver: Any, subscription: Any) -> None:
    """Close the subscription's handle and its managed queue's, keeping the durable subscription."""
    keep = getattr(driver.CMQC, "MQCO_KEEP_SUB", 4)
    quietly(lambda: subscription.close(sub_close_options=keep, close_sub_queue=True))
