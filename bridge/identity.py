"""A message's identity for the landing ledger, by the listener's `identity` rule.

Rules (`[[listeners]] identity`): "msg_id" (the source's message id), "header:NAME" (a header the
producer sets, e.g. its own business id), "body-sha256" (hex digest of the body). RabbitMQ's STOMP
message-id changes on every delivery, so there "msg_id" recognises no redelivery of a message that
landed: at-least-once where a crash falls between landing and the source commit (counted:
`mqbridge_possible_duplicates_total`); a producer's id ("header:NAME") makes it exactly-once.

Identities are kept in one ledger for every listener of a bridge, so those that two sources could
give alike are scoped (`listener_scope`, `scoped`):

- a topic listener's by its durable subscription: one topic message reaches every subscription
  with the same message id, and must land once in each;
- a queue listener's by its queue when the rule is "header:NAME" or "body-sha256": two queues whose
  producers number their messages alike (order 1001 on ORDERS and invoice 1001 on INVOICES), or
  that carry an identical body, are different messages. Unscoped, the second would be taken for a
  redelivery of the first, committed at the source and never landed. Broker message ids ("msg_id")
  are unique across queues and stay unscoped (so do the stamps of earlier builds' `identity =
  "stamp"`, ids of copies still on a queue, which the STOMP adapter hands on as their msg_id).

Builds before 2026-11-26 kept queue identities unscoped, so a queue listener's lookup also asks for
the unscoped form (`Scope.unscoped_too`): a message landed by such a build and redelivered after
the upgrade is still recognised. Those entries leave the ledger after `dedupe_window`; the lookup of
unscoped forms can go once no ledger written before 0.1.0 is in use.

Compute identities on the *original* message, as the listener received it, before the
preprocessor chain: a preprocessor may rewrite the body or headers (an envelope adds a timestamp),
which would give the same delivery a different identity each time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from mqbridge.errors import IdentityError
from mqbridge.message import Message

HEADER_PREFIX = "header:"


@dataclass(frozen=True)
class Scope:
    """How a listener's identities are kept in the ledger: `prefix` ("SOURCE:SUBSCRIPTION",
    "SOURCE:QUEUE" or "" for unscoped), and whether earlier versions kept them unscoped."""

    prefix: str = ""
    unscoped_too: bool = False


#: Identities kept as the rule gives them.
UNSCOPED = Scope()


def listener_scope(source: str, queue: str, subscription: str | None, rule: str) -> Scope:
    """The scope of a listener's identities (see the module's docstring)."""
    if subscription:
        return Scope(f"{source}:{subscription}")
    if rule.startswith(HEADER_PREFIX) or rule == "body-sha256":
        return Scope(f"{source}:{queue}", unscoped_too=True)
    return UNSCOPED


def scoped(identity: str, scope: str) -> str:
    """`identity` as the ledger keeps it under the scope prefix `scope` ("": unchanged)."""
    return f"{scope}|{identity}" if scope else identity


def unscoped(identity: str) -> str:
    """`identity` without its scope prefix (`scoped`)."""
    return identity.split("|", 1)[1] if "|" in identity else identity


def answers_to(identity: str | None, key: str) -> bool:
    """Whether a message the ledger knows as `identity` is the one an operator asks for by `key`:
    its identity, scoped or not (`mqbridge where` is given what the producer knows)."""
    return identity is not None and key in (identity, unscoped(identity))


def identity_of(message: Message, rule: str) -> str:
    """The identity of `message` under `rule`. Raises IdentityError when the rule's header is
    missing (a per-message failure) and ValueError for a rule that is not one of the three (the
    configuration has validated it)."""
    if rule == "msg_id":
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
    raise ValueError(f"{rule!r} is not an identity rule (msg_id, header:NAME, body-sha256)")
