"""`[[listeners]]`: the model of one listener entry and the rules between listener entries and the
rest of the file (`listener_problems`, called by `mqbridge.config.schema.BridgeConfig`, which
re-exports these names).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from mqbridge.config.base import Duration, Model, parse_duration
from mqbridge.config.listener_rules import IDENTITY_RULES, STAMP_REFUSED, resolve_identity, selector_problems
from mqbridge.config.sources import SourceConfig
from mqbridge.config.topics import topic_problems
from mqbridge.errors import KeyedError, Loc

#: A durable subscription's name: it becomes an ActiveMQ client-id, a RabbitMQ queue name, an IBM MQ SubName.
SUBSCRIPTION_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
#: Deliveries before a message is moved aside, where neither the listener nor the queue says.
DEFAULT_BACKOUT_THRESHOLD = 3
#: Failures of one message, with no backout threshold to move it, before its listener halts.
DEFAULT_HALT_AFTER_FAILURES = 10


class PreprocessorRef(Model):
    """One step of a listener's chain. In TOML: `"name"` or `{name = "...", <option> = ...}`."""

    name: str = Field(min_length=1, description="Registered preprocessor name")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of the preprocessor")


def _preprocessors_from_toml(value: Any) -> Any:
    """TOML items (a name, or a table whose keys other than `name` are options) as PreprocessorRefs."""
    if not isinstance(value, list):
        return value
    out: list[Any] = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            out.append({"name": item})
        elif isinstance(item, dict):
            options = {k: v for k, v in item.items() if k != "name"}
            out.append({"name": item["name"], "options": options} if "name" in item else {"options": options})
        elif isinstance(item, PreprocessorRef):
            out.append(item)
        else:
            raise KeyedError([((index,), 'a preprocessor is a name or a table {name = "...", <options>}')])
    return out


