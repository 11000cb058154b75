"""One plugin *generation*: every plugin registered on a fresh pluggy manager, the preprocessors
they contribute, and each listener entry's chain built and validated from its configuration.

A plugin whose new version cannot be used (it did not load, a hookimpl does not match its spec,
its registration hook raised, its file became unsafe) keeps its previous version in the new
generation, as does a deleted file whose preprocessors the configuration still names; each such
plugin has a `KeptVersion` saying why. A generation whose chains have `problems` must not be used.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from mqbridge.errors import PluginError, PluginLoadError
from mqbridge.plugins import spec
from mqbridge.plugins.chain import ChainSpec, Step
from mqbridge.plugins.discovery import (
    Candidate,
    LoadProblem,
    Plugin,
    Source,
    error_line,
    forget_modules,
)
from mqbridge.plugins.registry import PreprocessorRegistry

if TYPE_CHECKING:
    from mqbridge.config import BridgeConfig


@dataclass(frozen=True)
class ChainRequest:
    """One listener entry's configured chain: `preprocessors = [...]`, keyed by the listener's name
    (`source:queue`, unique in a valid configuration)."""

    listener: str  # "amq:/queue/orders"
    label: str  # "listeners[0] (amq:/queue/orders)", for errors
    refs: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    plugins: str | int = "follow"  # which generation it runs: follow | pinned | a number (mqbridge.plugins.pinning)
    canary: bool = False  # a reload is swapped in here first
    canary_units: int = 10  # clean units of work before a canary's generation is promoted
    canary_seconds: float = 60.0  # and time since it was swapped in

    @property
    def key(self) -> str:
        return self.listener


def requests_from_config(config: BridgeConfig) -> list[ChainRequest]:
    """The chain of every listener entry, in the order of `config.listeners`."""
    requests = []
    for index, listener in enumerate(config.listeners):
        name = f"{listener.source}:{listener.queue}"
        refs = tuple((ref.name, dict(ref.options)) for ref in listener.preprocessors)
        requests.append(ChainRequest(name, f"listeners[{index}] ({name})", refs, listener.plugins,
                                     listener.plugins_canary, listener.plugins_canary_units,
                                     listener.plugins_canary_time))
    return requests


class Kept(enum.Enum):
    """Why a generation runs a plugin's previously loaded version instead of what is on disk."""

    NEW_VERSION_FAILED = "new-version-failed"  # the changed file did not load or register
    UNSAFE = "unsafe"  # the file or its folder cannot be read safely any more
    STILL_NAMED = "still-named"  # the file was removed, but a listener names its preprocessors
    REJECTED = "rejected"  # this version raised on every message after it was swapped in


@dataclass(frozen=True)
class KeptVersion:
    """A plugin's previous version kept running, why, and the detail (error or names)."""

    why: Kept
    detail: str = ""

    def __str__(self) -> str:
        if self.why is Kept.STILL_NAMED:
            return (f"file removed, but preprocessor(s) {self.detail} are still named in the configuration: "
                    "keeping the loaded version until the configuration stops naming them")
        return f"keeping the previous version: {self.detail}"


@dataclass
class Generation:
    """One built set of plugins and chains; usable only when `problems` is empty."""

    number: int
    pm: pluggy.PluginManager
    registry: PreprocessorRegistry
    plugins: dict[str, Plugin] = field(default_factory=dict)
    errors: list[LoadProblem] = field(default_factory=list)
    chains: dict[str, ChainSpec] = field(default_factory=dict)  # by listener name
    kept: dict[str, KeptVersion] = field(default_factory=dict)  # plugin key -> why
    problems: list[str] = field(default_factory=list)  # chains that cannot be built
    disabled: list[Candidate] = field(default_factory=list)  # skipped: MQBRIDGE_DISABLED_PLUGINS

    def module_names(self) -> set[str]:
        return {p.module_name for p in self.plugins.values() if p.module_name}


def _manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(spec.PROJECT)
    pm.add_hookspecs(spec)
    return pm


