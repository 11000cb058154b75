"""What one listener thread is given (`ListenerSpec`, from its `[[listeners]]` entry) and what the
control thread and status page see of it (`ListenerState`): kept apart from the thread's loop
(`mqbridge.loop.listener`, which re-exports both)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mqbridge.config import DEFAULT_HALT_AFTER_FAILURES
from mqbridge.identity import UNSCOPED, Scope


@dataclass
class ListenerSpec:
    """What one listener thread needs from the configuration."""

    name: str  # e.g. "amq:/queue/orders#1"
    source_name: str
    queue: str
    batch: int
    wait: float
    message_type: str
    backout_threshold: int
    backout_queue: str | None
    identity: str = "msg_id"  # the `identity` rule, for the landing ledger
    halt_after_failures: int = DEFAULT_HALT_AFTER_FAILURES  # the halt policy (no backout threshold)
    outbox_allow: tuple[str, ...] | None = None  # where preprocessors may emit to (`mqbridge.outbound.outbox`)
    #: Part of each identity in the ledger: a topic listener's "SOURCE:SUBSCRIPTION" (one topic
    #: message lands once per subscription), a queue's "SOURCE:QUEUE" for producer-given identities
    #: (`mqbridge.identity.listener_scope`).
    identity_scope: Scope = UNSCOPED


@dataclass
class ListenerState:
    """What the control thread and the status page see of a listener thread."""

    phase: str = "starting"  # starting | connecting | receiving | processing | paused | stopped | failed
    heartbeat: float = field(default_factory=time.monotonic)
    #: Monotonic time of the last message or connect (0: neither yet): `run --until-idle` counts from
    #: here, so a thread that just reconnected (a broker restart) gets the whole idle time to receive.
    last_activity: float = 0.0
    connected_once: bool = False
    last_error: str = ""
    units: int = 0
