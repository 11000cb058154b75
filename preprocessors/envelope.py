"""Built-in preprocessor `envelope`: wraps the original body in an XML (default) or JSON
envelope whose header describes where the message came from.

    preprocessors = ["envelope"]                          # XML
    preprocessors = [{name = "envelope", format = "json"}]

XML:

    <?xml version='1.0' encoding='utf-8'?>
    <envelope version="1">
      <header>
        <messageId>ID:host-1:1:1:1</messageId>
        <correlationId null="true" />
        <putDate>2024-05-01</putDate><putTime>10:11:12.345</putTime>
        ... source, queueManager, queue, replyToQueue, replyToQueueManager, putApplication,
        ... userId, receivedTime, server, listenerThread
      </header>
      <body encoding="text">the original body</body>      <!-- or encoding="base64" -->
    </envelope>

JSON: {"version": 1, "header": {...same names, null when unknown}, "bodyEncoding": "text" |
"base64", "body": "..."}.

The body is kept as text when it is valid UTF-8 (and, for XML, has no character XML cannot
carry), else base64; either way `parse_envelope` gives back the exact original bytes.
Dates and times are UTC. The envelope is UTF-8; the message gets the header
`mqbridge-envelope: xml|json`.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import timezone
from typing import Literal

from mqbridge import Message, PreprocessorOptions, PreprocessorRegistry, copy_message, hookimpl

__version__ = "1"

FIELDS = ("messageId", "correlationId", "putDate", "putTime", "source", "queueManager", "queue",
          "replyToQueue", "replyToQueueManager", "putApplication", "userId", "receivedTime", "server",
          "listenerThread")

# Header names carrying each field, STOMP/JMS style and IBM MQ MQMD style; first one present wins.
HEADER_NAMES = {
    "queueManager": ("queue-manager", "queue_manager", "QueueManager", "QMgrName", "broker"),
    "replyToQueue": ("reply-to", "reply_to", "ReplyToQ", "JMSReplyTo"),
    "replyToQueueManager": ("reply-to-queue-manager", "reply-to-qmgr", "ReplyToQMgr"),
    "putApplication": ("put-application", "PutApplName", "app-id", "JMSXAppID"),
    "userId": ("user-id", "UserIdentifier", "JMSXUserID"),
}

# Characters XML 1.0 cannot carry at all.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class EnvelopeOptions(PreprocessorOptions):
    """Options of `envelope`."""

    format: Literal["xml", "json"] = "xml"


@dataclass(frozen=True)
class Envelope:
    """A parsed envelope: its header fields (None where unknown) and the original body."""

    header: dict[str, str | None]
    body: bytes
    format: str


def envelope_header(message: Message, server: str, thread_name: str) -> dict[str, str | None]:
    """The header fields of `message`, in FIELDS order."""
    headers = {k.lower(): v for k, v in message.headers.items()}

    def first(field: str) -> str | None:
        return next((headers[n.lower()] for n in HEADER_NAMES[field] if n.lower() in headers), None)

    put = message.put_timestamp.astimezone(timezone.utc) if message.put_timestamp else None
    received = message.received_timestamp.astimezone(timezone.utc)
    return {
        "messageId": message.msg_id,
        "correlationId": message.correlation_id,
        "putDate": put.date().isoformat() if put else None,
        "putTime": put.time().isoformat(timespec="milliseconds") if put else None,
        "source": message.source,
        "queueManager": first("queueManager"),
        "queue": message.destination,
        "replyToQueue": first("replyToQueue"),
        "replyToQueueManager": first("replyToQueueManager"),
        "putApplication": first("putApplication"),
        "userId": first("userId"),
        "receivedTime": received.isoformat(timespec="microseconds"),
        "server": server,
        "listenerThread": thread_name,
    }


def _text(body: bytes, xml: bool) -> str | None:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if xml and _NOT_XML.search(text) else text


def to_xml(header: dict[str, str | None], body: bytes) -> bytes:
    root = ET.Element("envelope", version="1")
    head = ET.SubElement(root, "header")
    for name, value in header.items():
        element = ET.SubElement(head, name)
        if value is None:
            element.set("null", "true")
        elif _NOT_XML.search(value):
            element.set("encoding", "base64")
            element.text = base64.b64encode(value.encode("utf-8", "surrogatepass")).decode("ascii")
        else:
            element.text = value
    text = _text(body, xml=True)
    element = ET.SubElement(root, "body", encoding="text" if text is not None else "base64")
    element.text = text if text is not None else base64.b64encode(body).decode("ascii")
    # XML parsers turn a raw CR (and CR LF) into LF; a character reference survives parsing.
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document.replace(b"\r", b"&#13;")


def to_json(header: dict[str, str | None], body: bytes) -> bytes:
    text = _text(body, xml=False)
    document = {"version": 1, "header": header, "bodyEncoding": "text" if text is not None else "base64",
                "body": text if text is not None else base64.b64encode(body).decode("ascii")}
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def parse_envelope(data: bytes) -> Envelope:
    """Read an envelope written by this preprocessor (XML or JSON) back."""
    if data.lstrip()[:1] == b"{":
        document = json.loads(data)
        raw = document["body"]
        body = base64.b64decode(raw) if document["bodyEncoding"] == "base64" else raw.encode("utf-8")
        return Envelope(dict(document["header"]), body, "json")
    root = ET.fromstring(data)
    header: dict[str, str | None] = {}
    head = root.find("header")
    for element in (head if head is not None else ()):
        if element.get("null") == "true":
            header[element.tag] = None
        elif element.get("encoding") == "base64":
            header[element.tag] = base64.b64decode(element.text or "").decode("utf-8", "surrogatepass")
        else:
            header[element.tag] = element.text or ""
    body_element = root.find("body")
    assert body_element is not None, "envelope without a body"
    raw_text = body_element.text or ""
    body = base64.b64decode(raw_text) if body_element.get("encoding") == "base64" else raw_text.encode("utf-8")
    return Envelope(header, body, "xml")


class EnvelopePreprocessor:
    """Wraps each message's body; see the module docstring."""

    def __init__(self, options: EnvelopeOptions) -> None:
        self.format = options.format
        self.server = socket.gethostname()

    def process(self, message: Message) -> Message:
        header = envelope_header(message, self.server, threading.current_thread().name)
        out = copy_message(message)
        out.body = to_xml(header, message.body) if self.format == "xml" else to_json(header, message.body)
        out.headers["mqbridge-envelope"] = self.format
        return out


@hookimpl
def mqbridge_register_preprocessors(registry: PreprocessorRegistry) -> None:
    registry.add("envelope", EnvelopePreprocessor, options=EnvelopeOptions,
                 description="wrap the body in an XML or JSON envelope with the message's origin")
