"""One driver per broker kind: everything the bridge can do with a source of that kind, declared in
one place by the kind's adapter package (like faust's transport drivers and kombu's
`Transport.implements`).

Core never imports an adapter: `DRIVER_KINDS` names each kind's driver as "module:attribute", and
`driver_for` imports it the first time that kind is used (then caches it), so a missing optional
library (pymqi) only matters where it is configured. A part a kind does not have is None, and the
function that needs it (`redrive_of`, `probe_for`, `replay_target`) says so, instead of each feature
keeping a registry of its own that a new kind could miss.

The parts other than `source` are loaders: calling one imports the part's module (a STOMP source
need not import the replay sender to consume). Each part's type is the feature's own (`Redrive`,
`ProbeFactory`, `ReplayTargetFactory`, `SourceAdapter`), so mypy checks every driver against them;
this module sits above those features (they never import it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from mqbridge.errors import ConfigError

if TYPE_CHECKING:
    from mqbridge.backlog.probe import BacklogProbe, ProbeFactory
    from mqbridge.config import SourceConfig
    from mqbridge.outbound.stored import Sender
    from mqbridge.resend.redrive import Redrive
    from mqbridge.resend.replay.identities import Renewal
    from mqbridge.resend.replay.runner import ReplayTarget, ReplayTargetFactory
    from mqbridge.source import Source, SourceAdapter, SourceContext

#: Source kinds (`[sources.X] kind`) and the driver of each, imported when used. Adding a kind is
#: one package declaring a `Driver` and one line here (docs/development.md, "Adding a broker kind").
DRIVER_KINDS: dict[str, str] = {
    "stomp": "mqbridge.listeners.stomp:DRIVER",
    "mq": "mqbridge.listeners.mq:DRIVER",
    "memory": "mqbridge.listeners.memory:DRIVER",
}


@dataclass(frozen=True)
class Driver:
    """What a broker kind provides. `source` is required; every other part is a loader of that part,
    or None where the kind has none."""

    kind: str
    #: The adapter class: builds a listener thread's Source (`mqbridge.source.open_source`).
    source: type[SourceAdapter]
    #: The backlog probe factory (`mqbridge.backlog`); None: the kind has no outside queue to read.
    backlog: Callable[[], ProbeFactory] | None = None
    #: The re-drive (`mqbridge redrive`); None: the kind has no backout queue to re-drive from.
    redrive: Callable[[], Redrive] | None = None
    #: The replay sender (`mqbridge replay`); None: a replay cannot send to this kind.
    replay: Callable[[], ReplayTargetFactory] | None = None
    #: The sender of stored results (`mqbridge.outbound.stored`): (source name, config, client name) ->
    #: a Sender on a connection of its own; None: the kind sends no stored results.
    results: Callable[[], Callable[[str, SourceConfig, str], Sender]] | None = None

    def parts(self) -> dict[str, bool]:
        """Which optional parts this kind has, by name (for errors naming the kinds that have one)."""
        return {"backlog": self.backlog is not None, "redrive": self.redrive is not None,
                "replay": self.replay is not None, "results": self.results is not None}


@cache
def driver_for(kind: str) -> Driver:
    """The driver of source kind `kind`, imported now and cached (ConfigError naming an unknown kind
    or a missing library)."""
    target = DRIVER_KINDS.get(kind)
    if target is None:
        raise ConfigError(f"unsupported source kind {kind!r} (known: {', '.join(sorted(DRIVER_KINDS))})")
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"source kind {kind!r} cannot be used: {exc}") from exc
    driver = getattr(module, attribute, None)
    if not isinstance(driver, Driver) or driver.kind != kind:
        raise ConfigError(f"source kind {kind!r}: {target} is not the Driver of kind {kind!r} ({driver!r})")
    return driver


def kinds_with(part: str) -> list[str]:
    """The registered kinds whose driver has `part` (imports each driver)."""
    found = []
    for kind in sorted(DRIVER_KINDS):
        try:
            if driver_for(kind).parts()[part]:
                found.append(kind)
        except ConfigError:
            continue
    return found


def open_source(context: SourceContext) -> Source:
    """A new, unconnected source for one listener thread, from its configured kind's driver."""
    return driver_for(context.source.kind).source.from_context(context)


def probe_for(name: str, config: SourceConfig) -> BacklogProbe | None:
    """The backlog probe of source `name`, its adapter module imported now; None if its kind has none
    (the memory broker has no outside queue) or the factory has none for this source (Artemis)."""
    load = driver_for(config.kind).backlog
    return load()(name, config) if load is not None else None


def stored_sender_of(kind: str) -> Callable[[str, SourceConfig, str], Sender] | None:
    """The stored-result sender factory of source kind `kind` (`mqbridge.outbound.stored`); None if it has none."""
    load = driver_for(kind).results
    return load() if load is not None else None


def redrive_of(kind: str) -> Redrive:
    """The re-drive of source kind `kind` (ConfigError if the kind cannot re-drive)."""
    load = driver_for(kind).redrive
    if load is None:
        raise ConfigError(f"the {kind} source cannot re-drive: a {kind} source has no backout queue to re-drive "
                          f"from (re-drive supports {', '.join(kinds_with('redrive'))})")
    return load()


def replay_target(kind: str, source_name: str, config: SourceConfig, destination: str, replay_id: str,
                  in_doubt_wait: float, renewal: Renewal | None = None) -> ReplayTarget:
    """The replay target of a source of kind `kind`, connected, sending rows with `renewal` (None: as
    landed, `mqbridge.resend.replay.identities.AS_LANDED`). A kind a replay cannot send to, or a destination
    that does not exist (a RabbitMQ /amq/queue/NAME, an IBM MQ queue), raises ConfigError: nothing is
    sent, nothing recorded."""
    load = driver_for(kind).replay
    if load is None:
        raise ConfigError(f"source {source_name!r}: replay cannot send to a {kind} source "
                          f"(it sends to {', '.join(kinds_with('replay'))} sources)")
    factory = load()
    if renewal is None:
        return factory(source_name, config, destination, replay_id, in_doubt_wait)
    return factory(source_name, config, destination, replay_id, in_doubt_wait, renewal=renewal)
