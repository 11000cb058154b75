"""Would the bridge land what a replay sends? The identities replayed rows have at the target,
checked against the landing ledger before anything is sent, and `--new-identity`.

A bridge recognises a message by its listener's identity rule (`mqbridge.identity`) and drops one
whose identity the landing ledger still holds (kept for `dedupe_window`) as a redelivery. Rows
replayed to the queue they came from keep what made them recognisable, so a replay could send
every row and the bridge land none. Per rule, at the target:

- `msg_id`: a STOMP broker gives every SEND a new message id (ActiveMQ ignores a SEND's
  `message-id`, RabbitMQ refuses it), so a replayed message is new. On IBM MQ a replayed row keeps
  the MsgId it came with: recognised. `--new-identity`: the queue manager gives it a new MsgId.
- `header:NAME`: the producer's value, sent again: recognised. `--new-identity`: NAME gets a new
  value (`renewed_value`: the old one, the replay and the row), the old value goes in
  `mqbridge-replayed-NAME` (IBM MQ: property `mqbridge_replayed_NAME`).
- `body-sha256`: the body, sent byte-exact: recognised, and no replay can change that.

The new values are derived from the replay id and the row's key, not drawn at random: a row that a
resumed STOMP replay sends twice (the `--in-doubt-wait` limit) carries one identity, and the bridge
lands it once. For the same reason a renewed value found in the ledger was landed by this replay,
so the check leaves renewed rules out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mqbridge.errors import IdentityError
from mqbridge.identity import HEADER_PREFIX, Scope, identity_of, listener_scope, scoped
from mqbridge.message import Message
from mqbridge.resend.replay.rows import ReplayRow

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

#: Where a renewed header's old value travels: this prefix, then its name.
REPLAYED_PREFIX = "mqbridge-replayed-"
#: Identities looked up in the landing ledger per query.
LOOKUP_CHUNK = 500


@dataclass(frozen=True)
class Renewal:
    """What `--new-identity` changes on every replayed message: these headers get new values
    (`renewed_value`), and on IBM MQ the MsgId is left to the queue manager."""

    headers: frozenset[str] = frozenset()
    msg_id: bool = False

    def covers(self, rule: str) -> bool:
        """Whether messages sent with this renewal have a new identity under `rule`."""
        if rule.startswith(HEADER_PREFIX):
            return rule[len(HEADER_PREFIX):] in self.headers
        return rule == "msg_id" and self.msg_id


#: No renewal: a row is sent as it landed.
AS_LANDED = Renewal()


@dataclass(frozen=True)
class Delivered:
    """What a consumer of the target sees of a replayed row, as far as identities go: its headers
    (IBM MQ: message properties) and its message id (None: the target gives it a new one)."""

    headers: Mapping[str, str]
    msg_id: str | None


@dataclass(frozen=True)
class Reader:
    """A listener of the configuration that reads the replay's destination."""

    name: str  # the listener's name (its queue, or TOPIC@SUBSCRIPTION)
    rule: str  # its identity rule
    scope: Scope  # how the ledger keeps its identities


def renewed_value(old: str | None, replay_id: str, row_key: str) -> str:
    """A header's new value under `--new-identity`: the old one (if any), the replay and a digest
    of the row's key, so that each row of a replay has its own, the same on every run."""
    digest = hashlib.sha256(row_key.encode()).hexdigest()[:12]
    return f"{old}.replay-{replay_id}.{digest}" if old else f"replay-{replay_id}.{digest}"


def renew_headers(headers: dict[str, str], names: Iterable[tuple[str, str]], replay_id: str, row_key: str) -> None:
    """Give each header of `names` ((header, where its old value goes)) in `headers` a new value."""
    for name, keep_as in names:
        old = headers.get(name)
        headers[name] = renewed_value(old, replay_id, row_key)
        if old is not None:
            headers[keep_as] = old


def _same_queue(a: str, b: str, broker: str | None) -> bool:
    """Whether two destinations of one source name one queue (RabbitMQ: /queue/N is /amq/queue/N)."""
    if broker == "rabbitmq":
        a, b = (d.replace("/amq/queue/", "/queue/", 1) if d.startswith("/amq/queue/") else d for d in (a, b))
    return a == b


def readers_of(config: BridgeConfig, source: str, destination: str) -> list[Reader]:
    """The listeners of `config` that read `destination` of `source` (a queue, or a topic through a
    durable subscription), with the scope their identities have in the ledger."""
    broker = getattr(config.sources[source], "broker", None)
    return [Reader(listener.queue, listener.identity,
                   listener_scope(listener.source, listener.queue, listener.subscription, listener.identity))
            for listener in config.listeners
            if listener.source == source and _same_queue(listener.source_destination, destination, broker)]


