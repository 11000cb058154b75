"""The plugin host: loads plugins into a pluggy manager, builds every listener's preprocessor
chain from the configuration, and hot-reloads drop-in files.

A *generation* is one complete, validated set: a pluggy manager with every plugin registered,
the preprocessor registry they filled, and a `ChainSpec` per listener entry. The control thread
calls `check_for_changes()` every `control_interval`; when a drop-in file was added, changed or
removed (content hash, mode or owner), a new generation is built off to the side and validated,
then swapped in under a lock. A unit of work takes one snapshot (`chain_provider()`), so it
finishes on the generation it started with.

A plugin whose new version fails (syntax or import error, bad hookimpl, a raising registration
hook, unsafe permissions) keeps its previous version in the new generation and the error is
shown in the status until the file is fixed. A new generation whose chains cannot be built (an
option the new version no longer accepts, a preprocessor that vanished) is not swapped in at all.
A removed file whose preprocessors a listener still names stays loaded until the configuration
stops naming them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mqbridge.chain import PreprocessorChain
from mqbridge.counters import Counters
from mqbridge.errors import ConfigError, PluginError
from mqbridge.message import Message, MessageResult
from mqbridge.plugin_generation import (
    KEEPING,
    ChainRequest,
    Generation,
    GenerationBuilder,
    requests_from_config,
)
from mqbridge.plugin_loader import (
    BUILTIN_PLUGINS,
    Candidate,
    LoadError,
    builtin_candidates,
    default_service_uid,
    disabled_from_env,
    folder_candidates,
    forget_modules,
    installed_entry_points,
    package_candidates,
)

if TYPE_CHECKING:
    from mqbridge.control import Bridge

log = logging.getLogger(__name__)


class PluginHost:
    """Owns the plugin generations of one bridge (see the module docstring)."""

    def __init__(self, plugin_dirs: Sequence[Path] = (), requests: Sequence[ChainRequest] = (), *,
                 counters: Counters | None = None, disabled: Collection[str] | None = None,
                 service_uid: int | None = None, known_types: Collection[str] | None = None,
                 builtins: Sequence[str] = BUILTIN_PLUGINS,
                 entry_points: Callable[[], Iterable[Any]] | None = installed_entry_points,
                 missing_dirs_ok: bool = False) -> None:
        self.plugin_dirs = [Path(p) for p in plugin_dirs]
        self.missing_dirs_ok = missing_dirs_ok  # the default plugin_dirs need not exist
        self.requests = {r.key: r for r in requests}
        self.counters = counters or Counters()
        self.disabled = frozenset(disabled_from_env() if disabled is None else disabled)
        self.service_uid = default_service_uid() if service_uid is None else service_uid
        self._builder = GenerationBuilder(self.requests, self.disabled, known_types)
        self._builtins = tuple(builtins)
        self._entry_points = entry_points
        self._config: Any = None
        self._config_file: str | None = None  # named in start-up errors
        self._lock = threading.Lock()
        self._unit_seq = 0
        self._current: Generation | None = None
        self._static: list[Candidate] | None = None  # built-ins and packages: loaded once
        self._static_errors: list[LoadError] = []
        self._state: tuple[Any, ...] | None = None
        self._active: dict[str, set[str]] = {}  # what is being reported, per kind: logged once
        self._observer_errors: set[str] = set()
        self.errors: list[LoadError] = []  # load errors of the last build attempt
        self.kept: dict[str, str] = {}  # plugin key -> why its previous version still runs
        self.reload_error = ""  # why the last reload was rejected ("" once one succeeds)
        self.reloaded_at: float | None = None
        self.chain_problems: list[str] = []  # start(strict=False) only

    @classmethod
    def from_config(cls, config: Any, **kwargs: Any) -> PluginHost:
        from mqbridge.control import resolve_path

        explicit = "plugin_dirs" in getattr(config.bridge, "model_fields_set", {"plugin_dirs"})
        kwargs.setdefault("missing_dirs_ok", not explicit)
        host = cls([resolve_path(config, Path(p)) for p in config.bridge.plugin_dirs],
                   requests_from_config(config), known_types=list(config.types), **kwargs)
        host._config = config
        host._config_file = getattr(config, "path", None)
        return host

    # -- building ----------------------------------------------------------------------------
    def _static_candidates(self) -> list[Candidate]:
        if self._static is None:
            found = builtin_candidates(self._builtins)
            if self._entry_points is not None:
                try:
                    found += package_candidates(self._entry_points(), self._builtins)
                except Exception as exc:
                    self._static_errors.append(LoadError("entry points", f"cannot list installed plugins: {exc}"))
            self._static = found
        return self._static

    @property
    def disabled_found(self) -> list[tuple[str, str, str]]:
        """Plugins skipped because of MQBRIDGE_DISABLED_PLUGINS: (name, kind, where)."""
        return self._builder.disabled_found

    def _build(self, candidates: list[Candidate], scan_errors: list[LoadError],
               previous: Generation | None) -> tuple[Generation, list[str]]:
        return self._builder.build(candidates, scan_errors, previous, self._static_errors)

    def _scan(self) -> tuple[list[Candidate], list[LoadError], tuple[Any, ...]]:
        folder, errors = folder_candidates(self.plugin_dirs, self.service_uid, self._builtins,
                                           missing_ok=self.missing_dirs_ok)
        state = (tuple((c.key, c.fingerprint) for c in folder), tuple(map(str, errors)))
        return self._static_candidates() + folder, errors, state

    # -- running -----------------------------------------------------------------------------
    def start(self, *, strict: bool = True) -> None:
        """Load every plugin and build every chain. Raises ConfigError when a listener's chain
        names an unknown preprocessor or gives invalid options (with `strict=False` the problems
        are kept in `chain_problems` instead, for listings)."""
        candidates, scan_errors, self._state = self._scan()
        gen, problems = self._build(candidates, scan_errors, None)
        self._note_errors(gen.errors)
        self.chain_problems = problems
        if problems and strict:
            forget_modules(gen.module_names())
            where = f"{self._config_file}: " if self._config_file else ""
            raise ConfigError(f"{where}preprocessor chains: " + "; ".join(problems))
        with self._lock:
            self._current = gen
        self.counters.set("plugin_generation", gen.number)
        log.info("plugins: %s", ", ".join(f"{p.name} ({p.kind})" for p in gen.plugins.values()) or "none")

    def close(self) -> None:
        """Forget the drop-in modules of the current generation (at shutdown, or in tests)."""
        if self._current is not None:
            forget_modules(self._current.module_names())

    @property
    def current(self) -> Generation:
        if self._current is None:
            raise PluginError("the plugin host has not been started")
        return self._current

    @property
    def generation(self) -> int:
        return self.current.number

    def chain(self, key: int) -> PreprocessorChain:
        """A snapshot of listener entry `key`'s chain for one unit of work."""
        with self._lock:
            gen = self.current
            self._unit_seq += 1
            unit = self._unit_seq
        return PreprocessorChain(gen.chains[key], unit)

    def chain_provider(self, key: int) -> Callable[[], PreprocessorChain]:
        if key not in self.requests:
            raise ConfigError(f"no listener entry {key} in the plugin host")
        return lambda: self.chain(key)

    def chain_factory(self, listener_config: Any) -> Callable[[], PreprocessorChain]:
        """`Bridge(chain_factory=...)`: the chain provider of one configured listener entry."""
        listeners = list(getattr(self._config, "listeners", ()))
        for index, candidate in enumerate(listeners):
            if candidate is listener_config:
                return self.chain_provider(index)
        raise ConfigError(f"listener {listener_config.source}:{listener_config.queue} is not in the configuration "
                          "the plugin host was built from")

    def check_for_changes(self) -> bool:
        """Rescan the plugin folders; build, validate and swap in a new generation if anything
        changed. Returns True if a new generation was swapped in. Never raises."""
        try:
            return self._check()
        except Exception:
            log.exception("plugin reload failed unexpectedly; keeping generation %d", self.generation)
            self.counters.inc("plugin_reload_failures")
            return False

    def _check(self) -> bool:
        candidates, scan_errors, state = self._scan()
        if state == self._state:
            return False
        self._state = state
        current = self.current
        gen, problems = self._build(candidates, scan_errors, current)
        self.kept = dict(gen.kept)
        fallback = {gen.plugins[k].name for k, why in gen.kept.items() if why.startswith(KEEPING)}
        self._note_errors(gen.errors, fallback)
        self._report("kept", log.warning, [f"plugin {gen.plugins[k].name}: {why}" for k, why in gen.kept.items()
                                           if not why.startswith(KEEPING)])
        if problems:
            self.reload_error = "; ".join(problems)
            self.counters.inc("plugin_reload_failures")
            forget_modules(gen.module_names() - current.module_names())
            self._report("rejected", log.error, [f"plugin reload rejected, keeping generation "
                                                 f"{current.number}: {self.reload_error}"])
            return False
        self.reload_error = ""
        self._report("rejected", log.error, [])
        if {k: id(p.obj) for k, p in gen.plugins.items()} == {k: id(p.obj) for k, p in current.plugins.items()}:
            return False  # only errors changed: every plugin runs the version it ran before
        with self._lock:
            self._current = gen
        self.reloaded_at = time.time()
        forget_modules(current.module_names() - gen.module_names())
        self.counters.inc("plugin_reloads")
        self.counters.set("plugin_generation", gen.number)
        changed = sorted(p.name for k, p in gen.plugins.items() if current.plugins.get(k) is not p)
        removed = sorted(p.name for k, p in current.plugins.items() if k not in gen.plugins)
        log.info("plugins reloaded: generation %d (new or changed: %s; removed: %s)", gen.number,
                 ", ".join(changed) or "none", ", ".join(removed) or "none")
        return True

    def _note_errors(self, errors: list[LoadError], fallback: Collection[str] = ()) -> None:
        self.errors = list(errors)
        self.counters.set("plugin_errors", len(errors))
        texts = [f"plugin {e.plugin}: new version not loaded, the previous one keeps running: {e}"
                 if e.plugin in fallback else f"plugin {e.plugin} not loaded: {e}" for e in errors]
        for error in self._report("errors", log.error, texts):
            self.counters.inc("plugin_load_errors", plugin=errors[error].plugin)

    def _report(self, kind: str, emit: Callable[..., None], texts: list[str]) -> list[int]:
        """Log each text that was not already being reported (an error is logged once, when it
        appears, not on every rescan); returns the indexes of the new ones."""
        before = self._active.get(kind, set())
        self._active[kind] = set(texts)
        new = [i for i, text in enumerate(texts) if text not in before]
        for i in new:
            emit("%s", texts[i])
        return new

    # -- the bridge ----------------------------------------------------------------------------
    def attach(self, bridge: Bridge) -> None:
        """Reload on every control tick, observe results of every type, report in the status."""
        bridge.tick_hooks.append(self._tick)
        for type_name in bridge.config.types:
            bridge.collector.register_result_handler(self.observe_result, message_type=type_name)
        status_hooks = getattr(bridge, "status_hooks", None)
        if status_hooks is not None:
            status_hooks["plugins"] = self.status

    def _tick(self, _bridge: Bridge) -> None:
        self.check_for_changes()

    def observe_result(self, message: Message, result: MessageResult) -> None:
        """Collector result handler: calls `mqbridge_result` of the current generation."""
        hook = self.current.pm.hook.mqbridge_result
        if not hook.get_hookimpls():
            return
        try:
            hook(message=message, result=result)
        except Exception as exc:
            self.counters.inc("plugin_observer_errors")
            text = f"{type(exc).__name__}: {exc}"
            if text not in self._observer_errors and len(self._observer_errors) < 100:
                self._observer_errors.add(text)
                log.error("mqbridge_result hook failed (logged once): %s", text, exc_info=exc)

    def status(self) -> dict[str, Any]:
        """The status page's "plugins" field."""
        gen = self._current
        return {
            "generation": gen.number if gen else 0,
            "plugins": self.describe(),
            "errors": [e.as_dict() for e in self.errors],
            "reload_error": self.reload_error,
            "reloaded_at": self.reloaded_at,
        }

    def describe(self) -> list[dict[str, Any]]:
        """Every plugin: name, source, version or mtime, preprocessors, path and state."""
        gen = self._current
        rows: list[dict[str, Any]] = []
        for key, plugin in (gen.plugins.items() if gen else ()):
            rows.append({"name": plugin.name, "source": plugin.kind, "version": plugin.version,
                         "mtime": plugin.mtime, "preprocessors": list(plugin.preprocessors),
                         "path": str(plugin.path) if plugin.path else None,
                         "state": self.kept.get(key, "loaded")})
        loaded = {(r["name"], r["path"]) for r in rows}
        for error in self.errors:
            if (error.plugin, error.path) not in loaded:
                rows.append({"name": error.plugin, "source": "folder" if error.path else "", "version": None,
                             "mtime": None, "preprocessors": [], "path": error.path, "state": f"error: {error}"})
        for name, kind, where in self.disabled_found:
            rows.append({"name": name, "source": kind, "version": None, "mtime": None, "preprocessors": [],
                         "path": where, "state": "disabled by MQBRIDGE_DISABLED_PLUGINS"})
        return rows


