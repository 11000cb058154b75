"""Falling back from a plugin generation that loads but raises on every message.

A reload swaps in a generation that validated: its files ran and its chains were built. Whether
its preprocessors work is only known once messages go through them. So each listener entry whose
chain uses a changed plugin is *on trial* after a swap, until the new chain gets one message
through without raising. Meanwhile a unit of work on which the new chain raised for every message
is preprocessed again with the last good generation's chain (the listener loop asks
`PreprocessorChain.fallback`); each message that failed with the new chain and passed with the good
one is *blamed* on the new generation, not on the message, and counts towards no backout threshold.

"Raises for every message" is concrete: `FALLBACK_AFTER` blamed messages and not one success since
the swap. Then the host swaps the last good generation back in for good, logs a warning naming the
plugin(s) and version(s), and keeps the rejected file version out of later generations until the
file changes again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from mqbridge.plugins.chain import ChainSpec
from mqbridge.plugins.discovery import Plugin
from mqbridge.plugins.generation import Generation

#: Messages blamed on a new generation, with none getting through it, before it is rejected.
FALLBACK_AFTER = 10


def describe(plugin: Plugin) -> str:
    """`name version V (path)`, with the content hash when the plugin has no `__version__`."""
    fingerprint = plugin.candidate.fingerprint
    version = plugin.version or (f"sha256 {fingerprint[0][:12]}" if fingerprint else "unversioned")
    where = f" ({plugin.path})" if plugin.path else ""
    return f"{plugin.name} version {version}{where}"


def changed_plugins(new: Generation, good: Generation, spec: ChainSpec) -> list[Plugin]:
    """The plugins `spec` (a chain of `new`) runs that are not the ones `good` ran: its steps' plugins
    and the generation's `mqbridge_classify` implementations."""
    names = {step.plugin for step in spec.steps}
    if spec.classify_hook is not None:
        names |= {spec.plugin_names.get(impl.plugin_name, impl.plugin_name)
                  for impl in spec.classify_hook.get_hookimpls()}
    return [plugin for key, plugin in new.plugins.items()
            if plugin.name in names and good.plugins.get(key) is not plugin]


@dataclass
class Trial:
    """One listener entry's chain of a new generation, until its first success."""

    generation: Generation
    good: Generation  # the last good generation, swapped back in if this one is rejected
    changed: list[Plugin]
    blamed: int = 0
    succeeded: bool = False
    rejected: bool = False

    def describe(self) -> str:
        """The changed plugins, for the warning."""
        return ", ".join(describe(p) for p in self.changed) or "(no plugin changed)"


class Probation:
    """The trials of the current generation, per listener entry (thread-safe)."""

    def __init__(self, limit: int = FALLBACK_AFTER) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._trials: dict[str, Trial] = {}

    def start(self, new: Generation, old: Generation) -> None:
        """`new` replaces `old`: put each entry whose chain runs a changed plugin on trial. An entry
        still on trial under `old` keeps the generation that was last good for it."""
        with self._lock:
            trials: dict[str, Trial] = {}
            for entry, spec in new.chains.items():
                previous = self._trials.get(entry)
                good = previous.good if previous is not None and not previous.succeeded else old
                changed = changed_plugins(new, good, spec)
                if changed and entry in good.chains:
                    trials[entry] = Trial(new, good, changed)
            self._trials = trials

    def clear(self) -> None:
        with self._lock:
            self._trials = {}

    def _trial(self, spec: ChainSpec) -> Trial | None:
        trial = self._trials.get(spec.listener)
        if trial is None or trial.succeeded or trial.rejected or trial.generation.chains.get(spec.listener) is not spec:
            return None
        return trial

    def fallback_spec(self, spec: ChainSpec) -> ChainSpec | None:
        """The last good chain of `spec`'s entry while `spec` is on trial, else None."""
        with self._lock:
            trial = self._trial(spec)
            return None if trial is None else trial.good.chains[spec.listener]

    def record(self, spec: ChainSpec, succeeded: int, blamed: int) -> Trial | None:
        """Count one unit's outcome; returns the trial when it has just failed (the caller swaps
        its good generation back in), else None."""
        with self._lock:
            trial = self._trial(spec)
            if trial is None:
                return None
            if succeeded:
                trial.succeeded = True
                return None
            trial.blamed += blamed
            if trial.blamed < self.limit:
                return None
            trial.rejected = True
            return trial

    def status(self) -> dict[str, object]:
        """Entries on trial: {entry: blamed so far}."""
        with self._lock:
            return {str(entry): t.blamed for entry, t in self._trials.items() if not (t.succeeded or t.rejected)}