def renewal_for(readers: Sequence[Reader]) -> Renewal:
    """The renewal that gives messages new identities under the rules of `readers` (`body-sha256`
    cannot be renewed)."""
    names = frozenset(r.rule[len(HEADER_PREFIX):] for r in readers if r.rule.startswith(HEADER_PREFIX))
    return Renewal(headers=names, msg_id=any(r.rule == "msg_id" for r in readers))


def identity_at(row: ReplayRow, delivered: Delivered, rule: str) -> str | None:
    """The identity the replayed `row` has under `rule` at the target, unscoped; None when it has a
    new one there (a new message id) or none (a missing header: the bridge moves such a message to
    its backout queue, it does not drop it)."""
    if rule == "msg_id":
        return delivered.msg_id
    message = Message(msg_id=delivered.msg_id or "", body=row.body, source="", destination="",
                      headers=dict(delivered.headers))
    try:
        return identity_of(message, rule)
    except IdentityError:
        return None


@dataclass
class Drops:
    """What the check found: rows a reader would drop as already landed, by reader."""

    checked: int = 0
    rows: int = 0
    by_reader: dict[str, int] = field(default_factory=dict)


def count_drops(rows: Iterable[ReplayRow], readers: Sequence[Reader], delivered: Callable[[ReplayRow], Delivered],
                published: Callable[[Sequence[str]], set[str]], *, skip: set[str]) -> Drops:
    """How many of `rows` (less those whose key is in `skip`: sent by this replay already) a reader
    would drop as already landed: their identity at the target, scoped as that reader keeps it (or,
    where an earlier version kept it unscoped, unscoped), is one `published` knows."""
    drops = Drops()
    pending: list[list[tuple[str, list[str]]]] = []  # per row: (reader, the forms of its identity asked)

    def settle() -> None:
        asked = [form for per_reader in pending for _, forms in per_reader for form in forms]
        landed = published(asked) if asked else set()
        for per_reader in pending:
            hit = [name for name, forms in per_reader if landed.intersection(forms)]
            for name in hit:
                drops.by_reader[name] = drops.by_reader.get(name, 0) + 1
            drops.rows += bool(hit)
        pending.clear()

    for row in rows:
        if row.key in skip:
            continue
        drops.checked += 1
        seen = delivered(row)
        per_reader = []
        for reader in readers:
            plain = identity_at(row, seen, reader.rule)
            if plain is not None:
                forms = [scoped(plain, reader.scope.prefix)] + ([plain] if reader.scope.unscoped_too else [])
                per_reader.append((reader.name, forms))
        pending.append(per_reader)
        if len(pending) >= LOOKUP_CHUNK:
            settle()
    settle()
    return drops


def refusal(drops: Drops, readers: Sequence[Reader], destination: str) -> str:
    """Why a replay is refused (`drops.rows` > 0), and the ways out."""
    rules = {r.name: r.rule for r in readers}
    who = "; ".join(f"listener {name} (identity = {rules[name]!r}): {count}"
                    for name, count in sorted(drops.by_reader.items()))
    lines = [f"{drops.rows} of the {drops.checked} rows to send would be dropped by the bridge as already landed: "
             f"the landing ledger still holds their identities (kept for dedupe_window) — {who}. "
             "Nothing was sent."]
    renewable = [rules[n] for n in drops.by_reader if rules[n] != "body-sha256"]
    if renewable:
        lines.append("To land them again as new messages, run the replay with --new-identity: "
                     f"{_renewal_text(renewable)}.")
    if any(rules[n] == "body-sha256" for n in drops.by_reader):
        lines.append("A listener with identity = 'body-sha256' knows a message by its body, which a replay sends "
                     f"byte-exact and cannot change: those rows land again from {destination} only after they leave "
                     "the ledger (dedupe_window), or through a listener with another identity rule.")
    return " ".join(lines)


def _renewal_text(rules: Iterable[str]) -> str:
    parts = []
    for rule in sorted(set(rules)):
        if rule == "msg_id":
            parts.append("the queue manager gives each message a new MsgId (the old one stays in the property "
                         "mqbridge_replayed_message_id)")
        else:
            name = rule[len(HEADER_PREFIX):]
            parts.append(f"header {name} gets a new value, the old one goes in {REPLAYED_PREFIX}{name}")
    return "; ".join(parts)
