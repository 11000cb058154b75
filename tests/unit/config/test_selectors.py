"""`[[listeners]] selector`: accepted for ActiveMQ, Artemis and IBM MQ, refused for RabbitMQ and the
memory source with what to do instead; two listeners on one queue need different selectors."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbridge.cli import main
from tests.unit.lint.texts import BASE, check

EU = "selector = \"region = 'EU'\"\n"
#: A second listener on the same queue taking the rest.
REST = ('[[listeners]]\nsource = "amq"\nqueue = "/queue/orders"\nmessage_type = "orders"\n'
        'backout_queue = "/queue/orders.backout"\nselector = "region <> \'EU\' OR region IS NULL"\n')


def test_two_listeners_with_complementary_selectors_share_a_queue(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = check(tmp_path, capsys, BASE + EU + REST)
    assert code == 0, lines
    assert lines == ["bridge.toml: OK (1 sources, 1 types, 2 listeners, 2 listener threads)"]


def test_the_same_selector_twice_on_one_queue_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = check(tmp_path, capsys, BASE + EU + REST.replace("region <> 'EU' OR region IS NULL", "region = 'EU'"))
    assert code == 1
    assert any("listeners[1]: same source, queue and selector as listeners[0]" in line for line in lines), lines


def test_rabbitmq_refuses_a_selector_at_check_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a RabbitMQ source and a listener with a selector
    text = BASE.replace('kind = "stomp"', 'kind = "stomp"\nbroker = "rabbitmq"') + EU
    # When check-config reads it
    code, lines = check(tmp_path, capsys, text)
    # Then it fails on the selector's line, saying why and what to do instead
    assert code == 1
    [line] = [line for line in lines if "selector" in line]
    assert line.startswith("bridge.toml:14: listeners[0].selector: RabbitMQ has no message selectors"), line
    assert "headers or topic exchange" in line


@pytest.mark.parametrize("text, expected", [
    (BASE + 'selector = "  "\n', "listeners[0].selector: empty; remove the key to take every message"),
    (BASE.replace('kind = "stomp"', 'kind = "memory"') + EU, "listeners[0].selector: the memory source has no"),
])
def test_selectors_the_source_cannot_apply_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       text: str, expected: str) -> None:
    code, lines = check(tmp_path, capsys, text)
    assert code == 1 and any(expected in line for line in lines), lines


def test_an_ibm_mq_selection_string_longer_than_mq_allows_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bridge.toml"
    path.write_text(BASE.replace('kind = "stomp"', 'kind = "mq"\nqueue_manager = "QM1"\nconn_name = "127.0.0.1(1414)"')
                    .replace('backout_queue = "/queue/orders.backout"\n', "")
                    .replace('"/queue/orders"', '"ORDERS"') + f'selector = "region = \'{"x" * 10240}\'"\n')
    assert main(["check-config", "--config", str(path)]) == 1


def test_listeners_sharing_a_queue_must_have_one_thread_count(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # They share the name source:queue (listener control, counters, metrics): one thread count for both.
    code, lines = check(tmp_path, capsys, BASE + EU + REST + "threads = 3\n")
    assert code == 1
    assert any("listeners[1].threads: must equal listeners[0].threads" in line for line in lines), lines


# -- the backlog's RabbitMQ management API -----------------------------------------------------
RABBIT = BASE.replace('kind = "stomp"', 'kind = "stomp"\nbroker = "rabbitmq"\nuser = "bridge"\npassword = "s3cret"\n'
                      'host = "{host}"\nmanagement_url = "{url}"')


@pytest.mark.parametrize("host, url, expected", [
    ("127.0.0.1", "http://127.0.0.1:15672", None),
    ("broker.example.com", "https://broker.example.com:15671", None),
    ("broker.example.com", "http://broker.example.com:15672", "the password would travel in clear"),
    ("127.0.0.1", "ftp://127.0.0.1", "must match the pattern"),
    ("127.0.0.1", "http://guest:s3cret@127.0.0.1:15672", "must match the pattern"),  # no credentials in it
])
def test_the_management_url_carries_the_password_in_clear_only_to_loopback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], host: str, url: str, expected: str | None) -> None:
    text = RABBIT.format(host=host, url=url)
    if host != "127.0.0.1":  # the STOMP connection itself must be allowed to carry it
        text = text.replace('management_url', 'ssl = true\nssl_insecure = true\nmanagement_url')
    code, lines = check(tmp_path, capsys, text)
    if expected is None:
        assert code == 0, lines
    else:
        assert code == 1 and any(expected in line for line in lines), lines
        assert not any("s3cret" in line for line in lines)


def test_the_management_url_is_refused_for_activemq(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = check(tmp_path, capsys, BASE.replace('kind = "stomp"', 'kind = "stomp"\n'
                                                       'management_url = "http://127.0.0.1:15672"'))
    assert code == 1 and any('only for broker = "rabbitmq"' in line for line in lines), lines
