"""Which plugin generation each listener entry runs: following reloads, pinned, or the canary.

A listener entry's `plugins` key (`ChainRequest.plugins`) sets a *ceiling*: `"follow"` (the default)
has none and runs every generation swapped in; `"pinned"` has the generation it started with
(so it runs that one until an operator moves it or the bridge restarts); a number N follows
reloads up to generation N and stays there (it never runs a generation numbered above N). An
operator's move (`mqbridge listener plugins`, `POST /listeners/<name>/plugins/<to>`, which the
control plane hands to `CanaryAndPins.move`) pins an entry to any generation still loaded, or lets
it follow again.

With `plugins_canary = true` on some entries, a reload is swapped in on those entries only (a
`CanaryTrial`); every other entry keeps the promoted generation. The trial *promotes* the new
generation to the others once the canaries got `units` units of work through it and `seconds`
have passed, with no message it raised on; it *rolls back* at the first message it raises on
(the canaries go back to the promoted generation; no other entry ever ran the new one).

`CanaryAndPins` holds those decisions (the move, the promotion, the rollback); the plugin host
inherits it, so they run on the host's state under the host's lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mqbridge.counters import Counters
from mqbridge.errors import ControlConflictError, ControlError, PluginError, UnknownListenerError
from mqbridge.plugins.chain import ChainSpec
from mqbridge.plugins.fallback import Probation, changed_plugins, describe
from mqbridge.plugins.generation import ChainRequest, Generation

log = logging.getLogger("mqbridge.plugins.host")  # the logger these lines had in the host

FOLLOW = "follow"
PINNED = "pinned"
LATEST = "latest"


# A refused move is a PluginError (what the host raises) and the control plane's kind of refusal
# (`mqbridge.monitoring.control` answers 404, 409 or 400 by kind), so neither side maps texts.
class NoSuchListenerError(PluginError, UnknownListenerError):
    """A move names a listener entry the plugin host does not have."""


class MoveRefusedError(PluginError, ControlConflictError):
    """A move the listener's state does not allow: a canary, or a generation no longer loaded."""


class GenerationTargetError(PluginError, ControlError):
    """A move's target is not a generation number, `latest` or `follow`."""


@dataclass
class Placement:
    """One listener entry's generation policy: `ceiling` None follows every promotion; otherwise
    `held` is the generation it runs, the newest promoted one numbered at most `ceiling`."""

    ceiling: int | None
    held: Generation | None = None
    moved: bool = False  # by an operator: shown as pinned, whatever the configuration said

    def mode(self, configured: str | int) -> str:
        if self.ceiling is None:
            return FOLLOW
        if self.moved or configured == PINNED:
            return PINNED
        return f"up to {self.ceiling}"


class Pins:
    """The placements of every listener entry (the host's lock guards them)."""

    def __init__(self, requests: Mapping[str, ChainRequest]) -> None:
        self.requests = requests
        self.placements: dict[str, Placement] = {}

    def start(self, first: Generation) -> None:
        """Generation `first` is the one every entry starts with."""
        for key, request in self.requests.items():
            ceiling = None if request.plugins == FOLLOW else (
                first.number if request.plugins == PINNED else int(request.plugins))
            self.placements[key] = Placement(ceiling, None if ceiling is None else first)

    def generation(self, listener: str, promoted: Generation) -> Generation:
        """What `listener` runs when `promoted` is the generation following entries run."""
        placement = self.placements.get(listener)
        if placement is None or placement.held is None:
            return promoted
        return placement.held

    def promote(self, new: Generation) -> None:
        """`new` is promoted: each entry whose ceiling allows it moves up to it."""
        for placement in self.placements.values():
            if placement.held is not None and placement.ceiling is not None and new.number <= placement.ceiling:
                placement.held = new

    def replace(self, bad: Generation, good: Generation) -> None:
        """`bad` was rejected after a promotion: entries that hold it go back to `good`."""
        for placement in self.placements.values():
            if placement.held is bad:
                placement.held = good

    def move(self, listener: str, to: Generation | None) -> None:
        """Pin `listener` to `to`, or (None) let it follow reloads again."""
        if to is None:
            self.placements[listener] = Placement(None)
        else:
            self.placements[listener] = Placement(to.number, to, moved=True)

    def held(self) -> list[Generation]:
        return [p.held for p in self.placements.values() if p.held is not None]

    def mode(self, listener: str) -> str:
        placement = self.placements.get(listener)
        request = self.requests.get(listener)
        if placement is None or request is None:
            return FOLLOW
        return placement.mode(request.plugins)