class ListenerConfig(Model):
    """`[[listeners]]`: listener threads on one queue of one source, or on one topic through a
    durable subscription (`topic` + `subscription`, `mqbridge.config.topics`)."""

    source: str = Field(min_length=1, description="Name of a [sources.<name>] entry")
    queue: str = Field(default="", description="Queue (STOMP destination or MQ queue name); for a `topic` "
                       "listener it is set to TOPIC@SUBSCRIPTION, the listener's name in metrics and commands")
    topic: str | None = Field(default=None, min_length=1, description="Instead of `queue`: a topic (STOMP "
                              "/topic/NAME, IBM MQ topic string) read through the durable subscription "
                              "`subscription` (docs/topics.md)")
    subscription: str | None = Field(default=None, pattern=SUBSCRIPTION_NAME, description="With `topic`: the "
                                     "durable subscription's name, kept by the broker while the bridge is down "
                                     "(ActiveMQ client-id and subscription name, RabbitMQ queue name, IBM MQ "
                                     "SubName)")
    threads: int | None = Field(default=None, ge=1, le=64, description="Listener threads on this queue: a fixed "
                                "count; unset: adaptive, from 1 up to threads_max, chosen while it runs from the "
                                "committed rate (docs/performance.md#adaptive-concurrency)")
    threads_max: int = Field(default=8, ge=1, le=64, description="With threads unset: the most threads the adaptive "
                             "count takes (connections to the broker: up to threads_max x in_flight)")
    batch: int = Field(default=500, ge=1, le=100_000, description="Maximum messages per unit of work")
    in_flight: int = Field(default=2, ge=1, le=16, description="Units of work one listener thread holds at once, "
                           "each on a source connection of its own: it reads the next while Spark writes the "
                           "bulk holding the earlier ones (connections to the broker: threads x in_flight)")
    wait: Duration = Field(default=parse_duration("1s"), description="Longest a unit of work being filled waits for "
                           "more messages after its first; unset: a quarter of its type's `latency`, at most this "
                           "1s (a unit that waits longer holds its first message past the latency target)")
    message_type: str = Field(min_length=1, description="Default message type (a [types.<name>] entry)")
    preprocessors: Annotated[list[PreprocessorRef], BeforeValidator(_preprocessors_from_toml)] = Field(
        default_factory=list, description="Ordered preprocessor chain")
    plugins: Literal["follow", "pinned"] | Annotated[int, Field(ge=1)] = Field(
        default="follow", description="Which plugin generation its chain runs (docs/plugins.md#pinning-and-a-canary): "
        "follow (every reload), pinned (the one it started with, until the bridge restarts)"
        ", or a number N (follows reloads up to generation N and stays there; generation 1 is "
        "the one loaded at start)")
    plugins_canary: bool = Field(default=False, description="A reload is swapped in on this listener first and "
                                 "promoted to the others after plugins_canary_units units of work and "
                                 "plugins_canary_time without a message the new generation raised on; rolled "
                                 "back at the first such message (needs plugins = \"follow\")")
    plugins_canary_units: int = Field(default=10, ge=1, description="With plugins_canary: units of work the "
                                      "new generation must get through before it is promoted")
    plugins_canary_time: Duration = Field(default=parse_duration("60s"), description="With plugins_canary: "
                                          "time on the new generation before it is promoted")
    backout_threshold: int | None = Field(
        default=None, ge=0, description="Deliveries before a message is moved to the backout queue; 0 disables; "
                                        f"unset: {DEFAULT_BACKOUT_THRESHOLD} (IBM MQ: the queue's BOTHRESH)")
    backout_queue: str | None = Field(default=None, description="Where poison messages go; MQ: None uses BOQNAME")
    halt_after_failures: int = Field(
        default=DEFAULT_HALT_AFTER_FAILURES, ge=1,
        description="With no backout threshold (backout_threshold = 0, IBM MQ BOTHRESH(0)): a message that "
                    "failed this many times halts its listener (critical log, /healthz 503) instead of looping")
    prefetch: int | None = Field(default=None, ge=1, description="STOMP prefetch; None: batch")
    confirm: Literal["off", "reply-to"] = Field(
        default="off", description="STOMP: `reply-to` sends a message with a `reply-to` header a result message "
        "(landed or backout) in the commit's transaction; IBM MQ answers the MQMD Report options instead")
    reply_to_allow: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, description="Glob patterns of the reply-to destinations results may go to (IBM MQ: QMGR/QUEUE, "
        "or QUEUE on the connected queue manager); None: STOMP any, IBM MQ the connected queue manager only")
    selector: str | None = Field(default=None, description="Only messages matching this JMS selector (\"region = "
                                 "'EU'\"): ActiveMQ/Artemis, IBM MQ (SelectionString); None: every message")
    outbox_allow: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, description="Glob patterns of the destinations its preprocessors may emit derived messages to "
        "(mqbridge.emit; STOMP destination or IBM MQ queue); None: emitting is refused")
    identity: str = Field(default="auto", description="What recognises a redelivered message: msg_id, "
                          "header:NAME (a producer's id), body-sha256; auto: msg_id (RabbitMQ's is per delivery: "
                          "at-least-once there, counted; header:NAME makes it exactly-once)")

    @model_validator(mode="after")
    def _queue_or_topic(self) -> ListenerConfig:
        if self.topic is None:
            if self.subscription is not None:
                raise KeyedError([(("subscription",), "only with topic (a queue has no subscriptions)")])
            if not self.queue:
                raise KeyedError([(("queue",), "required key is missing (or set topic and subscription instead)")])
            return self
        if self.subscription is None:
            raise KeyedError([(("subscription",), "required with topic: the name of the durable subscription "
                                                  "the broker keeps the topic's messages in while the bridge is down")])
        name = f"{self.topic}@{self.subscription}"
        if self.queue not in ("", name):  # a dumped and re-read entry has queue = its name already
            raise KeyedError([(("queue",), "set queue or topic, not both")])
        self.queue = name
        if "in_flight" not in self.model_fields_set:
            self.in_flight = 1  # one connection: ActiveMQ allows one per durable subscription (client-id)
        if self.threads is None:
            self.threads = 1  # fixed, for the same reason: not adaptive
        return self

    @model_validator(mode="after")
    def _threads_max_only_adaptive(self) -> ListenerConfig:
        if "threads_max" in self.model_fields_set and self.threads is not None and self.topic is None:
            raise KeyedError([(("threads_max",), f"is the adaptive thread count's ceiling, and threads = "
                                                 f"{self.threads} fixes the count: leave threads unset to have it "
                                                 "adapt, or drop threads_max")])
        return self

    @property
    def adaptive_threads(self) -> bool:
        """Whether the bridge chooses this entry's thread count while it runs (`threads` unset)."""
        return self.threads is None

    @property
    def start_threads(self) -> int:
        """The threads it starts with: the fixed count, or 1 for an adaptive one."""
        return self.threads if self.threads is not None else 1

    @property
    def source_destination(self) -> str:
        """What the source reads: the topic, or the queue."""
        return self.topic if self.topic is not None else self.queue

    @field_validator("identity")
    @classmethod
    def _check_identity(cls, value: str) -> str:
        if value in IDENTITY_RULES or (value.startswith("header:") and value[len("header:"):].strip()):
            return value
        if value == "stamp":
            raise ValueError(STAMP_REFUSED)
        raise ValueError(f"{value!r} is not an identity rule (auto, msg_id, header:NAME or body-sha256)")