def build_bridge(config: Any, **bridge_kwargs: Any) -> tuple[Bridge, PluginHost]:
    """A Bridge whose listeners run the preprocessor chains of `config`, with the plugin host
    attached (reload on every control tick, result observers, status). Raises ConfigError if a
    chain cannot be built."""
    from mqbridge.control import Bridge

    counters = bridge_kwargs.pop("counters", None) or Counters()
    host = PluginHost.from_config(config, counters=counters)
    host.start()
    bridge = Bridge(config, chain_factory=host.chain_factory, counters=counters, **bridge_kwargs)
    host.attach(bridge)
    return bridge, host


def report(host: PluginHost) -> tuple[str, bool]:
    """`mqbridge plugins`: a listing of the plugins, errors and chains; and whether all is well."""
    lines = [f"plugins (generation {host.status()['generation']}):"]
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
    gen = host._current
    if host.requests:
        lines.append("chains:")
        for key, request in host.requests.items():
            spec = gen.chains.get(key) if gen else None
            names = " -> ".join(step.name for step in spec.steps) if spec and spec.steps else "(none)"
            lines.append(f"  {request.label}: {names}")
    if host.chain_problems:
        lines.append("chain errors:")
        lines += [f"  {problem}" for problem in host.chain_problems]
    return "\n".join(lines), not host.errors and not host.chain_problems


__all__ = ["ChainRequest", "Generation", "PluginHost", "build_bridge", "report", "requests_from_config"]
