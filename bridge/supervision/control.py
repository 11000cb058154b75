"""Run-time control of listeners (`mqbridge listener pause|resume|stop|start|threads|plugins`): the
state an operator gives each listener entry of a running bridge, which the control thread then follows.

    running   its threads read units of work (every listener starts so)
    paused    its threads finish the units of work they hold and take no new one; their connections
              and heartbeats stay up (they wait at the listener's own intake gate, as they do at the
              memory guard's)
    stopped   its threads finish their units of work and end; their connections are closed

and its thread count, which replaces `[[listeners]] threads` until the process ends. An entry whose
`threads` is unset has its count chosen by the bridge (`mqbridge.supervision.tuning`, through
`ListenerControls.tune`) until an operator's `threads` command fixes it. `plugins` moves
the entry to another plugin generation (`mqbridge.plugins.pinning`): it is handed on to the plugin
host, which applies it at once (the entry's next unit of work takes that generation's chain).

A command comes from a request thread of the monitoring endpoint (`mqbridge.monitoring.control`):
it only changes this state, under a lock, and closes or opens the listener's gate, so that no
thread takes a new unit after a pause or a stop, even before the control thread has looked.
The control thread (`Bridge.reconcile`) makes the threads match on its next wake-up (at most 0.25 s
later): it asks the threads of a stopped listener, and those beyond a lowered count, to finish and
end, and starts threads that are wanted and not running. `start` also starts again the threads of
a listener that halted (a poison message that cannot be moved), at once, without their backoff.

The state lives in the process: a configuration reload (SIGHUP) keeps it; a restart starts every
listener running with its configured thread count.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from mqbridge.errors import AmbiguousListenerError, ControlConflictError, ControlError, UnknownListenerError
from mqbridge.gate import IntakeGate

log = logging.getLogger("mqbridge.control")  # the name operators configure

RUNNING, PAUSED, STOPPED = "running", "paused", "stopped"
STATES = (RUNNING, PAUSED, STOPPED)
#: The commands, as `mqbridge listener` and the endpoint name them.
ACTIONS = ("pause", "resume", "stop", "start", "threads", "plugins")
#: What `plugins` hands its target to: the plugin host's `move(listener, target)`, which returns one
#: line saying what it did and raises a ControlError kind (and PluginError) when it refuses.
PluginMover = Callable[[str, str], str]
#: The thread counts a command may set (those of `[[listeners]] threads`).
MIN_THREADS, MAX_THREADS = 1, 64


@dataclass
class ListenerControl:
    """The run-time state of one listener entry (`source:queue`)."""

    name: str  # "source:queue", the `listener` label of the metrics
    source: str
    queue: str
    configured: int  # `[[listeners]] threads` (an adaptive entry's: the count it starts with)
    threads: int  # the thread count in force: the configured one until a command (or the tuner) changes it
    #: The most threads the tuner may give it (`[[listeners]] threads_max`); None: its count is fixed
    #: (configured, or set by an operator's `threads` command).
    ceiling: int | None = None
    state: str = RUNNING
    #: Closed while paused or stopped: the listener's threads take no new unit of work.
    gate: IntakeGate = field(default_factory=IntakeGate)
    #: `start` commands so far: a thread slot that has seen fewer clears its halt and backoff.
    starts: int = 0
    #: The last command that changed something, and when (UTC, ISO 8601); "" before any.
    last_command: str = ""
    changed_at: str = ""
    #: The tuner's last change of its thread count, why, and when (UTC, ISO 8601); "" before any.
    tuning: str = ""
    tuned_at: str = ""

    @property
    def adaptive(self) -> bool:
        """Whether the bridge chooses its thread count (`mqbridge.supervision.tuning`)."""
        return self.ceiling is not None

    @property
    def wanted(self) -> int:
        """Threads that should be running (0 while stopped)."""
        return 0 if self.state == STOPPED else self.threads

    def wants(self, index: int) -> bool:
        """Whether thread number `index` (1..) of this listener should be running."""
        return self.state != STOPPED and index <= self.threads


@dataclass(frozen=True)
class Outcome:
    """What a command did: the listener's name and state after it, and one line saying so."""

    listener: str
    action: str
    state: str
    threads: int
    changed: bool
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"listener": self.listener, "action": self.action, "state": self.state, "threads": self.threads,
                "changed": self.changed, "message": self.message}


