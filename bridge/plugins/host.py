"""The plugin host: owns the plugin generations of one bridge and hands out chain snapshots.

`start()` builds generation 1 (a ConfigError when a chain cannot be built). Afterwards there is
one reload path, `check_for_changes()`: rescan the folders and, when a drop-in file was added,
changed or removed (content hash, mode or owner), build a new generation off to the side,
validate it and swap it in under a lock. The bridge calls it on every control tick (`on_tick`)
and on a reload request (`on_reload`, SIGHUP). A unit of work takes one snapshot
(`chain_provider(listener)()`), so it finishes on the generation it started with. A generation whose
chains cannot be built is never swapped in.

Which generation a listener entry's snapshot comes from is `mqbridge.plugins.pinning`'s decision:
the *promoted* generation (`current`) for entries that follow reloads, the one an entry is pinned
to, or, while a reload is on trial on the canary entries, the new one for those. A generation
stays loaded (its drop-in modules in `sys.modules`) while any entry runs it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqbridge.config import DEFAULT_PLUGIN_DIRS
from mqbridge.counters import Counters
from mqbridge.errors import ConfigError, PluginError
from mqbridge.message import Message, MessageResult
from mqbridge.observer import BridgeView, Observer
from mqbridge.plugins.chain import ChainSpec, PreprocessorChain
from mqbridge.plugins.discovery import (
    BUILTIN_PLUGINS,
    Candidate,
    LoadProblem,
    builtin_candidates,
    default_service_uid,
    disabled_from_env,
    folder_candidates,
    forget_modules,
    installed_entry_points,
    package_candidates,
)
from mqbridge.plugins.fallback import FALLBACK_AFTER, Probation, Trial, describe
from mqbridge.plugins.generation import (
    ChainRequest,
    Generation,
    GenerationBuilder,
    Kept,
    requests_from_config,
)
from mqbridge.plugins.pinning import CanaryAndPins, CanaryTrial, Pins, canary_trial

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig

log = logging.getLogger(__name__)


class PluginHost(CanaryAndPins, Observer):
    """Owns the plugin generations of one bridge (see the module docstring); a bridge observer.
    Which generation each listener entry runs (`move`, a canary's promotion or rollback) is
    `CanaryAndPins`'s, in mqbridge.plugins.pinning."""


    def __init__(self, plugin_dirs: Sequence[Path] = (), requests: Sequence[ChainRequest] = (), *,
                 counters: Counters | None = None, disabled: Collection[str] | None = None,
                 service_uid: int | None = None, known_types: Collection[str] | None = None,
                 entry_points: Callable[[], Iterable[Any]] | None = installed_entry_points,
                 missing_dirs_ok: bool = False, config_file: Path | None = None,
                 fallback_after: int = FALLBACK_AFTER) -> None:
        self.plugin_dirs = [Path(p) for p in plugin_dirs]
        self.missing_dirs_ok = missing_dirs_ok
        self.requests = {r.key: r for r in requests}
        self.counters = counters or Counters()
        self.service_uid = default_service_uid() if service_uid is None else service_uid
        disabled = frozenset(disabled_from_env() if disabled is None else disabled)
        known = None if known_types is None else frozenset(known_types)
        self._builder = GenerationBuilder(self.requests, disabled, known)
        self._entry_points = entry_points
        self._config_file = config_file  # named in start-up errors
        self._lock = threading.Lock()
        self._unit_seq = 0
        self._current: Generation | None = None
        self._static: list[Candidate] | None = None  # built-ins and packages: loaded once
        self._static_errors: list[LoadProblem] = []
        self._state: tuple[Any, ...] | None = None  # what the folders held at the last scan
        self._active: dict[str, set[str]] = {}  # what is being reported, per kind: logged once
        self._observer_errors: set[str] = set()
        self._last: Generation | None = None  # the last generation built, swapped in or not
        self.reload_error = ""  # why the last reload was rejected ("" once one succeeds)
        self.reloaded_at: float | None = None
        self.chain_problems: list[str] = []  # start(strict=False) only
        # Run-time fallback (mqbridge.plugins.fallback): chains on trial after a swap, file versions
        # rejected because they raised on every message (key -> (fingerprint, why)), and the
        # highest generation number swapped in (a rejected one's number is never reused).
        self._probation = Probation(fallback_after)
        self._rejected: dict[str, tuple[Any, str]] = {}
        self._top = 0
        self.fallback_note = ""  # the last fallback, for the status page
        self._pins = Pins(self.requests)  # which generation each entry runs (mqbridge.plugins.pinning)
        self._canary: CanaryTrial | None = None  # a reload running on the canary entries only
        self.canary_note = ""  # the last promotion or rollback, for the status page
        self._rolled_back: CanaryTrial | None = None  # units already on it fall back to its good generation

    @classmethod
    def from_config(cls, config: BridgeConfig, *, counters: Counters | None = None) -> PluginHost:
        """The host of `config`: its plugin folders (relative to the file) and listener chains."""
        dirs = config.bridge.plugin_dirs
        return cls([config.resolve_path(p) for p in (DEFAULT_PLUGIN_DIRS if dirs is None else dirs)],
                   requests_from_config(config), counters=counters, known_types=list(config.types),
                   missing_dirs_ok=dirs is None, config_file=config.path)

    # -- state of the last build -------------------------------------------------------------
    @property
    def errors(self) -> list[LoadProblem]:
        """Load errors of the last build (a plugin that keeps its previous version included)."""
        return list(self._last.errors) if self._last else []

    @property
    def current(self) -> Generation:
        if self._current is None:
            raise PluginError("the plugin host has not been started")
        return self._current

    @property
    def generation(self) -> int:
        return self.current.number

    # -- building ----------------------------------------------------------------------------
    def _scan(self) -> tuple[list[Candidate], list[LoadProblem], tuple[Any, ...]]:
        if self._static is None:
            self._static = builtin_candidates(BUILTIN_PLUGINS)
            try:
                self._static += package_candidates(self._entry_points() if self._entry_points else ())
            except Exception as exc:
                self._static_errors.append(LoadProblem("entry points", f"cannot list installed plugins: {exc}"))
        folder, errors = folder_candidates(self.plugin_dirs, self.service_uid, missing_ok=self.missing_dirs_ok)
        state = (tuple((c.key, c.fingerprint) for c in folder), tuple(map(str, errors)))
        return self._static + folder, errors, state

    def _build(self, previous: Generation | None) -> Generation | None:
        """Scan and build a generation, or None when the folders did not change since the last scan."""
        candidates, scan_errors, state = self._scan()
        if previous is not None and state == self._state:
            return None
        self._state = state
        number = max(previous.number, self._top) + 1 if previous is not None else None
        gen = self._last = self._builder.build(candidates, scan_errors, previous, self._static_errors,
                                               number=number, rejected=self._rejected)
        fallback = {gen.plugins[k].name for k, kept in gen.kept.items() if kept.why is not Kept.STILL_NAMED}
        self.counters.set("plugin_errors", len(gen.errors))
        texts = [f"plugin {e.plugin}: new version not loaded, the previous one keeps running: {e}"
                 if e.plugin in fallback else f"plugin {e.plugin} not loaded: {e}" for e in gen.errors]
        for index in self._report("errors", log.error, texts):
            self.counters.inc("plugin_load_errors", plugin=gen.errors[index].plugin)
        self._report("kept", log.warning, [f"plugin {gen.plugins[k].name}: {kept}" for k, kept in gen.kept.items()
                                           if kept.why in (Kept.STILL_NAMED, Kept.REJECTED)])
        return gen

    def _report(self, kind: str, emit: Callable[..., None], texts: list[str]) -> list[int]:
        """Log each text that was not already being reported (an error is logged once, when it
        appears, not on every rescan); returns the indexes of the new ones."""
        before = self._active.get(kind, set())
        self._active[kind] = set(texts)
        new = [i for i, text in enumerate(texts) if text not in before]
        for i in new:
            emit("%s", texts[i])
        return new

    # -- running -----------------------------------------------------------------------------
    def start(self, strict: bool = True) -> None:
        """Load every plugin and build every chain. Raises ConfigError when a listener's chain
        names an unknown preprocessor or gives invalid options (with `strict=False` the problems
        are kept in `chain_problems` instead, for listings)."""
        gen = self._build(None)
        assert gen is not None
        self.chain_problems = list(gen.problems)
        # An unsafe plugin file or folder refuses the start whatever the chains name: someone
        # else may put code there that a later reload would run.
        unsafe = [f"{e.message}" for e in gen.errors if e.unsafe]
        if (gen.problems or unsafe) and strict:
            forget_modules(gen.module_names())
            where = f"{self._config_file}: " if self._config_file else ""
            parts = ([f"unsafe plugin path: {'; '.join(unsafe)}"] if unsafe else []) + (
                [f"preprocessor chains: {'; '.join(gen.problems)}"] if gen.problems else [])
            raise ConfigError(where + "; ".join(parts))
        with self._lock:
            self._current = gen
            self._top = gen.number
            self._pins.start(gen)
        self.counters.set("plugin_generation", gen.number)
        log.info("plugins: %s", ", ".join(f"{p.name} ({p.candidate.source.value})"
                                          for p in gen.plugins.values()) or "none")

    def close(self) -> None:
        """Forget the drop-in modules of every loaded generation (at shutdown, or in tests)."""
        if self._current is None:
            return
        with self._lock:
            live = self._live()
        for gen in live:
            forget_modules(gen.module_names())

    def chain(self, listener: str) -> PreprocessorChain:
        """A snapshot of the chain of `listener` (its name, `source:queue`) for one unit of work."""
        with self._lock:
            gen = self._running(listener)
            self._unit_seq += 1
            unit = self._unit_seq
        return PreprocessorChain(gen.chains[listener], unit, judge=self)

    def _release(self, retired: Generation) -> None:
        """Forget the drop-in modules of `retired` that no loaded generation uses any more, and put
        back those of loaded generations that an earlier release took out."""
        with self._lock:
            live = self._live()
        if any(g is retired for g in live):
            return
        in_use = set[str]().union(*(g.module_names() for g in live))
        forget_modules(retired.module_names() - in_use)
        for gen in live:
            for plugin in gen.plugins.values():
                if plugin.module_name and plugin.module_name not in sys.modules:
                    sys.modules[plugin.module_name] = plugin.obj  # type: ignore[assignment]

    def chain_provider(self, listener: str) -> Callable[[], PreprocessorChain]:
        """What the threads of listener `listener` (`source:queue`) call once per unit of work."""
        if listener not in self.requests:
            raise ConfigError(f"no listener {listener!r} in the plugin host (known: {sorted(self.requests)})")
        return lambda: self.chain(listener)

    def check_for_changes(self) -> bool:
        """Rescan the plugin folders; build, validate and swap in a new generation if anything
        changed. Returns True if a new generation was swapped in. Never raises."""
        try:
            return self._check()
        except Exception:
            log.exception("plugin reload failed unexpectedly; keeping the current generation")
            self.counters.inc("plugin_reload_failures")
            return False

    def _check(self) -> bool:
        with self._lock:
            current = self.current
            newest = self._canary.generation if self._canary is not None else current
        gen = self._build(newest)
        if gen is None:
            return False
        if gen.problems:
            self.reload_error = "; ".join(gen.problems)
            self.counters.inc("plugin_reload_failures")
            with self._lock:
                in_use = set[str]().union(*(g.module_names() for g in self._live()))
            forget_modules(gen.module_names() - in_use)
            self._report("rejected", log.error, [f"plugin reload rejected, keeping generation "
                                                 f"{newest.number}: {self.reload_error}"])
            return False
        self.reload_error = ""
        self._report("rejected", log.error, [])
        if {k: id(p.obj) for k, p in gen.plugins.items()} == {k: id(p.obj) for k, p in newest.plugins.items()}:
            return False  # only errors changed: every plugin runs the version it ran before
        with self._lock:
            self._top = gen.number
            trial = canary_trial(self.requests.values(), gen, current)
            if trial is not None:
                self._canary = trial  # a canary generation not yet promoted is replaced
            else:
                self._current = gen
                self._pins.promote(gen)
                self._probation.start(gen, current)
        self.reloaded_at = time.time()
        self._release(newest)
        self.counters.inc("plugin_reloads")
        changed = sorted(p.name for k, p in gen.plugins.items() if newest.plugins.get(k) is not p)
        removed = sorted(p.name for k, p in newest.plugins.items() if k not in gen.plugins)
        what = f"new or changed: {', '.join(changed) or 'none'}; removed: {', '.join(removed) or 'none'}"
        if trial is None:
            self.counters.set("plugin_generation", gen.number)
            log.info("plugins reloaded: generation %d (%s)", gen.number, what)
        else:
            log.info("plugins reloaded: generation %d (%s) on the canary listener(s) %s only; the others stay on "
                     "generation %d until it got %d units of work through and %gs passed without raising",
                     gen.number, what, ", ".join(sorted(trial.listeners)), current.number, trial.units, trial.seconds)
        return True

    # -- run-time fallback (the chains' Judge) ----------------------------------------------
    def fallback_spec(self, spec: ChainSpec) -> ChainSpec | None:
        """The last good generation's chain while `spec` (of a newly swapped-in generation, or the
        canary's) is on trial, or after its canary generation was rolled back; else None."""
        for trial in (self._canary, self._rolled_back):
            if trial is not None and trial.runs(spec.listener, spec.generation):
                return trial.good.chains.get(spec.listener)
        return self._probation.fallback_spec(spec)

    def record(self, spec: ChainSpec, succeeded: int, blamed: int, failed: int = 0) -> None:
        """One unit's outcome on `spec`. On a canary's generation: any message it raised on rolls it
        back; a unit without one counts towards its promotion. Otherwise a success ends its trial,
        and `fallback_after` blamed messages without one swap the last good generation back in."""
        canary = self._canary
        if canary is not None and canary.runs(spec.listener, spec.generation):
            if failed or blamed:
                self._roll_back(canary, spec, max(failed, blamed))
            elif succeeded:
                with self._lock:
                    canary.clean_units += 1
                self._maybe_promote()
            return
        trial = self._probation.record(spec, succeeded, blamed)
        if trial is not None:
            self._fall_back(trial, spec)

    def _fall_back(self, trial: Trial, spec: ChainSpec) -> None:
        bad, good = trial.generation, trial.good
        with self._lock:
            if self._current is not bad:
                return  # another reload came first
            self._current = good
            self._pins.replace(bad, good)
            self._probation.clear()
        why = (f"raised on each of the first {trial.blamed} messages of {spec.listener} after generation "
               f"{bad.number} was swapped in, and got none through")
        for plugin in trial.changed:
            if plugin.candidate.fingerprint is not None:
                self._rejected[plugin.key] = (plugin.candidate.fingerprint, f"version rejected: it {why}")
        self._release(bad)
        previous = [describe(good.plugins[p.key]) for p in trial.changed if p.key in good.plugins]
        self.fallback_note = (f"plugin {trial.describe()} {why}: fell back to generation {good.number}"
                              + (f" ({', '.join(previous)})" if previous else ""))
        self.counters.inc("plugin_fallbacks")
        self.counters.set("plugin_generation", good.number)
        log.warning("%s; the messages it failed were preprocessed again with generation %d and count towards "
                    "no backout threshold. Fix the plugin file: a changed file is loaded again",
                    self.fallback_note, good.number)

    # -- the bridge's observer ---------------------------------------------------------------
    def on_tick(self, bridge: BridgeView) -> None:
        """Every control tick: rescan the folders; promote a canary's generation whose time is up."""
        self.check_for_changes()
        self._maybe_promote()

    def on_reload(self, bridge: BridgeView) -> None:
        """A reload request (SIGHUP): rescan now, exactly like a tick."""
        if not self.check_for_changes():
            log.info("plugins: no change")

    def observe_result(self, message: Message, result: MessageResult) -> None:
        """Calls `mqbridge_result` of the current generation for one result (`observe_results`)."""
        self.observe_results(((message, result),))

    def observe_results(self, results: Sequence[tuple[Message, MessageResult]]) -> None:
        """Calls `mqbridge_result` of the current generation for each result, unless no plugin of it
        implements the hook (looked up once for all of them)."""
        hook = self.current.pm.hook.mqbridge_result
        if not hook.get_hookimpls():
            return
        for message, result in results:
            try:
                hook(message=message, result=result)
            except Exception as exc:
                self.counters.inc("plugin_observer_errors")
                text = f"{type(exc).__name__}: {exc}"
                if text not in self._observer_errors and len(self._observer_errors) < 100:
                    self._observer_errors.add(text)
                    log.error("mqbridge_result hook failed (logged once): %s", text, exc_info=exc)

    def status_fields(self) -> dict[str, Any]:
        return {"plugins": self.status()}

    def status(self) -> dict[str, Any]:
        """The status page's "plugins" field."""
        return {
            "generation": self._current.number if self._current else 0,
            "plugins": self.describe(),
            "errors": [e.as_dict() for e in self.errors],
            "reload_error": self.reload_error,
            "reloaded_at": self.reloaded_at,
            "fallback": self.fallback_note,
            "on_trial": self._probation.status(),
            "listeners": self.listener_generations(),
            "canary": self._canary.as_dict() if self._canary is not None else None,
            "canary_note": self.canary_note,
        }

    def listener_generations(self) -> dict[str, dict[str, Any]]:
        """Each listener entry (`source:queue`): the generation its next unit runs, its `plugins`
        mode (follow, pinned, "up to N") and whether it is a canary."""
        if self._current is None:
            return {}
        with self._lock:
            return {key: {"generation": self._running(key).number, "plugins": self._pins.mode(key),
                          "canary": request.canary} for key, request in self.requests.items()}

    def describe(self) -> list[dict[str, Any]]:
        """Every plugin: name, source, version or mtime, preprocessors, path, state and `kept`
        (a `Kept` value when its previous version still runs, else None)."""
        gen, last = self._current, self._last
        kept = last.kept if last else {}
        rows: list[dict[str, Any]] = []
        for key, plugin in (gen.plugins.items() if gen else ()):
            rows.append(_row(plugin.name, plugin.candidate.source.value, str(plugin.path) if plugin.path else None,
                             str(kept[key]) if key in kept else "loaded", version=plugin.version,
                             mtime=plugin.candidate.mtime, preprocessors=list(plugin.preprocessors),
                             kept=kept[key].why.value if key in kept else None))
        loaded = {(r["name"], r["path"]) for r in rows}
        for error in self.errors:
            if (error.plugin, error.path) not in loaded:
                rows.append(_row(error.plugin, "folder" if error.path else "", error.path, f"error: {error}"))
        for found in last.disabled if last else ():
            rows.append(_row(found.name, found.source.value, str(found.path or found.key),
                             "disabled by MQBRIDGE_DISABLED_PLUGINS"))
        return rows


def _row(name: str, source: str, path: str | None, state: str, *, version: str | None = None,
         mtime: float | None = None, preprocessors: list[str] | None = None, kept: str | None = None) -> dict[str, Any]:
    return {"name": name, "source": source, "version": version, "mtime": mtime,
            "preprocessors": preprocessors or [], "path": path, "state": state, "kept": kept}


def report(host: PluginHost) -> tuple[str, bool]:
    """`mqbridge plugins`: a listing of the plugins, errors and chains; and whether all is well."""
    lines = [f"plugins (generation {host.status()['generation']}):",
             f"  {'NAME':<16} {'SOURCE':<9} {'VERSION':<30} {'PREPROCESSORS':<20} STATE"]
    for row in host.describe():
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["mtime"])) if row["mtime"] else ""
        version = " ".join(x for x in (row["version"], when and f"mtime {when}") if x) or "-"
        lines.append(f"  {row['name']:<16} {row['source'] or '-':<9} {version:<30} "
                     f"{', '.join(row['preprocessors']) or '-':<20} {row['state']}")
        if row["path"]:
            lines.append(f"  {'':<16} {row['path']}")
    if host.errors:
        lines.append("load errors:")
        lines += [f"  {error}" for error in host.errors]
    if host.requests:
        lines.append("chains:")
        for key, request in host.requests.items():
            spec = host._current.chains.get(key) if host._current else None
            names = " -> ".join(step.name for step in spec.steps) if spec and spec.steps else "(none)"
            lines.append(f"  {request.label}: {names}")
    if host.chain_problems:
        lines.append("chain errors:")
        lines += [f"  {problem}" for problem in host.chain_problems]
    return "\n".join(lines), not host.errors and not host.chain_problems


class ResultObserver:
    """The plugins' `mqbridge_result` hook as the collector's observer of a type
    (`BulkCollector.register_result_handler`): a bulk's results in one call (`many`, as the collector
    hands them), so that a bridge whose plugins do not implement the hook, most of them, does not call
    into pluggy once per message landed."""

    def __init__(self, host: PluginHost) -> None:
        self._host = host

    def __call__(self, message: Message, result: MessageResult) -> None:
        self._host.observe_result(message, result)

    def many(self, results: Sequence[tuple[Message, MessageResult]]) -> None:
        self._host.observe_results(results)
