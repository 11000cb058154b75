"""Building one plugin *generation*: every plugin registered on a fresh pluggy manager, the
preprocessors they contribute, and each listener entry's chain built and validated from its
configured names and options.

A plugin whose new version cannot be used (it did not load, a hookimpl does not match its spec,
its registration hook raised) keeps its previous version in the new generation, as does a
deleted file whose preprocessors the configuration still names. The host decides what to do
with the result (swap it in, or not when the chains have problems).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pluggy

from mqbridge import hookspecs
from mqbridge.chain import ChainSpec, Step
from mqbridge.errors import PluginError
from mqbridge.plugin_loader import (
    FOLDER,
    Candidate,
    LoadedPlugin,
    LoadError,
    PluginLoadError,
    error_line,
    forget_modules,
    load_candidate,
)
from mqbridge.plugin_registry import PreprocessorRegistry

KEEPING = "keeping the previous version"


@dataclass(frozen=True)
class ChainRequest:
    """One listener entry's configured chain: `preprocessors = [...]`."""

    key: int  # index in the configuration's listeners
    label: str  # "listeners[0] (amq:/queue/orders)", for errors
    listener: str  # "amq:/queue/orders"
    refs: tuple[tuple[str, Mapping[str, Any]], ...] = ()


@dataclass
class Generation:
    """One validated set of plugins and chains."""

    number: int
    pm: pluggy.PluginManager
    plugins: dict[str, LoadedPlugin]
    registry: PreprocessorRegistry
    errors: list[LoadError] = field(default_factory=list)
    chains: dict[int, ChainSpec] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)  # plugin key -> why its old version is kept

    def module_names(self) -> set[str]:
        return {p.module_name for p in self.plugins.values() if p.module_name}


def requests_from_config(config: Any) -> list[ChainRequest]:
    """The chain of every listener entry; a preprocessor is "name" or {name = ..., options...}."""
    requests = []
    for index, listener in enumerate(config.listeners):
        refs: list[tuple[str, Mapping[str, Any]]] = []
        for ref in getattr(listener, "preprocessors", None) or ():
            if isinstance(ref, str):
                refs.append((ref, {}))
            else:
                refs.append((ref.name, dict(getattr(ref, "options", None) or {})))
        name = f"{listener.source}:{listener.queue}"
        requests.append(ChainRequest(index, f"listeners[{index}] ({name})", name, tuple(refs)))
    return requests


