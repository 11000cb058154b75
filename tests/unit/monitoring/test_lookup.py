"""`GET /messages/<id>` and `mqbridge where`, on a real socket and a real SQLite ledger and backout
log, without a broker: the token it always needs, the answers of the endpoint, and the command's
answers from the running bridge, from the files when none answers, its output and exit codes."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mqbridge.app import App, build_app
from mqbridge.cli import main
from mqbridge.config import parse_config
from mqbridge.landing.ledger import SqliteLedger, ledger_path, owner_id
from mqbridge.loop.in_flight import Held
from mqbridge.message import Message
from mqbridge.monitoring.lookup import NEEDS_TOKEN
from mqbridge.tracing.backout_log import BackoutLog, MovedMessage
from mqbridge.tracing.where import Locator
from tests.support.configs import orders_config
from tests.support.exactly_once import free_port
from tests.support.http import fetch

TOKEN = "0123456789abcdef-monitoring"
FILE = "/w/orders/put_date=2024-05-01/part-b1-00000.parquet"


def config_file(tmp_path: Path, monitoring: str = f'token = "{TOKEN}"', listen: str = "127.0.0.1:0") -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(orders_config(f'[bridge]\nstate_dir = "state"\n[monitoring]\nlisten = "{listen}"\n{monitoring}\n'))
    return path


def land(tmp_path: Path, bulk_id: str, *identities: str) -> None:
    ledger = SqliteLedger.open(ledger_path(tmp_path / "state"), owner=owner_id())
    try:
        ledger.prepare(bulk_id, "orders", [("/w/orders/_staging/x", FILE)], list(identities))
        ledger.mark_published(bulk_id)
    finally:
        ledger.close()


def move(tmp_path: Path, msg_id: str) -> None:
    log = BackoutLog.in_state_dir(tmp_path / "state")
    log.record(MovedMessage(time.time(), "amq:/queue/orders#1", "/queue/orders", "/queue/orders.backout", msg_id,
                            msg_id, "body is not valid JSON", "orders", 3))
    log.close()


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[Callable[..., App]]:
    """Starts the monitoring endpoint of a bridge built (not started) from `config_file`."""
    apps: list[App] = []

    def start(**options: Any) -> App:
        path = config_file(tmp_path, **options)
        app = build_app(parse_config(path.read_text(), str(path)), executors={})
        assert app.monitor is not None
        app.monitor.start()
        apps.append(app)
        return app

    yield start
    for app in apps:
        assert app.monitor is not None
        app.monitor.stop()
        if app.landing is not None:
            app.landing.close()


def messages_url(app: App, key: str) -> str:
    assert app.monitor is not None
    return f"{app.monitor.url}/messages/{urllib.parse.quote(key, safe='')}"


# -- the endpoint ------------------------------------------------------------------------------
@pytest.mark.parametrize("public", [False, True])
def test_the_lookup_always_needs_the_token(endpoint: Callable[..., App], public: bool) -> None:
    app = endpoint(monitoring=f'token = "{TOKEN}"\nmetrics_public = {str(public).lower()}')
    for token in (None, "wrong-token-0123456789"):
        response = fetch(messages_url(app, "ID:1"), token=token)
        assert response.status == 401, token
    if public:
        assert fetch(app.monitor.url + "/healthz").status in (200, 503)  # type: ignore[union-attr]
    response = fetch(messages_url(app, "ID:1"), token=TOKEN)
    assert response.status == 200 and response.content_type == "application/json"
    doc = json.loads(response.text)
    assert doc["state"] == "unknown" and doc["id"] == "ID:1" and doc["bridge"] == "mqbridge"


def test_without_a_token_configured_the_lookup_is_refused(endpoint: Callable[..., App]) -> None:
    app = endpoint(monitoring="")
    response = fetch(messages_url(app, "ID:1"))
    assert response.status == 403 and json.loads(response.text) == {"error": NEEDS_TOKEN}
    assert fetch(app.monitor.url + "/status").status == 200  # type: ignore[union-attr]  # the rest stays open


def test_an_id_with_slashes_and_colons_is_one_percent_encoded_segment(tmp_path: Path,
                                                                     endpoint: Callable[..., App]) -> None:
    land(tmp_path, "b1", "orders/2024:17")
    app = endpoint()
    doc = json.loads(fetch(messages_url(app, "orders/2024:17"), token=TOKEN).text)
    assert doc["state"] == "landed" and doc["landed"]["bulk"] == "b1" and doc["landed"]["put_date"] == "2024-05-01"
    response = fetch(messages_url(app, "x" * 1025), token=TOKEN)
    assert response.status == 400 and "longer than 1024" in response.text


# -- mqbridge where ----------------------------------------------------------------------------
def where(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["where", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_with_no_bridge_running_it_answers_from_the_ledger_and_the_backout_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config_file(tmp_path, listen=f"127.0.0.1:{free_port()}")  # nothing listens there
    land(tmp_path, "b1", "ID:1")
    move(tmp_path, "ID:2")
    code, out, _ = where(capsys, "--config", str(path), "ID:1")
    assert code == 0 and out.startswith("ID:1 LANDED (answered by the landing ledger and the backout log)\n")
    assert "note       no running bridge was asked, so a message in flight is not seen: no bridge answers" in out
    assert "table      orders, put_date 2024-05-01" in out and "bulk       b1, published " in out
    code, out, _ = where(capsys, "--config", str(path), "ID:2")
    assert code == 5 and "was MOVED to a backout queue" in out
    assert "moved to   /queue/orders.backout at " in out and "reason     body is not valid JSON" in out
    code, out, _ = where(capsys, "--config", str(path), "ID:3")
    assert code == 1 and "ID:3 is UNKNOWN" in out and "searched   the landing ledger, the backout log" in out
    code, out, _ = where(capsys, "--config", str(path), "--json", "ID:1")
    doc = json.loads(out)
    assert code == 0 and doc["state"] == "landed" and doc["landed"]["bulk"] == "b1"


def test_without_a_ledger_file_it_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config_file(tmp_path, monitoring="", listen="")  # monitoring disabled: nothing to ask
    code, out, _ = where(capsys, "--config", str(path), "ID:1")
    assert code == 1 and "monitoring is disabled" in out and "note       no ledger file " in out
    assert not (tmp_path / "state").exists()  # read-only: nothing created


def test_the_running_bridge_answers_and_says_so(tmp_path: Path, endpoint: Callable[..., App],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    land(tmp_path, "b1", "ID:1")
    app = endpoint()
    assert app.monitor is not None
    url = app.monitor.url
    code, out, _ = where(capsys, "--config", str(tmp_path / "bridge.toml"), "--url", url, "ID:1")
    assert code == 0 and out.startswith(f"ID:1 LANDED (answered by the running bridge at {url})")
    token_file = tmp_path / "monitoring.token"
    token_file.write_text(TOKEN + "\n")
    code, out, _ = where(capsys, "--url", url, "--token-file", str(token_file), "--json", "ID:1")
    assert code == 0 and json.loads(out)["answered_by"] == f"the running bridge at {url}"
    # In flight: which listener thread, unit, bulk, since when (the bridge's holding, here given)
    message = Message("ID:9", b"{}", "amq", "/queue/orders", message_type="orders", identity="ID:9")
    held = Held(message, "amq:/queue/orders#1", "pending", "orders-1a2b3c4d-00000007", "writing")
    app.monitor.locate = Locator(app.config.listeners, app.config.bridge.dedupe_window,
                                 holding=lambda key: [held] if key == "ID:9" else []).locate
    code, out, _ = where(capsys, "--url", url, "--token-file", str(token_file), "ID:9")
    assert code == 4 and "ID:9 is IN FLIGHT" in out
    assert "listener   amq:/queue/orders#1 (unit pending)" in out
    assert "bulk       orders-1a2b3c4d-00000007 (writing)" in out and "), delivery 1" in out


def test_a_refused_token_or_no_answer_without_a_configuration_exits_3(
        tmp_path: Path, endpoint: Callable[..., App], capsys: pytest.CaptureFixture[str]) -> None:
    app = endpoint()
    assert app.monitor is not None
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-the-token-0123456789\n")
    code, _, err = where(capsys, "--url", app.monitor.url, "--token-file", str(wrong), "ID:1")
    assert code == 3 and "401: the token was refused" in err
    code, _, err = where(capsys, "--url", app.monitor.url, "ID:1")
    assert code == 3 and "needs its token" in err
    code, _, err = where(capsys, "--url", f"http://127.0.0.1:{free_port()}", "ID:1")
    assert code == 3 and "no bridge answers at" in err


def test_an_endpoint_without_a_token_leaves_the_answer_to_the_files(tmp_path: Path, endpoint: Callable[..., App],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    land(tmp_path, "b1", "ID:1")
    app = endpoint(monitoring="")
    assert app.monitor is not None
    code, out, _ = where(capsys, "--config", str(tmp_path / "bridge.toml"), "--url", app.monitor.url, "ID:1")
    assert code == 0 and "answered HTTP 403: /messages/ needs a [monitoring] token" in out
    code, _, err = where(capsys, "--url", app.monitor.url, "ID:1")
    assert code == 3 and "answered HTTP 403" in err


@pytest.mark.parametrize(("args", "error"), [
    (["--config", "b.toml", "--token-file", "t", "ID:1"], "--cacert and --token-file are for a --url"),
    (["--url", "http://127.0.0.1:1", " "], "the message id is empty"),
    (["--url", "http://127.0.0.1:1", "--cacert", "ca.pem", "ID:1"], "--cacert is for an https:// endpoint"),
])
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], error: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["where", *args])
    assert exit_info.value.code == 2 and error in capsys.readouterr().err
