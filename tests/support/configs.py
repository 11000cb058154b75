"""Configuration text shared by tests that need a small, valid bridge configuration."""

from __future__ import annotations


def orders_config(head: str = "", listener: str = "", source: str = "") -> str:
    """A configuration with one type `orders` read by one STOMP listener on /queue/orders.

    `head` adds sections before the type (e.g. `[bridge]`, `[monitoring]`); `listener` adds keys
    to the `[[listeners]]` table (e.g. `backout_threshold = 0`); `source` adds keys to the
    `[sources.amq]` table (e.g. `password = "..."`).
    """
    return f"""{head}
[types.orders]
[sources.amq]
kind = "stomp"
{source}
[[listeners]]
source = "amq"
queue = "/queue/orders"
message_type = "orders"
backout_queue = "/queue/orders.backout"
{listener}
"""