@dataclass(frozen=True)
class GenerationBuilder:
    """Builds generations for a fixed set of listener chains (see the module docstring)."""

    requests: Mapping[str, ChainRequest]
    disabled: Collection[str] = frozenset()
    known_types: Collection[str] | None = None

    def build(self, candidates: Sequence[Candidate], scan_errors: Sequence[LoadProblem],
              previous: Generation | None, static_errors: Sequence[LoadProblem] = (), *,
              number: int | None = None, rejected: Mapping[str, tuple[Any, str]] | None = None) -> Generation:
        """A new generation from `candidates`, falling back to `previous` plugin by plugin.
        `rejected` maps plugin keys to (fingerprint, why) of versions that raised on every message
        after a swap: a candidate with that fingerprint keeps its previous version."""
        gen = Generation(number if number is not None else (previous.number + 1 if previous else 1), _manager(),
                         PreprocessorRegistry(), errors=[*static_errors, *scan_errors])
        rejected = rejected or {}
        old_plugins = previous.plugins if previous else {}
        unreadable = {str(Path(e.path).absolute()) for e in scan_errors if e.path}  # files and folders
        seen = set()
        for cand in candidates:
            if cand.name in self.disabled:
                gen.disabled.append(cand)
                continue
            seen.add(cand.key)
            self._add_candidate(gen, cand, old_plugins.get(cand.key), rejected)
        self._keep_vanished(gen, {k: p for k, p in old_plugins.items() if k not in seen}, unreadable)
        self._build_chains(gen)
        return gen

    def _add_candidate(self, gen: Generation, cand: Candidate, old: Plugin | None,
                       rejected: Mapping[str, tuple[Any, str]]) -> None:
        """Add `cand` to `gen`: its `old` version where unchanged or rejected, else the candidate
        loaded now; if that fails to load or register, the error, and `old` kept in its place."""
        loaded: Plugin | None = None
        error: LoadProblem | None = None
        if old is not None and (cand.source is not Source.FOLDER or old.candidate.fingerprint == cand.fingerprint):
            loaded = old  # unchanged: do not run it again
        elif old is not None and cand.key in rejected and rejected[cand.key][0] == cand.fingerprint:
            loaded = old  # this version raised on every message: the previous one goes on
            gen.kept[cand.key] = KeptVersion(Kept.REJECTED, rejected[cand.key][1])
        else:
            try:
                loaded = cand.load()
            except PluginError as exc:
                error = _load_error(cand.name, exc, cand.path)
        if loaded is not None:
            error = self._register(gen, loaded)
            if error is None:
                return
            if loaded is not old and loaded.module_name:
                forget_modules([loaded.module_name])
        assert error is not None
        gen.errors.append(error)
        if old is not None and loaded is not old and self._register(gen, old) is None:
            gen.kept[cand.key] = KeptVersion(Kept.NEW_VERSION_FAILED, str(error))

    def _keep_vanished(self, gen: Generation, vanished: Mapping[str, Plugin], unreadable: set[str]) -> None:
        """Keep in `gen` the previous plugins no candidate stands for any more, where dropping them
        is not safe: their file or folder could not be read, or a chain still names their
        preprocessors (a disabled plugin is dropped)."""
        used = {name for r in self.requests.values() for name, _ in r.refs}
        for key, old in vanished.items():
            if old.name in self.disabled:
                continue
            path = old.candidate.path
            still_used = sorted(used & set(old.preprocessors))
            if path is not None and {str(path.absolute()), str(path.parent.absolute())} & unreadable:
                kept = KeptVersion(Kept.UNSAFE, "its file or folder cannot be read safely")
            elif still_used:
                kept = KeptVersion(Kept.STILL_NAMED, ", ".join(still_used))
            else:
                continue
            if self._register(gen, old) is None:
                gen.kept[key] = kept

    def _register(self, gen: Generation, plugin: Plugin) -> LoadProblem | None:
        """Validate `plugin` on a scratch manager, let it register its preprocessors, then add it
        to the generation. Returns the error instead of raising."""
        obj = plugin.obj
        try:
            for attr in dir(obj):
                value = getattr(obj, attr, None)
                if attr.startswith("mqbridge_") and callable(value) and not hasattr(value, "mqbridge_impl"):
                    raise PluginLoadError(f"{attr} is not marked with @hookimpl (from mqbridge import hookimpl)",
                                          None, getattr(getattr(value, "__code__", None), "co_firstlineno", None))
            scratch = _manager()
            scratch.register(obj, name=plugin.key)
            scratch.check_pending()
        except pluggy.PluginValidationError as exc:
            return _load_error(plugin.name, _explain(exc, obj, plugin.key), plugin.path)
        except PluginError as exc:
            return _load_error(plugin.name, exc, plugin.path)
        registry = gen.registry
        registry.begin(plugin.name)
        try:
            scratch.hook.mqbridge_register_preprocessors(registry=registry)
        except Exception as exc:
            registry.discard(registry.added())
            return _load_error(plugin.name, exc, plugin.path, prefix="mqbridge_register_preprocessors failed: ")
        plugin.preprocessors = registry.added()
        gen.pm.register(obj, name=plugin.key)
        gen.plugins[plugin.key] = plugin
        return None

    def _build_chains(self, gen: Generation) -> None:
        names = {key: p.name for key, p in gen.plugins.items()}
        for request in self.requests.values():
            steps = []
            for name, options in request.refs:
                ptype = gen.registry.get(name)
                if ptype is None:
                    gen.problems.append(f"{request.label}: unknown preprocessor {name!r}{self._hint(gen, name)}")
                    continue
                try:
                    instance = ptype.instantiate(options)
                except PluginError as exc:
                    gen.problems.append(f"{request.label}: preprocessor {name!r} (plugin {ptype.plugin}): {exc}")
                    continue
                unknown = set(getattr(instance, "message_types", ()) or ()) - set(self.known_types or ())
                if self.known_types is not None and unknown:
                    gen.problems.append(f"{request.label}: preprocessor {name!r} (plugin {ptype.plugin}) routes to "
                                        f"unconfigured message type(s) {', '.join(sorted(unknown))}")
                steps.append(Step(name, ptype.plugin, instance))
            gen.chains[request.listener] = ChainSpec(request.listener, tuple(steps), gen.number,
                                                     classify_hook=gen.pm.hook.mqbridge_classify, plugin_names=names)

    def _hint(self, gen: Generation, name: str) -> str:
        hints = [f"known: {', '.join(gen.registry.names()) or 'none'}"]
        hints += [f"plugin {name!r} is disabled by MQBRIDGE_DISABLED_PLUGINS"
                  for found in gen.disabled if found.name == name]
        hints += [f"load error: {e}" for e in gen.errors]
        return " (" + "; ".join(hints) + ")"


def _explain(exc: pluggy.PluginValidationError, obj: object, key: str) -> PluginLoadError:
    """pluggy's message, on one line, without its internal plugin names, with the line of the
    offending hookimpl."""
    text = " ".join(str(exc).split())
    text = text.replace(f"Plugin '{key}' ", "").replace(f" in plugin {obj!r}", "")
    line = None
    for attr in dir(obj):
        code = getattr(getattr(obj, attr, None), "__code__", None)
        if attr.startswith("mqbridge_") and code is not None and f"'{attr}'" in text:
            line = code.co_firstlineno
    return PluginLoadError(text, None, line)


def _load_error(plugin: str, exc: BaseException, path: Path | None, prefix: str = "") -> LoadProblem:
    where = str(path) if path else None
    line = getattr(exc, "line", None)
    if line is None and where:
        line = error_line(exc, where)
    message = str(exc)
    if not isinstance(exc, PluginError | pluggy.PluginValidationError):
        message = f"{type(exc).__name__}: {exc}"
    elif isinstance(exc, PluginLoadError) and exc.path and exc.path != where:
        where = exc.path
    return LoadProblem(plugin, prefix + message, where, line)
