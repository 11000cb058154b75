"""Built-in preprocessor `decode`: converts bodies from their character set to UTF-8 (or
another `target`), so every row of a table has one encoding.

    preprocessors = [{name = "decode"}]                        # charset from the message
    preprocessors = [{name = "decode", charset = "cp1252"}]    # always this one

The source charset is, in order: the `charset` option; the `charset=` parameter of the
`content-type` header; a byte-order mark; the encoding named in an XML declaration
(`<?xml version="1.0" encoding="ISO-8859-1"?>`). A body with none of these is passed on unchanged.
An XML declaration's encoding is rewritten to the target, and `content-type`'s charset too.

A body that is not valid in its charset raises (with `errors = "strict"`, the default): the unit
of work is rolled back and the message ends in the backout queue after `backout_threshold`
deliveries, instead of landing garbled. `errors = "replace"` lands it with U+FFFD instead.
"""

from __future__ import annotations

import codecs
import re
from typing import Literal

from pydantic import field_validator

from mqbridge import Message, PreprocessorOptions, PreprocessorRegistry, copy_message, hookimpl

__version__ = "1"

_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_CHARSET_PARAM = re.compile(r";\s*charset\s*=\s*\"?([^\";\s]+)\"?", re.IGNORECASE)
_XML_DECL = re.compile(rb"^\s*<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._:-]+)[\"']")
_XML_DECL_TEXT = re.compile(r"^(\s*<\?xml[^>]*?encoding\s*=\s*[\"'])([A-Za-z0-9._:-]+)([\"'])")


def _codec(name: str) -> str:
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise ValueError(f"unknown character set {name!r}") from None


class DecodeOptions(PreprocessorOptions):
    """Options of `decode`."""

    charset: str | None = None  # source charset; None: find it in the message
    target: str = "utf-8"
    errors: Literal["strict", "replace"] = "strict"
    header: str = "content-type"  # the header whose charset= parameter names the source charset

    @field_validator("charset", "target")
    @classmethod
    def _known(cls, value: str | None) -> str | None:
        return None if value is None else (_codec(value) and value)


class DecodePreprocessor:
    """Re-encodes bodies; see the module docstring."""

    def __init__(self, options: DecodeOptions) -> None:
        self.options = options
        self.target = _codec(options.target)

    def source_charset(self, message: Message) -> str | None:
        """The charset the body is in, or None if nothing says."""
        if self.options.charset:
            return self.options.charset
        wanted = self.options.header.lower()
        for name, value in message.headers.items():
            if name.lower() == wanted and (match := _CHARSET_PARAM.search(value)):
                return match.group(1)
        body = message.body
        for bom, charset in _BOMS:
            if body.startswith(bom):
                return charset
        declared = _XML_DECL.match(body)
        return declared.group(1).decode("ascii") if declared else None

    def process(self, message: Message) -> Message:
        charset = self.source_charset(message)
        if charset is None:
            return message
        if _codec(charset) == "utf-8" and not message.body.startswith(codecs.BOM_UTF8):
            charset = "utf-8"
        elif _codec(charset) == "utf-8":
            charset = "utf-8-sig"  # drop the BOM
        text = message.body.decode(charset, self.options.errors)
        text = _XML_DECL_TEXT.sub(lambda m: m.group(1) + self.options.target + m.group(3), text, count=1)
        out = copy_message(message)
        out.body = text.encode(self.target, self.options.errors)
        for name, value in message.headers.items():
            if name.lower() == self.options.header.lower() and _CHARSET_PARAM.search(value):
                out.headers[name] = _CHARSET_PARAM.sub(f";charset={self.options.target}", value, count=1)
        out.headers["mqbridge-decoded-from"] = charset
        return out


@hookimpl
def mqbridge_register_preprocessors(registry: PreprocessorRegistry) -> None:
    registry.add("decode", DecodePreprocessor, options=DecodeOptions,
                 description="convert bodies from their character set to UTF-8 (or `target`)")
