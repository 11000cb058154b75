"""Built-in preprocessor `jsonpath`: chooses the message type from a field of a JSON body, so
one queue can feed several tables.

    [[listeners]]
    queue = "/queue/inbox"
    message_type = "other"                  # bodies that are not JSON or have no mapped value
    preprocessors = [{name = "jsonpath", path = "$.kind",
                      types = {order = "orders", invoice = "invoices"}}]

`path` is a small JSONPath subset: `$`, then `.name`, `['name']` or `[index]` steps
(`$.order.lines[0].sku`). The value found (numbers and booleans as their JSON text) is looked up
in `types`; a missing field, an unmapped value or a body that is not JSON gets `default`, or the
listener's `message_type` when `default` is not set. Every type named must be configured under
`[types]` (checked at start-up). With `header` set, the value is also copied into that header.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import field_validator

from mqbridge import Message, PreprocessorOptions, PreprocessorRegistry, copy_message, hookimpl

__version__ = "1"

_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")


def parse_path(path: str) -> list[str | int]:
    """`$.a['b c'][0]` -> ["a", "b c", 0]; ValueError if it is not in the supported subset."""
    if not path.startswith("$"):
        raise ValueError(f"path {path!r} must start with '$'")
    steps: list[str | int] = []
    pos = 1
    while pos < len(path):
        match = _STEP.match(path, pos)
        if match is None:
            raise ValueError(f"path {path!r}: cannot read step at {path[pos:]!r} "
                             "(use .name, ['name'] or [index])")
        name, index, quoted, dquoted = match.groups()
        steps.append(int(index) if index is not None else next(s for s in (name, quoted, dquoted) if s is not None))
        pos = match.end()
    if not steps:
        raise ValueError("path '$' selects the whole document; name a field")
    return steps


def find(document: Any, steps: list[str | int]) -> Any:
    """The value at `steps`, or None if any step is missing."""
    for step in steps:
        found = (isinstance(step, int) and isinstance(document, list) and step < len(document)) or (
            isinstance(step, str) and isinstance(document, dict) and step in document)
        if not found:
            return None
        document = document[step]
    return document


class JsonPathOptions(PreprocessorOptions):
    """Options of `jsonpath`."""

    path: str
    types: dict[str, str]  # field value -> message type
    default: str | None = None  # type for anything else; None: the listener's message_type
    header: str | None = None  # also copy the value into this header

    @field_validator("path")
    @classmethod
    def _valid_path(cls, value: str) -> str:
        parse_path(value)
        return value

    @field_validator("types")
    @classmethod
    def _not_empty(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("map at least one field value to a message type")
        return value


class JsonPathPreprocessor:
    """Classifies by a JSON field; see the module docstring."""

    def __init__(self, options: JsonPathOptions) -> None:
        self.options = options
        self.steps = parse_path(options.path)
        #: Every type this preprocessor may choose (the host checks they are configured).
        self.message_types = set(options.types.values()) | ({options.default} if options.default else set())

    def value(self, message: Message) -> str | None:
        try:
            document = json.loads(message.body)
        except (ValueError, UnicodeDecodeError):
            return None
        found = find(document, self.steps)
        if found is None or isinstance(found, dict | list):
            return None
        return found if isinstance(found, str) else json.dumps(found)

    def classify(self, message: Message) -> str | None:
        value = self.value(message)
        return self.options.types.get(value, self.options.default) if value is not None else self.options.default

    def process(self, message: Message) -> Message:
        if self.options.header is None:
            return message
        value = self.value(message)
        if value is None:
            return message
        out = copy_message(message)
        out.headers[self.options.header] = value
        return out


@hookimpl
def mqbridge_register_preprocessors(registry: PreprocessorRegistry) -> None:
    registry.add("jsonpath", JsonPathPreprocessor, options=JsonPathOptions,
                 description="choose the message type from a field of a JSON body")
