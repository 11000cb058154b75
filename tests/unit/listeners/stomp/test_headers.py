"""The STOMP adapter's header parser gives exactly what stomp.py's own gives (it only skips the
unescaping where a line has nothing to unescape)."""

from __future__ import annotations

import random

import stomp.protocol
import stomp.utils

from mqbridge.listeners import stomp as adapter  # noqa: F401  (installs the fast parser)
from mqbridge.listeners.stomp.frames import _stomp_parse_headers, ack_frames, parse_headers

PIECES = ["a", "b", "key", "message-id", ":", "::", "\\c", "\\n", "\\\\", "\\r", "\\t", "\\", "é", " ", "\r", "x:y", ""]


def test_the_fast_parser_agrees_with_stomp_py_on_random_header_lines() -> None:
    rng = random.Random(7)
    for _ in range(20000):
        lines = ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(0, 8))]
        offset = rng.randint(0, 2)
        assert parse_headers(lines, offset) == _stomp_parse_headers(lines, offset), lines


def test_repeated_keys_keep_the_first_value_and_escapes_are_undone() -> None:
    lines = ["MESSAGE", "a:1", "a:2", "b\\cc:x\\ny", "b:c:3", ":novalue", "nocolon"]
    assert parse_headers(lines, 1) == {"a": "1", "b:c": "x\ny", "b": "c:3"}


def test_stomp_py_parses_frames_with_it_once_the_adapter_is_loaded() -> None:
    assert stomp.utils.parse_headers is parse_headers
    frame = stomp.utils.parse_frame(b"MESSAGE\nmessage-id:ID\\c1\ndestination:/queue/q\n\nbody\x00")
    assert frame.headers == {"message-id": "ID:1", "destination": "/queue/q"} and frame.body == b"body\x00"


class _Capture:
    """A stomp.py transport that keeps the bytes it would send."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def set_listener(self, name: str, listener: object) -> None:
        pass

    def transmit(self, frame: stomp.utils.Frame) -> None:
        self.sent.append(stomp.utils.pack(stomp.utils.convert_frame(frame)))


def _frames(data: bytes) -> list[tuple[str, dict[str, str]]]:
    return [(f.cmd, f.headers) for f in (stomp.utils.parse_frame(part + b"\x00") for part in data.split(b"\x00")[:-1])]


def test_ack_frames_in_one_buffer_say_what_stomp_py_sends_frame_by_frame() -> None:
    rng = random.Random(11)
    capture = _Capture()
    protocol = stomp.protocol.Protocol12(capture)
    for _ in range(300):
        ids = ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(1, 4))]
        tx = rng.choice([None, "tx-1", "t:x\\y"])
        receipt = rng.choice([None, "ack-1", "r:1\n"])
        capture.sent.clear()
        for n, token in enumerate(ids, 1):
            protocol.ack(token, transaction=tx, receipt=receipt if n == len(ids) else None)
        assert _frames(ack_frames(ids, tx, receipt)) == _frames(b"".join(capture.sent)), (ids, tx, receipt)


def test_no_ids_no_frames() -> None:
    assert ack_frames([], "tx", "r") == b""
