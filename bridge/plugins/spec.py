"""Every hook a mqbridge plugin can implement, in one place, and the pluggy markers.

Preprocessor *order* is not pluggy's call order: a listener's `preprocessors = [...]` list names
registered preprocessors and the chain calls them one by one, in that order. The hooks here
contribute preprocessors, or make decisions and observations that are not part of a chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from mqbridge.message import Message, MessageResult
    from mqbridge.plugins.registry import PreprocessorRegistry

PROJECT = "mqbridge"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def mqbridge_register_preprocessors(registry: PreprocessorRegistry) -> None:
    """Contribute named preprocessors.

    :param registry: call `registry.add(name, factory, options=OptionsModel, description=...)`
        once per preprocessor. `factory(options)` is called with the validated options (an
        instance of the pydantic model, or of an empty model when `options` is None) once per
        listener entry that names the preprocessor, and returns an object with
        `process(message) -> Message | None` and optionally `on_submit_error(message, reason)` and
        `classify(message) -> str | None`, or just a callable `message -> Message | None`.
        `on_submit_error` is called once for each delivery it processed that does not leave the
        queue as landed, with a `Rollback` saying why (see `Preprocessor` in
        `mqbridge.plugins.registry`, and docs/plugins.md).

    Called again for every new plugin generation (hot reload); keep it free of side effects.
    """


@hookspec(firstresult=True)
def mqbridge_classify(message: Message, listener: str) -> str | None:
    """Choose the message type of `message` from its *original* content, before preprocessing.

    :param message: a copy of the received message; changing it has no effect.
    :param listener: "source:queue" of the listener entry.
    :return: a type configured under `[types]`, or None. The first non-None answer wins; None
        from every plugin (and from every `classify` method of the listener's preprocessors,
        which are asked first) keeps the listener's `message_type`. An unknown type is a
        configuration error that stops the bridge; an exception rolls the unit of work back.
    """


@hookspec
def mqbridge_result(message: Message, result: MessageResult) -> None:
    """Observe the outcome of one message after its bulk was written (or failed to be).

    :param message: the message as it was submitted; do not change it.
    :param result: `outcome` (success, retryable or permanent), `reason` and `bulk_id`.

    Called on a collector worker thread for every message of every bulk, after the result was
    handed to the listener (which may already be committing); keep it fast. Exceptions are
    logged and counted, never passed on.
    """
