"""The control plane of the monitoring endpoint (POST /listeners/<name>/..., mqbridge.monitoring.control)
and `mqbridge listener` (mqbridge.commands.listener), on a real socket in front of a running bridge of
the in-memory source: off without a token, 401 without the right one even with public metrics, the
refusals and their texts, and the command line's waiting and exit codes; `plugins` (a listener moved
to another plugin generation) with its refusals: an unknown listener, a generation no longer loaded,
a canary, a target that is none."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mqbridge.cli import main
from mqbridge.message import Bulk, MessageResult
from mqbridge.monitoring.access import PUBLIC_PATHS, Access
from mqbridge.monitoring.control import parse
from mqbridge.monitoring.control_client import command_path
from mqbridge.monitoring.server import MonitoringServer
from mqbridge.supervision.control import PAUSED, RUNNING, STOPPED
from mqbridge.supervision.supervisor import Bridge
from tests.support.bridge import RunningBridge
from tests.support.exactly_once import free_port
from tests.support.http import fetch
from tests.support.memory import RecordingExecutor, memory_app, memory_config
from tests.support.waiting import wait_until

TOKEN = "0123456789abcdef-control"
#: A second source whose listener reads a queue of the same name.
SHARED = ('\n[sources.other]\nkind = "memory"\nbroker = "control-plane-other"\n[[listeners]]\nsource = "other"\n'
          'queue = "orders"\nmessage_type = "orders"\nbackout_queue = "orders.backout"\nwait = "50ms"\n')


class SlowExecutor(RecordingExecutor):
    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0

    def execute(self, bulk: Bulk) -> list[MessageResult]:
        time.sleep(self.seconds)
        return super().execute(bulk)


Serve = Callable[..., tuple[Bridge, str]]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """serve(token=..., public=..., shared=..., port=...): a running memory bridge (listener `mem:orders`,
    and `other:orders` with `shared`) behind a monitoring server; its bridge and URL."""
    started: list[tuple[RunningBridge, MonitoringServer]] = []

    def start(*, token: str | None = TOKEN, public: bool = False, shared: bool = False,
              port: int = 0, extra: str = "") -> tuple[Bridge, str]:
        cfg, _broker = memory_config(extra=(SHARED if shared else "") + extra)
        executor = SlowExecutor()
        bridge = memory_app(cfg, executor).bridge
        bridge.executor = executor  # type: ignore[attr-defined]  # the test's handle
        access = Access(token.encode() if token else None, PUBLIC_PATHS if public else frozenset())
        server = MonitoringServer(bridge, "127.0.0.1", port, access=access, control=bridge.controls)
        bridge.observers.append(server)  # its "spark" and "process" fields of /status
        run = RunningBridge(bridge)
        server.start()
        started.append((run, server))
        wait_until(lambda: bridge.status()["ready"], 10, "the listener threads to connect")
        return bridge, server.url

    yield start
    for run, server in started:
        server.stop()
        run.stop()


def post(url: str, path: str, token: str | None = TOKEN) -> tuple[int, str]:
    status, _, text = fetch(url + path, token=token, method="POST")
    return status, text


@pytest.mark.parametrize(("path", "parsed"), [
    ("/listeners/orders/pause", ("orders", "pause", None)),
    ("/listeners/%2Fqueue%2Forders/stop", ("/queue/orders", "stop", None)),
    ("/listeners//queue/orders/resume/", ("/queue/orders", "resume", None)),  # left unencoded
    ("/listeners/amq%3A%2Fqueue%2Forders/threads/3", ("amq:/queue/orders", "threads", 3)),
    ("/listeners/amq:/queue/orders/start?x=1", ("amq:/queue/orders", "start", None)),
    ("/listeners/orders/threads/three", None), ("/listeners/orders/explode", None), ("/listeners/pause", None),
    ("/listeners//pause", None), ("/status", None),
    ("/listeners/amq%3A%2Fqueue%2Fpay/plugins/latest", ("amq:/queue/pay", "plugins", "latest")),
    ("/listeners/orders/plugins/3/", ("orders", "plugins", "3")),  # checked by the plugin host
    ("/listeners/orders/plugins", None),
])
def test_control_paths(path: str, parsed: tuple[str, str, int | str | None] | None) -> None:
    assert parse(path) == parsed


def test_the_client_encodes_the_name_as_one_segment() -> None:
    assert command_path("amq:/queue/orders", "pause") == "/listeners/amq%3A%2Fqueue%2Forders/pause"
    assert parse(command_path("amq:/queue/a b", "threads", 4)) == ("amq:/queue/a b", "threads", 4)
    assert parse(command_path("amq:/queue/a b", "plugins", "follow")) == ("amq:/queue/a b", "plugins", "follow")


def test_without_a_token_the_control_plane_is_off_and_says_why(serve: Serve) -> None:
    bridge, url = serve(token=None)
    status, text = post(url, "/listeners/orders/pause", token=None)
    assert status == 403
    assert text == ("the control plane is off: it needs [monitoring] token (see docs/security.md); without a token "
                    "anyone who reaches this port could pause or stop the bridge's listeners\n")
    assert bridge.controls.get("mem:orders").state == RUNNING
    assert fetch(url + "/status").status == 200  # reading stays open without a token


@pytest.mark.parametrize("public", [False, True])
def test_a_missing_or_wrong_token_is_refused_with_401_even_with_public_metrics(serve: Serve, public: bool) -> None:
    bridge, url = serve(public=public)
    for token in (None, "wrong-token-0123456789"):
        response = fetch(url + "/listeners/orders/stop", token=token, method="POST")
        assert response.status == 401 and "Authorization: Bearer <token>" in response.text
    assert fetch(url + "/metrics").status == (200 if public else 401)
    assert bridge.controls.get("mem:orders").state == RUNNING


def test_commands_with_the_token_answer_json_and_refusals_name_the_reason(serve: Serve) -> None:
    bridge, url = serve(shared=True)
    status, text = post(url, "/listeners/mem%3Aorders/pause")
    assert status == 200
    assert json.loads(text) == {"listener": "mem:orders", "action": "pause", "state": PAUSED, "threads": 1,
                                "changed": True, "message": "paused: its threads finish the units of work they hold "
                                                            "and take no new one; connections stay up"}
    assert post(url, "/listeners/nothing/pause") == (
        404, "no listener 'nothing'; this bridge's listeners are mem:orders, other:orders (name one by its "
             "queue, or as source:queue)\n")
    assert post(url, "/listeners/orders/stop") == (
        409, "'orders' is the queue of 2 listeners: name one as source:queue (mem:orders, other:orders)\n")
    assert post(url, "/listeners/other:orders/threads/0")[0] == 400
    assert post(url, "/listeners/other:orders/stop")[0] == 200
    assert post(url, "/listeners/other:orders/resume") == (
        409, "listener other:orders is stopped, not paused: use start\n")
    status, text = post(url, "/listeners/other:orders/explode")
    assert status == 404 and text.startswith("not found: POST /listeners/<name>/pause")
    assert fetch(url + "/listeners/orders/pause", token=TOKEN).status == 404  # a GET changes nothing
    states = {c["name"]: c["state"] for c in json.loads(fetch(url + "/status", token=TOKEN).text)["listener_controls"]}
    assert states == {"mem:orders": PAUSED, "other:orders": STOPPED}


#: A canary listener beside `mem:orders` (plugin pinning, mqbridge.plugins.pinning).
CANARY = ('\n[sources.canary]\nkind = "memory"\nbroker = "control-plane-canary"\n[[listeners]]\nsource = "canary"\n'
          'queue = "orders"\nmessage_type = "orders"\nbackout_queue = "orders.backout"\nwait = "50ms"\n'
          'plugins_canary = true\n')


def test_plugins_moves_a_listener_and_refusals_name_the_problem(serve: Serve,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    bridge, url = serve(extra=CANARY)
    with caplog.at_level(logging.INFO, logger="mqbridge.monitoring.control"):
        assert post(url, "/listeners/nothing/plugins/latest") == (
            404, "no listener 'nothing'; this bridge's listeners are mem:orders, canary:orders (name one by its "
                 "queue, or as source:queue)\n")
        assert post(url, "/listeners/mem:orders/plugins/7") == (
            409, "plugin generation 7 is not loaded any more (loaded: 1); 'latest' is 1\n")
        assert post(url, "/listeners/canary:orders/plugins/latest") == (
            409, "canary:orders is a canary listener (plugins_canary): it takes every reload first and cannot be "
                 "pinned\n")
        status, text = post(url, "/listeners/mem:orders/plugins/soon")
        assert status == 400 and text.startswith("'soon' is not a plugin generation: a number, 'latest'")
        status, text = post(url, "/listeners/mem%3Aorders/plugins/latest")
    # Then a move answers what it did; every refusal and the move are logged with the caller
    assert status == 200
    assert json.loads(text) == {"listener": "mem:orders", "action": "plugins", "state": RUNNING, "threads": 1,
                                "changed": True, "message": "plugins pinned, generation 1 (was 1)"}
    logged = [r.getMessage() for r in caplog.records if r.name == "mqbridge.monitoring.control"]
    assert [line.split(" ", 3)[1] for line in logged] == ["127.0.0.1"] * 5
    assert "POST /listeners/mem:orders/plugins/7 refused (409): plugin generation 7 is not loaded" in logged[1]
    assert logged[-1].endswith("POST /listeners/mem%3Aorders/plugins/latest: mem:orders: plugins pinned, "
                               "generation 1 (was 1)")
    status_doc = json.loads(fetch(url + "/status", token=TOKEN).text)
    assert status_doc["plugins"]["listeners"]["mem:orders"]["plugins"] == "pinned"
    assert [c["last_command"] for c in status_doc["listener_controls"]] == ["plugins latest", ""]
    assert post(url, "/listeners/orders/plugins/follow") == (
        409, "'orders' is the queue of 2 listeners: name one as source:queue (mem:orders, canary:orders)\n")
    assert post(url, "/listeners/mem:orders/plugins/follow")[0] == 200
    assert bridge.status()["plugins"]["listeners"]["mem:orders"]["plugins"] == "follow"


def test_mqbridge_listener_plugins_says_the_generation_in_effect_or_why_not(
        serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _bridge, url = serve()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    endpoint = ["--url", url, "--token-file", str(token_file)]
    assert main(["listener", "plugins", *endpoint, "orders", "latest"]) == 0
    out = capsys.readouterr().out
    assert "mem:orders: plugins pinned, generation 1 (was 1)\n" in out
    assert "mem:orders: in effect: plugin generation 1 (pinned) from its next unit of work" in out
    assert main(["listener", "plugins", *endpoint, "orders", "2"]) == 1
    assert ("mqbridge listener plugins: plugin generation 2 is not loaded any more (loaded: 1); 'latest' is 1"
            in capsys.readouterr().err)
    assert main(["listener", "plugins", *endpoint, "orders", "follow", "--wait", "0"]) == 0
    assert capsys.readouterr().out == "mem:orders: plugins follow, generation 1 (was 1)\n"


def test_mqbridge_listener_waits_until_a_command_is_in_effect(serve: Serve, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bridge, url = serve()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    endpoint = ["--url", url, "--token-file", str(token_file)]
    assert main(["listener", "pause", *endpoint, "orders"]) == 0
    out = capsys.readouterr().out
    assert "mem:orders: paused: its threads finish" in out
    assert "mem:orders: in effect: paused, 1 threads, 1 alive" in out
    assert main(["listener", "threads", *endpoint, "orders", "3"]) == 0
    assert "mem:orders: in effect: paused, 3 threads (configured: 1), 3 alive" in capsys.readouterr().out
    assert main(["status", *endpoint]) == 0  # healthy: paused on purpose
    out = capsys.readouterr().out
    assert "listener mem:orders: PAUSED, 3 threads (configured 1), 3 alive; threads 3 at " in out
    assert main(["listener", "stop", *endpoint, "mem:orders"]) == 0
    assert "in effect: stopped, 3 threads (configured: 1), 0 alive" in capsys.readouterr().out
    assert main(["status", *endpoint]) == 0
    out = capsys.readouterr().out
    assert out.count(" stopped ") == 3 and "listener mem:orders: STOPPED, 3 threads (configured 1), 0 alive" in out
    assert main(["listener", "start", *endpoint, "orders", "--wait", "0"]) == 0
    out = capsys.readouterr().out
    assert "mem:orders: started" in out and "in effect" not in out
    wait_until(lambda: bridge.status()["listener_controls"][0]["in_effect"], 10, "the start")
    assert [e["alive"] for e in bridge.status()["listeners"]] == [True] * 3


def test_mqbridge_listener_exit_codes(serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bridge, url = serve()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    endpoint = ["--url", url, "--token-file", str(token_file)]
    # 1: refused by the bridge, with its reason
    assert main(["listener", "resume", *endpoint, "nothing"]) == 1
    assert "mqbridge listener resume: no listener 'nothing'; this bridge's listeners are mem:orders" \
        in capsys.readouterr().err
    assert main(["listener", "threads", *endpoint, "orders", "65"]) == 1
    assert "threads: 65 is not a thread count from 1 to 64" in capsys.readouterr().err
    # 3: no token, a wrong one, nothing answering
    assert main(["listener", "pause", "--url", url, "orders"]) == 3
    assert "answered 401: the endpoint needs its token" in capsys.readouterr().err
    (tmp_path / "wrong").write_text("wrong-token-0123456789")
    assert main(["listener", "pause", "--url", url, "--token-file", str(tmp_path / "wrong"), "orders"]) == 3
    assert main(["listener", "pause", "--url", f"http://127.0.0.1:{free_port()}", "orders"]) == 3
    assert "no bridge answers at" in capsys.readouterr().err
    assert bridge.controls.get("mem:orders").state == RUNNING
    # 4: accepted, not in effect in time (a unit whose bulk takes 2 s to land is in flight)
    bridge.executor.seconds = 2.0  # type: ignore[attr-defined]
    broker = bridge.slots[0].thread.connections.sources[0].broker  # type: ignore[union-attr]
    broker.put_many("orders", [b"slow"])
    wait_until(lambda: bridge.status()["listeners"][0]["phase"] == "processing"
               or bridge.collector.stats().messages, 5, "a unit in flight")
    assert main(["listener", "pause", *endpoint, "orders", "--wait", "300ms"]) == 4
    out = capsys.readouterr().out
    assert "mem:orders: not in effect after 0.3s: 1 threads finishing their units of work (now paused" in out
    # 2: options that do not go together
    assert main(["listener", "resume", "--config", "x.toml", "--token-file", str(token_file), "orders"]) == 2


def test_mqbridge_listener_with_config_uses_its_listen_address_and_token(serve: Serve, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    bridge, _url = serve(port=port)
    config = tmp_path / "bridge.toml"
    config.write_text(f'[monitoring]\nlisten = "127.0.0.1:{port}"\ntoken = "{TOKEN}"\n[types.orders]\n'
                      '[sources.mem]\nkind = "memory"\n[[listeners]]\nsource = "mem"\nqueue = "orders"\n'
                      'message_type = "orders"\nbackout_queue = "orders.backout"\n')
    assert main(["listener", "pause", "--config", str(config), "orders"]) == 0
    assert bridge.controls.get("mem:orders").state == PAUSED
    assert main(["listener", "resume", "-c", str(config), "orders"]) == 0
    assert "in effect: running" in capsys.readouterr().out


def test_every_listener_action_has_help_with_an_example_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("pause", "resume", "stop", "start", "threads", "plugins"):
        with pytest.raises(SystemExit) as info:
            main(["listener", action, "--help"])
        assert info.value.code == 0
        out = capsys.readouterr().out
        assert f"\nexample:\n  mqbridge listener {action} --config" in out
        assert "\nexit codes:\n  0  in effect" in out and "  4  accepted, but not in effect within --wait" in out
