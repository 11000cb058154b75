"""An example mqbridge plugin: masks fields of JSON bodies and consumes heartbeats.

Put this file in a folder listed in `[bridge] plugin_dirs` and name it in a listener:

    preprocessors = [{name = "redact", fields = ["card_number", "cvv"]}]
"""

from __future__ import annotations

import json
import logging

from mqbridge import Message, PreprocessorOptions, PreprocessorRegistry, Rollback, hookimpl

__version__ = "1.0"

log = logging.getLogger(__name__)


class RedactOptions(PreprocessorOptions):
    fields: list[str]  # top-level JSON fields to mask
    mask: str = "***"
    drop_type: str = "heartbeat"  # messages with this `type` header are consumed


class Redact:
    def __init__(self, options: RedactOptions) -> None:
        self.options = options

    def process(self, message: Message) -> Message | None:
        if message.headers.get("type") == self.options.drop_type:
            return None  # consumed: removed from the queue, never lands
        document = json.loads(message.body)  # not JSON: raises, the unit of work is rolled back
        for field in self.options.fields:
            if field in document:
                document[field] = self.options.mask
        message.body = json.dumps(document).encode()  # the chain's own copy: safe to change
        message.headers["redacted"] = ",".join(self.options.fields)
        return message

    def on_submit_error(self, message: Message, reason: Rollback) -> None:
        # Once per delivery that does not land (reason.kind says why): undo side effects here.
        log.warning("message %s did not land (%s): %s", message.msg_id, reason.kind.value, reason.error)


@hookimpl
def mqbridge_register_preprocessors(registry: PreprocessorRegistry) -> None:
    registry.add("redact", Redact, options=RedactOptions, description="mask fields of JSON bodies")
