"""The example in docs/plugins.md ("Writing a preprocessor") is the file examples/plugins/redact.py,
and that exact file works as documented when loaded from its folder like any drop-in plugin."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqbridge import Rollback, RollbackKind
from mqbridge.errors import PreprocessorError
from mqbridge.plugins import PluginHost
from tests.support.plugins import listener, make_host, message, request

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "plugins" / "redact.py"


@pytest.fixture
def host() -> Iterator[PluginHost]:
    host = make_host(EXAMPLE.parent, request(("redact", {"fields": ["card_number", "cvv"]})))
    host.start()
    yield host
    host.close()


def test_the_documented_example_is_the_tested_file() -> None:
    doc = (ROOT / "docs" / "plugins.md").read_text()
    match = re.search(r"<!-- example: examples/plugins/redact.py -->\n```python\n(.*?)```", doc, re.DOTALL)
    assert match is not None, "docs/plugins.md lost its example"
    assert match.group(1) == EXAMPLE.read_text()


def test_example_masks_fields(host: PluginHost) -> None:
    body = json.dumps({"order": 1, "card_number": "4111111111111111", "cvv": "123"}).encode()
    out = host.chain(listener(0)).process(message(body))
    assert out is not None
    assert json.loads(out.body) == {"order": 1, "card_number": "***", "cvv": "***"}
    assert out.headers["redacted"] == "card_number,cvv"
    assert {r["name"]: r["version"] for r in host.describe()}["redact"] == "1.0"


def test_example_consumes_heartbeats(host: PluginHost) -> None:
    assert host.chain(listener(0)).process(message(b"", headers={"type": "heartbeat"})) is None


def test_example_rejects_bodies_that_are_not_json(host: PluginHost, caplog: pytest.LogCaptureFixture) -> None:
    chain = host.chain(listener(0))
    with pytest.raises(PreprocessorError, match="preprocessor 'redact' .*JSONDecodeError") as info:
        chain.process(message(b"<xml/>"))
    chain.on_submit_error(message(b"<xml/>"), Rollback(RollbackKind.PREPROCESSOR, info.value))
    assert "message m-1 did not land (preprocessor)" in caplog.text


def test_example_requires_its_fields_option() -> None:
    host = make_host(EXAMPLE.parent, request("redact"))
    with pytest.raises(Exception, match="fields: required key is missing"):
        host.start()


def test_the_smallest_plugin_of_the_docs_works_as_a_drop_in_file(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "plugins.md").read_text()
    section = doc[doc.index("## The smallest plugin"):]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    (tmp_path / "snippet.py").write_text(match.group(1))
    host = make_host(tmp_path, request("drop_empty"))
    host.start()
    assert host.chain(listener(0)).process(message(b"  \n")) is None
    assert host.chain(listener(0)).process(message(b"x")) is not None
    host.close()