def listener_problems(listeners: Sequence[ListenerConfig], sources: Mapping[str, SourceConfig],
                      types: Mapping[str, object]) -> list[tuple[Loc, str]]:
    """What is wrong between the `[[listeners]]` entries and the sources and types they name."""
    problems: list[tuple[Loc, str]] = []
    seen: dict[tuple[str, str, str], int] = {}
    subscriptions: dict[tuple[str, str], int] = {}
    for index, listener in enumerate(listeners):
        where: Loc = ("listeners", index)
        source = sources.get(listener.source)
        problems.extend(_entry_problems(listener, source, sources, types, where))
        if listener.topic is not None:
            problems.extend(topic_problems(listener, source, types, where))
            # One subscription name is one durable subscription (one ActiveMQ client-id) per broker.
            first_sub = subscriptions.setdefault((listener.source, listener.subscription or ""), index)
            if first_sub != index:
                problems.append(((*where, "subscription"), f"{listener.subscription!r} is already the "
                                 f"subscription of listeners[{first_sub}] on this source"))
        # Listeners with different selectors may share a queue: each takes its own messages.
        first = seen.setdefault((listener.source, listener.queue, listener.selector or ""), index)
        if first != index:
            problems.append((where, f"same source, queue and selector as listeners[{first}]; raise its threads"))
        if listener.plugins_canary and listener.plugins != "follow":
            problems.append(((*where, "plugins_canary"), f"needs plugins = \"follow\" (it is {listener.plugins!r}): "
                             "a canary takes each reload first"))
        plugins_of = next((i for i, o in enumerate(listeners[:index]) if (o.source, o.queue) ==
                           (listener.source, listener.queue) and (o.plugins, o.plugins_canary) !=
                           (listener.plugins, listener.plugins_canary)), None)
        if plugins_of is not None:
            problems.append(((*where, "plugins"), f"plugins and plugins_canary must equal those of "
                             f"listeners[{plugins_of}]: listeners on one queue share its chain's generation"))
        # They share one name (source:queue) for control, counters and metrics: one thread count.
        sharing = next((i for i, o in enumerate(listeners[:index]) if (o.source, o.queue) ==
                        (listener.source, listener.queue) and o.threads != listener.threads), None)
        if sharing is not None:
            problems.append(((*where, "threads"), f"must equal listeners[{sharing}].threads: listeners on one "
                             "queue share its name (source:queue) for control, counters and metrics"))
    return problems


