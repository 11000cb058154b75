"""The STOMP adapter's header parser gives exactly what stomp.py's own gives (it only skips the
unescaping where a line has nothing to unescape)."""

from __future__ import annotations

import random

import stomp.utils

from mqbridge.listeners import stomp as adapter  # noqa: F401  (installs the fast parser)
from mqbridge.listeners.stomp.frames import _stomp_parse_headers, parse_headers

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