class GenerationBuilder:
    """Builds generations for a fixed set of listener chains (see the module docstring)."""

    def __init__(self, requests: Mapping[int, ChainRequest], disabled: Collection[str] = (),
                 known_types: Collection[str] | None = None) -> None:
        self.requests = requests
        self.disabled = frozenset(disabled)
        self.known_types = None if known_types is None else set(known_types)
        #: Plugins skipped because of MQBRIDGE_DISABLED_PLUGINS in the last build: (name, kind, where).
        self.disabled_found: list[tuple[str, str, str]] = []

    def build(self, candidates: list[Candidate], scan_errors: list[LoadError], previous: Generation | None,
              static_errors: Sequence[LoadError] = ()) -> tuple[Generation, list[str]]:
        """A new generation from `candidates`, falling back to `previous` plugin by plugin.
        Returns it and the chain errors that make it unusable (then it must not be used)."""
        pm = pluggy.PluginManager(hookspecs.PROJECT)
        pm.add_hookspecs(hookspecs)
        gen = Generation((previous.number + 1) if previous else 1, pm, {}, PreprocessorRegistry(),
                         errors=list(static_errors) + list(scan_errors))
        old_plugins = previous.plugins if previous else {}
        failed = {f"{FOLDER}:{Path(e.path).absolute()}" for e in scan_errors if e.path}
        failed_dirs = {str(Path(e.path).absolute()) for e in scan_errors if e.path}
        self.disabled_found = []
        seen = set()
        for cand in candidates:
            if cand.name in self.disabled:
                self.disabled_found.append((cand.name, cand.kind, str(cand.path or cand.key)))
                continue
            seen.add(cand.key)
            old = old_plugins.get(cand.key)
            error = None
            loaded = None
            if old is not None and (cand.kind != FOLDER or old.fingerprint == cand.fingerprint):
                loaded = old  # unchanged: do not run it again
            else:
                try:
                    loaded = load_candidate(cand)
                except PluginError as exc:
                    error = _load_error(cand.name, exc, cand.path)
            if loaded is not None:
                error = self._register(gen, loaded)
                if error is None:
                    continue
                forget_modules([loaded.module_name] if loaded is not old and loaded.module_name else [])
            assert error is not None
            gen.errors.append(error)
            if old is not None and loaded is not old and self._register(gen, old) is None:
                gen.kept[cand.key] = f"{KEEPING}: {error}"
        used = {name for r in self.requests.values() for name, _ in r.refs}
        for key, old in old_plugins.items():
            if key in seen or old.name in self.disabled:
                continue
            in_failed_dir = old.path is not None and str(old.path.parent.absolute()) in failed_dirs
            still_used = sorted(used & set(old.preprocessors))
            if key in failed or in_failed_dir:
                reason = f"{KEEPING}: its file or folder cannot be read safely"
            elif still_used:
                reason = (f"file removed, but preprocessor(s) {', '.join(still_used)} are still named in the "
                          "configuration: keeping the loaded version until the configuration stops naming them")
            else:
                continue
            if self._register(gen, old) is None:
                gen.kept[key] = reason
        return gen, self._build_chains(gen)

    def _register(self, gen: Generation, plugin: LoadedPlugin) -> LoadError | None:
        """Validate `plugin` on a scratch manager, let it register its preprocessors, then add it
        to the generation. Returns the error instead of raising."""
        obj = plugin.obj
        try:
            for attr in dir(obj):
                value = getattr(obj, attr, None)
                if attr.startswith("mqbridge_") and callable(value) and not hasattr(value, "mqbridge_impl"):
                    raise PluginLoadError(f"{attr} is not marked with @hookimpl (from bridge import hookimpl)",
                                          None, getattr(getattr(value, "__code__", None), "co_firstlineno", None))
            scratch = pluggy.PluginManager(hookspecs.PROJECT)
            scratch.add_hookspecs(hookspecs)
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

    def _build_chains(self, gen: Generation) -> list[str]:
        problems = []
        names = {key: p.name for key, p in gen.plugins.items()}
        for request in self.requests.values():
            steps = []
            for name, options in request.refs:
                ptype = gen.registry.get(name)
                if ptype is None:
                    problems.append(f"{request.label}: unknown preprocessor {name!r}{self._hint(gen, name)}")
                    continue
                try:
                    instance = ptype.instantiate(options)
                except PluginError as exc:
                    problems.append(f"{request.label}: preprocessor {name!r} (plugin {ptype.plugin}): {exc}")
                    continue
                types = set(getattr(instance, "message_types", ()) or ())
                if self.known_types is not None and types - self.known_types:
                    problems.append(f"{request.label}: preprocessor {name!r} (plugin {ptype.plugin}) routes to "
                                    f"unconfigured message type(s) {', '.join(sorted(types - self.known_types))}")
                steps.append(Step(name, ptype.plugin, instance))
            gen.chains[request.key] = ChainSpec(request.listener, tuple(steps), gen.number,
                                                gen.pm.hook.mqbridge_classify, names)
        return problems

    def _hint(self, gen: Generation, name: str) -> str:
        hints = [f"known: {', '.join(gen.registry.names()) or 'none'}"]
        hints += [f"plugin {name!r} is disabled by MQBRIDGE_DISABLED_PLUGINS"
                  for found, _, _ in self.disabled_found if found == name]
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


def _load_error(plugin: str, exc: BaseException, path: Path | None, prefix: str = "") -> LoadError:
    where = str(path) if path else None
    line = getattr(exc, "line", None)
    if line is None and where:
        line = error_line(exc, where)
    message = str(exc)
    if not isinstance(exc, PluginError | pluggy.PluginValidationError):
        message = f"{type(exc).__name__}: {exc}"
    elif isinstance(exc, PluginLoadError) and exc.path and exc.path != where:
        where = exc.path
    return LoadError(plugin, prefix + message, where, line)