class ListenerControls:
    """The run-time state of every listener entry of a bridge; commands are safe from any thread."""

    def __init__(self, listeners: Iterable[tuple[str, str, int] | tuple[str, str, int, int | None]]) -> None:
        """`listeners`: (source, queue, configured threads[, ceiling]) of each `[[listeners]]` entry; a
        ceiling (`threads_max`) makes the entry's thread count adaptive, starting at the configured one."""
        self._lock = threading.Lock()
        #: Set by the composition root (`PluginHost.move`); None: `plugins` is refused.
        self.move_plugins: PluginMover | None = None
        self.entries: dict[str, ListenerControl] = {}
        for source, queue, threads, *rest in listeners:
            name = f"{source}:{queue}"
            ceiling = rest[0] if rest else None
            self.entries[name] = ListenerControl(name, source, queue, threads, threads, ceiling=ceiling)

    def __iter__(self) -> Iterator[ListenerControl]:
        return iter(list(self.entries.values()))

    def get(self, name: str) -> ListenerControl:
        """The entry of `source:queue` (the control thread's look-up; KeyError if there is none)."""
        return self.entries[name]

    def resolve(self, name: str) -> ListenerControl:
        """The entry an operator means by `name`: `source:queue`, or a queue name that one source
        reads. UnknownListenerError or AmbiguousListenerError, each naming the listeners there are."""
        found = self.entries.get(name)
        if found is not None:
            return found
        matches = [entry for entry in self.entries.values() if entry.queue == name]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise AmbiguousListenerError(f"{name!r} is the queue of {len(matches)} listeners: name one as "
                                         f"source:queue ({', '.join(entry.name for entry in matches)})")
        raise UnknownListenerError(f"no listener {name!r}; this bridge's listeners are "
                                   f"{', '.join(self.entries) or 'none'} (name one by its queue, or as source:queue)")

    def tune(self, name: str, threads: int, reason: str) -> bool:
        """The tuner's change of an adaptive entry's thread count to `threads` (within 1 and its ceiling),
        for `reason`; False (nothing changed) when the entry's count is fixed, by configuration or by an
        operator's `threads` command meanwhile, or it is not running (a pause or stop is the operator's)."""
        with self._lock:
            entry = self.entries[name]
            if entry.ceiling is None or entry.state != RUNNING:
                return False
            threads = max(MIN_THREADS, min(entry.ceiling, threads))
            if threads == entry.threads:
                return False
            entry.threads, entry.tuning = threads, reason
            entry.tuned_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            return True

    def command(self, name: str, action: str, threads: int | None = None, *, target: str | None = None) -> Outcome:
        """Apply `action` to the listener `name` (see the module docstring); ControlError (or one
        of its kinds) when it cannot be applied as given. Logged when it changes something.
        `threads` is the count of `threads`, `target` the generation of `plugins`."""
        if action not in ACTIONS:
            raise ControlError(f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
        if action == "plugins":
            return self._move_plugins(name, target)
        with self._lock:
            entry = self.resolve(name)
            before = (entry.state, entry.threads)
            adaptive = entry.adaptive
            message = self._apply(entry, action, threads)
            changed = (entry.state, entry.threads) != before or action == "start" or adaptive != entry.adaptive
            if changed:
                entry.last_command = action if action != "threads" else f"threads {entry.threads}"
                entry.changed_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            outcome = Outcome(entry.name, action, entry.state, entry.threads, changed, message)
        if changed:
            log.warning("listener %s: %s", entry.name, message)
        return outcome

    def _move_plugins(self, name: str, target: str | None) -> Outcome:
        """`plugins`: the plugin host moves the entry (outside this lock: the host has its own, and
        the move is in effect when it returns). Logged by the host, at INFO."""
        with self._lock:
            entry = self.resolve(name)
        if self.move_plugins is None:
            raise ControlError("plugins: this bridge has no plugin host to move a listener's generation")
        if not target:
            raise ControlError("plugins: name the generation: a number, 'latest' or 'follow'")
        message = self.move_plugins(entry.name, target).removeprefix(f"{entry.name}: ")  # the outcome names it
        with self._lock:
            entry.last_command = f"plugins {target}"
            entry.changed_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            return Outcome(entry.name, "plugins", entry.state, entry.threads, True, message)

    @staticmethod
    def _apply(entry: ListenerControl, action: str, threads: int | None) -> str:
        state = entry.state
        if action == "pause":
            if state == STOPPED:
                raise ControlConflictError(f"listener {entry.name} is stopped: start it first (it holds no "
                                           "connection, so there is nothing to pause)")
            if state == PAUSED:
                return "already paused"
            entry.state = PAUSED
            entry.gate.close()
            return "paused: its threads finish the units of work they hold and take no new one; connections stay up"
        if action == "resume":
            if state == STOPPED:
                raise ControlConflictError(f"listener {entry.name} is stopped, not paused: use start")
            if state == RUNNING:
                return "already running"
            entry.state = RUNNING
            entry.gate.open()
            return "resumed: its threads take units of work again"
        if action == "stop":
            if state == STOPPED:
                return "already stopped"
            entry.state = STOPPED
            entry.gate.close()  # no thread takes a new unit before the control thread asks it to end
            return "stopped: its threads finish the units of work they hold and end; connections close"
        if action == "start":
            entry.state = RUNNING
            entry.starts += 1
            entry.gate.open()
            return ("started: its threads connect and read" if state == STOPPED else
                    "resumed and started: its threads take units of work again" if state == PAUSED else
                    "running: threads that halted or wait to be restarted start again now")
        # threads
        if threads is None or not MIN_THREADS <= threads <= MAX_THREADS:
            raise ControlError(f"threads: {threads} is not a thread count from {MIN_THREADS} to {MAX_THREADS} "
                               "(to stop the listener, use stop)")
        old, entry.threads = entry.threads, threads
        adaptive, entry.ceiling = entry.adaptive, None  # an operator's count is fixed: the tuner leaves it
        if old == threads and not adaptive:
            return f"already {threads} threads"
        return (f"threads {old} -> {threads}" + (" (in force once it is started)" if state == STOPPED else "")
                + (", fixed: no longer adaptive" if adaptive else "")
                + f"; configured: {'adaptive' if adaptive else entry.configured}, until the bridge restarts")


def progress(entry: ListenerControl, *, up: int, at_gate: int, alive: int, retiring: int, halted: int) -> str:
    """What the listener's threads still have to do to be as `entry` says, "" once they are. `up`:
    its wanted threads that are alive and connected; `at_gate` of those, how many wait at a gate
    holding nothing (paused); `alive`: every thread of it still running, `retiring` of those the
    ones asked to end (stopped, or beyond the count); `halted`: threads that stopped reading for good."""
    if entry.state == STOPPED:
        return f"{alive} threads finishing their units of work" if alive else ""
    waiting = []
    if up < entry.threads:
        waiting.append(f"{up} of {entry.threads} threads connected" + (f", {halted} halted" if halted else ""))
    if entry.state == PAUSED and up > at_gate:
        waiting.append(f"{up - at_gate} threads finishing their units of work")
    if retiring:
        waiting.append(f"{retiring} threads beyond the count finishing their units of work")
    return "; ".join(waiting)


def control_status(controls: ListenerControls, slots: Sequence[Any]) -> list[dict[str, Any]]:
    """Each listener entry's run-time state, thread counts, and what its threads (the supervisor's
    `slots`) still have to do to be in that state ("" once they are: `in_effect`), for /status."""
    out = []
    for control in controls:
        mine = [s for s in slots if s.listener == control.name]
        wanted = [s for s in mine if control.wants(s.index) and s.alive]
        up = [s for s in wanted if s.thread is not None and s.thread.state.phase in ("receiving", "processing",
                                                                                    "paused")]
        at_gate = sum(1 for s in up if s.thread is not None and s.thread.state.phase == "paused"
                      and not s.thread.connections.pending)
        alive = sum(1 for s in mine if s.alive)
        pending = progress(control, up=len(up), at_gate=at_gate, alive=alive, retiring=alive - len(wanted),
                           halted=sum(1 for s in mine if s.halted))
        out.append({"name": control.name, "source": control.source, "queue": control.queue,
                    "state": control.state, "threads": control.threads, "configured_threads": control.configured,
                    "threads_mode": "adaptive" if control.adaptive else "fixed", "threads_max": control.ceiling,
                    "tuning": control.tuning, "tuned_at": control.tuned_at,
                    "threads_alive": alive, "in_effect": not pending, "pending": pending,
                    "last_command": control.last_command, "changed_at": control.changed_at})
    return out
