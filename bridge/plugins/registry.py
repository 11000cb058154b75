"""What plugins contribute: named preprocessor types, each with an options model.

`PreprocessorRegistry` is handed to `mqbridge_register_preprocessors`; one registry is filled
per plugin generation. A `PreprocessorType` turns a listener's options into a preprocessor
instance (`instantiate`), validating them against the type's pydantic model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError

from mqbridge.config import key_path
from mqbridge.config.messages import problems_of
from mqbridge.errors import PluginError
from mqbridge.message import Message

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


class PreprocessorOptions(BaseModel):
    """Base class for option models: unknown keys are errors and instances are immutable
    (one preprocessor instance may serve several threads)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoOptions(PreprocessorOptions):
    """The options of a preprocessor that takes none."""


@runtime_checkable
class Preprocessor(Protocol):
    """A preprocessor instance. One instance serves every listener thread of the listener entry
    that names it, so `process` may be called from several threads at once.

    Optional methods, called when present:
      `classify(message) -> str | None` — choose the type from the original content;
      `on_submit_error(message, reason) -> None` — undo: this delivery of `message` does not leave
        its queue as landed. Called once per delivery the chain processed (`process` ran, or a
        step raised) that is not committed as landed or consumed, on the listener thread, with a
        copy of the message as received and a `mqbridge.Rollback`: its `kind` is "preprocessor"
        (a preprocessor raised on it), "write_failed" (its bulk write failed for it), "outage"
        (its sink was unavailable), "unit_backout" (its whole unit went back: IBM MQ backing out
        a unit another message failed in, or a source commit that failed) or "in_doubt" (the
        source commit's outcome is unknown); `error` is the exception behind it, `landed` says
        it is in its table anyway, `moved` that it goes to the backout queue. Its own failures
        are told before the unit is committed or backed out; a failed commit is told after it.
        A hook whose second parameter is not named `reason` (`on_submit_error(message, error)`)
        gets `reason.error` instead: an exception, as before. Exceptions are logged, never passed
        on. See docs/plugins.md, "Undo: on_submit_error".
    """

    def process(self, message: Message) -> Message | None:
        """Return the (possibly new) message to pass on, or None to consume it: it is then
        committed from the source and never reaches Spark. `message` is the chain's own copy."""


Factory = Callable[[Any], "Preprocessor | Callable[[Message], Message | None]"]


class _FunctionPreprocessor:
    """Adapts a plain `message -> message | None` callable to the Preprocessor protocol."""

    def __init__(self, function: Callable[[Message], Message | None]) -> None:
        self.process = function

    def __repr__(self) -> str:
        return f"<preprocessor {getattr(self.process, '__qualname__', self.process)!r}>"


@dataclass(frozen=True)
class PreprocessorType:
    """A named preprocessor contributed by a plugin."""

    name: str
    factory: Factory
    options: type[BaseModel]
    plugin: str  # display name of the contributing plugin
    description: str = ""

    def validate_options(self, raw: Mapping[str, Any]) -> BaseModel:
        """The options as the type's model; raises PluginError listing every problem."""
        unknown = sorted(set(raw) - _accepted_keys(self.options))
        if unknown and self.options.model_config.get("extra") != "allow":
            accepted = ", ".join(sorted(_accepted_keys(self.options))) or "none"
            raise PluginError(f"unknown option(s) {', '.join(unknown)} (accepted: {accepted})")
        try:
            return self.options.model_validate(dict(raw))
        except ValidationError as exc:
            # Worded as the configuration's own keys are (no pydantic "Input should be ...").
            problems = "; ".join(f"{key_path(loc) or '(options)'}: {msg}" for loc, msg in problems_of(exc, None))
            raise PluginError(f"invalid options: {problems}") from None

    def instantiate(self, raw: Mapping[str, Any]) -> Preprocessor:
        """A new preprocessor instance for one listener entry."""
        options = self.validate_options(raw)
        try:
            made = self.factory(options)
        except Exception as exc:
            raise PluginError(f"could not be created: {type(exc).__name__}: {exc}") from exc
        if isinstance(made, Preprocessor):
            return made
        if callable(made):
            return _FunctionPreprocessor(made)
        raise PluginError(f"factory returned {type(made).__name__}, not a preprocessor "
                          "(an object with process(message) or a callable)")


def _accepted_keys(model: type[BaseModel]) -> set[str]:
    keys = set()
    for name, info in model.model_fields.items():
        keys.add(name)
        if info.alias:
            keys.add(info.alias)
    return keys


class PreprocessorRegistry:
    """Collects the preprocessors plugins register, attributing each to its plugin."""

    def __init__(self) -> None:
        self._types: dict[str, PreprocessorType] = {}
        self._plugin = "(unknown)"
        self._added: list[str] = []

    def add(self, name: str, factory: Factory, *, options: type[BaseModel] | None = None,
            description: str = "") -> None:
        """Register preprocessor `name`. `factory(options)` makes one instance per listener
        entry that names it; `options` is a pydantic model (subclass `PreprocessorOptions` so
        unknown keys are rejected) or None for a preprocessor without options."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise PluginError(f"invalid preprocessor name {name!r} (letters, digits, _ . -)")
        if not callable(factory):
            raise PluginError(f"preprocessor {name!r}: factory {factory!r} is not callable")
        model = NoOptions if options is None else options
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise PluginError(f"preprocessor {name!r}: options must be a pydantic model class, not {model!r}")
        existing = self._types.get(name)
        if existing is not None:
            raise PluginError(f"preprocessor {name!r} is already registered by plugin {existing.plugin!r}")
        self._types[name] = PreprocessorType(name, factory, model, self._plugin, description.strip())
        self._added.append(name)

    # -- used by the host --------------------------------------------------------------------
    def begin(self, plugin: str) -> None:
        """Attribute what is added from now on to `plugin`."""
        self._plugin = plugin
        self._added = []

    def added(self) -> list[str]:
        """Names added since the last `begin`."""
        return list(self._added)

    def discard(self, names: list[str]) -> None:
        """Drop names added by a plugin whose registration then failed."""
        for name in names:
            self._types.pop(name, None)

    def get(self, name: str) -> PreprocessorType | None:
        return self._types.get(name)

    def names(self) -> list[str]:
        return sorted(self._types)
