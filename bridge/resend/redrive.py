"""Re-drive: move messages from a listener's backout queue back to its source queue, keeping the
identity the landing ledger knows them by (`mqbridge redrive`). What is common to every source
kind: the request, the report, which listener a name means. A kind's re-drive is a part of its
driver (`mqbridge.drivers.redrive_of`), imported only when used."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mqbridge.errors import ConfigError

if TYPE_CHECKING:
    from mqbridge.config import ListenerConfig, SourceConfig

@dataclass(frozen=True)
class RedriveRequest:
    """What to move: at most `limit` messages, `batch` per unit of work; `wait` is how long an
    empty backout queue is waited on; `dry_run` lists them and moves nothing."""

    limit: int
    batch: int = 100
    wait: float = 2.0
    dry_run: bool = False


@dataclass
class RedriveReport:
    """What a re-drive did."""

    backout: str
    target: str
    moved: int = 0
    without_identity: int = 0  # not moved there by the bridge: they go back as new messages
    listed: int = 0  # dry run: seen and left in place


class Redrive(Protocol):
    """A source kind's re-drive (`mqbridge.drivers.Driver.redrive`)."""

    def __call__(self, source_name: str, config: SourceConfig, listener: ListenerConfig,
                 request: RedriveRequest, say: Callable[[str], None]) -> RedriveReport: ...


def find_listener(listeners: Sequence[ListenerConfig], name: str) -> ListenerConfig:
    """The listener `name` means: its queue as configured, or SOURCE:QUEUE when two sources share
    the queue name (as `mqbridge listener` names them)."""
    exact = [item for item in listeners if f"{item.source}:{item.queue}" == name]
    if exact:
        return exact[0]
    found = [item for item in listeners if item.queue == name]
    if len(found) == 1:
        return found[0]
    names = ", ".join(sorted({item.queue for item in listeners})) or "none"
    if found:
        raise ConfigError(f"--listener {name}: two sources read this queue; name it SOURCE:QUEUE "
                          f"({', '.join(f'{item.source}:{item.queue}' for item in found)})")
    raise ConfigError(f"--listener {name}: no listener reads this queue (configured: {names})")
