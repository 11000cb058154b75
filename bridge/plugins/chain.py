"""The preprocessor chain of one listener entry, as the listener loop sees it (its `Chain` protocol).

A `ChainSpec` is built once per listener entry and plugin generation (hot reload makes a new
one). The host hands each unit of work a fresh `PreprocessorChain` over the spec current at
that moment, so a unit of work runs on one generation from start to end even if a reload swaps
in a new one meanwhile. The chain a preprocessor is running in is `current_chain()`.

Preprocessors never see the message the source adapter holds: the adapter keeps that one for
commits and backout moves, so the chain hands the first preprocessor a copy (with its own
headers dict) and passes each result on to the next.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import pluggy

from mqbridge.errors import PreprocessorError
from mqbridge.message import Message, Rollback
from mqbridge.plugins.registry import Preprocessor

log = logging.getLogger(__name__)

_current: contextvars.ContextVar[PreprocessorChain | None] = contextvars.ContextVar(
    "mqbridge_current_chain", default=None)


def current_chain() -> PreprocessorChain | None:
    """The chain whose preprocessor or classify hook is running on this thread, else None.
    Its `listener`, `generation` and `unit` say where and in which unit of work a message is
    being handled."""
    return _current.get()


def copy_message(message: Message) -> Message:
    """A copy a preprocessor may change freely (the headers dict is copied too)."""
    return dataclasses.replace(message, headers=dict(message.headers))


@dataclass(frozen=True)
class Step:
    """One configured preprocessor of a chain."""

    name: str  # the registered preprocessor name
    plugin: str  # display name of the plugin that registered it
    instance: Preprocessor

    @functools.cached_property
    def undo(self) -> Callable[[Message, Rollback], None] | None:
        """The instance's `on_submit_error` as the chain calls it (None: it has none). A hook whose
        second parameter is named `reason` gets the `Rollback`; any other (`error`, as written
        before there was a `Rollback`) gets its `error`, an exception."""
        hook: Callable[[Message, Any], None] | None = getattr(self.instance, "on_submit_error", None)
        if hook is None:
            return None
        if _second_parameter(hook) == "reason":
            return hook
        return lambda message, reason: hook(message, reason.error)


@dataclass(frozen=True)
class ChainSpec:
    """The steps of one listener entry in one plugin generation (shared by its units of work)."""

    listener: str  # "source:queue": the listener entry's name, its key in a generation's chains
    steps: tuple[Step, ...] = ()
    generation: int = 0
    classify_hook: pluggy.HookCaller | None = None  # mqbridge_classify of the generation
    plugin_names: Mapping[str, str] = field(default_factory=dict)  # pluggy name -> display name


class Judge(Protocol):
    """Who decides whether a newly swapped-in generation's chain is kept (the plugin host)."""

    def fallback_spec(self, spec: ChainSpec) -> ChainSpec | None:
        """The last good generation's chain for `spec`'s listener entry while `spec` is on trial."""

    def record(self, spec: ChainSpec, succeeded: int, blamed: int, failed: int = 0) -> None:
        """How `spec` did on one unit of work (see `PreprocessorChain.record`); `failed`: the
        messages it raised on, blamed or not."""