@dataclass
class CanaryTrial:
    """A new generation running on the canary entries only, until it is promoted or rolled back."""

    generation: Generation
    good: Generation  # the promoted generation the other entries keep running
    listeners: frozenset[str]
    units: int  # clean units of work needed before promotion
    seconds: float  # and time since the swap
    started: float = field(default_factory=time.monotonic)
    clean_units: int = 0

    def runs(self, listener: str, generation: int) -> bool:
        """Whether a chain of `listener` on `generation` is this trial's."""
        return listener in self.listeners and generation == self.generation.number

    def ready(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return self.clean_units >= self.units and now - self.started >= self.seconds

    def as_dict(self) -> dict[str, object]:
        return {"generation": self.generation.number, "promoted_generation": self.good.number,
                "listeners": sorted(self.listeners), "clean_units": self.clean_units, "units_needed": self.units,
                "seconds": round(time.monotonic() - self.started, 1), "seconds_needed": self.seconds}


def canary_trial(requests: Iterable[ChainRequest], new: Generation, good: Generation) -> CanaryTrial | None:
    """The trial of `new` on the canary entries of `requests`, or None when none is a canary."""
    canaries = [r for r in requests if r.canary]
    if not canaries:
        return None
    return CanaryTrial(new, good, frozenset(r.key for r in canaries), max(r.canary_units for r in canaries),
                       max(r.canary_seconds for r in canaries))


def parse_target(text: str | int) -> int | str:
    """An operator's `move` target: a generation number, `latest` or `follow`."""
    if isinstance(text, int):
        return text
    word = text.strip().lower()
    if word in (LATEST, FOLLOW):
        return word
    try:
        return int(word)
    except ValueError:
        raise GenerationTargetError(f"{text!r} is not a plugin generation: a number, 'latest' (pin to the "
                                    "promoted generation) or 'follow' (take every reload again)") from None


class CanaryAndPins:
    """The part of `mqbridge.plugins.host.PluginHost` that decides which generation each listener
    entry runs: an operator's move, and a canary trial's promotion or rollback. A mixin, so that
    these run on the host's own state under its lock, as they did when they were written there;
    the host keeps loading, reloading and releasing generations."""

    # The host's state these methods use (set by `PluginHost.__init__`).
    requests: dict[str, ChainRequest]
    counters: Counters
    canary_note: str
    _lock: threading.Lock
    _current: Generation | None
    _pins: Pins
    _canary: CanaryTrial | None
    _rolled_back: CanaryTrial | None
    _probation: Probation
    _rejected: dict[str, tuple[Any, str]]

    if TYPE_CHECKING:  # the host's, see there
        @property
        def current(self) -> Generation: ...

        def _release(self, retired: Generation) -> None: ...

    def _running(self, listener: str) -> Generation:
        """The generation `listener` runs now (under the lock)."""
        canary = self._canary
        if canary is not None and listener in canary.listeners:
            return canary.generation
        return self._pins.generation(listener, self.current)

    def _live(self) -> list[Generation]:
        """Every generation some entry runs or may be sent back to (under the lock)."""
        live = [self.current, *self._pins.held()]
        if self._canary is not None:
            live += [self._canary.generation, self._canary.good]
        return list({id(g): g for g in live}.values())

    def move(self, listener: str, target: str | int) -> str:
        """Pin `listener` to a loaded generation (a number, or `latest`: the promoted one), or let it
        follow reloads again (`follow`). Returns what was done, in one line for the operator.
        Raises a PluginError: NoSuchListenerError for an unknown listener, MoveRefusedError for a
        canary or a generation no longer loaded, GenerationTargetError for a target that is none."""
        if listener not in self.requests:
            known = ", ".join(sorted(self.requests))
            raise NoSuchListenerError(f"no listener {listener!r} in the plugin host (known: {known})")
        to = parse_target(target)
        with self._lock:
            if self.requests[listener].canary:
                raise MoveRefusedError(f"{listener} is a canary listener (plugins_canary): it takes every reload "
                                       "first and cannot be pinned")
            before = self._running(listener)
            if to == FOLLOW:
                self._pins.move(listener, None)
            else:
                live = sorted(self._live(), key=lambda g: g.number)
                found = self.current if to == LATEST else next((g for g in live if g.number == to), None)
                if found is None:
                    raise MoveRefusedError(f"plugin generation {to} is not loaded any more (loaded: "
                                           f"{', '.join(str(g.number) for g in live)}); 'latest' is "
                                           f"{self.current.number}")
                self._pins.move(listener, found)
            after = self._running(listener)
            mode = self._pins.mode(listener)
        text = f"{listener}: plugins {mode}, generation {after.number} (was {before.number})"
        log.info("plugins: %s", text)
        self._release(before)
        return text

    def _promote(self, trial: CanaryTrial) -> None:
        """The canary's generation goes to every listener entry that follows reloads."""
        with self._lock:
            if self._canary is not trial:
                return  # rolled back, or replaced by a newer reload, meanwhile
            self._canary = None
            old = self.current
            self._current = trial.generation
            self._pins.promote(trial.generation)
            self._probation.start(trial.generation, old)
        self.canary_note = (f"generation {trial.generation.number} promoted from the canary listener(s) "
                            f"{', '.join(sorted(trial.listeners))} after {trial.clean_units} units of work and "
                            f"{time.monotonic() - trial.started:.0f}s without a plugin error")
        self.counters.inc("plugin_canary_promotions")
        self.counters.set("plugin_generation", trial.generation.number)
        log.info("plugins: %s", self.canary_note)
        self._release(old)

    def _roll_back(self, trial: CanaryTrial, spec: ChainSpec, failed: int) -> None:
        """The canary's generation raised: the canaries go back to the promoted generation, and the
        changed file versions stay out of later generations until the files change again."""
        with self._lock:
            if self._canary is not trial:
                return
            self._canary = None
            self._rolled_back = trial
        changed = changed_plugins(trial.generation, trial.good, spec)
        why = f"raised on {failed} message(s) of the canary listener {spec.listener}"
        for plugin in changed:
            if plugin.candidate.fingerprint is not None:
                self._rejected[plugin.key] = (plugin.candidate.fingerprint, f"version rolled back: it {why}")
        self.canary_note = (f"generation {trial.generation.number} rolled back: plugin "
                            f"{', '.join(describe(p) for p in changed) or '(none changed)'} {why}; the canary "
                            f"runs generation {trial.good.number} again and no other listener ran it")
        self.counters.inc("plugin_canary_rollbacks")
        log.info("plugins: %s", self.canary_note)
        self._release(trial.generation)

    def _maybe_promote(self) -> None:
        trial = self._canary
        if trial is not None and trial.ready():
            self._promote(trial)
