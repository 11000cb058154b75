"""An example mqbridge plugin: a transactional outbox. Every message that lands also tells an
auditor queue about itself, in the unit of work that removes the message from its queue; a message
that does not land (moved to the backout queue, given back) tells nobody.

Put this file in a folder listed in `[bridge] plugin_dirs`, name it in a listener and allow its
destination:

    preprocessors = [{name = "notify", destination = "/queue/orders.audit"}]
    outbox_allow = ["/queue/orders.audit"]
"""

from __future__ import annotations

import hashlib
import json

from mqbridge import Message, PreprocessorOptions, PreprocessorRegistry, emit, hookimpl

__version__ = "1.0"


class NotifyOptions(PreprocessorOptions):
    destination: str  # where the notices go (must match the listener's outbox_allow)


class Notify:
    def __init__(self, options: NotifyOptions) -> None:
        self.options = options

    def process(self, message: Message) -> Message | None:
        # Derived from the message alone (no clock, no counter): after a crash the chain derives the
        # notice again for a message that had landed, and it must be the same notice.
        notice = {"msg_id": message.msg_id, "queue": message.destination,
                  "sha256": hashlib.sha256(message.body).hexdigest(), "bytes": len(message.body)}
        emit(self.options.destination, json.dumps(notice, sort_keys=True),
             {"content-type": "application/json", "notice-of": message.msg_id})
        return message


@hookimpl
def mqbridge_register_preprocessors(registry: PreprocessorRegistry) -> None:
    registry.add("notify", Notify, options=NotifyOptions, description="tell a queue about every landed message")
