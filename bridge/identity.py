"""A message's identity for the landing ledger, by the listener's `identity` rule.

Rules (`[[listeners]] identity`): "msg_id" (the source's message id), "header:NAME" (a header the
producer sets, e.g. its own business id: RabbitMQ's STOMP message-id changes per delivery, so it
cannot recognise a redelivery), "body-sha256" (hex digest of the body), "stamp" (the id the STOMP
adapter stamps on a copy of each message before it is landed: a stable id where the broker has
none; the adapter hands on stamped copies only, with the stamp as their msg_id).

A topic listener's identities are scoped by its durable subscription (`scoped`): one topic
message reaches every subscription with the same message id, and must land once in each.

Compute identities on the *original* message, as the listener received it, before the
preprocessor chain: a preprocessor may rewrite the body or headers (an envelope adds a timestamp),
which would give the same delivery a different identity each time.
"""

from __future__ import annotations

import hashlib

from mqbridge.errors import IdentityError
from mqbridge.message import Message

HEADER_PREFIX = "header:"


def scoped(identity: str, scope: str) -> str:
    """`identity` as the ledger keeps it for a listener whose identities are scoped (a topic
    listener: scope "SOURCE:SUBSCRIPTION"), unchanged for a queue listener (scope "")."""
    return f"{scope}|{identity}" if scope else identity


def identity_of(message: Message, rule: str) -> str:
    """The identity of `message` under `rule`. Raises IdentityError when the rule's header is
    missing (a per-message failure) and ValueError for a rule that is not one of the three (the
    configuration has validated it)."""
    if rule in ("msg_id", "stamp"):
        return message.msg_id
    if rule == "body-sha256":
        return hashlib.sha256(message.body).hexdigest()
    if rule.startswith(HEADER_PREFIX) and len(rule) > len(HEADER_PREFIX):
        name = rule[len(HEADER_PREFIX):]
        try:
            return message.headers[name]
        except KeyError:
            raise IdentityError(f"message {message.msg_id} has no header {name!r}, its identity "
                                f"(identity = {rule!r})") from None
    raise ValueError(f"{rule!r} is not an identity rule (msg_id, stamp, header:NAME, body-sha256)")