class PreprocessorChain:
    """One unit of work's snapshot of a listener's chain (implements `mqbridge.loop.preprocess.Chain`)."""

    __slots__ = ("failed", "judge", "spec", "unit")

    def __init__(self, spec: ChainSpec, unit: int = 0, judge: Judge | None = None) -> None:
        self.spec = spec
        #: Sequence number of the unit of work, unique in the process and increasing in the
        #: order units took their snapshot (so also across a generation swap).
        self.unit = unit
        self.judge = judge
        #: Messages this snapshot raised on (classify or process): a canary is rolled back on one.
        self.failed = 0

    @property
    def listener(self) -> str:
        return self.spec.listener

    @property
    def generation(self) -> int:
        """The plugin generation this chain runs (1 at start-up, +1 per reload swapped in)."""
        return self.spec.generation

    @property
    def names(self) -> list[str]:
        return [step.name for step in self.spec.steps]

    def __repr__(self) -> str:
        return (f"<PreprocessorChain {self.listener} generation={self.generation} unit={self.unit} "
                f"steps={self.names}>")

    # -- the Chain protocol --------------------------------------------------------------------
    def classify(self, message: Message) -> str | None:
        """Ask each step's `classify` in chain order, then the `mqbridge_classify` hook; the
        first answer wins. Runs on a copy of the original, unpreprocessed message."""
        spec = self.spec
        token = _current.set(self)
        try:
            for step in spec.steps:
                classify = getattr(step.instance, "classify", None)
                if classify is None:
                    continue
                try:
                    answer = classify(copy_message(message))
                except Exception as exc:
                    self.failed += 1
                    raise PreprocessorError(
                        f"preprocessor {step.name!r} (plugin {step.plugin}) failed to classify message "
                        f"{message.msg_id}: {type(exc).__name__}: {exc}", step.name) from exc
                if answer is not None:
                    return _checked_type(answer, step.name)
            hook = spec.classify_hook
            if hook is None or not hook.get_hookimpls():
                return None
            try:
                answer = hook(message=copy_message(message), listener=spec.listener)
            except Exception as exc:
                self.failed += 1
                plugin = _blame(hook, exc.__traceback__, spec.plugin_names)
                raise PreprocessorError(
                    f"mqbridge_classify of plugin {plugin} failed on message {message.msg_id}: "
                    f"{type(exc).__name__}: {exc}", plugin) from exc
            return None if answer is None else _checked_type(answer, "mqbridge_classify")
        finally:
            _current.reset(token)

    def process(self, message: Message) -> Message | None:
        """Run every step in order on a copy of `message`; None if a step consumed it. With no
        step, `message` itself (as a PlainChain does): nothing may change it, and a copy per
        message cost about 6% of the bridge's CPU (bench/throughput.py --mode steady)."""
        if not self.spec.steps:
            return message
        current = copy_message(message)
        token = _current.set(self)
        try:
            for step in self.spec.steps:
                try:
                    out = step.instance.process(current)
                except Exception as exc:
                    self.failed += 1
                    raise PreprocessorError(
                        f"preprocessor {step.name!r} (plugin {step.plugin}) failed on message "
                        f"{message.msg_id}: {type(exc).__name__}: {exc}", step.name) from exc
                if out is None:
                    return None
                if not isinstance(out, Message):
                    self.failed += 1
                    raise PreprocessorError(
                        f"preprocessor {step.name!r} (plugin {step.plugin}) returned "
                        f"{type(out).__name__}, not a Message or None", step.name)
                if out.msg_id != message.msg_id:
                    # The listener matches results and commits by message id.
                    self.failed += 1
                    raise PreprocessorError(
                        f"preprocessor {step.name!r} (plugin {step.plugin}) changed msg_id "
                        f"{message.msg_id!r} to {out.msg_id!r}; it must stay the source's id", step.name)
                current = out
        finally:
            _current.reset(token)
        # A preprocessor may build a new Message: keep what the listener and adapter rely on.
        current.token = message.token
        if not current.message_type:
            current.message_type = message.message_type
        return current

    def on_submit_error(self, message: Message, reason: Rollback) -> None:
        """Tell every step that has `on_submit_error` (also those after a step that raised, which
        never saw the message) that this delivery of `message` does not leave the queue as landed,
        and why: `Step.undo`. Each step gets its own copy of the message as received. One step
        failing does not keep the others from being told. When the listener calls this:
        `mqbridge.loop.undo`."""
        token = _current.set(self)
        try:
            for step in self.spec.steps:
                undo = step.undo
                if undo is None:
                    continue
                try:
                    undo(copy_message(message), reason)
                except Exception:
                    log.exception("%s: on_submit_error of preprocessor %r (plugin %s) failed for message %s",
                                  self.listener, step.name, step.plugin, message.msg_id)
        finally:
            _current.reset(token)


    def fallback(self) -> PreprocessorChain | None:
        """The last good generation's chain, while this one's generation is on trial (swapped in by
        a reload and no message got through it yet); else None."""
        if self.judge is None:
            return None
        good = self.judge.fallback_spec(self.spec)
        return None if good is None else PreprocessorChain(good, self.unit)

    def record(self, succeeded: int, blamed: int) -> None:
        """How this chain did on one unit of work: messages it got through, and messages it raised
        on that the last good generation got through (`blamed`). The judge also hears how many
        messages it raised on in all (`failed`)."""
        if self.judge is not None and (succeeded or blamed or self.failed):
            self.judge.record(self.spec, succeeded, blamed, self.failed)


def _second_parameter(hook: Callable[..., Any]) -> str | None:
    """The name of the second positional parameter of a (bound) `on_submit_error`, if it has one."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # no signature to read (some builtins): the old convention
        return None
    positional = [p.name for p in parameters
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    return positional[1] if len(positional) > 1 else None


def _checked_type(answer: object, who: str) -> str:
    if not isinstance(answer, str) or not answer:
        raise PreprocessorError(f"{who} returned {answer!r} as message type; expected a type name", who)
    return answer


def _blame(hook: pluggy.HookCaller, tb: TracebackType | None, names: Mapping[str, str]) -> str:
    """The display name of the plugin whose hookimpl raised (found in the traceback)."""
    codes = {impl.function.__code__: impl.plugin_name for impl in hook.get_hookimpls()
             if hasattr(impl.function, "__code__")}
    while tb is not None:
        plugin = codes.get(tb.tb_frame.f_code)
        if plugin is not None:
            return names.get(plugin, plugin)
        tb = tb.tb_next
    return "mqbridge_classify"
