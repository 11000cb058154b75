"""The built-in `decode` and `jsonpath` preprocessors, run through the host like any plugin."""

from __future__ import annotations

import codecs
import re
from typing import Any

import pytest

from mqbridge.errors import ConfigError, PreprocessorError
from mqbridge.message import Message
from mqbridge.plugins import PluginHost
from mqbridge.preprocessors.jsonpath import parse_path
from tests.support.plugins import listener, make_host, message, request


def chain_host(*refs: str | tuple[str, dict[str, Any]], **kwargs: Any) -> PluginHost:
    host = make_host(None, request(*refs), **kwargs)
    host.start()
    return host


def run(host: PluginHost, msg: Message) -> Message:
    out = host.chain(listener(0)).process(msg)
    assert out is not None
    return out


# -- decode --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "headers", "decoded_from"), [
    ('<?xml version="1.0" encoding="UTF-16"?><a>é</a>'.encode("utf-16"), {}, "utf-16"),
    ("<a>é</a>".encode("utf-16-be"), {"content-type": "text/xml; charset=UTF-16BE"}, "UTF-16BE"),
    ('<?xml version="1.0" encoding="ISO-8859-1"?><a>é</a>'.encode("latin-1"), {}, "ISO-8859-1"),
    (codecs.BOM_UTF8 + "<a>é</a>".encode(), {}, "utf-8-sig"),
])
def test_decode_finds_the_charset_and_writes_utf8(body: bytes, headers: dict[str, str], decoded_from: str) -> None:
    out = run(chain_host("decode"), message(body, headers=dict(headers)))
    text = out.body.decode("utf-8")
    assert text.endswith("<a>é</a>") and "\ufeff" not in text
    assert out.headers["mqbridge-decoded-from"] == decoded_from
    if "encoding=" in text:
        assert 'encoding="utf-8"' in text
    if headers:
        assert out.headers["content-type"] == "text/xml;charset=utf-8"


def test_decode_leaves_bodies_without_a_known_charset_alone() -> None:
    msg = message(b"\x00\x01 plain bytes")
    assert run(chain_host("decode"), msg).body == msg.body


def test_decode_with_a_fixed_charset_and_strict_errors_raises_on_bad_bytes() -> None:
    host = chain_host(("decode", {"charset": "ascii"}))
    assert run(host, message(b"ok")).body == b"ok"
    with pytest.raises(PreprocessorError, match="preprocessor 'decode'.*UnicodeDecodeError"):
        host.chain(listener(0)).process(message(b"caf\xe9"))
    host = chain_host(("decode", {"charset": "ascii", "errors": "replace"}))
    assert run(host, message(b"caf\xe9")).body == "caf\ufffd".encode()


def test_decode_rejects_unknown_charsets_at_start_up() -> None:
    with pytest.raises(ConfigError, match="charset: unknown character set 'klingon'"):
        chain_host(("decode", {"charset": "klingon"}))


# -- jsonpath ------------------------------------------------------------------------------------
ROUTE = {"path": "$.meta['doc type']", "types": {"order": "orders", "invoice": "invoices", "7": "sevens"},
         "default": "other", "header": "x-doc-type"}


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"meta": {"doc type": "order"}}', "orders"),
    (b'{"meta": {"doc type": "invoice"}, "n": 1}', "invoices"),
    (b'{"meta": {"doc type": 7}}', "sevens"),
    (b'{"meta": {"doc type": "memo"}}', "other"),
    (b'{"meta": {}}', "other"),
    (b"not json", "other"),
    (b"\xff\xfe", "other"),
])
def test_jsonpath_classifies_by_field(body: bytes, expected: str) -> None:
    host = chain_host(("jsonpath", ROUTE))
    assert host.chain(listener(0)).classify(message(body)) == expected


def test_jsonpath_without_default_keeps_the_listener_type_and_copies_the_value() -> None:
    host = chain_host(("jsonpath", {"path": "$.items[1].kind", "types": {"b": "bees"}, "header": "kind"}))
    chain = host.chain(listener(0))
    msg = message(b'{"items": [{"kind": "a"}, {"kind": "b"}]}')
    assert chain.classify(msg) == "bees"
    assert chain.classify(message(b'{"items": [{"kind": "a"}, {"kind": "c"}]}')) is None
    assert run(host, msg).headers["kind"] == "b"


@pytest.mark.parametrize(("path", "steps"), [("$.a", ["a"]), ("$.a.b[0]", ["a", "b", 0]),
                                             ("$['x y'][\"z\"]", ["x y", "z"])])
def test_jsonpath_paths(path: str, steps: list[Any]) -> None:
    assert parse_path(path) == steps


@pytest.mark.parametrize(("options", "problem"), [
    ({"path": "a.b", "types": {"x": "y"}}, "must start with '$'"),
    ({"path": "$.a[*]", "types": {"x": "y"}}, "cannot read step"),
    ({"path": "$.a", "types": {}}, "map at least one field value"),
    ({"types": {"x": "y"}}, "path: required key is missing"),
])
def test_jsonpath_options_are_checked_at_start_up(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        chain_host(("jsonpath", options))
