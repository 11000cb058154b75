"""Every hook a mqbridge plugin can implement, in one place.

A plugin is a module (a built-in in `preprocessors/`, a loose `.py` file in a `[bridge]
plugin_dirs` folder, or an installed package registered under the `mqbridge` entry-point group)
whose functions are marked with `bridge.hookimpl`:

    from mqbridge import hookimpl

    @hookimpl
    def mqbridge_register_preprocessors(registry):
        registry.add("stamp", Stamp, options=StampOptions)

Preprocessor *order* is not pluggy's call order: a listener's `preprocessors = [...]` list names
registered preprocessors and the chain calls them one by one, in that order. Hooks here are for
contributing preprocessors and for decisions or observations that are not part of a chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from mqbridge.message import Message, MessageResult
    from mqbridge.plugin_registry import PreprocessorRegistry

PROJECT = "mqbridge"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def mqbridge_register_preprocessors(registry: PreprocessorRegistry) -> None:
    """Contribute named preprocessors.

    Call `registry.add(name, factory, options=OptionsModel, description=...)` once per
    preprocessor. `factory(options)` is called with the validated options (an instance of the
    pydantic model, or of an empty model when `options` is None) once per listener entry that
    names the preprocessor, and returns an object with `process(message) -> Message | None` and
    optionally `on_submit_error(message, error)` and `classify(message) -> str | None`, or just
    a callable `message -> Message | None`.

    Called again for every new plugin generation (hot reload); keep it free of side effects.
    """


@hookspec(firstresult=True)
def mqbridge_classify(message: Message, listener: str) -> str | None:
    """Choose the message type of `message` from its *original* content, before any
    preprocessing. The first non-None answer wins; None from every plugin (and from every
    `classify` method of the listener's preprocessors, which are asked first) keeps the
    listener's `message_type`.

    `listener` is "source:queue" of the listener entry. `message` is a copy: changing it has
    no effect. The type returned must be configured under `[types]`; an unknown type is a
    configuration error that stops the bridge. An exception rolls the unit of work back.
    """


@hookspec
def mqbridge_result(message: Message, result: MessageResult) -> None:
    """Observe the outcome of one message after its bulk was written (or failed to be):
    `result.outcome` is success, retryable or permanent, with `result.reason` and
    `result.bulk_id`. Called on a collector worker thread for every message of every bulk, after
    the result was handed to the listener (which may already be committing); keep it fast and do
    not change `message`. Exceptions are logged and counted, never passed on.
    """
