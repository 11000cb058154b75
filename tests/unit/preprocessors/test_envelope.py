"""The built-in `envelope` preprocessor: XML and JSON output parses, carries every header field
and gives back the exact original body, text or binary."""

from __future__ import annotations

import json
import os
import socket
import threading
import xml.etree.ElementTree as ET
from datetime import datetime, timezone

import pytest

from mqbridge.message import Message
from mqbridge.preprocessors.envelope import FIELDS, EnvelopeOptions, EnvelopePreprocessor, parse_envelope

PUT = datetime(2024, 5, 1, 10, 11, 12, 345000, tzinfo=timezone.utc)
RECEIVED = datetime(2024, 5, 1, 10, 11, 13, 500000, tzinfo=timezone.utc)

BODIES = [
    pytest.param(b"<order id='1'>caf\xc3\xa9 & co</order>", id="xml-text"),
    pytest.param("zażółć gęślą jaźń 日本 🎉".encode(), id="utf8"),
    pytest.param(b"line1\r\nline2\rline3\n  ", id="cr-lf-and-trailing-space"),
    pytest.param(b"", id="empty"),
    pytest.param(b"a\x00b\x01c", id="utf8-with-chars-xml-cannot-carry"),
    pytest.param(b"\xff\xfe<\x00a\x00>\x00", id="utf16-bytes"),
    pytest.param(bytes(range(256)), id="all-bytes"),
    pytest.param(os.urandom(4096), id="random"),
    pytest.param(b"]]><![CDATA[", id="cdata-lookalike"),
]


def full_message(body: bytes) -> Message:
    return Message(
        msg_id="ID:broker-1:1:1:7", body=body, source="amq", destination="/queue/orders",
        correlation_id="corr-42", put_timestamp=PUT, received_timestamp=RECEIVED,
        headers={"reply-to": "/queue/replies", "ReplyToQMgr": "QM2", "put-application": "shop.exe",
                 "user-id": "alice", "queue-manager": "QM1", "x-other": "kept"},
    )


def wrap(body: bytes, fmt: str, thread_name: str = "listener-amq:/queue/orders#1") -> tuple[Message, Message]:
    original = full_message(body)
    result: list[Message] = []
    preprocessor = EnvelopePreprocessor(EnvelopeOptions(format=fmt))  # type: ignore[arg-type]
    worker = threading.Thread(target=lambda: result.append(preprocessor.process(original)), name=thread_name)
    worker.start()
    worker.join()
    return original, result[0]


EXPECTED_HEADER = {
    "messageId": "ID:broker-1:1:1:7", "correlationId": "corr-42", "putDate": "2024-05-01",
    "putTime": "10:11:12.345", "source": "amq", "queueManager": "QM1", "queue": "/queue/orders",
    "replyToQueue": "/queue/replies", "replyToQueueManager": "QM2", "putApplication": "shop.exe",
    "userId": "alice", "receivedTime": "2024-05-01T10:11:13.500000+00:00", "server": socket.gethostname(),
    "listenerThread": "listener-amq:/queue/orders#1",
}


@pytest.mark.parametrize("fmt", ["xml", "json"])
@pytest.mark.parametrize("body", BODIES)
def test_round_trip_is_byte_exact(fmt: str, body: bytes) -> None:
    original, out = wrap(body, fmt)
    envelope = parse_envelope(out.body)
    assert envelope.body == body and envelope.format == fmt
    assert envelope.header == EXPECTED_HEADER
    assert list(envelope.header) == list(FIELDS)
    # the original message is untouched; the result only gains a header
    assert original.body == body and "mqbridge-envelope" not in original.headers
    assert out.headers == {**original.headers, "mqbridge-envelope": fmt} and out.msg_id == original.msg_id


@pytest.mark.parametrize(("body", "encoding"), [(b"plain text", "text"), (b"a\x00b", "base64"),
                                                (b"\xff\xfe", "base64"), (b"\r\n", "text")])
def test_xml_is_well_formed_with_text_or_base64_body(body: bytes, encoding: str) -> None:
    _, out = wrap(body, "xml")
    root = ET.fromstring(out.body)  # parses with a standard parser
    assert out.body.startswith(b"<?xml version='1.0' encoding='utf-8'?>")
    assert root.tag == "envelope" and root.get("version") == "1"
    assert [e.tag for e in root.find("header")] == list(FIELDS)  # type: ignore[union-attr]
    assert root.find("body").get("encoding") == encoding  # type: ignore[union-attr]


@pytest.mark.parametrize(("body", "encoding"), [(b"a\x00b", "text"), (b"\xff\xfe", "base64")])
def test_json_is_valid_with_text_or_base64_body(body: bytes, encoding: str) -> None:
    _, out = wrap(body, "json")
    document = json.loads(out.body)
    assert document["version"] == 1 and document["bodyEncoding"] == encoding
    assert list(document["header"]) == list(FIELDS)


@pytest.mark.parametrize("fmt", ["xml", "json"])
def test_unknown_fields_are_null_and_mq_style_headers_are_found(fmt: str) -> None:
    message = Message("m1", b"x", "qm1", "ORDERS.IN", headers={
        "ReplyToQ": "REPLY.Q", "ReplyToQMgr": "QM9", "PutApplName": "payroll", "UserIdentifier": "mqm"})
    out = EnvelopePreprocessor(EnvelopeOptions(format=fmt)).process(message)  # type: ignore[arg-type]
    header = parse_envelope(out.body).header
    assert header["correlationId"] is None and header["putDate"] is None and header["putTime"] is None
    assert header["queueManager"] is None
    assert (header["replyToQueue"], header["replyToQueueManager"], header["putApplication"], header["userId"]) \
        == ("REPLY.Q", "QM9", "payroll", "mqm")
    assert header["listenerThread"] == threading.current_thread().name


def test_header_values_xml_cannot_carry_survive_in_base64() -> None:
    message = full_message(b"x")
    message.correlation_id = "bad\x00id"
    out = EnvelopePreprocessor(EnvelopeOptions()).process(message)
    assert parse_envelope(out.body).header["correlationId"] == "bad\x00id"


def test_a_non_utc_put_time_is_written_in_utc() -> None:
    message = full_message(b"x")
    message.put_timestamp = datetime.fromisoformat("2024-05-01T01:30:00+02:00")
    header = parse_envelope(EnvelopePreprocessor(EnvelopeOptions()).process(message).body).header
    assert (header["putDate"], header["putTime"]) == ("2024-04-30", "23:30:00.000")