def _entry_problems(listener: ListenerConfig, source: SourceConfig | None, sources: Mapping[str, SourceConfig],
                    types: Mapping[str, object], where: Loc) -> list[tuple[Loc, str]]:
    """What is wrong with one entry against its source and type."""
    problems: list[tuple[Loc, str]] = []
    if source is None:
        problems.append(((*where, "source"), f"unknown source {listener.source!r} "
                                             f"(configured: {', '.join(sources)})"))
    if listener.message_type not in types:
        problems.append(((*where, "message_type"), f"unknown message type {listener.message_type!r} "
                                                   f"(configured: {', '.join(types)})"))
    # Sources whose listener loop counts deliveries need a queue to move poison messages to.
    if source is not None and source.kind in ("stomp", "memory") and listener.backout_threshold != 0 \
            and not listener.backout_queue:
        problems.append(((*where, "backout_queue"), f"required for a {source.kind} source when "
                                                    "backout_threshold > 0 (or set backout_threshold = 0)"))
    if listener.confirm != "off" and source is not None:
        if source.kind != "stomp":
            problems.append(((*where, "confirm"), f"only for STOMP sources; a {source.kind} source "
                             + ("answers each message's MQMD Report options (MQRO_PAN, MQRO_NAN) itself"
                                if source.kind == "mq" else "has no reply-to")))
        elif getattr(source, "commit_mode", None) == "receipted" and getattr(source, "broker", None) != "rabbitmq":
            # RabbitMQ has no transaction to send it in (config.sources.RABBITMQ_NOT_TRANSACTIONAL): there a
            # result is confirmed before the ACK, and sent twice if the bridge dies in between.
            problems.append(((*where, "confirm"), "needs commit_mode = \"transactional\": a result sent "
                             "outside the ACKs' transaction could be sent twice for one message"))
    if listener.reply_to_allow is not None and source is not None and source.kind != "mq" \
            and listener.confirm == "off":
        problems.append(((*where, "reply_to_allow"), 'only used with confirm = "reply-to" (STOMP) or by an '
                                                     "IBM MQ source's reports"))
    # MQ_Q_NAME_LENGTH: an IBM MQ queue name is 1 to 48 bytes (the queue manager would say 2085).
    if source is not None and source.kind == "mq" and listener.topic is None and len(listener.queue.encode()) > 48:
        problems.append(((*where, "queue"), f"{listener.queue!r} is longer than 48 bytes, the longest "
                                            "IBM MQ queue name"))
    if listener.topic is None and "{subscription}" in str(getattr(types.get(listener.message_type), "table", "")):
        problems.append(((*where, "message_type"), f"the table of type {listener.message_type!r} has "
                         "{subscription}, which only a topic listener has"))
    resolve_identity(listener)
    problems.extend(selector_problems(listener.selector, source, where))
    return problems


#: With `wait` unset, a unit being filled waits at most this share of its type's latency target: the
#: target counts from a message's receipt to its bulk's write starting, and the unit's wait comes first.
#: At half the quick start's steady rate (8 threads sharing 2,000-3,500 msg/s, units of 500) a unit
#: waited up to the whole 1 s default: receipt-to-commit p99 2.5 s against a 1 s target, 1.5 s with
#: this share (medians of five runs each, docs/performance.md).
FILL_SHARE = 0.25


def unit_wait(listener: ListenerConfig, latency: float | None) -> float:
    """The seconds a unit of `listener` waits to fill: its `wait` when set, else `FILL_SHARE` of its
    type's `latency` (None: the type is unknown here), at most the default `wait`."""
    if "wait" in listener.model_fields_set or latency is None:
        return listener.wait
    return min(listener.wait, FILL_SHARE * latency)
